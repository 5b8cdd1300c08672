//! `decode` and `encode`: JSON out, JSON in, validated, byte-identical when
//! nothing was changed.

use std::fs;
use std::io::Write;
use std::process::{Command, Stdio};

use amdgpu_image::fuzz_support::{write_sample_set, SampleSpec};
use amdgpu_image::DirStore;

mod cli;
use cli::run;

fn sample_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_sample_set(
        &DirStore::open_dir(dir.path()).unwrap(),
        SampleSpec::default(),
    )
    .unwrap();
    dir
}

fn encode(json: &str, out: &std::path::Path) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args(["encode", "-o", out.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn decode_then_encode_gives_the_same_bytes() {
    let dir = sample_dir();
    let out = tempfile::tempdir().unwrap();
    for name in [
        "amdgpu-kfd-1.img",
        "amdgpu-renderD-2.img",
        "amdgpu-dmabuf_3.img",
    ] {
        let d = run(&["decode", dir.path().join(name).to_str().unwrap()]);
        assert_eq!(d.status.code(), Some(0), "{name}");
        let v: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
        assert_eq!(v["file"], name);
        assert_eq!(v["message_checksum"], "verified");
        let e = encode(
            std::str::from_utf8(&d.stdout).unwrap(),
            &out.path().join(name),
        );
        assert_eq!(
            e.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&e.stderr)
        );
        assert_eq!(
            fs::read(out.path().join(name)).unwrap(),
            fs::read(dir.path().join(name)).unwrap(),
            "{name}"
        );
    }
    // Every byte of priv_data, not a prefix.
    let d = run(&[
        "decode",
        dir.path().join("amdgpu-kfd-1.img").to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
    assert_eq!(v["content"]["priv_data"]["len"], 64);
    assert_eq!(
        v["content"]["priv_data"]["hex"].as_str().unwrap().len(),
        128
    );
}

#[test]
fn an_edit_is_validated_and_sealed() {
    let dir = sample_dir();
    let kfd = dir.path().join("amdgpu-kfd-1.img");
    let d = run(&["decode", kfd.to_str().unwrap()]);
    let mut v: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
    // A change restore accepts: re-sealed, the set verifies.
    v["content"]["device_entries"][1]["wave_front_size"] = 64.into();
    let e = encode(&v.to_string(), &kfd);
    assert_eq!(
        e.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
    assert_eq!(
        run(&["verify", dir.path().to_str().unwrap()]).status.code(),
        Some(0)
    );
    // One it refuses: nothing written.
    let before = fs::read(&kfd).unwrap();
    v["content"]["num_of_bos"] = 99.into();
    let e = encode(&v.to_string(), &kfd);
    assert_eq!(e.status.code(), Some(1));
    let err = String::from_utf8(e.stderr).unwrap();
    assert!(
        err.contains("criu_kfd.num_of_bos: is 99 but the image has 8 bo entries"),
        "{err}"
    );
    assert_eq!(fs::read(&kfd).unwrap(), before);
}

#[test]
fn bad_input_is_named() {
    let dir = sample_dir();
    let kfd = dir.path().join("amdgpu-kfd-1.img");
    let d = run(&["decode", kfd.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("amdgpu-kfd-1.img");

    let mut unknown = v.clone();
    unknown["content"]["bogus"] = 1.into();
    let e = encode(&unknown.to_string(), &target);
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("unknown field `bogus`"));

    let mut missing = v.clone();
    missing["content"].as_object_mut().unwrap().remove("pid");
    let e = encode(&missing.to_string(), &target);
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("missing field `pid`"));

    let mut prefix = v.clone();
    prefix["content"]["priv_data"] = serde_json::json!({"len": 64, "hex_prefix": "0001"});
    let e = encode(&prefix.to_string(), &target);
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr).contains("only a hex_prefix is given"));

    let e = encode(&v.to_string(), &out.path().join("amdgpu-renderD-1.img"));
    assert_eq!(e.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&e.stderr)
        .contains("the input is a criu_kfd, but amdgpu-renderD-1.img holds a criu_render_node"));
    assert!(!target.exists());

    let e = encode("not json", &target);
    assert_eq!(e.status.code(), Some(2));

    // decode: a pages file, a damaged message.
    let d = run(&[
        "decode",
        dir.path().join("amdgpu-pages-1-1000.img").to_str().unwrap(),
    ]);
    assert_eq!(d.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&d.stderr).contains("holds raw BO contents"));
    let mut bytes = fs::read(&kfd).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x40;
    fs::write(&kfd, bytes).unwrap();
    let d = run(&["decode", kfd.to_str().unwrap()]);
    assert_ne!(d.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&d.stderr).contains("panicked"));
}

