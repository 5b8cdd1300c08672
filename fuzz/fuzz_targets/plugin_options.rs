//! Fuzz target `plugin_options`: the engine's options (`KFD_*` environment
//! values and CRIU plugin options) through `amdgpu_checkpoint::options`.
//! The input is `NAME=value` lines; the check is
//! `amdgpu_checkpoint::fuzz_support::check_plugin_options`, which the
//! corpus replay on stable Rust runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    amdgpu_checkpoint::fuzz_support::check_plugin_options(data);
});
