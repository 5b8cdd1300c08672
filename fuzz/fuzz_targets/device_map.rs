//! Fuzz target `device_map`: device maps (`amdgpu.device-map`,
//! `KFD_DEVICE_MAP`) parsed, printed back, resolved against a built-in
//! machine and mapped with their pins. The check is
//! `amdgpu_topology::fuzz_support::check_device_map`, which the corpus
//! replay on stable Rust runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    amdgpu_topology::fuzz_support::check_device_map(data);
});
