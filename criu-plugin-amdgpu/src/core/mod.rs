//! The plugin logic, generic over [`kfd::Driver`].
//!
//! Everything the hooks decide and do lives here, parameterised by the
//! driver (real kernel or simulator), so the same code runs inside CRIU and
//! in `cargo test`. Nothing in this module touches CRIU's symbols or global
//! state; callers pass what CRIU would provide.

pub mod convert;
pub mod dump;
pub mod error;
pub mod handles;
pub mod identify;
pub mod parallel;
pub mod plugin;
pub mod restore;
pub mod transfer;
pub mod vma;

pub use error::Error;
