//! The checks of the fuzz targets over this crate's parser of whole sysfs
//! trees, shared by the cargo-fuzz target (fuzz/) and the replay of its
//! corpus on stable Rust, so both run the same code. Not part of the API.

use std::path::Path;

use crate::memfs::MemoryFs;
use crate::parse::parse_with;
use crate::write::{write_with, SysfsWriter};

/// The `sysfs_tree` target: entries separated by NUL bytes, alternating a
/// path below the root and that file's contents (a path ending in `/` is a
/// directory), parsed as a KFD sysfs tree. Never panics; a tree that parses
/// writes back to a tree that parses to the same system.
pub fn check_sysfs_tree(data: &[u8]) {
    let root = Path::new("/t");
    let mut tree = MemoryFs::new();
    let _ = tree.create_dir_all(root);
    let mut parts = data.split(|&b| b == 0);
    while let Some(name) = parts.next() {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        // Only relative names below the root: a fuzzed tree never leaves it.
        if name.is_empty() || name.starts_with('/') || name.split('/').any(|c| c == "..") {
            let _ = parts.next();
            continue;
        }
        let path = root.join(name.trim_end_matches('/'));
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
        assert_eq!(
            reparsed.system, parsed.system,
            "system changed through write and parse"
        );
    }
}
