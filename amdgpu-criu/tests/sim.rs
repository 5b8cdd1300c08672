//! `amdgpu-criu sim` end to end: unmodified ROCm programs (AMD's ROCr and
//! libhsakmt, one process and a tree of three) run on a simulated machine,
//! checkpointed by real CRIU with this project's plugin and restored on
//! another machine (the same model as another host numbers it: other
//! gpu_ids, render minors, node order), where each process checks what a
//! user relies on: every buffer holds its bytes as the process reads it,
//! and new GPU work (an SDMA copy, a ROCr async copy) runs and brings back
//! the bytes put in VRAM before the checkpoint. And the failure paths, each
//! saying what is wrong and leaving nothing behind: no CRIU, no root (run
//! as an unprivileged user: `run` works, the checkpoint says why it
//! cannot), a program without GPU state, a machine that cannot take the
//! checkpoint (the GPU and the check named), a program that ends during
//! the checkpoint, and Ctrl-C.
//!
//! The programs are `tests/sim/hsakmt_app.c` and `tests/sim/rocr_app.c`.
//! A HIP program joins them once the simulated GPU executes shader code
//! (kfd-sim's compute dispatcher on the gfx9 ISA crate): `tests/sim/hip_app.cpp`,
//! built with hipcc, a kernel filling a buffer before the checkpoint and one
//! checking it after the restore, run through the same steps as the ROCr
//! test below (`a_rocr_program_...`), with its kernel's result as the check.
//!
//! Needs root (CRIU), `cc`, libhsakmt-dev, libhsa-runtime-dev, `/dev/fuse`,
//! and the CRIU builds of `make criu` / `.ci/run` in `$CRIU_BUILDS` (default
//! `~/.cache/criu-builds`): criu-dev for every test, every release for the
//! libhsakmt one. Without them a test says why and skips; under `CI` a
//! skip fails.

#[path = "sim/harness.rs"]
mod harness;

use std::time::Duration;

use harness::*;

/// criu-dev, or why not.
fn criu_dev() -> Option<String> {
    match criu(RELEASES[0]) {
        Ok(path) => Some(path.display().to_string()),
        Err(why) => {
            skip(&why);
            None
        }
    }
}

/// The machine of `sim ps --json` serving `pid`.
fn machine_of(w: &World, pid: u32) -> serde_json::Value {
    w.machines()
        .into_iter()
        .find(|m| processes(m).iter().any(|p| p["pid"] == pid))
        .unwrap_or_else(|| panic!("no machine serves pid {pid}: {:?}", w.machines()))
}

/// `pid`'s entry in `sim ps --json`.
fn process(w: &World, pid: u32) -> serde_json::Value {
    processes(&machine_of(w, pid))
        .into_iter()
        .find(|p| p["pid"] == pid)
        .expect("the process")
}

/// Checkpoints `pid` into `dir` with `criu`: the JSON report.
fn checkpoint(w: &World, pid: u32, dir: &std::path::Path, criu: &str) -> serde_json::Value {
    let done = w.json(&[
        "sim",
        "checkpoint",
        &pid.to_string(),
        "--dir",
        dir.to_str().unwrap(),
        "--criu",
        criu,
    ]);
    assert_eq!(done["ok"], true, "{done}");
    assert_eq!(done["pid"], pid, "{done}");
    assert!(
        dir.join("sim.json").is_file() && dir.join("inventory.img").is_file(),
        "the checkpoint is complete"
    );
    done
}

/// Waits until CRIU ended every process of `pids` and their machine is
/// gone from the registry.
fn wait_ended(w: &World, pids: &[u32]) {
    assert!(
        wait_until(Duration::from_secs(30), || pids.iter().all(|&p| !alive(p))),
        "CRIU left the checkpointed program running"
    );
    assert!(
        wait_until(Duration::from_secs(30), || w.machines().is_empty()),
        "the machine of the checkpointed program did not end: {:?}",
        w.machines()
    );
    w.assert_nothing_left();
}

