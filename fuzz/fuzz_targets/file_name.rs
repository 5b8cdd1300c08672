//! Fuzz target `file_name`: runs `amdgpu_image::fuzz_support::check_file_name` (the
//! same check `cargo test -p amdgpu-image` replays on fuzz/corpus/file_name/).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| amdgpu_image::fuzz_support::check_file_name(data));
