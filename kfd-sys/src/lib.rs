#![doc = include_str!("../README.md")]
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
