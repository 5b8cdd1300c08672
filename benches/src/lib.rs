//! Shared helpers for the benchmarks.

pub mod image;
pub mod topology;
pub mod transfer;
