//! Shared helpers for the benchmarks.
//!
//! Unsafe code is denied; the two `libc` calls with no safe std equivalent
//! are allowed where they are: `posix_fadvise` in `transfer::drop_cache` and,
//! in a test, `lseek(SEEK_DATA/SEEK_HOLE)`.

#![deny(unsafe_code)]

pub mod image;
pub mod topology;
pub mod transfer;
