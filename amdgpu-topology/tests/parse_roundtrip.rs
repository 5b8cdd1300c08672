//! `parse(write(m)) == m` for every fixture, and the writer reproduces the
//! fixtures' files byte for byte (it prints what the kernel prints).

mod fixture_dir;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use amdgpu_topology::memfs::MemoryFs;
use amdgpu_topology::parse::parse_with;
use amdgpu_topology::write::write_with;
use amdgpu_topology::{parse, write};
use fixture_dir::{topology_fixtures, FIXTURES};

/// Every file under `root`, by relative path.
fn files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_owned();
                out.insert(rel, fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn fixtures_round_trip_through_write() {
    let Some(dir) = topology_fixtures() else {
        return;
    };
    for name in FIXTURES {
        let original = parse(&dir.join(name)).unwrap().system;
        let mut tree = MemoryFs::new();
        write_with(&mut tree, &original, Path::new("/t")).unwrap();
        let again = parse_with(&tree, Path::new("/t")).unwrap();
        assert!(again.skipped.is_empty(), "{name}");
        assert_eq!(again.system, original, "{name}: parse(write(m)) != m");
    }
    // Through real files too, for a complete fixture of modest size.
    let original = parse(&dir.join("vega10-mi25-1gpu")).unwrap().system;
    let tmp = tempfile::tempdir().unwrap();
    write(&original, tmp.path()).unwrap();
    assert_eq!(parse(tmp.path()).unwrap().system, original);
}

#[test]
fn written_files_match_the_fixture_bytes() {
    let Some(dir) = topology_fixtures() else {
        return;
    };
    for name in FIXTURES {
        let source = dir.join(name);
        let mut tree = MemoryFs::new();
        let root = Path::new("/t");
        write_with(&mut tree, &parse(&source).unwrap().system, root).unwrap();
        let expected = files(&source);
        let written: BTreeMap<PathBuf, Vec<u8>> = tree
            .files()
            .map(|(path, bytes)| (path.strip_prefix(root).unwrap().to_owned(), bytes.to_vec()))
            .collect();
        assert_eq!(
            expected.keys().collect::<Vec<_>>(),
            written.keys().collect::<Vec<_>>(),
            "{name}: same set of files"
        );
        for (path, bytes) in &expected {
            let mut bytes = bytes.clone();
            // mi100's gpu_id and name come from Python literals without the
            // newline sysfs prints; the writer always prints it.
            if bytes.last() != Some(&b'\n') {
                bytes.push(b'\n');
            }
            assert_eq!(
                String::from_utf8_lossy(&written[path]),
                String::from_utf8_lossy(&bytes),
                "{name}: {}",
                path.display()
            );
        }
    }
}

#[test]
fn write_refuses_to_mix_two_trees() {
    let Some(dir) = topology_fixtures() else {
        return;
    };
    let system = parse(&dir.join("vega10-mi25-1gpu")).unwrap().system;
    let tmp = tempfile::tempdir().unwrap();
    write(&system, tmp.path()).unwrap();
    let err = write(&system, tmp.path()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(err.to_string().contains("empty directory"), "{err}");
}
