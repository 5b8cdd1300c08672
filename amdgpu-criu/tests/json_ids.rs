//! Ids and 64-bit values in the JSON the tool prints: strings (hex for
//! ids), so a JSON reader that keeps numbers as doubles (jq 1.6, the one of
//! Debian 11 and Ubuntu 22.04) changes nothing on a `decode | jq | encode`
//! round trip; `encode` reads both forms; `verify` finds a render-node
//! image whose GPU disagrees with the KFD image's entry for it; gpu_ids
//! are hex in every command's JSON.

use std::path::Path;

use serde_json::{Number, Value};

mod cli;
use cli::{run, stderr, stdout};

/// A demo checkpoint of `workload` written into `dir`.
fn demo_set(dir: &Path, workload: &str) {
    let out = run(&[
        "demo",
        "--workload",
        workload,
        "--dir",
        dir.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// What a reader that keeps numbers as doubles writes back: every number
/// rounded to the nearest double.
fn through_doubles(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                *n = Number::from(u as f64 as u64);
            }
        }
        Value::Array(list) => list.iter_mut().for_each(through_doubles),
        Value::Object(map) => map.values_mut().for_each(through_doubles),
        _ => {}
    }
}

fn message_images(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("amdgpu-kfd-") || n.starts_with("amdgpu-renderD-"))
        .collect();
    names.sort();
    names
}

