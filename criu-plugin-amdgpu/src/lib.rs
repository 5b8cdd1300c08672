//! The CRIU plugin for AMD GPU (ROCm) processes: a drop-in replacement for
//! CRIU's C `amdgpu_plugin.so`, built as a `cdylib` (installed as
//! `amdgpu_plugin.so`) and as an `rlib` for the CRIU host emulator and
//! tools.
//!
//! This crate is the CRIU adapter only; the dump and restore work is the
//! engine's (`amdgpu-checkpoint`). Layout:
//! - [`abi`]: the `CR_PLUGIN_DESC` symbol CRIU loads, the hook trampolines
//!   (panics caught, `-ENOTSUP` for what is not ours), the choice of
//!   `max_hooks` for the CRIU version that loads the `.so`, and what happens
//!   where a hook is missing.
//! - [`criu`]: CRIU's services (log, image dir, inventory, fd store, image
//!   streamer), looked up at run time so the `.so` has no link-time
//!   dependency on CRIU.
//! - [`hooks`]: CRIU's hooks mapped onto the engine, per CRIU process role,
//!   generic over [`kfd::Driver`] and over what CRIU provides
//!   ([`hooks::CriuHost`]), so the same code runs inside CRIU and under the
//!   CRIU host emulator (`criu-host-emulator`, a separate test crate).
//! - [`store`]: CRIU's images directory or image streamer as one image
//!   store.
//! - [`log`]: log lines with the `amdgpu_plugin: ` prefix, into CRIU's log or
//!   stderr; the engine's `log` records are routed there too.
//! - `runtime` (private): the process-wide state of the loaded plugin.
//!
//! Unsafe code is denied outside [`abi`] and [`criu`].
//!
//! The `.so` contains no simulator and no emulator: nothing in this crate
//! depends on `kfd-sim`, whatever else a workspace build compiles.
//!
//! # Example
//!
//! The options the plugin reads from CRIU's environment, here from a map:
//! the firmware check switched off and the staging memory per GPU bounded
//! to 64 MiB (an invalid value is reported and its default kept).
//!
//! ```
//! use amdgpu_checkpoint::Options;
//!
//! let env = |name: &str| match name {
//!     "KFD_FW_VER_CHECK" => Some("NO".to_owned()),
//!     "KFD_MAX_BUFFER_SIZE" => Some("64M".to_owned()),
//!     "KFD_NUMA_CHECK" => Some("maybe".to_owned()),
//!     _ => None,
//! };
//! // No `--plugin-option amdgpu.*` entries on top here.
//! let (options, invalid) = Options::default().read(env, &[])?;
//! assert!(!options.checks().fw_version);
//! assert!(options.checks().numa, "an invalid value keeps the default");
//! assert_eq!(invalid.len(), 1);
//! assert!(options.staging().total() <= 64 << 20);
//! # Ok::<(), amdgpu_checkpoint::options::OptionError>(())
//! ```

#![deny(unsafe_code)]

// The C ABI and CRIU's services are where this crate meets raw pointers
// and fds; everything else is safe code.
#[allow(unsafe_code)]
pub mod abi;
#[allow(unsafe_code)]
pub mod criu;
pub mod hooks;
pub mod log;
#[cfg(test)]
#[allow(unsafe_code)]
mod panic_tests;
mod runtime;
pub mod store;
