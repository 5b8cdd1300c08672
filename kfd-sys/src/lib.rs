//! Raw amdkfd and amdgpu DRM ioctl ABI.
//!
//! `#[repr(C)]` mirrors of the kernel uapi header `linux/kfd_ioctl.h` (KFD ioctl 1.11 as
//! shipped by Debian 12, plus the later additions the CRIU path needs), of the subset of
//! libdrm's `drm.h` and `amdgpu_drm.h` that a userspace SDMA copier and render-node BO
//! checkpointing use, and of the SDMA linear-copy packet. Every item keeps its C name,
//! so searching for the C name finds the Rust item. Request codes are computed by
//! [`_IOWR`] and friends from the `size_of` of the argument type, never written as hex.
//! On 64-bit targets every struct's and union's size and alignment and every field's
//! offset are also asserted at compile time (private module `layout`), so a wrong layout
//! fails the build even where no C headers are installed. The test `tests/abi.rs`
//! compiles a C probe against the system headers and compares every size, alignment,
//! field offset, request code and constant.
//!
//! This crate holds types and numbers only: no system calls, no `unsafe`, no logic.
//! The safe layer lives in the `kfd` crate.
//!
//! | module | mirrors |
//! |---|---|
//! | [`ioctl`] | `<asm-generic/ioctl.h>`: request-code encoding and decoding |
//! | [`kfd`] | `linux/kfd_ioctl.h` 1.11, later additions, `/dev/kfd` mmap-offset layout |
//! | [`drm`] | `drm.h`: version, GEM close, PRIME, GEM_CHANGE_HANDLE |
//! | [`amdgpu_drm`] | `amdgpu_drm.h`: GEM, CTX, BO_LIST, CS, WAIT_CS, INFO |
//! | [`sdma`] | the SDMA linear-copy packet and per-family limits |
//!
//! Items newer than the installed headers (Debian 12: KFD ioctl 1.11, libdrm 2.4.114)
//! say so in their docs. Two layouts are chosen on purpose: [`drm_amdgpu_gem_op`] is the
//! current 24-byte upstream layout (the installed 16-byte one is its prefix) and
//! [`drm_amdgpu_gem_va`] the installed 40-byte one (newer headers have 64 bytes); the
//! kernel accepts both sizes of each.
//!
//! # Layout and zerocopy
//!
//! Structs derive `zerocopy`'s `FromBytes`, `IntoBytes`, `Immutable` and `KnownLayout`,
//! plus `Clone`, `Copy`, `Debug`, `Default`, `PartialEq`, `Eq` and `Hash`. Where the C
//! struct has implicit padding, the Rust struct names it (`_pad*` fields, not in C) so
//! that no byte is uninitialised. Unions derive `FromBytes`, `Immutable` and
//! `KnownLayout` (zerocopy cannot prove `IntoBytes` for unions whose members differ in
//! size); their `Debug` output is opaque and `Default` is all-zero. To read a union
//! member without `unsafe`, read the member's own struct from the argument bytes, e.g.
//! `drm_amdgpu_gem_create_in::read_from_prefix(bytes)`.
//!
//! # Example
//!
//! ```
//! use kfd_sys::{
//!     kfd_ioctl_criu_args, _IOC_DIR, _IOC_NR, _IOC_READ, _IOC_SIZE, _IOC_TYPE, _IOC_WRITE,
//!     _IOWR, AMDKFD_IOCTL_BASE, AMDKFD_IOC_CRIU_OP, KFD_CRIU_OP_PROCESS_INFO,
//! };
//! use zerocopy::IntoBytes;
//!
//! // The request code is derived from the argument type's size (56 bytes on x86-64).
//! assert_eq!(AMDKFD_IOC_CRIU_OP, _IOWR::<kfd_ioctl_criu_args>(AMDKFD_IOCTL_BASE, 0x22));
//! assert_eq!(_IOC_DIR(AMDKFD_IOC_CRIU_OP), _IOC_READ | _IOC_WRITE);
//! assert_eq!(_IOC_TYPE(AMDKFD_IOC_CRIU_OP), b'K');
//! assert_eq!(_IOC_NR(AMDKFD_IOC_CRIU_OP), 0x22);
//! assert_eq!(_IOC_SIZE(AMDKFD_IOC_CRIU_OP), size_of::<kfd_ioctl_criu_args>());
//!
//! // An argument block is plain data; a simulator or a logger sees its bytes.
//! let args = kfd_ioctl_criu_args { op: KFD_CRIU_OP_PROCESS_INFO, ..Default::default() };
//! assert_eq!(args.as_bytes().len(), size_of::<kfd_ioctl_criu_args>());
//! // A safe wrapper then performs `ioctl(kfd_fd, AMDKFD_IOC_CRIU_OP as _, &mut args)`.
//! ```

#![no_std]
#![forbid(unsafe_code)]
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

/// Implements `Default` (all zero) and an opaque `Debug` for a union.
macro_rules! union_impls {
    ($name:ident) => {
        impl Default for $name {
            fn default() -> Self {
                <Self as zerocopy::FromZeros>::new_zeroed()
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use union_impls;

pub mod amdgpu_drm;
pub mod drm;
pub mod ioctl;
pub mod kfd;
#[cfg(target_pointer_width = "64")]
mod layout;
pub mod pm4;
pub mod sdma;

pub use amdgpu_drm::*;
pub use drm::*;
pub use ioctl::*;
pub use kfd::*;
pub use sdma::*;
