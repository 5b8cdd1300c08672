//! Workloads end to end: checkpoint through the CRIU ops, restore into a new
//! process, resume, and check the restored process continues to the same
//! result as an uninterrupted run, for every profile.

mod kfd_support;

use kfd_sim::workload::{Profile, Workload, WorkloadError};
use kfd_sim::{Sim, SimConfig};
use kfd_support::*;

fn run_interrupted(sim: &Sim, profile: &Profile, before: u32, after: u32) -> u64 {
    let mut w = Workload::launch(sim, profile).unwrap();
    for _ in 0..before {
        w.step().unwrap();
    }
    let (pid, desc, _restored) = checkpoint_restore(sim, w);
    Workload::verify(sim, pid, &desc).unwrap();
    let mut r = Workload::attach(sim, pid);
    assert_eq!(r.steps().unwrap(), u64::from(before));
    for _ in 0..after {
        r.step().unwrap();
    }
    r.fingerprint().unwrap()
}

fn run_uninterrupted(sim: &Sim, profile: &Profile, steps: u32) -> u64 {
    let mut w = Workload::launch(sim, profile).unwrap();
    for _ in 0..steps {
        w.step().unwrap();
    }
    w.fingerprint().unwrap()
}

fn same_result(profile: Profile, gpus: usize) {
    let sim = Sim::synthetic(gpus, SimConfig::default()).unwrap();
    let a = run_interrupted(&sim, &profile, 3, 4);
    let b = run_uninterrupted(&sim, &profile, 7);
    assert_eq!(
        a, b,
        "{profile:?}: restored run diverged from the uninterrupted one"
    );
    let c = run_uninterrupted(&sim, &profile, 6);
    assert_ne!(b, c, "the fingerprint must see progress");
}

#[test]
fn basic_profile_continues_to_the_same_result() {
    same_result(Profile::Basic, 2);
}

#[test]
fn pytorch_like_profile_continues_to_the_same_result() {
    same_result(
        Profile::PyTorchLike {
            bos_per_gpu: 300,
            max_bo_bytes: 256 * KIB,
        },
        2,
    );
}

#[test]
fn tensorflow_like_profile_continues_to_the_same_result() {
    same_result(Profile::TensorFlowLike { bo_bytes: 4 << 20 }, 1);
}

#[test]
fn paused_process_makes_no_progress_until_unpaused() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut w = Workload::launch(&sim, &Profile::Basic).unwrap();
    w.step().unwrap();
    let criu = criu_for(&sim, w.pid());
    process_info(&criu, w.kfd_fd().unwrap()).unwrap();
    assert!(matches!(
        w.step(),
        Err(WorkloadError::QueuesNotRunning { .. })
    ));
    unpause(&criu, w.kfd_fd().unwrap()).unwrap();
    w.step().unwrap();
    assert_eq!(w.steps().unwrap(), 2);
}

#[test]
fn restored_process_runs_only_after_resume() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut w = Workload::launch(&sim, &Profile::Basic).unwrap();
    w.step().unwrap();
    let criu = criu_for(&sim, w.pid());
    let d = dump(&criu, w.kfd_fd().unwrap());
    let desc = w.describe().unwrap();
    w.exit().unwrap();
    let pid = sim.spawn_process().unwrap();
    let _restored = restore(&sim, pid, &d);
    let state = sim.kfd_state(pid).unwrap();
    assert!(state.awaiting_resume && !state.queues_running() && state.vm_acquired == [true]);
    let mut r = Workload::attach(&sim, pid);
    assert!(matches!(
        r.step(),
        Err(WorkloadError::QueuesNotRunning { .. })
    ));
    Workload::verify(&sim, pid, &desc).unwrap();
    resume(&criu, pid).unwrap();
    let state = sim.kfd_state(pid).unwrap();
    assert!(!state.awaiting_resume && state.queues_running() && state.resumed == 1);
    assert_eq!(state.queues, 1);
    r.step().unwrap();
    assert_eq!(r.steps().unwrap(), 2);
}

