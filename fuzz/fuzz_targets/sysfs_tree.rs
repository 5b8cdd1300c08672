//! Fuzz target `sysfs_tree`: an arbitrary KFD sysfs tree through
//! `amdgpu_topology::parse::parse_with`. The input is a list of entries
//! separated by NUL bytes, alternating a path below the root and that file's
//! contents (a path ending in `/` is a directory). Never panics; a tree that
//! parses writes back (`write::write_with`) to a tree that parses to the
//! same system.
#![no_main]

use std::path::{Path, PathBuf};

use amdgpu_topology::memfs::MemoryFs;
use amdgpu_topology::parse::parse_with;
use amdgpu_topology::write::{write_with, SysfsWriter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let root = Path::new("/t");
    let mut tree = MemoryFs::new();
    let _ = tree.create_dir_all(root);
    let mut parts = data.split(|&b| b == 0);
    while let Some(name) = parts.next() {
        let Ok(name) = std::str::from_utf8(name) else { continue };
        // Only relative names below the root: a fuzzed tree never leaves it.
        if name.is_empty() || name.starts_with('/') || name.split('/').any(|c| c == "..") {
            let _ = parts.next();
            continue;
        }
        let path: PathBuf = root.join(name.trim_end_matches('/'));
        if name.ends_with('/') {
            let _ = tree.create_dir_all(&path);
            continue;
        }
        let contents = parts.next().unwrap_or_default();
        if let Some(parent) = path.parent() {
            let _ = tree.create_dir_all(parent);
        }
        let _ = tree.write_file(&path, contents);
    }
    if let Ok(parsed) = parse_with(&tree, root) {
        let mut again = MemoryFs::new();
        write_with(&mut again, &parsed.system, root)
            .unwrap_or_else(|e| panic!("a parsed system does not write back: {e}"));
        let reparsed = parse_with(&again, root)
            .unwrap_or_else(|e| panic!("a written system does not parse: {e}"));
        assert_eq!(reparsed.system, parsed.system, "system changed through write and parse");
    }
});
