#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

// The C ABI and CRIU's services are where this crate meets raw pointers
// and fds; everything else is safe code.
#[allow(unsafe_code)]
pub mod abi;
#[allow(unsafe_code)]
pub mod criu;
pub mod hooks;
pub mod host;
pub mod log;
#[cfg(test)]
#[allow(unsafe_code)]
mod panic_tests;
mod runtime;
pub mod store;
