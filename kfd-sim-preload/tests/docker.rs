//! A GPU container checkpointed and restored by Docker (Debian 12's
//! `docker.io`: dockerd 20.10 in experimental mode, its containerd 1.6 and
//! runc 1.1), on simulated GPUs: the libhsakmt program of
//! `real_criu_restore.rs` in a container whose `/dev/kfd` and render node
//! are stand-in nodes, talking to a machine the test serves on a socket
//! file in a directory the container mounts, as pid 1 of its own pid
//! namespace (see `podman.rs` and `containers/engine.rs`: dockerd runs in
//! a mount namespace of the test's with its own data root, exec root and
//! socket, and nothing on the host changes). runc runs `criu swrk` from
//! `PATH`: CRIU criu-dev under the interposer, with the plugin's defaults.
//!
//! * `docker checkpoint create --leave-running`: the container runs on,
//!   GPU queues unpaused.
//! * `docker checkpoint create --checkpoint-dir DIR` exports the CRIU
//!   images (the container stops); `amdgpu-criu show`, `verify` and `check`
//!   read them. `docker start --checkpoint-dir` is refused by this Docker
//!   ("custom checkpointdir is not supported", moby#37344): an exported
//!   checkpoint is imported by copying it into the container's
//!   `checkpoints` directory, then `docker start --checkpoint NAME`.
//! * `docker start --checkpoint` on the same machine, onto a machine with
//!   other gpu_ids, and into a new container (created with the same
//!   options, the checkpoint copied in, as on another host): the program
//!   goes on from where it was (its beat counter counts on; a container
//!   started again from its image would count from 1, and the test proves
//!   the check catches that with a plain `docker start`), its BOs are
//!   bit-identical, its queues run.
//! * A machine whose GPU differs refuses the restore before the container
//!   starts, naming the GPU and the check.
//! * criu#2888: a container given the host's `/dev/dri` goes on on a
//!   machine whose render nodes have other names and minors; a container
//!   given one GPU of two, started from its checkpoint where that node's
//!   GPU differs, is refused naming the GPU and the check. A container's
//!   own device nodes come back with its `/dev` from the checkpoint (CRIU
//!   restores the tmpfs), whatever devices a new container was created
//!   with.
//! * CRIU killed in the middle of `docker checkpoint create`: the command
//!   fails and the plugin's guardian has the container's GPU queues running
//!   again.
//!
//! Needs root, Debian's docker.io (dockerd, containerd, runc; `.ci/run`
//! installs it), and what `real_criu_restore.rs` needs. Without them it
//! says why and skips; with `CI` set a skip is a failure.

mod common;
use real_criu_harness::driver;
#[path = "containers/engine.rs"]
mod engine;
#[path = "containers/gpu.rs"]
mod gpu;
use real_criu_harness as harness;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use driver::{check_process, Served};
use engine::{Engine, Kind};
use gpu::*;
use kfd_sim::Pid;

/// Where dockerd keeps container `name`'s checkpoints.
fn checkpoints_dir(engine: &Engine, name: &str) -> PathBuf {
    engine
        .scratch
        .path()
        .join("docker/containers")
        .join(engine.inspect(name, "{{.Id}}"))
        .join("checkpoints")
}

