//! The dumper killed at each stage of a dump, and the guardian's recovery,
//! modelled inside this process.
//!
//! tests/dumper_killed_process.rs runs the dumper as its own OS process
//! over `kfd_sim::remote` and SIGKILLs it for real; this test keeps the
//! model, which also checks what the killed plugin's in-flight work does
//! (its error paths run and reach nothing). What a SIGKILL does, as the
//! kernel sees it, is modelled: at the chosen
//! call the dumper process ends (`Sim::exit_process`: its tracee is
//! detached, it can make no further call: everything it tries answers
//! `ESRCH`, so nothing it still has in flight — its error paths, its
//! unpause — reaches the kernel), and its fds are closed when its objects
//! are dropped. Then a rescuer process does what the guardian does
//! (`amdgpu_checkpoint::recover::unpause_process`; the guardian process
//! itself is SIGKILL-tested against real processes in amdgpu-checkpoint's
//! tests/guardian.rs, and is the rescuer of tests/dumper_killed_process.rs).
//!
//! Stages: right after `PROCESS_INFO`, during the BO drain of each GPU (at
//! its second SDMA submission, `AMDGPU_CS` on its render node), and at
//! `DUMP_DEVICES_LATE` (its `UNPAUSE`, never issued). After each: the
//! application's queues run again, its next steps match a run that was
//! never dumped, no simulator object is leaked, and the images directory
//! does not verify as complete — here because the plugin, living on, runs
//! its failure exit and discards its images; a real SIGKILL runs nothing,
//! and at `DUMP_DEVICES_LATE` leaves every amdgpu image committed (see the
//! process test).
//!
//! Restore: CRIU (its main restorer and the restored task) killed right
//! after `RESTORE`, during each GPU's BO fill and at `RESUME`: the
//! half-restored task is gone and the simulator holds what it held before.

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amdgpu_checkpoint::recover::unpause_process;
use criu_host_emulator::EmulatedHost;
use kfd::{DeviceNumber, Driver, FdKind};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig, SimDriver, DRM_MAJOR};

mod common;
mod faults_common;

use common::{device_vmas, gpu_files};
use faults_common::{
    dump_kill_stages, empty_dir, fault_name, restore_kill_stages, set_looks_complete, Call,
    MiniCriu, Snapshot,
};

#[derive(Default)]
struct Record {
    calls: Vec<Call>,
    /// The processes of the CRIU run (dumper; main restorer and task),
    /// killed together.
    criu: Vec<kfd_sim::Pid>,
    /// Kill the dumper before call number `kill_at` (0-based).
    kill_at: Option<usize>,
    killed_at: Option<Instant>,
}

/// The dumper's driver: records its calls; kills it at the chosen one.
#[derive(Clone)]
struct KillDriver {
    inner: SimDriver,
    rec: Arc<Mutex<Record>>,
}

impl KillDriver {
    fn before(&self, name: String, minor: Option<u32>) {
        let mut rec = self.rec.lock().unwrap();
        let n = rec.calls.len();
        rec.calls.push(Call { name, minor });
        if rec.kill_at == Some(n) {
            rec.killed_at = Some(Instant::now());
            // SIGKILL as the kernel sees it.
            for &pid in &rec.criu {
                self.inner
                    .sim()
                    .exit_process(pid)
                    .expect("kill a CRIU process");
            }
        }
    }

    fn minor_of(&self, fd: BorrowedFd<'_>) -> Option<u32> {
        match self.inner.fd_kind(fd) {
            Ok(FdKind::CharDevice(DeviceNumber { major, minor })) if major == DRM_MAJOR => {
                Some(minor)
            }
            _ => None,
        }
    }
}

impl Driver for KillDriver {
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
        self.before("OPEN".into(), None);
        self.inner.open(path, flags)
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<c_int> {
        self.before(fault_name(request, arg), self.minor_of(fd));
        // SAFETY: forwarded Driver::ioctl contract.
        unsafe { self.inner.ioctl(fd, request, arg) }
    }

