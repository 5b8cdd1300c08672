//! `amdgpu-criu demo` and `amdgpu-criu check` through the built binary: the
//! demo checkpoints simulated processes through the plugin and restores
//! them verified, refuses machines that cannot take the checkpoint, and
//! reports injected failures with the plugin's error; `check` answers for a
//! demo-made image set on compatible and incompatible machines.

use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod cli;
use cli::{run, stderr, stdout};

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout:\n{}\nstderr:\n{}", stdout(out), stderr(out)))
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited normally")
}

/// Runs the demo with `--json` and checks the verified answer's shape.
fn demo_verified(args: &[&str]) -> Value {
    let mut all = vec!["demo", "--json"];
    // `basic` has a fixed size and refuses --size.
    if !args.contains(&"basic") && !args.contains(&"--size") {
        all.extend(["--size", "16M"]);
    }
    all.extend_from_slice(args);
    let out = run(&all);
    let v = json(&out);
    assert_eq!(code(&out), 0, "{v:#}\n{}", stderr(&out));
    assert_eq!(v["verified"], true, "{v:#}");
    assert!(v.get("error").is_none(), "{v:#}");
    let (c, r) = (&v["checkpoint"], &v["restore"]);
    for key in ["gpus", "bos", "bytes"] {
        assert!(c[key].as_u64().unwrap() > 0, "checkpoint {key}: {v:#}");
        assert_eq!(
            c[key], r[key],
            "{key} differ between checkpoint and restore"
        );
    }
    assert!(c["seconds"].as_f64().unwrap() > 0.0);
    assert!(r["seconds"].as_f64().unwrap() > 0.0);
    let map = v["gpu_map"].as_object().unwrap();
    assert_eq!(map.len() as u64, c["gpus"].as_u64().unwrap(), "{v:#}");
    v
}

/// A gpu_id as the JSON gives it: a hex string.
fn hex_id(text: &str) -> u64 {
    let digits = text
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("{text:?} is not a hex gpu_id"));
    u64::from_str_radix(digits, 16).unwrap()
}

fn gpu_map(v: &Value) -> Vec<(u64, u64)> {
    v["gpu_map"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (hex_id(k), hex_id(v.as_str().unwrap())))
        .collect()
}

#[test]
fn tensorflow_moves_to_a_renumbered_machine() {
    let v = demo_verified(&["--topology", "pcie-2gpu", "--workload", "tensorflow"]);
    let map = gpu_map(&v);
    assert_eq!(map.len(), 2);
    assert!(
        map.iter().all(|(from, to)| from != to),
        "a renumbered machine has other gpu_ids: {map:?}"
    );
    // About the requested size: six VRAM BOs per GPU share it with two
    // 2 MiB GTT BOs and the queues' rings.
    let bytes = v["checkpoint"]["bytes"].as_u64().unwrap();
    assert!((8 << 20..=16 << 20).contains(&bytes), "{bytes}");
}

#[test]
fn default_machine_with_two_hives_remaps_every_gpu() {
    // Eight GPUs take 35 MiB of rings and GTT buffers whatever the size.
    let v = demo_verified(&["--workload", "tensorflow", "--size", "40M"]);
    let map = gpu_map(&v);
    assert_eq!(map.len(), 8, "mi210-8gpu-2hive has eight GPUs");
    let targets: std::collections::BTreeSet<u64> = map.iter().map(|(_, to)| *to).collect();
    assert_eq!(targets.len(), 8, "one local GPU per checkpointed GPU");
}

#[test]
fn basic_pytorch_and_multi_move_to_a_renumbered_machine() {
    for workload in ["basic", "pytorch", "multi"] {
        let v = demo_verified(&["--topology", "pcie-2gpu", "--workload", workload]);
        // The memory behind the USERPTR BOs travels in the emulated CRIU's
        // pages dump and is mapped back at the same addresses there.
        let map = gpu_map(&v);
        assert_eq!(map.len(), 2, "{workload}: {v:#}");
        assert!(
            map.iter().all(|(from, to)| from != to),
            "{workload}: a renumbered machine has other gpu_ids: {v:#}"
        );
    }
}

#[test]
fn pytorch_restores_on_the_very_machine_it_ran_on() {
    // The checkpointed process's memory is unmapped when it ends and mapped
    // back by the restore on the same simulated machine.
    let v = demo_verified(&[
        "--topology",
        "pcie-2gpu",
        "--restore-topology",
        "pcie-2gpu",
        "--workload",
        "pytorch",
    ]);
    assert!(gpu_map(&v).iter().all(|(from, to)| from == to), "{v:#}");
}

