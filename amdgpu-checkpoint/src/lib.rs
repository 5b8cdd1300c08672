#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

mod drm_fdinfo;
pub mod dump;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_support;
pub mod guardian;
pub mod handles;
pub mod identify;
pub mod incremental;
pub mod kfd_version;
pub mod options;
pub mod parallel;
pub mod recover;
pub mod render_node;
pub mod restore;
pub mod sys;
pub mod transfer;
pub mod vma;

pub use error::Error;
pub use options::Options;
