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

/// The `device_map` target: the input as a device map
/// (`SRC=DST[,SRC=DST...]`), resolved against a built-in machine with two
/// XGMI hives and a renumbered copy of it, then mapped with the pins. Never
/// panics; a map that parses prints back to one that parses to the same
/// map; a compatible pinned mapping honours every pin.
pub fn check_device_map(data: &[u8]) {
    use std::sync::OnceLock;

    use crate::device_map::DeviceMap;
    use crate::devices::DeviceTopology;
    use crate::mapping::map_topologies_pinned;
    use crate::options::CheckOptions;

    static MACHINES: OnceLock<Option<(DeviceTopology, DeviceTopology)>> = OnceLock::new();
    let text = String::from_utf8_lossy(data);
    let Ok(map) = text.parse::<DeviceMap>() else {
        return;
    };
    let printed = map.to_string();
    assert_eq!(
        printed.parse::<DeviceMap>().as_ref(),
        Ok(&map),
        "{printed:?} does not parse back"
    );
    let Some((src, dst)) = MACHINES
        .get_or_init(|| {
            let origin = crate::builtin("mi210-8gpu-2hive")?;
            let other = crate::renumbered(&origin, 3);
            Some((
                DeviceTopology::from_system(&origin).ok()?,
                DeviceTopology::from_system(&other).ok()?,
            ))
        })
        .as_ref()
    else {
        return;
    };
    for (from, to) in [(src, dst), (src, src)] {
        let Ok(pins) = map.resolve(from, to) else {
            continue;
        };
        let Ok(result) = map_topologies_pinned(from, to, &CheckOptions::all(), &pins) else {
            continue;
        };
        if result.compatible {
            for (s, d) in &pins {
                assert_eq!(result.gpu_map.get(s), Some(d), "pin {s}={d} not honoured");
            }
        } else {
            assert!(!result.reasons.is_empty());
            for reason in &result.reasons {
                let _ = reason.to_string();
            }
        }
    }
}
