//! The CRIU plugin for AMD GPU (ROCm) processes: a drop-in replacement for
//! CRIU's C `amdgpu_plugin.so`, built as a `cdylib` (installed as
//! `amdgpu_plugin.so`) and as an `rlib` for tests and tools.
//!
//! Layout:
//! - [`abi`]: the `CR_PLUGIN_DESC` symbol CRIU loads, the hook trampolines,
//!   the choice of `max_hooks` for the CRIU version that loads the `.so`, and
//!   what happens where a hook is missing.
//! - [`criu`]: CRIU's services (log, image dir, inventory, fd store, image
//!   streamer), looked up at run time so the `.so` has no link-time
//!   dependency on CRIU.
//! - [`log`]: log lines with the `amdgpu_plugin: ` prefix, into CRIU's log or
//!   stderr.
//! - [`core`]: the plugin logic, generic over [`kfd::Driver`] and over what
//!   CRIU provides ([`core::plugin::CriuHost`]), so it runs against the real
//!   kernel inside CRIU and against `kfd-sim` in tests.
//! - [`options`]: `KFD_*_CHECK` and the staging bound `KFD_MAX_BUFFER_SIZE`.
//! - [`sys`]: the two host system calls `std` lacks.
//! - `emulator` (feature `emulator`): a CRIU host emulator over `kfd-sim`
//!   that calls the hooks in CRIU's order and process roles.
//! - `runtime` (private): the process-wide state of the loaded plugin.
//!
//! The plugin never parses sysfs or image bytes itself: it uses
//! `amdgpu-topology` and `amdgpu-image`.
//!
//! # Example
//!
//! The options the plugin reads from CRIU's environment, here from a map:
//! the firmware check switched off and the staging memory per GPU bounded
//! to 64 MiB (an invalid value is reported and its default kept).
//!
//! ```
//! use criu_plugin_amdgpu::options::Options;
//!
//! let env = |name: &str| match name {
//!     "KFD_FW_VER_CHECK" => Some("NO".to_owned()),
//!     "KFD_MAX_BUFFER_SIZE" => Some("64M".to_owned()),
//!     "KFD_NUMA_CHECK" => Some("maybe".to_owned()),
//!     _ => None,
//! };
//! let (options, invalid) = Options::from_lookup(env);
//! assert!(!options.checks.fw_version);
//! assert!(options.checks.numa, "an invalid value keeps the default");
//! assert_eq!(invalid.len(), 1);
//! assert!(options.staging.total() <= 64 << 20);
//! ```

pub mod abi;
pub mod core;
pub mod criu;
#[cfg(feature = "emulator")]
pub mod emulator;
pub mod log;
pub mod options;
mod runtime;
pub mod sys;
