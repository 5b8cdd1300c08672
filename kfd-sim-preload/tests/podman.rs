//! A GPU container checkpointed, exported, imported and restored by Podman
//! (Debian's podman and conmon, with runc, and with crun built with
//! libcriu), on simulated GPUs: the libhsakmt program of
//! `real_criu_restore.rs` runs in a container whose `/dev/kfd` and render
//! nodes are stand-in nodes (`--device /dev/fuse:/dev/kfd`), talking to a
//! machine the test serves on a socket file in a directory the container
//! mounts (its network namespace cannot reach an abstract socket), as pid
//! 1 of its own pid namespace (the served machine knows it by its host pid
//! and `PROCESS_INFO` reports 1, as the kernel does). The runtime runs
//! `criu` from `PATH`: a wrapper that starts CRIU criu-dev under the
//! interposer, configured through `/etc/criu/runc.conf` and
//! `default.conf` (see `containers/engine.rs`: nothing on the host
//! changes). The plugin runs with its defaults: parallel restore on.
//!
//! * `podman container checkpoint --leave-running --export` keeps the
//!   container running, GPU queues unpaused; `amdgpu-criu show`, `verify`
//!   and `check ARCHIVE --sysfs` read the archive (the format the kubelet's
//!   checkpoint API writes through CRI-O and containerd).
//! * `podman container checkpoint --export` then `podman container
//!   restore --import` on the same machine and onto a machine with other
//!   gpu_ids: the program goes on from where it was (its beat counter
//!   counts on), its BOs are bit-identical (as the simulator reads them and
//!   as the program reads them), its queues run, its mappings are the
//!   simulator's memory again. The container's task, in a network
//!   namespace of its own, cannot reach the plugin's parallel restore
//!   worker in CRIU's: it restores its BOs itself and the log says why,
//!   while CRIU still joins the container's mount namespace with the worker
//!   running.
//! * A container in the host's network namespace has its BOs copied by
//!   that worker (parallel restore inside a container restore).
//! * A machine whose GPU differs refuses the restore before the container
//!   starts, naming the GPU and the check, and keeps nothing of it.
//! * A container given the host's `/dev/dri` is restored on a machine
//!   whose render nodes have other names and minors (criu#2888).
//! * A container given one GPU of two sees, checkpoints and is restored on
//!   that one; restored where the GPU of its render node differs, it is
//!   refused naming the GPU and the check, though the machine's other GPU
//!   would fit (criu#2888: the GPUs the container sees count).
//! * CRIU killed in the middle of the dump (at its first device call after
//!   the pause, as an engine's timeout would): `podman container
//!   checkpoint` fails, and the plugin's guardian has the container's GPU
//!   queues running again.
//! * crun: with libcriu (`.ci/build-crun.sh` builds Debian's crun source
//!   against the vendored CRIU's libcriu) the same route as runc; Debian 12's
//!   own crun 1.8.1 is built without it, and Podman refuses to checkpoint a
//!   container it runs, which runs on.
//!
//! Needs root, Podman, runc, conmon and crun (`.ci/run` installs them and
//! builds crun with libcriu), and what `real_criu_restore.rs` needs.
//! Without them it says why and skips; with `CI` set a skip is a failure.

mod common;
use real_criu_harness::driver;
#[path = "containers/engine.rs"]
mod engine;
#[path = "containers/gpu.rs"]
mod gpu;
use real_criu_harness as harness;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use driver::{check_process, Served};
use engine::{Engine, Kind};
use gpu::*;
use kfd_sim::Pid;

/// The whole route with runc, on the same machine and onto a renumbered
/// one, the archive read by amdgpu-criu, and a machine that refuses.
#[test]
fn a_gpu_container_is_checkpointed_exported_and_restored_by_podman() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = engine_for(Kind::Podman) else {
        return;
    };
    route(&engine, &[], "runc");
}

/// The same with crun built with libcriu.
#[test]
fn a_gpu_container_is_checkpointed_exported_and_restored_by_podman_with_crun() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let crun = match crun_with_criu() {
        Ok(crun) => crun,
        Err(why) => {
            common::skip(&why);
            return;
        }
    };
    let Some((_setup, engine)) = engine_for(Kind::Podman) else {
        return;
    };
    let version = engine
        .run_in_namespace(&[crun.to_str().unwrap(), "--version"])
        .expect("crun --version");
    assert!(version.contains("+CRIU"), "{version}");
    println!("{}", version.lines().next().unwrap_or_default());
    route(&engine, &["--runtime", crun.to_str().unwrap()], "crun");
}

