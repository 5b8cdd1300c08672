//! A GPU container checkpointed, exported, imported and restored by Podman
//! (Debian's podman, conmon and runc), on simulated GPUs: the libhsakmt
//! program of `real_criu_restore.rs` runs in a container whose `/dev/kfd`
//! and render nodes are stand-in nodes (`--device /dev/fuse:/dev/kfd`),
//! talking to a machine the test serves on a socket file in a directory
//! the container mounts (its network namespace cannot reach an abstract
//! socket), as pid 1 of its own pid namespace (the served machine knows it
//! by its host pid and `PROCESS_INFO` reports 1, as the kernel does).
//! runc runs `criu` from `PATH`: a wrapper that starts CRIU criu-dev under
//! the interposer, configured through `/etc/criu/runc.conf` (see
//! `podman/engine.rs`: nothing on the host changes).
//!
//! * `podman container checkpoint --leave-running --export` keeps the
//!   container running, GPU queues unpaused; `amdgpu-criu show`, `verify`
//!   and `check ARCHIVE --sysfs` read the archive (the format the kubelet's
//!   checkpoint API writes through CRI-O and containerd).
//! * `podman container checkpoint --export` then `podman container
//!   restore --import` on the same machine and onto a machine with other
//!   gpu_ids: the program runs on, its BOs are bit-identical (as the
//!   simulator reads them and as the program reads them), its queues run,
//!   its mappings are the simulator's memory again.
//! * A machine whose GPU differs refuses the restore before the container
//!   starts, naming the GPU and the check, and keeps nothing of it.
//! * CRIU killed in the middle of the dump (at its first device call after
//!   the pause, as an engine's timeout would): `podman container
//!   checkpoint` fails, and the plugin's guardian has the container's GPU
//!   queues running again.
//! * crun: Debian 12's crun 1.8.1 is built without libcriu; Podman refuses
//!   to checkpoint a container it runs, and the container runs on.
//!
//! Needs root, Podman, runc and conmon (`.ci/run` installs them), and what
//! `real_criu_restore.rs` needs. Without them it says why and skips; with
//! `CI` set a skip is a failure.

mod common;
#[path = "real_criu_restore/driver.rs"]
mod driver;
#[path = "podman/engine.rs"]
mod engine;
#[path = "../../criu-plugin-amdgpu/tests/real_criu/harness.rs"]
mod harness;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use driver::*;
use engine::Engine;
use kfd_sim::remote::{RemoteCall, RemoteOp, Server, Verdict};
use kfd_sim::{Pid, Sim, SimConfig};

/// The setup and the engine, or `None` after saying why not.
fn setup() -> Option<(Setup, Engine)> {
    let found = driver::setup(&[harness::HEAD], false, common::preload_lib()).and_then(|setup| {
        if let Some(why) = engine::missing() {
            return Err(why);
        }
        let (_, criu) = &setup.criu[0];
        // Every machine of the tests has single-gpu's render minor.
        let minor = single_gpu()
            .nodes
            .iter()
            .map(|n| n.prop("drm_render_minor"))
            .find(|&m| m != 0)
            .expect("the GPU's render minor");
        let engine = Engine::new(
            criu,
            setup.plugins.path(),
            &setup.app,
            &setup.preload,
            &minor.to_string(),
        )?;
        Ok((setup, engine))
    });
    match found {
        Ok(found) => Some(found),
        Err(why) => {
            common::skip(&why);
            None
        }
    }
}

/// A machine served on a socket file in the shared directory, its
/// topology beside it as `topo-LABEL`.
fn serve(engine: &Engine, label: &str, system: amdgpu_topology::System) -> Served {
    serve_observed(engine, label, system, Arc::new(|_| Verdict::Run))
}

fn serve_observed(
    engine: &Engine,
    label: &str,
    system: amdgpu_topology::System,
    observer: kfd_sim::remote::Observer,
) -> Served {
    let sim = Sim::new(system, SimConfig::default()).expect("the simulated machine");
    let server = Server::new_in(&sim, &engine.share).expect("serve the machine");
    let topo = engine.share.join(format!("topo-{label}"));
    amdgpu_topology::write(sim.topology(), &topo).expect("write the topology");
    let served = Served::observed(sim, server, observer);
    let name = Path::new(served.server.address()).file_name().unwrap();
    fs::rename(
        engine.share.join(name),
        engine.share.join(format!("machine-{label}")),
    )
    .expect("name the socket");
    served
}

/// Makes `label`'s machine the one the shared directory's links name.
fn switch(engine: &Engine, label: &str) {
    engine.point("machine", &format!("machine-{label}"));
    engine.point("topology", &format!("topo-{label}"));
}

fn single_gpu() -> amdgpu_topology::System {
    amdgpu_topology::builtin("single-gpu").expect("a built-in machine")
}

