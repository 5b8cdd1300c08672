//! Shared helpers for the benchmarks.

pub mod topology;
pub mod image;
