//! Fuzz target `checkpoint_archive`: runs
//! `amdgpu_image::fuzz_support::check_archive` (the same check `cargo test
//! -p amdgpu-criu --test show_archive` replays on
//! fuzz/corpus/checkpoint_archive/): a Podman/CRI-O checkpoint archive, plain
//! or zstd-compressed tar.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| amdgpu_image::fuzz_support::check_archive(data));