/// `decode FILE`, passed through a double-keeping reader, `encode`d into
/// `into`.
fn round_trip(file: &Path, into: &Path) {
    let out = run(&["decode", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut value: Value = serde_json::from_slice(&out.stdout).unwrap();
    through_doubles(&mut value);
    let json = into.with_extension("json");
    std::fs::write(&json, value.to_string()).unwrap();
    let out = run(&[
        "encode",
        "-i",
        json.to_str().unwrap(),
        "-o",
        into.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::remove_file(json).unwrap();
}

#[test]
fn a_reader_that_rounds_large_numbers_changes_no_image() {
    let images = tempfile::tempdir().unwrap();
    let copies = tempfile::tempdir().unwrap();
    for workload in ["basic", "multi"] {
        let dir = images.path().join(workload);
        let args = [
            "demo",
            "--workload",
            workload,
            "--dir",
            dir.to_str().unwrap(),
            "-q",
        ];
        let args: Vec<&str> = if workload == "multi" {
            args.into_iter().chain(["--size", "42M"]).collect()
        } else {
            args.to_vec()
        };
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let names = message_images(&dir);
        assert!(names.iter().any(|n| n.contains("renderD")), "{names:?}");
        for name in names {
            let copy = copies.path().join(&name);
            round_trip(&dir.join(&name), &copy);
            assert_eq!(
                std::fs::read(dir.join(&name)).unwrap(),
                std::fs::read(&copy).unwrap(),
                "{workload}: {name} changed on a decode | jq | encode round trip"
            );
        }
    }
}

#[test]
fn encode_reads_numbers_and_strings_alike() {
    let images = tempfile::tempdir().unwrap();
    demo_set(images.path(), "basic");
    let kfd = images.path().join("amdgpu-kfd-1.img");
    let out = run(&["decode", kfd.to_str().unwrap()]);
    let mut value: Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = &mut value["content"]["device_entries"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["gpu_id"] != "0x0000")
        .unwrap();
    let hive = entry["hive_id"].as_str().unwrap().to_owned();
    assert!(hive.starts_with("0x"), "hive_id {hive}");
    assert!(entry["gpu_id"].as_str().unwrap().starts_with("0x"));
    // The form of the JSON an earlier version printed: plain numbers.
    let number = u64::from_str_radix(&hive[2..], 16).unwrap();
    entry["hive_id"] = Value::Number(Number::from(number));
    let gpu = entry["gpu_id"].as_str().unwrap().to_owned();
    entry["gpu_id"] = Value::Number(Number::from(u64::from_str_radix(&gpu[2..], 16).unwrap()));
    let json = images.path().join("kfd.json");
    std::fs::write(&json, value.to_string()).unwrap();
    let copy = tempfile::tempdir().unwrap();
    let out_file = copy.path().join("amdgpu-kfd-1.img");
    let out = run(&[
        "encode",
        "-i",
        json.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(&kfd).unwrap(),
        std::fs::read(&out_file).unwrap()
    );

    // A string that is no number names its field.
    value["content"]["bo_entries"][0]["size"] = Value::String("12 MiB".into());
    std::fs::write(&json, value.to_string()).unwrap();
    let out = run(&[
        "encode",
        "-i",
        json.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("bo_entries.[0]size: \"12 MiB\" is not a number"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn verify_finds_a_render_node_gpu_that_disagrees_with_the_kfd_image() {
    let images = tempfile::tempdir().unwrap();
    demo_set(images.path(), "basic");
    let out = run(&["verify", images.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // The KFD image edited (a hive_id changed) and sealed afresh by encode:
    // every checksum matches, only the two images disagree.
    let kfd = images.path().join("amdgpu-kfd-1.img");
    let out = run(&["decode", kfd.to_str().unwrap()]);
    let mut value: Value = serde_json::from_slice(&out.stdout).unwrap();
    let render = run(&[
        "decode",
        images.path().join("amdgpu-renderD-2.img").to_str().unwrap(),
    ]);
    let render: Value = serde_json::from_slice(&render.stdout).unwrap();
    let gpu = render["content"]["device"]["gpu_id"].clone();
    let entry = value["content"]["device_entries"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["gpu_id"] == gpu)
        .unwrap();
    entry["hive_id"] = Value::String("0x1".into());
    let json = images.path().join("kfd.json");
    std::fs::write(&json, value.to_string()).unwrap();
    let out = run(&[
        "encode",
        "-i",
        json.to_str().unwrap(),
        "-o",
        kfd.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::remove_file(&json).unwrap();

    let out = run(&["verify", "--json", images.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["file"] == "amdgpu-renderD-2.img"
            && p["path"] == "device.hive_id"
            && p["message"]
                .as_str()
                .unwrap()
                .contains(" here, 0x1 in amdgpu-kfd-1.img")),
        "{v:#}"
    );
}

fn is_hex_id(v: &Value) -> bool {
    v.as_str()
        .and_then(|s| s.strip_prefix("0x"))
        .is_some_and(|d| d.len() >= 4 && u64::from_str_radix(d, 16).is_ok())
}

#[test]
fn gpu_ids_are_hex_in_every_json() {
    let out = run(&["demo", "--workload", "basic", "--json", "-q"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let map = v["gpu_map"].as_object().unwrap();
    assert!(!map.is_empty());
    for (from, to) in map {
        assert!(
            is_hex_id(&Value::String(from.clone())) && is_hex_id(to),
            "{v:#}"
        );
    }

    let out = run(&[
        "map",
        "--from",
        "builtin:mi210-8gpu-2hive",
        "--to",
        "builtin:mi210-8gpu-2hive",
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (from, to) in v["gpu_map"].as_object().unwrap() {
        assert!(
            is_hex_id(&Value::String(from.clone())) && is_hex_id(to),
            "{v:#}"
        );
    }
    let out = run(&[
        "map",
        "--from",
        "builtin:mi250x-8",
        "--to",
        "builtin:mi210-8gpu-2hive",
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reason = &v["reasons"][0];
    assert!(
        is_hex_id(&reason["gpu"]) && is_hex_id(&reason["local_gpu"]),
        "{v:#}"
    );

    let out = run(&["ps", "--simulate", "builtin:pcie-2gpu", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpus = v["processes"][0]["gpus"].as_array().unwrap();
    assert!(gpus.iter().all(|g| is_hex_id(&g["gpu_id"])), "{v:#}");
}
