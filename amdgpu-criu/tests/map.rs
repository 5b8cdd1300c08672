//! `amdgpu-criu map` on the real topology captures, through the built binary.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

mod cli;

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    cli::run_with(args, env)
}

/// `../shared/fixtures/topology/<name>` next to the workspace, or `None`
/// after printing why the test is skipped.
fn fixture(name: &str) -> Option<String> {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    while !fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")) {
        dir = dir.parent()?;
    }
    let path = dir.join("../shared/fixtures/topology").join(name);
    if path.is_dir() {
        Some(path.to_str().unwrap().to_owned())
    } else {
        test_env::skip(format!("{} is absent", path.display()));
        None
    }
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_machine_maps_onto_itself_by_identity() {
    let Some(dir) = fixture("mi308x-cpx-8gpu") else {
        return;
    };
    let out = run(&["map", "--from", &dir, "--to", &dir, "--json"], &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["compatible"], true);
    assert_eq!(v["reasons"], serde_json::json!([]));
    let gpu_map = v["gpu_map"].as_object().unwrap();
    assert_eq!(gpu_map.len(), 32);
    // keys are the gpu_ids of the sysfs files (decimal there), in hex,
    // mapped to themselves
    let node2 = fs::read_to_string(Path::new(&dir).join("nodes/2/gpu_id")).unwrap();
    let node2 = format!("{:#06x}", node2.trim().parse::<u32>().unwrap());
    assert_eq!(gpu_map[&node2], node2.as_str());
    for (from, to) in gpu_map {
        assert!(from.starts_with("0x"), "{from}");
        assert_eq!(from, to.as_str().unwrap());
    }
    assert_eq!(v["cpu_map"], serde_json::json!({"0": 0, "1": 1}));

    let out = run(&["map", "--from", &dir, "--to", &dir], &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("compatible\n"), "{text}");
    // In text, gpu_ids are hex as in image file names.
    let hex = &node2;
    assert!(
        text.contains(&format!("  {hex} -> {hex}  (node 2 -> node 2)")),
        "{text}"
    );
}

