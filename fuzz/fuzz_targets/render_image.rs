//! Fuzz target `render_image`: runs `amdgpu_image::fuzz_support::check_render_image` (the
//! same check `cargo test -p amdgpu-image` replays on fuzz/corpus/render_image/).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| amdgpu_image::fuzz_support::check_render_image(data));