/// The message images (kfd, renderD, dmabuf) in `dir` and in the
/// directories below it (the incremental child), sorted.
fn message_images(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            out.extend(message_images(&path));
        } else if name.starts_with("amdgpu-kfd-")
            || name.starts_with("amdgpu-renderD-")
            || name.starts_with("amdgpu-dmabuf_")
        {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Every `bytes` field of decoded JSON: `{"len": n, "hex": …}` with all
/// `n` bytes, never an abbreviation.
fn check_every_byte(v: &serde_json::Value, at: &str, file: &str) {
    match v {
        serde_json::Value::Object(map) => {
            assert!(
                !map.contains_key("hex_prefix"),
                "{file}: {at}: a bytes field is abbreviated"
            );
            if let (Some(len), Some(hex)) = (map.get("len"), map.get("hex")) {
                assert_eq!(
                    hex.as_str().unwrap().len() as u64,
                    2 * len.as_u64().unwrap(),
                    "{file}: {at}: every byte"
                );
            }
            for (k, v) in map {
                check_every_byte(v, &format!("{at}.{k}"), file);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                check_every_byte(v, &format!("{at}[{i}]"), file);
            }
        }
        _ => {}
    }
}

/// Decodes and encodes back every message image `demo ARGS` writes;
/// the bytes must be the same. Returns the decoded JSON of each.
fn demo_round_trip(args: &[&str], env: &[(&str, &str)]) -> Vec<(String, serde_json::Value)> {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let mut all = vec!["demo", "--dir", dir.to_str().unwrap(), "--json"];
    all.extend_from_slice(args);
    let out = cli::run_with(&all, env);
    assert!(
        out.status.success(),
        "demo {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let images = message_images(&dir);
    assert!(!images.is_empty(), "demo {args:?} wrote no image");
    let again = root.path().join("again");
    fs::create_dir(&again).unwrap();
    let mut decoded = Vec::new();
    for image in images {
        let shown = image.strip_prefix(&dir).unwrap().display().to_string();
        let d = run(&["decode", image.to_str().unwrap()]);
        assert_eq!(
            d.status.code(),
            Some(0),
            "decode {shown}: {}",
            String::from_utf8_lossy(&d.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&d.stdout).unwrap();
        check_every_byte(&v["content"], "content", &shown);
        let target = again.join(image.file_name().unwrap());
        let e = encode(std::str::from_utf8(&d.stdout).unwrap(), &target);
        assert_eq!(
            e.status.code(),
            Some(0),
            "demo {args:?}: encode {shown}: {}",
            String::from_utf8_lossy(&e.stderr)
        );
        assert_eq!(
            fs::read(&target).unwrap(),
            fs::read(&image).unwrap(),
            "demo {args:?}: {shown} does not round-trip"
        );
        fs::remove_file(&target).unwrap();
        decoded.push((shown, v));
    }
    decoded
}

#[test]
fn every_image_demo_writes_round_trips_through_decode_and_encode() {
    let small = ["--topology", "builtin:pcie-2gpu", "--size", "16M"];
    for workload in ["pytorch", "tensorflow", "multi"] {
        let mut args = vec!["--workload", workload];
        args.extend_from_slice(&small);
        demo_round_trip(&args, &[]);
    }
    demo_round_trip(
        &["--workload", "basic", "--topology", "builtin:pcie-2gpu"],
        &[],
    );
    // Deduplicated: chunk sources within the set.
    let dedup = demo_round_trip(
        &[
            "--workload",
            "data-parallel",
            "--topology",
            "builtin:pcie-2gpu",
            "--size",
            "16M",
        ],
        &[("KFD_DEDUP", "1")],
    );
    assert!(
        dedup.iter().any(|(_, v)| v["content"]["bo_entries"]
            .as_array()
            .is_some_and(|bos| bos.iter().any(|b| b.get("chunk_sources").is_some()))),
        "the deduplicated set references chunks"
    );
    // An incremental child: dump ids, its parent's, chunk digests and
    // sources, every byte.
    // (Large enough BOs that a step leaves chunks unchanged.)
    let chained = demo_round_trip(
        &[
            "--incremental",
            "1",
            "--topology",
            "builtin:pcie-2gpu",
            "--size",
            "48M",
        ],
        &[],
    );
    let (_, child) = chained
        .iter()
        .find(|(name, _)| name.starts_with("incremental/amdgpu-kfd-"))
        .expect("the child's KFD image");
    let content = &child["content"];
    assert_eq!(content["parent_dump_id"]["len"], 16, "{content:#}");
    assert_eq!(content["dump_id"]["hex"].as_str().unwrap().len(), 32);
    let bos = content["bo_entries"].as_array().unwrap();
    assert!(bos.iter().any(|b| b.get("chunk_sources").is_some()));
    assert!(bos
        .iter()
        .all(|b| b.get("chunk_digests").is_none() || b["chunk_digests"]["hex"].as_str().is_some()));
}

#[test]
fn the_images_of_a_thunk_built_process_round_trip() {
    if !std::path::Path::new("/usr/include/hsakmt.h").is_file() {
        test_env::skip("libhsakmt-dev is not installed (/usr/include/hsakmt.h is missing)");
        return;
    }
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
    let dir = exe.parent().unwrap();
    let Some(lib) = [
        dir.join("libkfd_sim_preload.so"),
        dir.join("deps/libkfd_sim_preload.so"),
    ]
    .into_iter()
    .find(|p| p.is_file()) else {
        test_env::skip("libkfd_sim_preload.so is not built (cargo build -p kfd-sim-preload)");
        return;
    };
    let decoded = demo_round_trip(
        &["--workload", "hsakmt", "--seed", "3"],
        &[("KFD_SIM_PRELOAD_LIB", lib.to_str().unwrap())],
    );
    assert!(decoded.iter().any(|(name, _)| name.contains("amdgpu-kfd-")));
}
