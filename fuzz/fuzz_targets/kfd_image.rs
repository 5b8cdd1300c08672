//! Fuzz target `kfd_image`: runs `amdgpu_image::fuzz_support::check_kfd_image` (the
//! same check `cargo test -p amdgpu-image` replays on fuzz/corpus/kfd_image/).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| amdgpu_image::fuzz_support::check_kfd_image(data));