/// Restores `dir` with `args`: the JSON report.
fn restore(w: &World, dir: &std::path::Path, criu: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec![
        "sim",
        "restore",
        "--dir",
        dir.to_str().unwrap(),
        "--criu",
        criu,
    ];
    all.extend_from_slice(args);
    let restored = w.json(&all);
    assert_eq!(restored["ok"], true, "{restored}");
    restored
}

/// The restored processes' GPU maps: each process sees the gpu_ids it saw
/// before (`seen`), runs on other GPUs (`local`), its queues running.
fn assert_moved(restored: &serde_json::Value, before: &[(u32, Vec<(u64, u64)>)]) {
    let procs = restored["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), before.len(), "{restored}");
    for (pid, map) in before {
        let p = procs
            .iter()
            .find(|p| p["pid"] == *pid)
            .unwrap_or_else(|| panic!("pid {pid} not restored: {restored}"));
        let now = gpu_map(p);
        let seen: Vec<u64> = now.iter().map(|m| m.0).collect();
        let was: Vec<u64> = map.iter().map(|m| m.0).collect();
        assert_eq!(seen, was, "pid {pid} sees its checkpointed gpu_ids");
        assert!(
            now.iter().all(|m| m.0 != m.1),
            "pid {pid} runs on the other machine's GPUs: {now:?}"
        );
        assert_eq!(p["gpu"]["queues_running"], true, "{p}");
    }
}

/// Every process printed `check` with its buffers intact and its GPU
/// work done.
fn assert_checks(checks: &[Line], key: &str) {
    for c in checks {
        assert_eq!(c.field(key), Some("ok"), "{c:?}");
        assert_eq!(
            c.field("bos").or(c.field("host")),
            Some("ok"),
            "the process's buffers: {c:?}"
        );
    }
}

#[test]
fn a_rocr_program_is_checkpointed_and_restored_on_another_machine() {
    let Some(w) = World::new(true) else { return };
    let Some(criu) = criu_dev() else { return };
    let app = w.rocr_app();
    let out = w.path("rocr.out");
    let (pid, ready) = w.start("builtin:single-gpu", &out, &app, &["4"], 1);
    assert_eq!(ready[0].field("copy"), Some("ok"), "{ready:?}");
    assert_checks(&check(&out, &[pid]), "copy");
    let before = process(&w, pid);
    assert!(before["gpu"]["queues"].as_u64() > Some(0), "{before}");

    let dir = w.path("ck");
    let done = checkpoint(&w, pid, &dir, &criu);
    assert_eq!(done["gpu_images"], 1, "{done}");
    assert!(done["gpu_bytes"].as_u64() >= Some(4 << 20), "{done}");
    wait_ended(&w, &[pid]);

    let restored = restore(&w, &dir, &criu, &["--renumber", "3"]);
    assert_eq!(restored["pid"], pid);
    assert!(
        restored["machine"]
            .as_str()
            .is_some_and(|m| m.contains("renumbered")),
        "{restored}"
    );
    assert_moved(&restored, &[(pid, gpu_map(&before))]);
    // ROCr's event thread was in WAIT_EVENTS when CRIU froze it: the copy
    // needs it, so this also shows that call went on after the restore.
    assert_checks(&check(&out, &[pid]), "copy");
    w.stop_all();
    assert!(!alive(pid));
}

#[test]
fn a_libhsakmt_program_is_checkpointed_and_restored_on_another_machine_by_every_release() {
    let Some(w) = World::new(true) else { return };
    let Some(_) = criu_dev() else { return };
    let app = w.hsakmt_app();
    for release in RELEASES {
        let criu = match criu(release) {
            Ok(p) => p.display().to_string(),
            Err(why) => return skip(&why),
        };
        println!("CRIU {}:", release.name);
        let out = w.path(&format!("hsakmt-{}.out", release.name));
        let (pid, ready) = w.start("builtin:pcie-2gpu", &out, &app, &["2", "4"], 1);
        assert_eq!(ready[0].field("sdma"), Some("ok"), "{ready:?}");
        let before = process(&w, pid);
        assert_eq!(gpu_map(&before).len(), 2, "{before}");

        let dir = w.path(&format!("ck-{}", release.name));
        checkpoint(&w, pid, &dir, &criu);
        wait_ended(&w, &[pid]);
        let restored = restore(&w, &dir, &criu, &["--renumber", "7"]);
        assert_moved(&restored, &[(pid, gpu_map(&before))]);
        assert_checks(&check(&out, &[pid]), "sdma");

        if release.name == "head" {
            // The restored program checkpointed again, and restored with
            // its GPUs pinned the other way round.
            let map = gpu_map(&restored["processes"][0]);
            let again = w.path("ck-again");
            checkpoint(&w, pid, &again, &criu);
            wait_ended(&w, &[pid]);
            let pins = format!(
                "{:#x}={:#x},{:#x}={:#x}",
                map[0].0, map[1].1, map[1].0, map[0].1
            );
            let pinned = restore(
                &w,
                &again,
                &criu,
                &["--renumber", "7", "--device-map", &pins],
            );
            let mut got = gpu_map(&pinned["processes"][0]);
            let mut want = vec![(map[0].0, map[1].1), (map[1].0, map[0].1)];
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "--device-map {pins} is followed");
            assert_checks(&check(&out, &[pid]), "sdma");
            println!("  pinned with {pins}");
        }
        w.stop_all();
        println!("  run, checkpointed, restored renumbered, checked, stopped");
    }
}