/// Copies checkpoint directory `from` into container `name`'s checkpoints
/// as `as_name` (what a user does to restore a checkpoint made elsewhere).
fn import_checkpoint(engine: &Engine, from: &Path, name: &str, as_name: &str) {
    let to = checkpoints_dir(engine, name).join(as_name);
    fs::create_dir_all(&to).unwrap();
    for entry in fs::read_dir(from).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// `docker start --checkpoint CHECKPOINT NAME`. Docker 20.10 now and then
/// refuses it before restoring anything: the tar of the checkpoint it
/// uploads to containerd finds a blob of that digest in containerd's
/// content store already (`failed to upload checkpoint to containerd:
/// commit failed: content sha256:...: already exists`, moby#42900). It is
/// then asked again a second later, as a user would, at most twice more.
fn start_checkpoint(engine: &Engine, checkpoint: &str, name: &str) -> std::process::Output {
    let mut out = engine.cli(&["start", "--checkpoint", checkpoint, name]);
    for _ in 0..2 {
        let err = String::from_utf8_lossy(&out.stderr);
        if !(err.contains("failed to upload checkpoint to containerd")
            && err.contains("already exists"))
        {
            break;
        }
        println!(
            "docker start --checkpoint {checkpoint} {name}, again: {}",
            err.trim()
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
        out = engine.cli(&["start", "--checkpoint", checkpoint, name]);
    }
    out
}

/// [`start_checkpoint`], which must succeed.
fn start_checkpoint_ok(engine: &Engine, checkpoint: &str, name: &str) {
    let out = start_checkpoint(engine, checkpoint, name);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        panic!(
            "docker start --checkpoint {checkpoint} {name}: {}\n{err}\n{}{}",
            out.status,
            engine.criu_log_of(&err),
            engine.daemon_log()
        );
    }
}

/// The log of the latest CRIU run, which must be a `kind` (`dump` or
/// `restore`, as CRIU's first lines say).
fn criu_log(engine: &Engine, kind: &str) -> String {
    let log = engine
        .newest_criu_log()
        .and_then(|p| fs::read_to_string(p).ok())
        .unwrap_or_default();
    let mark = match kind {
        "dump" => "Dumping processes",
        _ => "Forking task with",
    };
    assert!(
        log.contains(mark),
        "the latest CRIU log is not a {kind}'s:\n{}",
        engine::tail(&log, 20)
    );
    log
}

#[test]
fn a_gpu_container_is_checkpointed_and_restored_by_docker() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = engine_for(Kind::Docker) else {
        return;
    };
    let version = engine.cli_ok(&[
        "version",
        "--format",
        "{{.Server.Version}} experimental={{.Server.Experimental}}",
    ]);
    println!("dockerd {}", version.trim());
    let here = serve(&engine, "a", single_gpu());
    let there = serve(
        &engine,
        "b",
        renumbered(&single_gpu(), 11, single_gpu_minor()),
    );
    let odd_system = {
        let mut system = renumbered(&single_gpu(), 12, single_gpu_minor());
        halve_simds(&mut system);
        system
    };
    let odd = serve(&engine, "c", odd_system);
    switch(&engine, "a");
    let minor = here.sim.gpus()[0].render_minor;
    let devices = [engine::render_device(minor)];
    let started = Instant::now();
    let records = engine.run_app("gpu", 1, 4, &devices);
    let app = proc_of(&engine, "gpu", &records);
    println!(
        "container started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(queues_run(&here, app.pid), "the container's GPU queues run");

    // --leave-running: the container runs on, unpaused.
    let t = Instant::now();
    engine.cli_ok(&["checkpoint", "create", "--leave-running", "gpu", "running"]);
    println!(
        "checkpoint create --leave-running: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(engine.running("gpu"));
    assert_eq!(
        engine.host_pid("gpu"),
        Some(app.pid),
        "the same process runs"
    );
    app.assert_beats_on("after checkpoint create --leave-running");
    assert!(
        queues_run(&here, app.pid),
        "--leave-running: the GPU queues run again: {:?}",
        here.sim.kfd_state(Pid(app.pid))
    );
    let dump_log = criu_log(&engine, "dump");
    assert!(
        dump_log.contains("amdgpu_plugin: ") && dump_log.contains("pid 1 paused"),
        "the plugin paused the container's pid 1:\n{}",
        engine::tail(&dump_log, 40)
    );

    // Exported with --checkpoint-dir (the container stops).
    let exported = engine.scratch.path().join("exported");
    fs::create_dir(&exported).unwrap();
    let t = Instant::now();
    engine.cli_ok(&[
        "checkpoint",
        "create",
        "--checkpoint-dir",
        exported.to_str().unwrap(),
        "gpu",
        "cp",
    ]);
    println!(
        "checkpoint create --checkpoint-dir: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(!engine.running("gpu"));
    here.assert_empty("after the checkpoint");
    let stopped_at = beats(&app);
    let images = exported.join("cp");
    let dir = images.to_str().unwrap();
    let (code, text) = amdgpu_criu(&["show", dir]);
    assert_eq!(code, Some(0), "show: {text}");
    let (code, text) = amdgpu_criu(&["verify", dir]);
    assert_eq!(code, Some(0), "verify: {text}");
    let (code, text) = amdgpu_criu(&["check", dir, "--sysfs", "builtin:single-gpu"]);
    assert_eq!(code, Some(0), "check on single-gpu: {text}");
    let topo_c = engine.share.join("topo-c");
    let (code, text) = amdgpu_criu(&["check", dir, "--sysfs", topo_c.to_str().unwrap()]);
    assert_eq!(code, Some(1), "check on the half-SIMD machine: {text}");
    assert!(
        text.contains("simd_count"),
        "check names the property: {text}"
    );
    println!("amdgpu-criu show, verify and check read the exported checkpoint");

    // This Docker restores from no other directory than the container's.
    let out = engine.cli(&[
        "start",
        "--checkpoint-dir",
        exported.to_str().unwrap(),
        "--checkpoint",
        "cp",
        "gpu",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("custom checkpointdir is not supported"),
        "docker start --checkpoint-dir: {}\n{err}",
        out.status
    );
    assert!(!engine.running("gpu"));
    println!("start --checkpoint-dir: {}", err.trim());

    // Imported into the container's checkpoints, restored on the same
    // machine.
    import_checkpoint(&engine, &images, "gpu", "cp");
    let restore = |served: &Served, name: &str, checkpoint: &str, before: Beats, which: &str| {
        let t = Instant::now();
        start_checkpoint_ok(&engine, checkpoint, name);
        println!(
            "start --checkpoint ({which}): {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let restored = proc_of(&engine, name, &records);
        if let Err(e) = resumed(&restored, before) {
            panic!("{which}: {e}");
        }
        check_process(served, &restored, which);
        restored
    };
    restore(
        &here,
        "gpu",
        "cp",
        stopped_at,
        "restored on the same machine",
    );
    let log = criu_log(&engine, "restore");
    assert!(
        log.contains("parallel restore enabled")
            && log.contains("CRIU's main process is out of reach"),
        "the task in its own network namespace restored its BOs itself, and said why:\n{}",
        engine::tail(&log, 40)
    );

    // Onto the renumbered machine.
    engine.cli_ok(&["checkpoint", "create", "gpu", "cp2"]);
    here.assert_empty("after the second checkpoint");
    let stopped_again = beats(&app);
    switch(&engine, "b");
    let restored = restore(
        &there,
        "gpu",
        "cp2",
        stopped_again,
        "restored on the renumbered machine",
    );
    let mut map = there.sim.kfd_state(Pid(restored.pid)).unwrap().gpu_ids;
    map.sort_unstable();
    let (old, new) = (here.sim.gpus()[0].gpu_id, there.sim.gpus()[0].gpu_id);
    assert_ne!(old, new);
    assert_eq!(
        map,
        vec![(old, new)],
        "it sees its gpu_id, runs on the local one"
    );
    println!("  GPU map {old:#x} -> {new:#x}");
    engine.cli_ok(&["rm", "--force", "gpu"]);
    there.assert_empty("after the renumbered container's end");

    // Into a new container, as on another host: created with the same
    // options, the exported checkpoint copied in.
    switch(&engine, "a");
    // The same options and command as gpu's, under another name.
    let (mut args, _) = engine.app_args("gpu", 1, 4, &devices, &[]);
    assert_eq!(args[..2], ["--name", "gpu"]);
    args[1] = "gpu2".into();
    let mut create = vec!["create"];
    create.extend(args.iter().map(String::as_str));
    engine.cli_ok(&create);
    import_checkpoint(&engine, &images, "gpu2", "cp");
    let from_export = Beats {
        lines: beats(&app).lines,
        last: stopped_at.last,
    };
    let moved = restore(
        &here,
        "gpu2",
        "cp",
        from_export,
        "restored into a new container",
    );

    // A machine that cannot take the GPU refuses before the container runs.
    engine.cli_ok(&["checkpoint", "create", "gpu2", "cp3"]);
    here.assert_empty("after the new container's checkpoint");
    switch(&engine, "c");
    let out = start_checkpoint(&engine, "cp3", "gpu2");
    assert!(
        !out.status.success(),
        "the half-SIMD machine restored the container"
    );
    assert!(!engine.running("gpu2"));
    let log = criu_log(&engine, "restore");
    let reason = log
        .lines()
        .find(|l| l.contains("amdgpu_plugin: ") && l.contains("Error ("))
        .unwrap_or_else(|| panic!("the plugin named no reason:\n{}", engine::tail(&log, 60)));
    assert!(
        reason.contains(&format!("{old:#x}")) || reason.contains(&format!("{old:x}")),
        "the refusal names the GPU: {reason}"
    );
    assert!(reason.contains("simd_count"), "and the check: {reason}");
    odd.assert_empty("after the refused restore");
    println!("  refused: {reason}");

    // A start that does not restore is caught: the program counts from 1.
    switch(&engine, "a");
    let before = Beats {
        lines: beats(&moved).lines,
        last: beats(&moved).last,
    };
    engine.cli_ok(&["start", "gpu2"]);
    let restarted = proc_of(&engine, "gpu2", &records);
    let caught = resumed(&restarted, before).expect_err("a plain start passed for a restore");
    assert!(caught.contains("started again"), "{caught}");
    println!("  a plain start is told apart: {caught}");
    engine.cli_ok(&["rm", "--force", "gpu2"]);
    here.assert_empty("after the new container's end");
}

/// criu#2888 with Docker. A container given the host's `/dev/dri`
/// (bind-mounted) is checkpointed on a machine whose GPUs are renderD128
/// and renderD129 and started from the checkpoint on one whose same GPUs
/// are renderD144 and renderD145: the restore finds the local GPUs' nodes
/// and the program goes on there. A container given one GPU of two (a
/// render node of its own) started from its checkpoint where the GPU of
/// that node differs is refused before it starts, naming the GPU and the
/// check, though the machine's other GPU would fit. (A container's own
/// device nodes come back from the checkpoint with its `/dev`, whatever a
/// new container was given: only the host's `/dev/dri` brings the
/// restoring host's nodes.)
#[test]
fn a_docker_container_is_restored_on_other_render_nodes_and_refused_the_wrong_gpu() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = engine_for(Kind::Docker) else {
        return;
    };
    let minors = render_minors(&pcie_2gpu());
    let (first, second) = (minors[0], minors[1]);
    let here = serve(&engine, "a", pcie_2gpu());
    let there = serve(&engine, "b", renumbered(&pcie_2gpu(), 14, first + 16));
    let wrong = {
        let mut system = renumbered(&pcie_2gpu(), 15, first);
        halve_simds_at(&mut system, second);
        serve(&engine, "e", system)
    };

    // The host's /dev/dri, restored on other render nodes.
    switch(&engine, "a");
    let volume = engine::host_dri_volume();
    let records = engine.run_app_with("host-dri", 1, 4, &[], &["-v", &volume]);
    let app = proc_of(&engine, "host-dri", &records);
    engine.cli_ok(&["checkpoint", "create", "host-dri", "cp"]);
    here.assert_empty("after the checkpoint");
    let stopped_at = beats(&app);
    switch(&engine, "b");
    start_checkpoint_ok(&engine, "cp", "host-dri");
    let restored = proc_of(&engine, "host-dri", &records);
    if let Err(e) = resumed(&restored, stopped_at) {
        panic!("restored on other render nodes: {e}");
    }
    check_process(&there, &restored, "restored on other render nodes");
    let moved = moved_to_other_render_nodes(&here, &there, restored.pid);
    println!("render nodes at the checkpoint -> after the restore: {moved:?}");
    engine.cli_ok(&["rm", "--force", "host-dri"]);
    there.assert_empty("after the restored container's end");

    // One GPU of two, its node's GPU different after the restore.
    switch(&engine, "a");
    let records = engine.run_app("one", 1, 4, &[engine::render_device(second)]);
    let app = proc_of(&engine, "one", &records);
    let given = gpu_at(&here, second);
    assert_eq!(
        gpu_map(&here, app.pid),
        vec![(given, given)],
        "the program's KFD process has the container's GPU alone"
    );
    engine.cli_ok(&["checkpoint", "create", "one", "cp"]);
    here.assert_empty("after the one-GPU checkpoint");
    switch(&engine, "e");
    let out = start_checkpoint(&engine, "cp", "one");
    assert!(!out.status.success(), "the wrong GPU took the container");
    assert!(!engine.running("one"));
    let reason = refusal(&criu_log(&engine, "restore"), given, "simd_count");
    wrong.assert_empty("after the refused restore");
    println!("the wrong GPU: {reason}");
}

/// CRIU killed in the middle of `docker checkpoint create`: the command
/// fails, the container runs on, and the plugin's guardian has its GPU
/// queues running again.
#[test]
fn a_killed_docker_checkpoint_leaves_the_container_s_gpu_queues_running() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = engine_for(Kind::Docker) else {
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
    let out = engine.cli(&["checkpoint", "create", "gpu", "killed"]);
    assert_guardian_recovered(&engine, &here, "gpu", &app, &record, &out);
}
