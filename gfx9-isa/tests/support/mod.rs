//! What the test binaries share: finding code objects in binaries,
//! building the HIP test programs, and running kernels on the interpreter.
//! Each binary uses part of it.

#![allow(dead_code)]

pub mod code_objects;
pub mod exec;
pub mod hip;
