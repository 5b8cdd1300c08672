//! Fuzz target `topology_properties`: a KFD sysfs `properties` file through
//! `amdgpu_topology::parse::parse_properties`. Never panics; a file that
//! parses formats back (`write::format_properties`) to text that parses to
//! the same properties. The same check replays fuzz/corpus/topology_properties/
//! on stable in criu-host-emulator/tests/hostile_sysfs.rs.
#![no_main]

use std::path::Path;

use amdgpu_topology::parse::{parse_properties, parse_u64_file};
use amdgpu_topology::write::format_properties;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("nodes/1/properties");
    let _ = parse_u64_file(data, Path::new("nodes/1/gpu_id"));
    if let Ok(props) = parse_properties(data, path) {
        let text = format_properties(&props);
        let again = parse_properties(text.as_bytes(), path)
            .unwrap_or_else(|e| panic!("formatted properties do not parse: {e}\n{text}"));
        assert_eq!(again, props, "properties changed through format and parse");
    }
});