#[test]
fn a_tree_of_three_processes_is_checkpointed_and_restored_on_another_machine() {
    let Some(w) = World::new(true) else { return };
    let Some(criu) = criu_dev() else { return };
    let app = w.hsakmt_app();
    let out = w.path("multi.out");
    let (root, ready) = w.start("builtin:pcie-2gpu", &out, &app, &["1", "2", "3"], 3);
    let pids: Vec<u32> = ready.iter().map(Line::pid).collect();
    let machine = machine_of(&w, root);
    let before: Vec<(u32, Vec<(u64, u64)>)> = pids
        .iter()
        .map(|&p| {
            let entry = processes(&machine)
                .into_iter()
                .find(|e| e["pid"] == p)
                .expect("every process is listed");
            (p, gpu_map(&entry))
        })
        .collect();

    let dir = w.path("ck");
    let done = checkpoint(&w, root, &dir, &criu);
    assert_eq!(done["gpu_images"], 3, "one KFD image per process: {done}");
    wait_ended(&w, &pids);
    let restored = restore(&w, &dir, &criu, &["--renumber", "5"]);
    assert_eq!(restored["pid"], root);
    assert_moved(&restored, &before);
    assert_checks(&check(&out, &pids), "sdma");
    w.stop_all();
}

#[test]
fn a_program_without_gpu_state_is_not_checkpointed() {
    let Some(w) = World::new(true) else { return };
    let Some(criu) = criu_dev() else { return };
    let started = w.json(&[
        "sim",
        "run",
        "--background",
        "--output",
        w.path("sleep.out").to_str().unwrap(),
        "--",
        "sleep",
        "600",
    ]);
    let pid = started["pid"].as_u64().unwrap() as u32;
    let dir = w.path("ck");
    let out = w.sim(&[
        "sim",
        "checkpoint",
        &pid.to_string(),
        "--dir",
        dir.to_str().unwrap(),
        "--criu",
        &criu,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("pid {pid} (sleep) holds no GPU state"))
            && err.contains("no process of it opened /dev/kfd"),
        "{err}"
    );
    assert!(!dir.exists(), "nothing was written");
    assert!(alive(pid), "the program runs on");
    w.stop_all();
}

