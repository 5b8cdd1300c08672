//! Shared helpers for the benchmarks.
//!
//! No unsafe code: the file hints std lacks (`posix_fadvise`,
//! `lseek(SEEK_DATA/SEEK_HOLE)`) come from `rustix`.

#![forbid(unsafe_code)]

pub mod image;
pub mod memory;
pub mod output;
pub mod topology;
pub mod transfer;
