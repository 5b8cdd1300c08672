//! Fuzz target `sysfs_tree`: an arbitrary KFD sysfs tree through
//! `amdgpu_topology::parse::parse_with`. The input is a list of entries
//! separated by NUL bytes, alternating a path below the root and that file's
//! contents; the check is `amdgpu_topology::fuzz_support::check_sysfs_tree`,
//! which the corpus replay on stable Rust runs too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    amdgpu_topology::fuzz_support::check_sysfs_tree(data);
});