#[test]
fn multi_process_workloads_share_dmabufs_and_restore() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let mut all: Vec<Workload> = (0..3)
        .map(|_| Workload::launch(&sim, &Profile::Basic).unwrap())
        .collect();
    let exporter = all[0].describe().unwrap();
    let shared = exporter
        .bos
        .iter()
        .find(|b| b.flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0)
        .unwrap()
        .handle;
    let (first, rest) = all.split_first_mut().unwrap();
    let imported: Vec<u64> = rest
        .iter_mut()
        .map(|w| first.share_with(shared, w).unwrap())
        .collect();
    for w in &mut all {
        w.step().unwrap();
    }
    // The shared BO is one object: a write by the exporter is seen by importers.
    all[0].write_bo(shared, 100, b"shared!").unwrap();
    for (w, &h) in all[1..].iter().zip(&imported) {
        assert_eq!(w.read_bo(h, 100, 7).unwrap(), b"shared!");
    }
    let again = Workload::launch_sharing(&sim, 2, &Profile::Basic).unwrap();
    assert_eq!(
        again[1].describe().unwrap().bos.len(),
        again[0].describe().unwrap().bos.len() + 1
    );
    drop(again);
    for w in all {
        let (pid, desc, _r) = checkpoint_restore(&sim, w);
        Workload::verify(&sim, pid, &desc).unwrap();
    }
}

#[test]
fn a_full_round_trip_leaks_nothing() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let before = sim.accounting();
    assert!(before.live_bos > 0 && before.kfd_fds == 1 && before.render_fds == 2);
    assert_eq!(before.dmabuf_fds, 0);
    let (pid, _desc, restored) = checkpoint_restore(&sim, w);
    drop(restored);
    sim.exit_process(pid).unwrap();
    let after = sim.accounting();
    assert_eq!(after.open_fds(), 0, "{after:?}");
    assert_eq!(after.live_bos, 0, "{after:?}");
    assert_eq!(after.pinned_userptr_pages, 0, "{after:?}");
}

#[test]
fn thousands_of_bos_round_trip() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let profile = Profile::PyTorchLike {
        bos_per_gpu: 2000,
        max_bo_bytes: 64 * KIB,
    };
    let mut w = Workload::launch(&sim, &profile).unwrap();
    w.step().unwrap();
    let (pid, desc, _r) = checkpoint_restore(&sim, w);
    assert!(desc.bos.len() > 2000);
    Workload::verify(&sim, pid, &desc).unwrap();
    let mut r = Workload::attach(&sim, pid);
    r.step().unwrap();
    assert_eq!(r.steps().unwrap(), 2);
}

#[test]
fn restore_under_the_original_pid_as_criu_does() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let mut w = Workload::launch(&sim, &Profile::Basic).unwrap();
    w.step().unwrap();
    let old = w.pid();
    let criu = criu_for(&sim, old);
    let d = dump(&criu, w.kfd_fd().unwrap());
    assert_eq!(d.info.pid, old.0, "PROCESS_INFO reports the target pid");
    let desc = w.describe().unwrap();
    w.exit().unwrap();
    assert!(!sim.process_alive(old));
    let pid = sim
        .spawn_process_with(kfd_sim::ProcessConfig {
            pid: Some(kfd_sim::Pid(d.info.pid)),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(pid, old);
    assert!(matches!(
        sim.spawn_process_with(kfd_sim::ProcessConfig {
            pid: Some(old),
            ..Default::default()
        }),
        Err(kfd_sim::SimError::PidInUse(_))
    ));
    let _r = restore(&sim, pid, &d);
    resume(&criu, kfd_sim::Pid(d.info.pid)).unwrap();
    Workload::verify(&sim, pid, &desc).unwrap();
    let mut r = Workload::attach(&sim, pid);
    r.step().unwrap();
    assert_eq!(r.steps().unwrap(), 2);
}

#[test]
fn an_attached_handle_cannot_issue_ioctls_but_can_observe() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let mut a = Workload::attach(&sim, w.pid());
    let gpu = sim.gpus()[0].gpu_id;
    assert!(matches!(
        a.alloc(gpu, 4096, kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT, &[]),
        Err(WorkloadError::Attached(_))
    ));
    a.step().unwrap();
    assert_eq!(w.steps().unwrap(), 1);
    assert_eq!(a.describe().unwrap(), w.describe().unwrap());
    let none = Workload::attach(&sim, sim.spawn_process().unwrap());
    assert!(matches!(
        none.describe(),
        Err(WorkloadError::NoKfdProcess(_))
    ));
}
