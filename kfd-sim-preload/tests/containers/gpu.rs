//! What the container tests (`podman.rs`, `docker.rs`) share beside the
//! engine: the setup, the simulated machines served on socket files in the
//! shared directory, the application as its records list it (known by its
//! host pid), the proof that a restored container resumed rather than
//! started again, and the observer that kills CRIU in the middle of a dump.
//!
//! The including crate provides `common`, `driver` (real_criu_restore's),
//! `engine` and `harness` at its root.

#![allow(dead_code)] // each includer uses a different subset

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kfd_sim::remote::{RemoteCall, RemoteOp, Server, Verdict};
use kfd_sim::{Pid, Sim, SimConfig};

use crate::driver::{self, Proc, Served, Setup};
use crate::engine::{self, Engine, Kind};
use crate::{common, harness};

/// The setup and the engine, or `None` after saying why not.
pub fn engine_for(kind: Kind) -> Option<(Setup, Engine)> {
    let found = driver::setup(&[harness::HEAD], false, common::preload_lib()).and_then(|setup| {
        if let Some(why) = engine::missing(kind) {
            return Err(why);
        }
        let (_, criu) = &setup.criu[0];
        let engine = Engine::new(
            kind,
            criu,
            setup.plugins.path(),
            &setup.app,
            &setup.preload,
            &stand_in_minors(),
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

/// The render minors the engine's namespace has stand-in nodes for (the
/// host's `/dev/dri`, and the tagged host paths `--device` names):
/// single-gpu's and pcie-2gpu's, and the same moved up by 16 (the
/// renumbered machines).
pub fn stand_in_minors() -> String {
    let mut minors: Vec<u32> = [single_gpu(), pcie_2gpu()]
        .iter()
        .flat_map(render_minors)
        .flat_map(|m| [m, m + 16])
        .collect();
    minors.sort_unstable();
    minors.dedup();
    minors
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The render minors of `system`'s GPUs, in node order.
pub fn render_minors(system: &amdgpu_topology::System) -> Vec<u32> {
    system
        .nodes
        .iter()
        .map(|n| n.prop("drm_render_minor") as u32)
        .filter(|&m| m != 0)
        .collect()
}

pub fn pcie_2gpu() -> amdgpu_topology::System {
    amdgpu_topology::builtin("pcie-2gpu").expect("a built-in machine")
}

/// A machine served on a socket file in the shared directory, its
/// topology beside it as `topo-LABEL`.
pub fn serve(engine: &Engine, label: &str, system: amdgpu_topology::System) -> Served {
    serve_observed(engine, label, system, Arc::new(|_| Verdict::Run))
}

/// [`serve`] with `observer` seeing every call.
pub fn serve_observed(
    engine: &Engine,
    label: &str,
    system: amdgpu_topology::System,
    observer: kfd_sim::remote::Observer,
) -> Served {
    let sim = Sim::new(system, SimConfig::default()).expect("the simulated machine");
    let server = Server::new_in(&sim, &engine.share).expect("serve the machine");
    let topo = engine.share.join(format!("topo-{label}"));
    amdgpu_topology::write(sim.topology(), &topo).expect("write the topology");
    engine.add_host_dri(label, &render_minors(sim.topology()));
    let served = Served::observed(sim, server, observer);
    let name = Path::new(served.server.address()).file_name().unwrap();
    fs::rename(
        engine.share.join(name),
        engine.share.join(format!("machine-{label}")),
    )
    .expect("name the socket");
    served
}

/// Makes `label`'s machine the one the shared directory's links name, and
/// its render nodes the host's `/dev/dri` a container bind-mounts.
pub fn switch(engine: &Engine, label: &str) {
    engine.point("machine", &format!("machine-{label}"));
    engine.point("topology", &format!("topo-{label}"));
    engine.point_host_dri(label);
}

pub fn single_gpu() -> amdgpu_topology::System {
    amdgpu_topology::builtin("single-gpu").expect("a built-in machine")
}

/// single-gpu's render minor.
pub fn single_gpu_minor() -> u32 {
    single_gpu()
        .nodes
        .iter()
        .map(|n| n.prop("drm_render_minor"))
        .find(|&m| m != 0)
        .expect("the GPU's render minor") as u32
}

/// Gives every GPU of `system` render minors from `first` on, in node
/// order.
pub fn set_minors(system: &mut amdgpu_topology::System, first: u32) {
    let mut next = u64::from(first);
    for node in &mut system.nodes {
        if node.prop("drm_render_minor") != 0 {
            node.properties.set("drm_render_minor", next);
            next += 1;
        }
    }
}

/// `system` with other gpu_ids and node order (`seed`), its GPUs at
/// render minors from `first` on, in node order.
pub fn renumbered(
    system: &amdgpu_topology::System,
    seed: u64,
    first: u32,
) -> amdgpu_topology::System {
    let mut system = amdgpu_topology::renumbered(system, seed);
    set_minors(&mut system, first);
    system
}

/// Halves the SIMDs of every GPU of `system`: no counterpart for them.
pub fn halve_simds(system: &mut amdgpu_topology::System) {
    for node in &mut system.nodes {
        let simds = node.prop("simd_count");
        if simds != 0 {
            node.properties.set("simd_count", simds / 2);
        }
    }
}

/// Halves the SIMDs of the GPU of `system` at render minor `minor`.
pub fn halve_simds_at(system: &mut amdgpu_topology::System, minor: u32) {
    let node = system
        .nodes
        .iter_mut()
        .find(|n| n.prop("drm_render_minor") == u64::from(minor))
        .expect("a GPU at that minor");
    let simds = node.prop("simd_count");
    node.properties.set("simd_count", simds / 2);
}

/// The gpu_id of `served`'s GPU at render minor `minor`.
pub fn gpu_at(served: &Served, minor: u32) -> u32 {
    served
        .sim
        .gpus()
        .iter()
        .find(|g| g.render_minor == minor)
        .expect("a GPU at that minor")
        .gpu_id
}

/// The restored process's GPUs: (checkpointed gpu_id it still sees, local
/// gpu_id it runs on).
pub fn gpu_map(served: &Served, pid: u32) -> Vec<(u32, u32)> {
    let mut map = served
        .sim
        .kfd_state(Pid(pid))
        .expect("the KFD process")
        .gpu_ids;
    map.sort_unstable();
    map
}

/// The restored process of `pid` runs on `served`'s GPUs, each
/// checkpointed GPU of `before` on one of them, none at a render minor it
/// had at the checkpoint; the pairs of render minors (checkpointed, local).
pub fn moved_to_other_render_nodes(before: &Served, served: &Served, pid: u32) -> Vec<(u32, u32)> {
    let minor = |m: &Served, id: u32| {
        m.sim
            .gpus()
            .iter()
            .find(|g| g.gpu_id == id)
            .map(|g| g.render_minor)
    };
    let map = gpu_map(served, pid);
    assert_eq!(
        map.len(),
        before.sim.gpus().len(),
        "every GPU restored: {map:?}"
    );
    let moved: Vec<(u32, u32)> = map
        .iter()
        .map(|&(old, new)| {
            (
                minor(before, old).expect("a checkpointed GPU"),
                minor(served, new).expect("a local GPU"),
            )
        })
        .collect();
    for (old, new) in &moved {
        assert!(
            !moved.iter().any(|(o, _)| o == new),
            "renderD{old} restored on renderD{new}, a checkpoint-time name: {moved:?}"
        );
    }
    moved
}

/// The plugin's first error line in a CRIU log, which must name GPU
/// `gpu_id` and `check`.
pub fn refusal(log: &str, gpu_id: u32, check: &str) -> String {
    let reason = log
        .lines()
        .find(|l| l.contains("amdgpu_plugin: ") && l.contains("Error ("))
        .unwrap_or_else(|| panic!("the plugin named no reason:\n{}", engine::tail(log, 60)))
        .to_owned();
    assert!(
        reason.contains(&format!("{gpu_id:#x}")),
        "the refusal names GPU {gpu_id:#x}: {reason}"
    );
    assert!(reason.contains(check), "and the check, {check}: {reason}");
    reason
}

/// The application as `ready` lists it, known by its host pid.
pub fn proc_of(engine: &Engine, name: &str, records: &Path) -> Proc {
    let mut p = Proc::parse(records);
    assert_eq!(p.pid, 1, "the program is pid 1 of its container");
    p.pid = engine.host_pid(name).expect("the container runs");
    p
}

/// `amdgpu-criu ARGS`: its exit status and output.
pub fn amdgpu_criu(args: &[&str]) -> (Option<i32>, String) {
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
pub fn queues_run(served: &Served, pid: u32) -> bool {
    served
        .sim
        .kfd_state(Pid(pid))
        .is_some_and(|s| !s.queues_paused && s.queues_running())
}

/// Where the application's beat counter stood: heartbeat lines written and
/// the last beat's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beats {
    pub lines: usize,
    pub last: u64,
}

/// The beat numbers of a heartbeat file's lines.
fn beat_numbers(p: &Proc) -> Vec<u64> {
    p.heartbeat()
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The application's beats now.
pub fn beats(p: &Proc) -> Beats {
    let numbers = beat_numbers(p);
    Beats {
        lines: numbers.len(),
        last: numbers.last().copied().unwrap_or(0),
    }
}

/// Whether the application went on from `before` (taken while it was
/// stopped by the checkpoint): its first beats since count on from the
/// last one, one by one. A container started again from its image counts
/// from 1; the error says so. Waits up to ten seconds for three new beats.
pub fn resumed(p: &Proc, before: Beats) -> Result<(), String> {
    let mut numbers = Vec::new();
    let grew = driver::wait_for(Duration::from_secs(10), || {
        numbers = beat_numbers(p);
        numbers.len() >= before.lines + 3
    });
    if !grew {
        return Err(format!(
            "the application wrote {} beats since the checkpoint, not 3",
            numbers.len().saturating_sub(before.lines)
        ));
    }
    let new = &numbers[before.lines..before.lines + 3];
    let want: Vec<u64> = (1..=3).map(|i| before.last + i).collect();
    if new == want {
        Ok(())
    } else if new[0] == 1 {
        Err(format!(
            "the container started again from its image: its beats count from 1 ({new:?}), \
             not on from beat {} of the checkpoint",
            before.last
        ))
    } else {
        Err(format!(
            "the beats after the checkpoint are {new:?}, not {want:?} after beat {}",
            before.last
        ))
    }
}

/// What [`kill_criu_after_pause`]'s observer saw.
#[derive(Default)]
pub struct KillRecord {
    /// The process whose `PROCESS_INFO` paused the queues (CRIU).
    pub paused_by: Option<Pid>,
    /// The process killed, and when.
    pub killed: Option<(Pid, Instant)>,
}

/// An observer that, once `armed`, lets the first `CRIU_OP PROCESS_INFO`
/// through (it pauses the target's queues) and kills the process that
/// made it at its next device call, as an engine's timeout would kill CRIU
/// in the middle of the dump.
pub fn kill_criu_after_pause(
    armed: Arc<AtomicBool>,
    record: Arc<Mutex<KillRecord>>,
) -> kfd_sim::remote::Observer {
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
        let mut record = record.lock().unwrap_or_else(PoisonError::into_inner);
        if criu_op == Some(kfd_sys::KFD_CRIU_OP_PROCESS_INFO) && record.paused_by.is_none() {
            record.paused_by = Some(call.pid);
            return Verdict::Run;
        }
        if record.killed.is_none() && record.paused_by == Some(call.pid) {
            record.killed = Some((call.pid, Instant::now()));
            return Verdict::Kill;
        }
        Verdict::Run
    })
}

/// The engine's checkpoint of container `name` failed after CRIU was
/// killed mid-dump (`out`): the container runs on with the same process,
/// whose GPU queues the plugin's guardian has running again.
pub fn assert_guardian_recovered(
    engine: &Engine,
    served: &Served,
    name: &str,
    app: &Proc,
    record: &Mutex<KillRecord>,
    out: &std::process::Output,
) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the checkpoint of a killed CRIU succeeded"
    );
    let (criu, at) = record
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .killed
        .expect("CRIU was killed after the pause");
    assert_ne!(criu.0, app.pid, "the one killed is CRIU, not the container");
    let unpaused = driver::wait_for(Duration::from_secs(20), || queues_run(served, app.pid));
    assert!(
        unpaused,
        "the container's GPU queues stay paused after CRIU's death: {:?}\n{err}",
        served.sim.kfd_state(Pid(app.pid))
    );
    println!(
        "CRIU (pid {}) killed mid-dump; the container's GPU queues run again {:.0} ms later",
        criu.0,
        at.elapsed().as_secs_f64() * 1000.0
    );
    assert!(engine.running(name), "the container runs on");
    assert_eq!(engine.host_pid(name), Some(app.pid));
    println!(
        "{}: {}",
        match engine.kind {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
        },
        err.lines().last().unwrap_or_default()
    );
    app.assert_beats_on("after the killed checkpoint");
}
