//! The `plugin_options` and `sysfs_tree` fuzz corpora (fuzz/corpus/) replayed
//! on stable Rust through the same checks as the fuzz targets
//! (fuzz/fuzz_targets/), so every input the fuzzer found becomes a
//! regression test by being added to the corpus.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use amdgpu_checkpoint::options::{parse_buffer_size, Options};
use amdgpu_topology::memfs::MemoryFs;
use amdgpu_topology::parse::parse_with;
use amdgpu_topology::write::{write_with, SysfsWriter};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "empty corpus at {}", dir.display());
    inputs
}

/// The `plugin_options` target's check.
fn check_options(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut values = HashMap::new();
    for line in text.lines() {
        if let Some((name, value)) = line.split_once('=') {
            values.insert(name.to_owned(), value.to_owned());
        }
        let _ = parse_buffer_size(line);
    }
    let (options, invalid) = Options::from_lookup(|name| values.get(name).cloned());
    for bad in &invalid {
        let _ = bad.to_string();
    }
    let _ = options.describe();
    if let Some(Ok(limit)) = values
        .get("KFD_MAX_BUFFER_SIZE")
        .map(|v| parse_buffer_size(v))
    {
        if limit > 0 {
            assert!(
                options.staging.total() <= limit.max(options.staging.buffer_size),
                "staging {} exceeds the limit {limit}",
                options.staging.total()
            );
        }
    }
}

/// The `sysfs_tree` target's check.
fn check_tree(data: &[u8]) {
    let root = Path::new("/t");
    let mut tree = MemoryFs::new();
    let _ = tree.create_dir_all(root);
    let mut parts = data.split(|&b| b == 0);
    while let Some(name) = parts.next() {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
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
        write_with(&mut again, &parsed.system, root).expect("a parsed system writes back");
        let reparsed = parse_with(&again, root).expect("a written system parses");
        assert_eq!(reparsed.system, parsed.system);
    }
}

#[test]
fn plugin_options_corpus_replays() {
    for (path, data) in corpus("plugin_options") {
        println!("{}", path.display());
        check_options(&data);
    }
}

#[test]
fn sysfs_tree_corpus_replays() {
    let mut parsed = 0;
    for (path, data) in corpus("sysfs_tree") {
        println!("{}", path.display());
        check_tree(&data);
        parsed += 1;
    }
    assert!(parsed > 0);
}
