//! `demo --workload multi` (three processes exchanging a DRM buffer by
//! dma-buf) verified end to end through the built binary, and `show` and
//! `verify` over the image set it leaves: render-node images with the
//! creator and the imports of the buffer, its drm-pages files, and the
//! dma-buf images of the processes holding it; damaged copies of that set
//! are reported naming the file.

use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod cli;
use cli::run;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A verified multi-process demo's image set.
fn demo_set() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let out = run(&[
        "demo",
        "--topology",
        "pcie-2gpu",
        "--workload",
        "multi",
        "--size",
        "16M",
        "--dir",
        images.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "demo: {}", text(&out));
    let said = text(&out);
    assert!(
        said.contains(
            "a DRM buffer shared by 3 processes (imports and dma-buf fds) is one buffer again"
        ),
        "{said}"
    );
    dir
}

fn show(images: &Path) -> Vec<Value> {
    let out = run(&["show", "--json", images.to_str().unwrap()]);
    assert!(out.status.success(), "show: {}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["files"].as_array().unwrap().clone()
}

fn file<'a>(files: &'a [Value], name: &str) -> &'a Value {
    files
        .iter()
        .find(|f| f["file"] == name)
        .unwrap_or_else(|| panic!("{name} shown"))
}

#[test]
fn multi_process_sets_show_and_verify_render_nodes_drm_pages_and_dma_bufs() {
    let dir = demo_set();
    let images = dir.path().join("images");
    let files = show(&images);

    // Render-node images: exactly one holder re-creates the buffer, the
    // others import it, all under one share handle.
    let mut creators = Vec::new();
    let mut importers = Vec::new();
    let mut keys = Vec::new();
    for f in files.iter().filter(|f| f["message"] == "criu_render_node") {
        for bo in f["content"]["bo_entries"].as_array().unwrap() {
            keys.push(bo["share_handle"].as_u64().expect("share handle shown"));
            if bo["is_import"] == 0 {
                creators.push(f["file"].as_str().unwrap().to_owned());
            } else {
                importers.push(f["file"].as_str().unwrap().to_owned());
            }
            // 64-bit fields as strings (decimal for sizes).
            assert_eq!(bo["size"], (1u64 << 20).to_string());
            assert_eq!(bo["vm_entries"].as_array().unwrap().len(), 1);
        }
    }
    assert_eq!(creators, ["amdgpu-renderD-2.img"], "the root creates it");
    assert_eq!(importers.len(), 2);
    keys.dedup();
    assert_eq!(keys.len(), 1, "one buffer");
    // Its contents, saved once per holder with a mapping.
    for render in creators.iter().chain(&importers) {
        let id = render
            .trim_start_matches("amdgpu-renderD-")
            .trim_end_matches(".img");
        let pages = file(&files, &format!("amdgpu-drm-pages-{id}-128-0000.img"));
        assert_eq!(pages["pages"]["length_header"], 1 << 20);
        assert_eq!(pages["pages"]["payload_bytes"], 1 << 20);
    }
    // The dma-buf fds held by the other two processes name the buffer.
    let dmabufs: Vec<&Value> = files
        .iter()
        .filter(|f| f["message"] == "criu_dmabuf_node")
        .collect();
    assert_eq!(dmabufs.len(), 2);
    for d in dmabufs {
        assert_eq!(d["content"]["gem_handle"].as_u64(), Some(keys[0]));
    }

    let out = run(&["verify", images.to_str().unwrap()]);
    assert!(out.status.success(), "verify: {}", text(&out));
    assert!(text(&out).contains("clean"), "{}", text(&out));
}

/// Copies the set and applies `damage` to the copy; `verify` must fail
/// naming `culprit`.
fn verify_damaged(images: &Path, culprit: &str, damage: impl FnOnce(&Path)) -> String {
    let copy = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(images).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
    }
    damage(copy.path());
    let out = run(&["verify", copy.path().to_str().unwrap()]);
    let said = text(&out);
    assert!(
        !out.status.success(),
        "verify accepted a damaged set: {said}"
    );
    assert!(said.contains(culprit), "names {culprit}: {said}");
    said
}

/// The render-node images holding the buffer: (creator, importers), as
/// (render image, drm-pages image) names.
fn holders(files: &[Value]) -> ((String, String), Vec<(String, String)>) {
    let mut creator = None;
    let mut importers = Vec::new();
    for f in files.iter().filter(|f| f["message"] == "criu_render_node") {
        let name = f["file"].as_str().unwrap().to_owned();
        let id = f["content"]["id"].as_u64().unwrap();
        let pages = format!("amdgpu-drm-pages-{id}-128-0000.img");
        for bo in f["content"]["bo_entries"].as_array().unwrap() {
            if bo["is_import"] == 0 {
                creator = Some((name.clone(), pages.clone()));
            } else {
                importers.push((name.clone(), pages.clone()));
            }
        }
    }
    (creator.expect("a creator"), importers)
}

#[test]
fn damaged_shared_sets_are_reported_naming_the_file() {
    let dir = demo_set();
    let images = dir.path().join("images");
    let files = show(&images);
    let (creator, importers) = holders(&files);

    // The buffer's creator is gone: its importers would wait forever.
    let said = verify_damaged(&images, &importers[0].0, |d| {
        fs::remove_file(d.join(&creator.0)).unwrap();
        fs::remove_file(d.join(&creator.1)).unwrap();
    });
    assert!(said.contains("share_handle"), "{said}");

    // A drm-pages file cut short.
    verify_damaged(&images, &creator.1, |d| {
        let path = d.join(&creator.1);
        let len = fs::metadata(&path).unwrap().len();
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 4096)
            .unwrap();
    });

    // A drm-pages file whose bytes changed (the checksum catches it).
    verify_damaged(&images, &importers[1].1, |d| {
        let path = d.join(&importers[1].1);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, bytes).unwrap();
    });

    // A dma-buf image naming no buffer of the set (every holder removed).
    let dmabuf = files
        .iter()
        .find(|f| f["message"] == "criu_dmabuf_node")
        .and_then(|f| f["file"].as_str())
        .expect("a dma-buf image")
        .to_owned();
    verify_damaged(&images, &dmabuf, |d| {
        for (render, pages) in std::iter::once(&creator).chain(&importers) {
            fs::remove_file(d.join(render)).unwrap();
            fs::remove_file(d.join(pages)).unwrap();
        }
    });
}
