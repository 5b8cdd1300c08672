//! The `plugin_options`, `sysfs_tree` and `device_map` fuzz corpora
//! (fuzz/corpus/) replayed
//! on stable Rust through the same checks as the fuzz targets
//! (fuzz/fuzz_targets/), so every input the fuzzer found becomes a
//! regression test by being added to the corpus.

use std::path::{Path, PathBuf};

use amdgpu_checkpoint::fuzz_support::check_plugin_options;
use amdgpu_topology::fuzz_support::{check_device_map, check_sysfs_tree};

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

#[test]
fn plugin_options_corpus_replays() {
    for (path, data) in corpus("plugin_options") {
        println!("{}", path.display());
        check_plugin_options(&data);
    }
}

#[test]
fn sysfs_tree_corpus_replays() {
    let mut parsed = 0;
    for (path, data) in corpus("sysfs_tree") {
        println!("{}", path.display());
        check_sysfs_tree(&data);
        parsed += 1;
    }
    assert!(parsed > 0);
}

#[test]
fn device_map_corpus_replays() {
    for (path, data) in corpus("device_map") {
        println!("{}", path.display());
        check_device_map(&data);
    }
}
