//! Replays the fuzz corpus (fuzz/corpus/<target>/) through the check
//! functions the fuzz targets call, on stable Rust: seeds and every crash
//! input added to the corpus stay regression tests.

use std::fs;
use std::path::PathBuf;

use amdgpu_image::fuzz_support::{
    chain_seed, check_chunk_chain, check_dmabuf_image, check_file_name, check_image_set,
    check_kfd_image, check_render_image,
};

fn corpus_root() -> PathBuf {
    // amdgpu-image → workspace root → fuzz/corpus
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
}

fn replay(target: &str, check: fn(&[u8])) {
    let dir = corpus_root().join(target);
    let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut n = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        if !path.is_file() {
            continue;
        }
        let data = fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(|| check(&data));
        assert!(
            result.is_ok(),
            "{target}: {} fails its check",
            path.display()
        );
        n += 1;
    }
    assert!(n > 0, "{target}: empty corpus in {}", dir.display());
    println!("{target}: {n} inputs replayed");
}

#[test]
fn kfd_image_corpus() {
    replay("kfd_image", check_kfd_image);
}

#[test]
fn render_image_corpus() {
    replay("render_image", check_render_image);
}

#[test]
fn dmabuf_image_corpus() {
    replay("dmabuf_image", check_dmabuf_image);
}

#[test]
fn chunk_chain_corpus() {
    replay("chunk_chain", |d| {
        check_chunk_chain(d);
    });
    // The seed is a clean chain (read through and flattened by the check),
    // as `chain_seed` builds it today; without its parent it is not clean.
    let seed = chain_seed();
    assert!(check_chunk_chain(&seed), "the seed chain verifies clean");
    let stored = fs::read(corpus_root().join("chunk_chain/seed-00")).unwrap();
    assert!(check_chunk_chain(&stored), "seed-00 verifies clean");
    let orphan = fs::read(corpus_root().join("chunk_chain/seed-01")).unwrap();
    assert!(!check_chunk_chain(&orphan), "seed-01 has no parent set");
}

#[test]
fn image_set_corpus() {
    replay("image_set", check_image_set);
}

#[test]
fn file_name_corpus() {
    replay("file_name", check_file_name);
}

#[test]
fn seed_sets_are_what_they_claim() {
    // The first image_set seed is a clean set, the second has one flipped pages byte.
    let clean = fs::read(corpus_root().join("image_set/seed-00")).unwrap();
    let store = amdgpu_image::fuzz_support::decode_set_input(&clean);
    let report = amdgpu_image::verify_set(&store, amdgpu_image::ReadLimits::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    let broken = fs::read(corpus_root().join("image_set/seed-01")).unwrap();
    let store = amdgpu_image::fuzz_support::decode_set_input(&broken);
    let report = amdgpu_image::verify_set(&store, amdgpu_image::ReadLimits::default()).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
}