/// Gives the GPU of a renumbered `single-gpu` its render minor back.
fn keep_minor(system: &mut amdgpu_topology::System) {
    let minor = single_gpu()
        .nodes
        .iter()
        .map(|n| n.prop("drm_render_minor"))
        .find(|&m| m != 0)
        .expect("the GPU's render minor");
    for node in &mut system.nodes {
        if node.prop("drm_render_minor") != 0 {
            node.properties.set("drm_render_minor", minor);
        }
    }
}

/// The application as `ready` lists it, known by its host pid.
fn proc_of(engine: &Engine, name: &str, records: &Path) -> Proc {
    let mut p = Proc::parse(records);
    assert_eq!(p.pid, 1, "the program is pid 1 of its container");
    p.pid = engine.host_pid(name).expect("the container runs");
    p
}

fn amdgpu_criu(args: &[&str]) -> (Option<i32>, String) {
    let cli = harness::workspace_root().join("target/release/amdgpu-criu");
    let cli = if cli.is_file() {
        cli
    } else {
        harness::workspace_root().join("target/debug/amdgpu-criu")
    };
    let out = Command::new(&cli)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", cli.display()));
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The queues of host process `pid` run and are not paused.
fn queues_run(served: &Served, pid: u32) -> bool {
    served
        .sim
        .kfd_state(Pid(pid))
        .is_some_and(|s| !s.queues_paused && s.queues_running())
}

/// The whole route with runc, on the same machine and onto a renumbered
/// one, the archive read by amdgpu-criu, and a machine that refuses.
#[test]
fn a_gpu_container_is_checkpointed_exported_and_restored_by_podman() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some((_setup, engine)) = setup() else {
        return;
    };
    // CRIU joins the restored container's mount namespace from its main
    // process to clean up link-remap files (setns(CLONE_NEWNS), which the
    // kernel refuses to a process of more than one thread): the plugin's
    // parallel-restore worker thread there makes that fail ("Can't switch:
    // Invalid argument", the restore with it). A container's task cannot
    // reach that worker anyway (its own network namespace), so it is off.
    engine.set_criu_env("AMDGPU_PLUGIN_PARALLEL_RESTORE=0");
    let here = serve(&engine, "a", single_gpu());
    let there_system = {
        // Other gpu_ids and node order; the container's render node keeps
        // its name, so the minor stays.
        let mut system = amdgpu_topology::renumbered(&single_gpu(), 11);
        keep_minor(&mut system);
        system
    };
    let there = serve(&engine, "b", there_system);
    let odd_system = {
        // A GPU with half the SIMDs: no counterpart for the checkpointed one.
        let mut system = amdgpu_topology::renumbered(&single_gpu(), 12);
        keep_minor(&mut system);
        for node in &mut system.nodes {
            let simds = node.prop("simd_count");
            if simds != 0 {
                node.properties.set("simd_count", simds / 2);
            }
        }
        system
    };
    let odd = serve(&engine, "c", odd_system);
    switch(&engine, "a");
    let minor = here.sim.gpus()[0].render_minor;
    let devices = [format!("/dev/dri/renderD{minor}")];
    let started = Instant::now();
    let records = engine.run_app("gpu", 1, 4, &devices);
    let app = proc_of(&engine, "gpu", &records);
    println!(
        "container started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(queues_run(&here, app.pid), "the container's GPU queues run");

    // --leave-running: the container runs on, unpaused.
    let ck = engine.scratch.path().join("running.tar");
    let t = Instant::now();
    engine.podman_ok(&[
        "container",
        "checkpoint",
        "--leave-running",
        "--keep",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    println!(
        "checkpoint --leave-running --export: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(engine.inspect("gpu", "{{.State.Running}}"), "true");
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
    println!("amdgpu-criu show, verify and check read the archive");

    // Checkpoint (the container stops), restore on the same machine.
    let ck = engine.scratch.path().join("gpu.tar");
    let t = Instant::now();
    engine.podman_ok(&[
        "container",
        "checkpoint",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    println!("checkpoint --export: {:.1} s", t.elapsed().as_secs_f64());
    assert_eq!(engine.inspect("gpu", "{{.State.Running}}"), "false");
    here.assert_empty("after the checkpoint");
    engine.podman_ok(&["rm", "gpu"]);
    let restore = |served: &Served, what: &str| {
        let t = Instant::now();
        engine.podman_ok(&["container", "restore", "--import", ck.to_str().unwrap()]);
        println!(
            "restore --import ({what}): {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let restored = proc_of(&engine, "gpu", &records);
        check_process(served, &restored, what);
        restored
    };
    restore(&here, "restored on the same machine");
    engine.podman_ok(&["rm", "--force", "--time", "0", "gpu"]);
    here.assert_empty("after the restored container's end");

    // Onto the renumbered machine.
    switch(&engine, "b");
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
    println!("  GPU map {old:#x} -> {new:#x}");
    engine.podman_ok(&["rm", "--force", "--time", "0", "gpu"]);
    there.assert_empty("after the renumbered container's end");

    // A machine that cannot take the GPU refuses before the container runs.
    switch(&engine, "c");
    let out = engine.podman(&["container", "restore", "--import", ck.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "the half-SIMD machine restored the container"
    );
    let running = engine.podman(&["inspect", "-f", "{{.State.Running}}", "gpu"]);
    assert_ne!(String::from_utf8_lossy(&running.stdout).trim(), "true");
    let log = engine
        .read_in_namespace(&format!(
            "{}/restore.log",
            engine.inspect("gpu", "{{.StaticDir}}")
        ))
        .unwrap_or_default();
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
    println!("  refused: {reason}");
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
    let Some((_setup, engine)) = setup() else {
        return;
    };
    let armed = Arc::new(AtomicBool::new(false));
    let paused_by = Arc::new(Mutex::new(None::<Pid>));
    let killed = Arc::new(Mutex::new(None::<(Pid, Instant)>));
    let observer = {
        let (armed, paused_by, killed) = (armed.clone(), paused_by.clone(), killed.clone());
        Arc::new(move |call: &RemoteCall<'_>| {
            if !armed.load(Ordering::SeqCst) {
                return Verdict::Run;
            }
            let criu_op = match call.op {
                RemoteOp::Ioctl(r) if r == u64::from(kfd_sys::AMDKFD_IOC_CRIU_OP) => {
                    let at = std::mem::offset_of!(kfd_sys::kfd_ioctl_criu_args, op);
                    call.arg
                        .get(at..at + 4)
                        .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
                }
                _ => None,
            };
            let mut paused = paused_by.lock().unwrap_or_else(PoisonError::into_inner);
            if criu_op == Some(kfd_sys::KFD_CRIU_OP_PROCESS_INFO) && paused.is_none() {
                *paused = Some(call.pid);
                return Verdict::Run;
            }
            let mut k = killed.lock().unwrap_or_else(PoisonError::into_inner);
            if k.is_none() && *paused == Some(call.pid) {
                *k = Some((call.pid, Instant::now()));
                return Verdict::Kill;
            }
            Verdict::Run
        })
    };
    let here = serve_observed(&engine, "a", single_gpu(), observer);
    switch(&engine, "a");
    let minor = here.sim.gpus()[0].render_minor;
    let records = engine.run_app("gpu", 1, 4, &[format!("/dev/dri/renderD{minor}")]);
    let app = proc_of(&engine, "gpu", &records);
    armed.store(true, Ordering::SeqCst);
    let ck = engine.scratch.path().join("gpu.tar");
    let out = engine.podman(&[
        "container",
        "checkpoint",
        "--export",
        ck.to_str().unwrap(),
        "gpu",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the checkpoint of a killed CRIU succeeded"
    );
    let (criu, at) = killed
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .expect("CRIU was killed after the pause");
    assert_ne!(criu.0, app.pid, "the one killed is CRIU, not the container");
    let unpaused = wait_for(Duration::from_secs(20), || queues_run(&here, app.pid));
    assert!(
        unpaused,
        "the container's GPU queues stay paused after CRIU's death: {:?}\n{err}",
        here.sim.kfd_state(Pid(app.pid))
    );
    println!(
        "CRIU (pid {}) killed mid-dump; the container's GPU queues run again {:.0} ms later",
        criu.0,
        at.elapsed().as_secs_f64() * 1000.0
    );
    assert_eq!(engine.inspect("gpu", "{{.State.Running}}"), "true");
    assert_eq!(engine.host_pid("gpu"), Some(app.pid));
    println!("podman: {}", err.lines().last().unwrap_or_default());
    app.assert_beats_on("after the killed checkpoint");
}

/// Debian 12's crun (1.8.1) is built without libcriu: Podman refuses to
/// checkpoint a container crun runs, and the container runs on with its
/// GPU queues untouched.
#[test]
fn crun_without_libcriu_refuses_and_the_container_runs_on() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if !engine::installed("crun") {
        common::skip("crun is not installed (Debian package crun)");
        return;
    }
    let Some((_setup, engine)) = setup() else {
        return;
    };
    let here = serve(&engine, "a", single_gpu());
    switch(&engine, "a");
    let minor = here.sim.gpus()[0].render_minor;
    let records = engine.run_app_with(
        "gpu",
        1,
        4,
        &[format!("/dev/dri/renderD{minor}")],
        &["--runtime", "crun"],
    );
    let app = proc_of(&engine, "gpu", &records);
    let version = engine
        .run_in_namespace(&["crun", "--version"])
        .expect("crun --version");
    let out = engine.podman(&["container", "checkpoint", "--leave-running", "gpu"]);
    let err = String::from_utf8_lossy(&out.stderr);
    if version.contains("+CRIU") {
        panic!("this crun has CRIU support ({version}): the test should checkpoint with it");
    }
    assert!(!out.status.success());
    assert!(
        err.contains("does not support checkpoint"),
        "Podman says why: {err}"
    );
    assert_eq!(engine.inspect("gpu", "{{.State.Running}}"), "true");
    assert!(queues_run(&here, app.pid));
    app.assert_beats_on("after crun's refusal");
    println!("crun refused: {}", err.trim());
}