#[test]
fn a_machine_that_cannot_take_the_checkpoint_is_refused_naming_the_gpu_and_the_check() {
    let Some(w) = World::new(true) else { return };
    let Some(criu) = criu_dev() else { return };
    let app = w.hsakmt_app();
    let out = w.path("app.out");
    let (pid, _) = w.start("builtin:single-gpu", &out, &app, &["1", "4"], 1);
    let dir = w.path("ck");
    checkpoint(&w, pid, &dir, &criu);
    wait_ended(&w, &[pid]);

    // The same machine with a GPU of fewer SIMDs.
    let mut system = amdgpu_topology::builtin("single-gpu").unwrap();
    let gpu = system.nodes.iter_mut().find(|n| n.is_gpu()).unwrap();
    let simds = gpu.prop("simd_count");
    gpu.properties.set("simd_count", simds / 2);
    let gpu_id = gpu.gpu_id.expect("the GPU's gpu_id");
    let other = w.path("smaller");
    amdgpu_topology::write(&system, &other).unwrap();
    for (machine, names) in [
        (
            other.to_str().unwrap().to_owned(),
            vec![format!("{gpu_id:#06x}"), "simd_count".to_owned()],
        ),
        (
            "builtin:pcie-2gpu".to_owned(),
            vec!["number of GPUs".to_owned()],
        ),
    ] {
        let refused = w.sim(&[
            "sim",
            "restore",
            "--dir",
            dir.to_str().unwrap(),
            "--machine",
            &machine,
            "--criu",
            &criu,
        ]);
        assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(err.contains("cannot take this checkpoint"), "{err}");
        for name in &names {
            assert!(
                err.contains(name.as_str()),
                "{machine}: names {name}: {err}"
            );
        }
        assert!(!alive(pid), "nothing was restored");
        w.assert_nothing_left();
    }
    // The checkpoint is still good on a machine that can take it.
    restore(&w, &dir, &criu, &["--renumber", "2"]);
    assert_checks(&check(&out, &[pid]), "sdma");
    w.stop_all();
}

#[test]
fn a_program_that_ends_during_the_checkpoint_leaves_no_checkpoint() {
    let Some(w) = World::new(true) else { return };
    let Some(criu) = criu_dev() else { return };
    let app = w.hsakmt_app();
    let out = w.path("app.out");
    let (pid, _) = w.start("builtin:single-gpu", &out, &app, &["1", "64"], 1);
    let dir = w.path("ck");
    let dump = w
        .command(&[
            "sim",
            "checkpoint",
            &pid.to_string(),
            "--dir",
            dir.to_str().unwrap(),
            "--criu",
            &criu,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // CRIU seized the program: held still (SIGSTOP) while it is seized,
    // CRIU is in the middle of the dump when the program is killed.
    assert!(
        wait_until(Duration::from_secs(60), || tracer(pid) != 0),
        "CRIU never seized the program"
    );
    let criu_pid = tracer(pid);
    signal(criu_pid, libc::SIGSTOP);
    assert_eq!(
        tracer(pid),
        criu_pid,
        "CRIU holds the program while stopped"
    );
    signal(pid, libc::SIGKILL);
    signal(criu_pid, libc::SIGCONT);
    let done = dump.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(1), "{}", text(&done));
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(
        err.contains(&format!("pid {pid} ended during the checkpoint")),
        "{err}"
    );
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["dump.log"], "only CRIU's log is left");
    assert!(
        wait_until(Duration::from_secs(30), || w.machines().is_empty()),
        "the machine ends with its program"
    );
    w.assert_nothing_left();
}