#[test]
fn multi_holds_three_processes() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let out = run(&[
        "demo",
        "--topology",
        "single-gpu",
        "--workload",
        "multi",
        "--size",
        "16M",
        "--dir",
        images.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("3 processes"), "{text}");
    assert!(
        text.lines().last().unwrap().starts_with("verified: "),
        "{text}"
    );
    let kfd_images = fs::read_dir(&images)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("amdgpu-kfd-")
        })
        .count();
    assert_eq!(kfd_images, 3);
    let verify = run(&["verify", images.to_str().unwrap()]);
    assert_eq!(code(&verify), 0, "{}", stdout(&verify));
}

#[test]
fn an_incompatible_restore_machine_is_refused_before_anything_runs() {
    let out = run(&[
        "demo",
        "--json",
        "--size",
        "16M",
        "--topology",
        "pcie-2gpu",
        "--restore-topology",
        "single-gpu",
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verified"], false);
    // Refused before the checkpoint: nothing was checkpointed or kept.
    assert!(v["checkpoint"].is_null(), "{v:#}");
    assert!(v["restore"].is_null(), "{v:#}");
    assert!(v["image_dir"].is_null(), "{v:#}");
    // The reasons in the shape `map --json` and `check --json` give them.
    let reasons = v["reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|r| r["check"] == "gpu_count" && r["checkpointed"] == 2 && r["local"] == 1),
        "{v:#}"
    );
    assert_eq!(v["workload"], "tensorflow");
    assert_eq!(v["topologies"]["checkpoint"], "builtin:pcie-2gpu");
    assert_eq!(v["topologies"]["restore"], "builtin:single-gpu");
    // A bare built-in name is taken, with a hint at the one form.
    let err = stderr(&out);
    assert!(
        err.contains("hint: \"pcie-2gpu\" is read as builtin:pcie-2gpu"),
        "{err}"
    );
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("builtin:single-gpu cannot restore a checkpoint taken on builtin:pcie-2gpu"),
        "{v:#}"
    );
    // Each reason once: no plugin ran to refuse it a second time.
    assert_eq!(
        err.matches("number of GPUs mismatch: 2 checkpointed, 1 local")
            .count(),
        1,
        "{err}"
    );
    assert!(!err.contains("amdgpu_plugin: "), "{err}");
}

#[test]
fn other_hardware_is_refused_with_every_reason() {
    let out = run(&[
        "demo",
        "--size",
        "16M",
        "--topology",
        "pcie-2gpu",
        "--restore-topology",
        "mi250x-8",
    ]);
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("verified:"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("number of GPUs mismatch: 2 checkpointed, 8 local"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_failed_checkpoint_names_the_error_and_leaves_the_app_running() {
    let out = run(&[
        "demo",
        "--size",
        "16M",
        "--topology",
        "pcie-2gpu",
        "--inject",
        "CRIU_OP:CHECKPOINT=EIO",
    ]);
    assert_eq!(code(&out), 1);
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(err.contains("CRIU_OP CHECKPOINT failed"), "{err}");
    assert!(err.contains("EIO"), "{err}");
    assert!(text.contains("checkpoint failed: DUMP_EXT_FILE"), "{text}");
    assert!(text.contains("unpaused, it keeps running"), "{text}");
    assert!(text.contains("no amdgpu image files remain"), "{text}");
    assert!(!text.contains("verified:"), "{text}");

    let out = run(&[
        "demo",
        "--json",
        "--size",
        "16M",
        "--topology",
        "pcie-2gpu",
        "--inject",
        "CRIU_OP:CHECKPOINT=EIO",
    ]);
    let v = json(&out);
    assert_eq!(code(&out), 1);
    assert_eq!(v["verified"], false);
    assert!(v["checkpoint"].is_null(), "{v:#}");
    assert!(v["error"]
        .as_str()
        .unwrap()
        .starts_with("checkpoint failed"));
}

#[test]
fn a_failed_restore_names_the_error() {
    let out = run(&[
        "demo",
        "--size",
        "16M",
        "--topology",
        "pcie-2gpu",
        "--inject",
        "CRIU_OP:RESTORE=ENOMEM",
    ]);
    assert_eq!(code(&out), 1);
    let err = stderr(&out);
    assert!(err.contains("CRIU_OP RESTORE failed"), "{err}");
    assert!(err.contains("ENOMEM"), "{err}");
    assert!(
        stdout(&out).contains("no process was left behind"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["demo", "--topology", "no-such-machine"][..],
        &["demo", "--size", "12Q"],
        &["demo", "--inject", ":3"],
        &["demo", "--workload", "nope"],
        &["check", "/nonexistent/images", "--builtin", "single-gpu"],
        &[
            "check",
            "/tmp",
            "--builtin",
            "single-gpu",
            "--sysfs",
            "/tmp",
        ],
    ] {
        let out = run(args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
    }
    // A directory that already holds images is not overwritten.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("amdgpu-kfd-1.img"), b"x").unwrap();
    let out = run(&["demo", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("already holds"), "{}", stderr(&out));
}

#[test]
fn inject_names_the_valid_operations_and_a_fault_that_never_fires_fails() {
    let out = run(&["demo", "--inject", "FOO"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("unknown operation \"FOO\"")
            && err.contains("valid operations: ")
            && err.contains("CRIU_OP:CHECKPOINT"),
        "{err}"
    );
    let help = stdout(&run(&["demo", "--help"]));
    assert!(
        help.contains("CRIU_OP:RESTORE") && help.contains("SDMA_SHORT"),
        "--help lists the operations: {help}"
    );
    // A valid operation that this run never calls after the workload
    // started: the rehearsal rehearsed nothing, so the run fails.
    let out = run(&[
        "demo",
        "--size",
        "16M",
        "--topology",
        "pcie-2gpu",
        "--inject",
        "ALLOC_MEMORY_OF_GPU=ENOMEM",
    ]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains("injected fault ALLOC_MEMORY_OF_GPU:1=ENOMEM never fired"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_size_that_cannot_be_honoured_is_refused_with_the_reason() {
    let out = run(&["demo", "--workload", "basic", "--size", "1G"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--size does not apply to the basic workload"),
        "{}",
        stderr(&out)
    );
    let out = run(&["demo", "--workload", "pytorch", "--size", "1"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--size 1 B is below the"),
        "{}",
        stderr(&out)
    );
    // More than any host here has: refused before anything is allocated.
    let out = run(&["demo", "--size", "64T"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("not enough memory") && stderr(&out).contains("MemAvailable"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_checkpoint_reports_logical_and_written_bytes() {
    let v = demo_verified(&["--topology", "pcie-2gpu", "--workload", "tensorflow"]);
    let c = &v["checkpoint"];
    let (logical, written) = (
        c["bytes"].as_u64().unwrap(),
        c["written_bytes"].as_u64().unwrap(),
    );
    // --size is the total of the BOs.
    assert!(logical.abs_diff(16 << 20) <= (16 << 20) / 32, "{v:#}");
    // The tensorflow pool is used to 5/6: dense data is written, the
    // untouched headroom is elided.
    assert!(written > logical / 2 && written < logical, "{v:#}");
}

/// Images of a tensorflow run on pcie-2gpu, kept in `dir`.
fn demo_images(dir: &Path) {
    let out = run(&[
        "demo",
        "--size",
        "16M",
        "--topology",
        "builtin:pcie-2gpu",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn keep_and_dir_are_one_or_the_other() {
    let out = run(&["demo", "--keep", "--dir", "/nonexistent/images"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("'--keep' cannot be used with '--dir <DIR>'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_answers_for_a_demo_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    demo_images(&images);
    let images = images.to_str().unwrap();

    // The same model: compatible, both GPUs mapped.
    let out = run(&["check", images, "--builtin", "pcie-2gpu", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["compatible"], true);
    assert_eq!(v["gpu_map"].as_object().unwrap().len(), 2, "{v:#}");
    assert_eq!(v["reasons"].as_array().unwrap().len(), 0);
    assert!(v["cpu_map"].is_object());

    // A renumbered copy written as a sysfs tree: compatible too.
    let system = amdgpu_topology::builtin("pcie-2gpu").unwrap();
    let sysfs = tmp.path().join("topology");
    amdgpu_topology::write(&amdgpu_topology::renumbered(&system, 7), &sysfs).unwrap();
    let out = run(&["check", images, "--sysfs", sysfs.to_str().unwrap()]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("compatible"), "{}", stdout(&out));

    // Fewer GPUs, or other GPUs: not compatible, with reasons.
    for machine in ["single-gpu", "mi210-8gpu-2hive"] {
        let out = run(&["check", images, "--builtin", machine, "--json"]);
        assert_eq!(code(&out), 1, "{machine}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["compatible"], false, "{machine}");
        assert!(!v["reasons"].as_array().unwrap().is_empty(), "{machine}");
        assert!(v["gpu_map"].as_object().unwrap().is_empty(), "{machine}");
    }
    let out = run(&["check", images, "--builtin", "single-gpu"]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("not compatible:"), "{}", stdout(&out));

    // The images are the kfd image, pages files and render-node images.
    let out = run(&["verify", images]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
}

#[test]
fn check_refuses_what_is_not_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "check",
        dir.path().to_str().unwrap(),
        "--builtin",
        "single-gpu",
    ]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no KFD image"), "{}", stderr(&out));
    fs::write(dir.path().join("amdgpu-kfd-1.img"), [0u8; 3]).unwrap();
    let out = run(&[
        "check",
        dir.path().to_str().unwrap(),
        "--builtin",
        "single-gpu",
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("amdgpu-kfd-1.img"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_tree_dump_failing_on_its_second_process_unpauses_every_process() {
    let out = run(&[
        "demo",
        "--size",
        "16M",
        "--topology",
        "single-gpu",
        "--workload",
        "multi",
        "--inject",
        "CRIU_OP:CHECKPOINT:2",
    ]);
    assert_eq!(code(&out), 1);
    let text = stdout(&out);
    assert_eq!(
        text.matches("unpaused, it keeps running").count(),
        3,
        "{text}"
    );
    // The plugin removes what the failed dump wrote.
    assert!(text.contains("no amdgpu image files remain"), "{text}");
}

#[test]
fn a_failed_resume_is_restored_but_not_verified() {
    let out = run(&[
        "demo",
        "--json",
        "--size",
        "16M",
        "--topology",
        "pcie-2gpu",
        "--inject",
        "CRIU_OP:RESUME=EIO",
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verified"], false);
    // CRIU releases the task anyway: the restore itself completed...
    assert_eq!(v["restore"]["bos"], v["checkpoint"]["bos"], "{v:#}");
    assert_eq!(v["gpu_map"].as_object().unwrap().len(), 2);
    // ...but its queues stay evicted, so it cannot run.
    assert!(v["error"].as_str().unwrap().starts_with("not verified"));
    let problems = v["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().unwrap().contains("cannot run after the restore")),
        "{v:#}"
    );
    assert!(
        stderr(&out).contains("CRIU_OP RESUME failed"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_and_show_name_the_dump_hosts_kfd_version_and_check_takes_a_device_map() {
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images");
    demo_images(&images);
    let images = images.to_str().unwrap();
    // The simulator's kernel reports 1.18: a restore needs the CRIU baseline.
    let out = run(&["check", images, "--builtin", "pcie-2gpu"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("dumped on KFD interface 1.18; a restore needs 1.8 or later"),
        "{}",
        stdout(&out)
    );
    let out = run(&["show", images, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("\"kfd_minor_version\": 18"), "{text}");
    assert!(text.contains("\"kfd_required_minor\": 8"), "{text}");

    // A device map swapping the two GPUs is followed; one naming a GPU the
    // images lack is an error.
    let v = json(&run(&["check", images, "--builtin", "pcie-2gpu", "--json"]));
    // gpu_ids in hex, as everywhere.
    let pairs: Vec<(String, String)> = v["gpu_map"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(pairs.len(), 2);
    let map = format!(
        "{}={},{}={}",
        pairs[0].0, pairs[1].1, pairs[1].0, pairs[0].1
    );
    let out = run(&[
        "check",
        images,
        "--builtin",
        "pcie-2gpu",
        "--json",
        "--device-map",
        &map,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["gpu_map"][&pairs[0].0], pairs[1].1.as_str(), "{v:#}");
    let out = run(&[
        "check",
        images,
        "--builtin",
        "pcie-2gpu",
        "--device-map",
        "0x1=0x2",
    ]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no checkpointed GPU is 0x0001"),
        "{}",
        stderr(&out)
    );
}

/// SIGTERM and SIGHUP in the middle of a demo: it removes the temporary
/// directories it made and exits with 128 + the signal, as a shell reports
/// a death by that signal. The signal comes as soon as the first directory
/// appears, the moment a directory made but not yet registered for removal
/// would be left behind; ten rounds each, as that window is short.
#[test]
fn a_signal_ends_the_demo_and_removes_its_temporary_directories() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let rounds = [(libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")].repeat(10);
    for (signal, name) in rounds {
        let tmp = tempfile::tempdir().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
        command
            .args([
                "demo",
                "--workload",
                "data-parallel",
                "--size",
                "512M",
                "--topology",
                "builtin:pcie-2gpu",
            ])
            .env("TMPDIR", tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for name in cli::VARIABLES {
            command.env_remove(name);
        }
        let mut child = command.spawn().unwrap();
        // The demo made its first temporary directory: it takes signals.
        let deadline = Instant::now() + Duration::from_secs(60);
        while fs::read_dir(tmp.path()).unwrap().next().is_none() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the demo ended before it made a temporary directory"
            );
            assert!(Instant::now() < deadline, "no temporary directory in 60 s");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: kill(2) on our own child's pid, which it still is (not
        // yet waited for).
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(128 + signal), "{name}: {err}");
        assert!(err.contains(&format!("stopped by {name}")), "{name}: {err}");
        let left: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(left.is_empty(), "{name}: left behind {left:?}\n{err}");
    }
}
