//! Fuzz target `image_set`: runs `amdgpu_image::fuzz_support::check_image_set` (the
//! same check `cargo test -p amdgpu-image` replays on fuzz/corpus/image_set/).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| amdgpu_image::fuzz_support::check_image_set(data));
