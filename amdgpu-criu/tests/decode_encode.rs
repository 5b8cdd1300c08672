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