    unsafe fn mmap(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<NonNull<c_void>> {
        self.before("MMAP".into(), self.minor_of(fd));
        // SAFETY: forwarded Driver::mmap contract.
        unsafe { self.inner.mmap(addr, len, prot, flags, fd, offset) }
    }

    faults_common::forward_driver_rest!();
}

/// The driver of CRIU process `pid`, killed with the others of the run.
fn killable(sim: &Sim, rec: &Arc<Mutex<Record>>, pid: kfd_sim::Pid) -> KillDriver {
    rec.lock().unwrap().criu.push(pid);
    KillDriver {
        inner: sim.driver(pid),
        rec: rec.clone(),
    }
}

const GPUS: usize = 2;
const NEXT_STEPS: usize = 3;

struct Run {
    calls: Vec<Call>,
    dump_failed: bool,
    recovery: Option<Duration>,
}

/// One dump of a fresh machine, the dumper killed before call `kill_at`;
/// checks everything a killed dump must leave as it was.
fn run(images: &Path, shm: &Path, kill_at: Option<usize>, expected: &[u64]) -> Run {
    empty_dir(images);
    let sim = Sim::synthetic(GPUS, SimConfig::default()).expect("simulated machine");
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
    app.step().expect("app step");
    let before = Snapshot::take(&sim);
    let rec = Arc::new(Mutex::new(Record {
        kill_at,
        ..Record::default()
    }));
    let quiet = criu_plugin_amdgpu::log::Capture::start();
    let result = {
        let (files, _) = gpu_files(&app);
        MiniCriu::new(&sim, shm).dump(
            |pid| killable(&sim, &rec, pid),
            EmulatedHost::new(images, None),
            app.pid(),
            &files,
            &device_vmas(&sim),
        )
    };
    drop(quiet);
    let (calls, killed_at) = {
        let rec = rec.lock().unwrap();
        (rec.calls.clone(), rec.killed_at)
    };
    let mut recovery = None;
    if let Some(killed_at) = killed_at {
        let state = sim.kfd_state(app.pid()).unwrap();
        assert_eq!(
            sim.tracer_of(app.pid()),
            None,
            "the dead dumper's tracee is free"
        );
        // The guardian's work.
        let rescuer = sim.spawn_process().unwrap();
        let done = unpause_process(&sim.driver(rescuer), app.pid().0).expect("recovery");
        assert_eq!(done.was_paused, state.queues_paused);
        recovery = Some(killed_at.elapsed());
        sim.exit_process(rescuer).unwrap();
        assert!(
            !set_looks_complete(images),
            "a killed dump never verifies as complete"
        );
    }
    let state = sim.kfd_state(app.pid()).unwrap();
    assert!(state.queues_running() && !state.queues_paused, "{state:?}");
    assert_eq!(
        common::steps_after(&mut app, NEXT_STEPS),
        expected,
        "the next steps"
    );
    let after = Snapshot::take(&sim);
    assert_eq!(after.accounting, before.accounting, "nothing leaked");
    Run {
        calls,
        dump_failed: result.is_err(),
        recovery,
    }
}

#[test]
fn a_dumper_killed_at_any_stage_leaves_the_app_recoverable_and_nothing_leaked() {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let expected = {
        let sim = Sim::synthetic(GPUS, SimConfig::default()).unwrap();
        let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
        app.step().unwrap();
        common::steps_after(&mut app, NEXT_STEPS)
    };
    let clean = run(images.path(), shm.path(), None, &expected);
    assert!(!clean.dump_failed);
    assert!(
        set_looks_complete(images.path()),
        "the clean dump is complete"
    );
    for (label, at) in dump_kill_stages(&clean.calls, GPUS) {
        let killed = run(images.path(), shm.path(), Some(at), &expected);
        assert!(killed.dump_failed, "{label}: the dump fails");
        let took = killed.recovery.expect("the dumper was killed");
        println!("killed {label} (call {at}): queues run again {took:?} after the kill");
    }
}

/// One restore of a clean dump's images on a fresh machine, CRIU (main
/// restorer and restored task) killed before call `kill_at`: the
/// half-restored task is gone and the simulator holds what it held before.
fn restore_run(kill_at: Option<usize>) -> (Vec<Call>, bool) {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let sim = Sim::synthetic(GPUS, SimConfig::default()).expect("simulated machine");
    let (pid, ids, ()) = faults_common::dump_and_kill(&sim, images.path(), shm.path(), |_| ());
    let before = Snapshot::take(&sim);
    let rec = Arc::new(Mutex::new(Record {
        kill_at,
        ..Record::default()
    }));
    let quiet = criu_plugin_amdgpu::log::Capture::start();
    let result = MiniCriu::new(&sim, shm.path()).restore(
        |p| killable(&sim, &rec, p),
        EmulatedHost::new(images.path(), None),
        pid,
        &ids,
        &device_vmas(&sim),
    );
    drop(quiet);
    let killed = rec.lock().unwrap().killed_at.is_some();
    let failed = match result {
        // Killed at RESUME: every file was restored, RESUME never was.
        Ok(task) if killed => {
            assert_ne!(task.resume_answer, 0, "RESUME fails");
            drop(task);
            true
        }
        Ok(task) => {
            assert_eq!(task.resume_answer, 0);
            drop(task);
            sim.exit_process(pid).expect("the restored task exits");
            false
        }
        Err(_) => true,
    };
    assert!(
        sim.kfd_state(pid).is_none(),
        "the half-restored task is gone"
    );
    let after = Snapshot::take(&sim);
    assert_eq!(after.accounting, before.accounting, "nothing leaked");
    let calls = rec.lock().unwrap().calls.clone();
    (calls, failed)
}

#[test]
fn criu_killed_at_any_restore_stage_leaves_no_half_restored_task_and_nothing_leaked() {
    let (calls, failed) = restore_run(None);
    assert!(!failed, "the clean restore succeeds");
    for (label, at) in restore_kill_stages(&calls) {
        let (_, failed) = restore_run(Some(at));
        assert!(failed, "{label}: the restore fails");
        println!("killed {label} (call {at}): the half-restored task is gone, nothing leaked");
    }
}