/// crun built with libcriu by `.ci/build-crun.sh`.
fn crun_with_criu() -> Result<PathBuf, String> {
    let crun = harness::builds_dir().join("crun/crun");
    if !crun.is_file() {
        return Err(format!(
            "no crun with libcriu at {} (build it with .ci/build-crun.sh)",
            crun.display()
        ));
    }
    Ok(crun)
}

/// The restore log of container `name` (in Podman's storage).
fn restore_log(engine: &Engine, name: &str) -> String {
    engine
        .read_in_namespace(&format!(
            "{}/restore.log",
            engine.inspect(name, "{{.StaticDir}}")
        ))
        .unwrap_or_default()
}

fn route(engine: &Engine, runtime: &[&str], what: &str) {
    let here = serve(engine, "a", single_gpu());
    // Other gpu_ids and node order; the render minor stays (the archive
    // names the container's devices as they were).
    let there = serve(
        engine,
        "b",
        renumbered(&single_gpu(), 11, single_gpu_minor()),
    );
    let odd_system = {
        let mut system = renumbered(&single_gpu(), 12, single_gpu_minor());
        halve_simds(&mut system);
        system
    };
    let odd = serve(engine, "c", odd_system);
    switch(engine, "a");
    let minor = here.sim.gpus()[0].render_minor;
    let devices = [engine::render_device(minor)];
    let started = Instant::now();
    let records = engine.run_app_with("gpu", 1, 4, &devices, runtime);
    let app = proc_of(engine, "gpu", &records);
    println!(
        "{what}: container started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(queues_run(&here, app.pid), "the container's GPU queues run");

    // --leave-running: the container runs on, unpaused.
    let ck = engine.scratch.path().join("running.tar");
    let t = Instant::now();
    engine.cli_ok(&[
        "container",
        "checkpoint",
        "--leave-running",
        "--keep",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    println!(
        "{what}: checkpoint --leave-running --export: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(engine.running("gpu"));
    assert_eq!(
        engine.host_pid("gpu"),
        Some(app.pid),
        "the same process runs"
    );
    app.assert_beats_on("after checkpoint --leave-running");
    assert!(
        queues_run(&here, app.pid),
        "--leave-running: the GPU queues run again: {:?}",
        here.sim.kfd_state(Pid(app.pid))
    );
    let dump_log = engine
        .read_in_namespace(&format!(
            "{}/dump.log",
            engine.inspect("gpu", "{{.StaticDir}}")
        ))
        .unwrap_or_default();
    assert!(
        dump_log.contains("amdgpu_plugin: ") && dump_log.contains("pid 1 paused"),
        "the plugin paused the container's pid 1 (PROCESS_INFO's pid in its namespace):\n{dump_log}"
    );

    // The archive, as the kubelet's checkpoint API writes it too.
    let archive = ck.to_str().unwrap();
    let (code, text) = amdgpu_criu(&["show", archive]);
    assert_eq!(code, Some(0), "show: {text}");
    assert!(
        text.contains("(checkpoint archive)") && text.contains("processes: 1"),
        "{text}"
    );
    let (code, text) = amdgpu_criu(&["verify", archive]);
    assert_eq!(code, Some(0), "verify: {text}");
    let (code, text) = amdgpu_criu(&["check", archive, "--sysfs", "builtin:single-gpu"]);
    assert_eq!(code, Some(0), "check on single-gpu: {text}");
    let topo_c = engine.share.join("topo-c");
    let (code, text) = amdgpu_criu(&["check", archive, "--sysfs", topo_c.to_str().unwrap()]);
    assert_eq!(code, Some(1), "check on the half-SIMD machine: {text}");
    assert!(
        text.contains("simd_count"),
        "check names the property: {text}"
    );
    println!("{what}: amdgpu-criu show, verify and check read the archive");

    // Checkpoint (the container stops), restore on the same machine.
    let ck = engine.scratch.path().join("gpu.tar");
    let t = Instant::now();
    engine.cli_ok(&[
        "container",
        "checkpoint",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    println!(
        "{what}: checkpoint --export: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(!engine.running("gpu"));
    here.assert_empty("after the checkpoint");
    let stopped_at = beats(&app);
    engine.cli_ok(&["rm", "gpu"]);
    let restore = |served: &Served, which: &str| {
        let t = Instant::now();
        engine.cli_ok(&[
            "container",
            "restore",
            "--keep",
            "--import",
            ck.to_str().unwrap(),
        ]);
        println!(
            "{what}: restore --import ({which}): {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let restored = proc_of(engine, "gpu", &records);
        if let Err(e) = resumed(&restored, stopped_at) {
            panic!("{which}: {e}");
        }
        check_process(served, &restored, which);
        if let Some(runtime) = runtime.get(1) {
            // The archive names the runtime; the restore used it again.
            assert_eq!(engine.inspect("gpu", "{{.OCIRuntime}}"), *runtime);
        }
        restored
    };
    restore(&here, "restored on the same machine");
    // The task, in the container's network namespace, could not reach the
    // worker in CRIU's, and restored its BOs itself; CRIU joined the
    // container's mount namespace with the worker running.
    let log = restore_log(engine, "gpu");
    assert!(
        log.contains("parallel restore enabled"),
        "the plugin's default, parallel restore, was on:\n{}",
        engine::tail(&log, 40)
    );
    let fallback = log
        .lines()
        .find(|l| l.contains("CRIU's main process is out of reach"))
        .unwrap_or_else(|| {
            panic!(
                "the task says why it restored its BOs itself:\n{}",
                engine::tail(&log, 40)
            )
        });
    assert!(
        log.contains("Restore finished successfully"),
        "{}",
        engine::tail(&log, 40)
    );
    println!("{what}: {}", fallback.trim());
    engine.cli_ok(&["rm", "--force", "--time", "0", "gpu"]);
    here.assert_empty("after the restored container's end");

    // Onto the renumbered machine.
    switch(engine, "b");
    let restored = restore(&there, "restored on the renumbered machine");
    let mut map = there.sim.kfd_state(Pid(restored.pid)).unwrap().gpu_ids;
    map.sort_unstable();
    let (old, new) = (here.sim.gpus()[0].gpu_id, there.sim.gpus()[0].gpu_id);
    assert_ne!(old, new);
    assert_eq!(
        map,
        vec![(old, new)],
        "it sees its gpu_id, runs on the local one"
    );
    println!("{what}: GPU map {old:#x} -> {new:#x}");
    engine.cli_ok(&["rm", "--force", "--time", "0", "gpu"]);
    there.assert_empty("after the renumbered container's end");

    // A machine that cannot take the GPU refuses before the container runs.
    switch(engine, "c");
    let out = engine.cli(&["container", "restore", "--import", ck.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "the half-SIMD machine restored the container"
    );
    assert!(!engine.running("gpu"));
    let log = restore_log(engine, "gpu");
    let reason = log
        .lines()
        .find(|l| l.contains("amdgpu_plugin: ") && l.contains("Error ("))
        .unwrap_or_else(|| panic!("the plugin named no reason:\n{log}"));
    assert!(
        reason.contains(&format!("{old:#x}")) || reason.contains(&format!("{old:x}")),
        "the refusal names the GPU: {reason}"
    );
    assert!(reason.contains("simd_count"), "and the check: {reason}");
    odd.assert_empty("after the refused restore");
    println!("{what}: refused: {reason}");
    engine.cli_ok(&["rm", "--force", "--time", "0", "gpu"]);

    // In the host's network namespace the task reaches the worker, which
    // copies its BOs while CRIU goes on (and joins the container's mount
    // namespace).
    switch(engine, "a");
    let mut options = runtime.to_vec();
    options.extend(["--network", "host"]);
    let (args, records) = engine.app_args("gpu-host-net", 1, 4, &devices, &options);
    let mut run = vec!["run", "-d"];
    run.extend(args.iter().map(String::as_str));
    engine.cli_ok(&run);
    engine.wait_ready("gpu-host-net", &records);
    let app = proc_of(engine, "gpu-host-net", &records);
    let ck = engine.scratch.path().join("host-net.tar");
    engine.cli_ok(&[
        "container",
        "checkpoint",
        "--export",
        ck.to_str().unwrap(),
        "gpu-host-net",
    ]);
    let stopped_at = beats(&app);
    engine.cli_ok(&["rm", "gpu-host-net"]);
    engine.cli_ok(&[
        "container",
        "restore",
        "--keep",
        "--import",
        ck.to_str().unwrap(),
    ]);
    let restored = proc_of(engine, "gpu-host-net", &records);
    if let Err(e) = resumed(&restored, stopped_at) {
        panic!("restored in the host's network namespace: {e}");
    }
    check_process(&here, &restored, "restored in the host's network namespace");
    let log = restore_log(engine, "gpu-host-net");
    let copied = log
        .lines()
        .find(|l| l.contains("parallel restore: file ") && l.contains("bytes of"))
        .unwrap_or_else(|| {
            panic!(
                "CRIU's main process copied the BOs:\n{}",
                engine::tail(&log, 40)
            )
        });
    println!("{what}: host network: {}", copied.trim());
    engine.cli_ok(&["rm", "--force", "--time", "0", "gpu-host-net"]);
    here.assert_empty("after the host-network container's end");
}

/// A container given one GPU of two (pcie-2gpu's second, its device cgroup
/// and `/dev/dri` holding that GPU alone): the program sees one GPU, the
/// checkpoint holds one, and it is restored on that GPU; on a machine whose
/// GPU at that render node differs (half the SIMDs; the machine's other GPU
/// would fit, but the container is not given it), the restore is refused
/// before the container starts, naming the GPU and the check (criu#2888:
/// the restore considers the GPUs the container sees, not the host's).
#[test]
fn a_container_given_one_gpu_of_two_is_restored_on_it_and_refused_another() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = engine_for(Kind::Podman) else {
        return;
    };
    let minors = render_minors(&pcie_2gpu());
    let (first, second) = (minors[0], minors[1]);
    let here = serve(&engine, "a", pcie_2gpu());
    let wrong = {
        let mut system = renumbered(&pcie_2gpu(), 13, first);
        halve_simds_at(&mut system, second);
        serve(&engine, "e", system)
    };
    switch(&engine, "a");
    let records = engine.run_app("gpu", 1, 4, &[engine::render_device(second)]);
    let app = proc_of(&engine, "gpu", &records);
    let given = gpu_at(&here, second);
    assert_eq!(
        gpu_map(&here, app.pid),
        vec![(given, given)],
        "the program's KFD process has the container's GPU alone"
    );
    let ck = engine.scratch.path().join("one-of-two.tar");
    engine.cli_ok(&[
        "container",
        "checkpoint",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    let stopped_at = beats(&app);
    engine.cli_ok(&["rm", "gpu"]);
    let (code, text) = amdgpu_criu(&["show", ck.to_str().unwrap()]);
    assert_eq!(code, Some(0), "show: {text}");
    assert!(
        text.contains(&format!("{given:#x}")),
        "the image holds the container's GPU: {text}"
    );

    engine.cli_ok(&[
        "container",
        "restore",
        "--keep",
        "--import",
        ck.to_str().unwrap(),
    ]);
    let restored = proc_of(&engine, "gpu", &records);
    if let Err(e) = resumed(&restored, stopped_at) {
        panic!("restored on its GPU: {e}");
    }
    check_process(&here, &restored, "restored on its GPU");
    assert_eq!(gpu_map(&here, restored.pid), vec![(given, given)]);
    println!("one GPU of two: restored on GPU {given:#x} (renderD{second})");
    engine.cli_ok(&["rm", "--force", "--time", "0", "gpu"]);
    here.assert_empty("after the restored container's end");

    switch(&engine, "e");
    let out = engine.cli(&["container", "restore", "--import", ck.to_str().unwrap()]);
    assert!(!out.status.success(), "the wrong GPU took the container");
    assert!(!engine.running("gpu"));
    let reason = refusal(&restore_log(&engine, "gpu"), given, "simd_count");
    wrong.assert_empty("after the refused restore");
    println!("the wrong GPU: {reason}");
}

/// A container given the host's `/dev/dri` (bind-mounted, not device
/// nodes of its own), checkpointed on a machine whose GPUs are renderD128
/// and renderD129 and restored on one whose same GPUs are renderD144 and
/// renderD145 (criu#2888: the restored container's render nodes have other
/// names and minors than at the checkpoint): the restore finds the local
/// GPUs' nodes and the program goes on there.
#[test]
fn a_container_with_the_host_s_dri_is_restored_on_other_render_nodes() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = engine_for(Kind::Podman) else {
        return;
    };
    let first = render_minors(&pcie_2gpu())[0];
    let here = serve(&engine, "a", pcie_2gpu());
    let there = serve(&engine, "b", renumbered(&pcie_2gpu(), 16, first + 16));
    switch(&engine, "a");
    let volume = engine::host_dri_volume();
    let records = engine.run_app_with("gpu", 1, 4, &[], &["-v", &volume]);
    let app = proc_of(&engine, "gpu", &records);
    let ck = engine.scratch.path().join("host-dri.tar");
    engine.cli_ok(&[
        "container",
        "checkpoint",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    let stopped_at = beats(&app);
    engine.cli_ok(&["rm", "gpu"]);
    switch(&engine, "b");
    engine.cli_ok(&[
        "container",
        "restore",
        "--keep",
        "--import",
        ck.to_str().unwrap(),
    ]);
    let restored = proc_of(&engine, "gpu", &records);
    if let Err(e) = resumed(&restored, stopped_at) {
        panic!("restored on other render nodes: {e}");
    }
    check_process(&there, &restored, "restored on other render nodes");
    let moved = moved_to_other_render_nodes(&here, &there, restored.pid);
    println!("render nodes at the checkpoint -> after the restore: {moved:?}");
    engine.cli_ok(&["rm", "--force", "--time", "0", "gpu"]);
    there.assert_empty("after the restored container's end");
}

/// CRIU killed in the middle of `podman container checkpoint` (at its
/// first device call after `PROCESS_INFO` paused the container's GPU
/// queues, as an engine's timeout would kill it): the checkpoint fails,
/// the container runs on, and the plugin's guardian has its GPU queues
/// running again.
#[test]
fn a_killed_checkpoint_leaves_the_container_s_gpu_queues_running() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = engine_for(Kind::Podman) else {
        return;
    };
    let armed = Arc::new(AtomicBool::new(false));
    let record = Arc::new(Mutex::new(KillRecord::default()));
    let here = serve_observed(
        &engine,
        "a",
        single_gpu(),
        kill_criu_after_pause(armed.clone(), record.clone()),
    );
    switch(&engine, "a");
    let minor = here.sim.gpus()[0].render_minor;
    let records = engine.run_app("gpu", 1, 4, &[engine::render_device(minor)]);
    let app = proc_of(&engine, "gpu", &records);
    armed.store(true, Ordering::SeqCst);
    let ck = engine.scratch.path().join("gpu.tar");
    let out = engine.cli(&[
        "container",
        "checkpoint",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    assert_guardian_recovered(&engine, &here, "gpu", &app, &record, &out);
}

/// Debian 12's crun (1.8.1) is built without libcriu: Podman refuses to
/// checkpoint a container crun runs, and the container runs on with its
/// GPU queues untouched.
#[test]
fn debian_crun_without_libcriu_refuses_and_the_container_runs_on() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if !engine::installed("crun") {
        common::skip("crun is not installed (Debian package crun)");
        return;
    }
    let Some((_setup, engine)) = engine_for(Kind::Podman) else {
        return;
    };
    let here = serve(&engine, "a", single_gpu());
    switch(&engine, "a");
    let minor = here.sim.gpus()[0].render_minor;
    let records = engine.run_app_with(
        "gpu",
        1,
        4,
        &[engine::render_device(minor)],
        &["--runtime", "crun"],
    );
    let app = proc_of(&engine, "gpu", &records);
    let version = engine
        .run_in_namespace(&["crun", "--version"])
        .expect("crun --version");
    let out = engine.cli(&["container", "checkpoint", "--leave-running", "gpu"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if version.contains("+CRIU") {
        panic!("this crun has CRIU support ({version}): the test should checkpoint with it");
    }
    assert!(!out.status.success());
    assert!(
        err.contains("does not support checkpoint"),
        "Podman says why: {err}"
    );
    assert!(engine.running("gpu"));
    assert!(queues_run(&here, app.pid));
    app.assert_beats_on("after crun's refusal");
    println!("crun refused: {}", err.trim());
}