#[test]
fn without_criu_the_checkpoint_says_what_is_missing_and_how_to_get_it() {
    let Some(w) = World::new(true) else { return };
    let app = w.hsakmt_app();
    let out = w.path("app.out");
    let (pid, _) = w.start("builtin:single-gpu", &out, &app, &["1", "4"], 1);
    let dir = w.path("ck");
    let given = w.sim(&[
        "sim",
        "checkpoint",
        &pid.to_string(),
        "--dir",
        dir.to_str().unwrap(),
        "--criu",
        "/nonexistent/criu",
    ]);
    assert_eq!(given.status.code(), Some(3), "{}", text(&given));
    assert!(
        String::from_utf8_lossy(&given.stderr)
            .contains("/nonexistent/criu cannot be used: no such file"),
        "{}",
        text(&given)
    );
    let empty = tempfile::tempdir().unwrap();
    let none = w
        .command(&[
            "sim",
            "checkpoint",
            &pid.to_string(),
            "--dir",
            dir.to_str().unwrap(),
        ])
        .env("PATH", empty.path())
        .env("CRIU_BUILDS", empty.path())
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(3), "{}", text(&none));
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(
        err.contains("no usable CRIU") && err.contains("make criu") && err.contains("--criu"),
        "{err}"
    );
    assert!(!dir.exists(), "nothing was written");
    assert_checks(&check(&out, &[pid]), "sdma");

    // Without --criu and none on PATH, the builds in $CRIU_BUILDS serve,
    // criu-dev first.
    let Some(criu) = criu_dev() else { return };
    let found = w
        .command(&[
            "sim",
            "checkpoint",
            "--json",
            &pid.to_string(),
            "--dir",
            dir.to_str().unwrap(),
        ])
        .env("PATH", empty.path())
        .env("CRIU_BUILDS", builds_dir())
        .output()
        .unwrap();
    assert!(found.status.success(), "{}", text(&found));
    let done: serde_json::Value = serde_json::from_slice(&found.stdout).unwrap();
    assert_eq!(done["criu"], criu.as_str(), "{done}");
    wait_ended(&w, &[pid]);
}