#[test]
fn a_gpu_count_mismatch_is_refused_with_exit_1() {
    let (Some(big), Some(small)) = (fixture("mi308x-cpx-8gpu"), fixture("vega10-mi25-1gpu")) else {
        return;
    };
    let out = run(&["map", "--from", &big, "--to", &small, "--json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["compatible"], false);
    assert_eq!(v["gpu_map"], serde_json::json!({}));
    assert_eq!(
        v["reasons"],
        serde_json::json!([{"gpu": null, "check": "gpu_count", "checkpointed": 32, "local": 1, "local_gpu": null}])
    );
    let out = run(&["map", "--from", &big, "--to", &small], &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    // The reason, and what to restore on instead.
    assert_eq!(
        text,
        "not compatible:\n  number of GPUs mismatch: 32 checkpointed, 1 local (restore where the \
         process sees 32 GPUs: a machine with 32, or a container that exposes 32 of the \
         machine's GPUs to it)\n"
    );
}

#[test]
fn less_vram_is_refused_unless_the_check_is_off() {
    let Some(dir) = fixture("vega10-mi25-1gpu") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let smaller = tmp.path().join("smaller");
    copy_tree(Path::new(&dir), &smaller);
    let bank = smaller.join("nodes/1/mem_banks/0/properties");
    let text = fs::read_to_string(&bank).unwrap();
    fs::write(
        &bank,
        text.replace("size_in_bytes 17163091968", "size_in_bytes 8581545984"),
    )
    .unwrap();
    let smaller = smaller.to_str().unwrap();

    let out = run(&["map", "--from", &dir, "--to", smaller, "--json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let gpu_id: u64 = fs::read_to_string(Path::new(&dir).join("nodes/1/gpu_id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        json(&out)["reasons"],
        serde_json::json!([{"gpu": format!("{gpu_id:#06x}"), "check": "vram_size", "checkpointed": 17163091968u64, "local": 8581545984u64, "local_gpu": format!("{gpu_id:#06x}")}])
    );

    let out = run(
        &["map", "--from", &dir, "--to", smaller],
        &[("KFD_VRAM_SIZE_CHECK", "no")],
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("checks switched off: KFD_VRAM_SIZE_CHECK\ncompatible\n"),
        "{text}"
    );

    // the other way round needs no switch
    let out = run(&["map", "--from", smaller, "--to", &dir], &[]);
    assert_eq!(out.status.code(), Some(0));

    // an invalid value is reported and the check stays on
    let out = run(
        &["map", "--from", &dir, "--to", smaller],
        &[("KFD_VRAM_SIZE_CHECK", "off")],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("KFD_VRAM_SIZE_CHECK") && stderr.contains("\"off\""),
        "{stderr}"
    );
}

#[test]
fn unreadable_topologies_and_bad_usage_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing: PathBuf = tmp.path().join("nowhere");
    let missing = missing.to_str().unwrap();
    let out = run(&["map", "--from", missing, "--to", missing], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains(missing));

    let out = run(&["map", "--from", missing], &[]);
    assert_eq!(out.status.code(), Some(2));

    // a malformed properties file names the file
    let broken = tmp.path().join("broken");
    fs::create_dir_all(broken.join("nodes/0")).unwrap();
    fs::write(broken.join("nodes/0/properties"), "cpu_cores_count many\n").unwrap();
    fs::write(broken.join("nodes/0/gpu_id"), "0\n").unwrap();
    let broken = broken.to_str().unwrap();
    let out = run(&["map", "--from", broken, "--to", broken], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("properties"));
}

#[test]
fn builtin_machines_map_onto_themselves() {
    let out = run(
        &[
            "map",
            "--from",
            "builtin:mi300x-64",
            "--to",
            "builtin:mi300x-64",
            "--json",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    let gpu_map = v["gpu_map"].as_object().unwrap();
    assert_eq!(gpu_map.len(), 64);
    for (from, to) in gpu_map {
        assert!(from.starts_with("0x"), "{from}");
        assert_eq!(from, to.as_str().unwrap());
    }

    let out = run(
        &[
            "map",
            "--from",
            "builtin:single-gpu",
            "--to",
            "builtin:mi300x-64",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("number of GPUs mismatch: 1 checkpointed, 64 local"));

    let out = run(
        &[
            "map",
            "--from",
            "builtin:nope",
            "--to",
            "builtin:single-gpu",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("mi300x-64"));
}

#[test]
fn partial_captures_need_complete() {
    let Some(dir) = fixture("mi210-8gpu-xgmi-2hives") else {
        return;
    };
    let out = run(&["map", "--from", &dir, "--to", &dir], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("has no gpu_id") && stderr.contains("--complete"),
        "{stderr}"
    );

    let out = run(
        &["map", "--from", &dir, "--to", &dir, "--complete", "--json"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["gpu_map"].as_object().unwrap().len(), 8);
    assert_eq!(v["cpu_map"], serde_json::json!({"0": 0, "1": 1}));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("filled in: node 2: gpu_id"), "{stderr}");
}

#[test]
fn equal_gpus_failing_alike_share_one_line() {
    let out = run(
        &[
            "map",
            "--from",
            "builtin:mi250x-8",
            "--to",
            "builtin:mi210-8gpu-2hive",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let device_id: Vec<&str> = text.lines().filter(|l| l.contains("device_id")).collect();
    assert_eq!(device_id.len(), 1, "{text}");
    let listed = device_id[0]
        .trim()
        .strip_prefix("checkpointed GPUs ")
        .and_then(|rest| rest.split_once(':'))
        .map(|(ids, _)| ids.split(", ").count());
    assert_eq!(listed, Some(8), "{text}");
    // JSON keeps one reason per checkpointed GPU
    let out = run(
        &[
            "map",
            "--from",
            "builtin:mi250x-8",
            "--to",
            "builtin:mi210-8gpu-2hive",
            "--json",
        ],
        &[],
    );
    let v = json(&out);
    let per_gpu = v["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["check"] == "device_id")
        .count();
    assert_eq!(per_gpu, 8);
}

#[test]
fn a_device_map_pins_gpus_and_a_broken_one_says_why() {
    let name = "mi210-8gpu-2hive";
    let dir = format!("builtin:{name}");
    let system = amdgpu_topology::builtin(name).unwrap();
    let hives: Vec<Vec<String>> = system
        .hives()
        .iter()
        .map(|h| {
            h.nodes
                .iter()
                // gpu_ids in hex, as the JSON gives them.
                .map(|&n| format!("{:#06x}", system.node(n).unwrap().gpu_id.unwrap()))
                .collect()
        })
        .collect();
    assert_eq!(hives.len(), 2);
    let (a, b) = (&hives[0], &hives[1]);
    let map_json = |map: &str, env: &[(&str, &str)]| {
        let out = run(
            &[
                "map",
                "--from",
                &dir,
                "--to",
                &dir,
                "--json",
                "--device-map",
                map,
            ],
            env,
        );
        (out.status.code(), json(&out))
    };
    // A GPU pinned into the other hive: its hive follows it.
    let decimal = u32::from_str_radix(&b[2][2..], 16).unwrap();
    let (code, v) = map_json(&format!("{}={decimal}", a[0]), &[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["gpu_map"][&a[0]], b[2].as_str());
    for g in &a[1..] {
        assert!(
            b.contains(&v["gpu_map"][g].as_str().unwrap().to_owned()),
            "{v}"
        );
    }

    // Two GPUs of one hive pinned into different hives: refused, the
    // reason in the text output.
    let map = format!("{}={},{}={}", a[0], a[0], a[1], b[0]);
    let out = run(
        &["map", "--from", &dir, "--to", &dir, "--device-map", &map],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("the device map splits its XGMI hive"),
        "{text}"
    );

    // Named twice, a GPU that is not there, a map that does not parse: 2.
    for map in [
        format!("{}={},{}={}", a[0], a[1], a[0], a[2]),
        format!("{}=0000:ff:1f.7", a[0]),
        "nonsense".to_owned(),
    ] {
        let out = run(
            &["map", "--from", &dir, "--to", &dir, "--device-map", &map],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{map}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("device map"), "{map}: {err}");
    }
    // KFD_DEVICE_MAP is honoured; the flag overrides it.
    let map = format!("{}={}", a[0], b[1]);
    let out = run(
        &["map", "--from", &dir, "--to", &dir, "--json"],
        &[("KFD_DEVICE_MAP", &map)],
    );
    assert_eq!(json(&out)["gpu_map"][&a[0]], b[1].as_str());
    let (_, v) = map_json("", &[("KFD_DEVICE_MAP", &map)]);
    assert_eq!(v["gpu_map"][&a[0]], a[0].as_str());
}