#[test]
fn without_root_run_works_and_checkpoint_says_why_it_cannot() {
    if !test_env::unprivileged::run_here("without_root_run_works_and_checkpoint_says_why_it_cannot")
    {
        return;
    }
    let Some(w) = World::new(false) else { return };
    let app = w.hsakmt_app();
    let out = w.path("app.out");
    let (pid, ready) = w.start("builtin:single-gpu", &out, &app, &["1", "4"], 1);
    assert_eq!(ready[0].field("sdma"), Some("ok"), "{ready:?}");
    assert!(process(&w, pid)["gpu"]["bos"].as_u64() > Some(0));
    let refused = w.sim(&[
        "sim",
        "checkpoint",
        &pid.to_string(),
        "--dir",
        w.path("ck").to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("CRIU needs root"),
        "{}",
        text(&refused)
    );
    assert_checks(&check(&out, &[pid]), "sdma");
    w.stop_all();
    assert!(!alive(pid));
}

#[test]
fn ctrl_c_leaves_nothing_behind() {
    let Some(w) = World::new(true) else { return };
    let Some(criu) = criu_dev() else { return };
    let app = w.hsakmt_app();

    // `run` in the foreground: the machine, its program and its files go.
    let out = w.path("fg.out");
    let mut run = w
        .command(&[
            "sim",
            "run",
            "--output",
            out.to_str().unwrap(),
            "--",
            app.to_str().unwrap(),
            "1",
            "4",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = wait_for_lines(&out, "ready", 1)[0].pid();
    signal(run.id(), libc::SIGINT);
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(130), "128 + SIGINT");
    assert!(!alive(pid), "the program went with its machine");
    w.assert_nothing_left();
    assert!(
        !std::fs::read_dir("/dev/shm").unwrap().flatten().any(|e| e
            .file_name()
            .to_string_lossy()
            .starts_with(&format!("kfd-sim-run-{}-", run.id()))),
        "the machine's simulator trees are gone"
    );

    // `checkpoint` interrupted with CRIU in the middle of the dump: no
    // checkpoint, and the program runs on with its GPU queues.
    let out = w.path("bg.out");
    let (pid, _) = w.start("builtin:single-gpu", &out, &app, &["1", "64"], 1);
    let dir = w.path("ck");
    let dump = w
        .command(&[
            "sim",
            "checkpoint",
            &pid.to_string(),
            "--dir",
            dir.to_str().unwrap(),
            "--criu",
            &criu,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(60), || tracer(pid) != 0));
    let criu_pid = tracer(pid);
    signal(criu_pid, libc::SIGSTOP);
    assert_eq!(
        tracer(pid),
        criu_pid,
        "CRIU holds the program while stopped"
    );
    signal(dump.id(), libc::SIGINT);
    let done = dump.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(1), "{}", text(&done));
    assert!(
        String::from_utf8_lossy(&done.stderr)
            .contains("stopped by SIGINT: no checkpoint was written; the program runs on"),
        "{}",
        text(&done)
    );
    assert!(!dir.join("sim.json").exists() && !dir.join("inventory.img").exists());
    assert!(
        wait_until(Duration::from_secs(30), || tracer(pid) == 0),
        "the program is let go"
    );
    assert_checks(&check(&out, &[pid]), "sdma");
    assert_eq!(process(&w, pid)["gpu"]["queues_running"], true);
    w.stop_all();
}

#[test]
fn run_exits_with_the_program_status_and_refuses_what_it_cannot_run() {
    let Some(w) = World::new(false) else { return };
    let out = w.sim(&["sim", "run", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("amdgpu-criu sim run: pid"), "{err}");
    let quiet = w.sim(&["--quiet", "sim", "run", "--", "true"]);
    assert_eq!(quiet.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&quiet.stderr),
        "",
        "quiet by default with -q"
    );
    let missing = w.sim(&["sim", "run", "--", "/nonexistent/program"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    let json = w.sim(&["sim", "run", "--json", "--", "true"]);
    assert_eq!(json.status.code(), Some(2), "--json needs --background");
    let unknown = w.sim(&["sim", "run", "--machine", "builtin:nope", "--", "true"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown));
    let ps = w.json(&["sim", "ps"]);
    assert_eq!(ps["machines"], serde_json::json!([]));
    w.assert_nothing_left();
}

/// `make criu`'s script: a build from the same archive is reused without
/// building, and what it cannot use is named. (Building CRIU itself takes
/// minutes; `.ci/run` builds the releases the tests run with
/// `../shared/vendor/criu/build.sh`, which this script stands in for
/// outside the repository's CI.)
#[test]
fn make_criu_reuses_a_build_and_names_what_it_cannot_use() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/criu/build.sh");
    let dir = tempfile::tempdir().unwrap();
    let run = |env: &[(&str, &std::path::Path)]| {
        let mut c = std::process::Command::new("bash");
        c.arg(&script)
            .env("CRIU_BUILDS", dir.path().join("builds"))
            .env_remove("CRIU_SRC")
            .env_remove("CRIU_REF")
            .env_remove("CRIU_NAME");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let archive = dir.path().join("criu-9.9.tar.gz");
    std::fs::write(&archive, b"not really an archive").unwrap();
    let digest = std::process::Command::new("sha256sum")
        .arg(&archive)
        .output()
        .unwrap();
    let digest = String::from_utf8_lossy(&digest.stdout)[..16].to_owned();
    let build = dir.path().join("builds/criu-9.9");
    std::fs::create_dir_all(&build).unwrap();
    std::fs::write(build.join("criu"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        build.join("criu"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(build.join("stamp"), format!("archive {digest}\n")).unwrap();
    let reused = run(&[("CRIU_SRC", &archive)]);
    assert!(reused.status.success(), "{}", text(&reused));
    assert_eq!(
        String::from_utf8_lossy(&reused.stdout).trim(),
        format!("criu-9.9 {}", build.join("criu").display())
    );
    let missing = run(&[("CRIU_SRC", std::path::Path::new("/nonexistent/criu.tar.gz"))]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("neither a directory nor an archive"));
    let both = run(&[
        ("CRIU_SRC", &archive),
        ("CRIU_REF", std::path::Path::new("v4.2")),
    ]);
    assert_eq!(both.status.code(), Some(2), "{}", text(&both));
    assert!(String::from_utf8_lossy(&both.stderr).contains("not both"));
}
