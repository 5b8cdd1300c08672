//! Recovering an application whose dumper died between `PROCESS_INFO` and
//! `UNPAUSE` (`amdgpu_checkpoint::recover`, behind `amdgpu-criu unpause` and
//! the dump guardian), over kfd-sim's ptrace, pidfd and CRIU-op rules:
//!
//! * while the dumper lives it is the tracer: recovery names it and leaves
//!   the application alone;
//! * once the dumper is gone (its death detaches the application, which
//!   stays paused), a recovery process seizes the application, takes its
//!   KFD fd with `pidfd_getfd`, unpauses it and detaches; the application's
//!   next steps match those of a run that was never paused;
//! * a second recovery finds nothing paused and says so;
//! * no such process, no KFD fd, ptrace refused, no CRIU capability and a
//!   frozen cgroup each get their own answer.

mod common;

use std::os::fd::AsFd;

use amdgpu_checkpoint::recover::{unpause_process, unpause_process_pinned, RecoverError};
use common::steps_after;
use kfd::{FrozenCgroup, Kfd};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Pid, ProcessConfig, Sim, SimConfig};

/// A machine with the basic workload after one step, and a dumper that has
/// seized it and paused its queues the way CRIU does (its own pidfd_getfd
/// copy of the application's KFD fd, `PROCESS_INFO`).
fn paused_app(gpus: usize) -> (Sim, Workload, Pid) {
    let sim = Sim::synthetic(gpus, SimConfig::default()).expect("simulated machine");
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
    app.step().expect("app step");
    let criu = sim.spawn_process().unwrap();
    sim.set_process_name(criu, "criu").unwrap();
    let driver = sim.driver(criu);
    kfd::Driver::ptrace_seize(&driver, app.pid().0).unwrap();
    let pidfd = kfd::Driver::pidfd_open(&driver, app.pid().0).unwrap();
    let kfd_fd = app.kfd_fd().unwrap();
    let fd = kfd::Driver::pidfd_getfd(
        &driver,
        pidfd.as_fd(),
        std::os::fd::AsRawFd::as_raw_fd(&kfd_fd),
    )
    .unwrap();
    Kfd::from_fd(&driver, fd)
        .process_info()
        .expect("PROCESS_INFO");
    let state = sim.kfd_state(app.pid()).unwrap();
    assert!(state.queues_paused && !state.queues_running());
    (sim, app, criu)
}

#[test]
fn after_the_dumper_dies_recovery_unpauses_and_the_app_continues_as_if_never_paused() {
    for gpus in [1, 2] {
        // The run that was never paused.
        let sim = Sim::synthetic(gpus, SimConfig::default()).unwrap();
        let mut reference = Workload::launch(&sim, &Profile::Basic).unwrap();
        reference.step().unwrap();
        let expected = steps_after(&mut reference, 3);

        let (sim, mut app, criu) = paused_app(gpus);
        assert!(app.step().is_err(), "paused queues do not run");
        let rescuer = sim.spawn_process().unwrap();
        let driver = sim.driver(rescuer);

        // CRIU alive: it is named, nothing changes.
        match unpause_process(&driver, app.pid().0) {
            Err(RecoverError::Traced {
                tracer,
                tracer_name,
                ..
            }) => {
                assert_eq!(tracer, criu.0);
                assert_eq!(tracer_name, "criu");
            }
            other => panic!("expected Traced, got {other:?}"),
        }
        assert!(sim.kfd_state(app.pid()).unwrap().queues_paused);

        // CRIU dies: the app is detached and stays paused; only its ptrace
        // parent may unpause, so nobody else can without attaching.
        sim.exit_process(criu).unwrap();
        assert_eq!(sim.tracer_of(app.pid()), None);
        assert!(sim.kfd_state(app.pid()).unwrap().queues_paused);

        let done = unpause_process(&driver, app.pid().0).expect("recovery");
        assert!(done.was_paused);
        assert!(!done.detach_deferred);
        assert_eq!(done.frozen, None);
        let state = sim.kfd_state(app.pid()).unwrap();
        assert!(!state.queues_paused && state.queues_running());
        assert_eq!(sim.tracer_of(app.pid()), None, "recovery detached");
        assert_eq!(steps_after(&mut app, 3), expected);

        // Again: nothing paused, nothing changes.
        let again = unpause_process(&driver, app.pid().0).expect("second recovery");
        assert!(!again.was_paused);
        assert!(sim.kfd_state(app.pid()).unwrap().queues_running());
    }
}

#[test]
fn each_refusal_has_its_own_answer() {
    let (sim, app, criu) = paused_app(1);
    sim.exit_process(criu).unwrap();
    let rescuer = sim.spawn_process().unwrap();
    let driver = sim.driver(rescuer);

    let gone = Pid(app.pid().0 + 1000);
    assert!(matches!(
        unpause_process(&driver, gone.0),
        Err(RecoverError::NoSuchProcess { pid }) if pid == gone.0
    ));

    let plain = sim.spawn_process().unwrap();
    sim.set_process_name(plain, "bash").unwrap();
    match unpause_process(&driver, plain.0) {
        Err(RecoverError::NoKfd { name, .. }) => assert_eq!(name, "bash"),
        other => panic!("expected NoKfd, got {other:?}"),
    }
    assert_eq!(sim.tracer_of(plain), None, "detached after the failure");

    sim.set_ptrace_allowed(app.pid(), false).unwrap();
    assert!(matches!(
        unpause_process(&driver, app.pid().0),
        Err(RecoverError::NotPermitted {
            op: "PTRACE_SEIZE",
            ..
        })
    ));
    sim.set_ptrace_allowed(app.pid(), true).unwrap();

    sim.set_checkpoint_restore_capable(rescuer, false).unwrap();
    match unpause_process(&driver, app.pid().0) {
        Err(e @ RecoverError::NotPermitted { .. }) => {
            assert!(e.to_string().contains("CAP_CHECKPOINT_RESTORE"), "{e}")
        }
        other => panic!("expected NotPermitted, got {other:?}"),
    }
    assert!(sim.kfd_state(app.pid()).unwrap().queues_paused);
    assert_eq!(sim.tracer_of(app.pid()), None, "detached after the refusal");
    sim.set_checkpoint_restore_capable(rescuer, true).unwrap();

    // In CRIU's cgroup v2 freezer: unpaused, and the freezer is reported.
    let cgroup = FrozenCgroup::V2 {
        dir: "/sys/fs/cgroup/job".into(),
    };
    sim.set_frozen_cgroup(app.pid(), Some(cgroup.clone()))
        .unwrap();
    let done = unpause_process(&driver, app.pid().0).expect("recovery");
    assert!(done.was_paused);
    assert_eq!(done.frozen, Some(cgroup));
    assert!(sim.kfd_state(app.pid()).unwrap().queues_running());
}

#[test]
fn pidfd_getfd_and_ptrace_follow_the_kernel_rules() {
    let (sim, app, criu) = paused_app(1);
    let other = sim.spawn_process().unwrap();
    let driver = sim.driver(other);
    let errno = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
    // Traced already: EPERM; not our tracee: ESRCH for INTERRUPT/DETACH.
    assert_eq!(
        errno(kfd::Driver::ptrace_seize(&driver, app.pid().0)),
        Some(libc::EPERM)
    );
    assert_eq!(
        errno(kfd::Driver::ptrace_detach(&driver, app.pid().0)),
        Some(libc::ESRCH)
    );
    // Seizing oneself: EPERM.
    assert_eq!(
        errno(kfd::Driver::ptrace_seize(&driver, other.0)),
        Some(libc::EPERM)
    );
    // A fd number the target does not hold: EBADF.
    let pidfd = kfd::Driver::pidfd_open(&driver, app.pid().0).unwrap();
    assert_eq!(
        kfd::Driver::pidfd_getfd(&driver, pidfd.as_fd(), 9999)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EBADF)
    );
    // Without being the tracer, the fd is usable for nothing KFD: EBADF.
    let raw = std::os::fd::AsRawFd::as_raw_fd(&app.kfd_fd().unwrap());
    let fd = kfd::Driver::pidfd_getfd(&driver, pidfd.as_fd(), raw).unwrap();
    match Kfd::from_fd(&driver, fd).unpause() {
        Err(kfd::Error::Os { errno, .. }) => assert_eq!(errno, libc::EBADF),
        other => panic!("expected EBADF, got {other:?}"),
    }
    // The process gone: ESRCH.
    sim.exit_process(criu).unwrap();
    let exited = sim.spawn_process().unwrap();
    let pidfd = kfd::Driver::pidfd_open(&driver, exited.0).unwrap();
    sim.exit_process(exited).unwrap();
    assert_eq!(
        kfd::Driver::pidfd_getfd(&driver, pidfd.as_fd(), raw)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ESRCH)
    );
    assert_eq!(
        kfd::Driver::pidfd_open(&driver, exited.0)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ESRCH)
    );
}

#[test]
fn a_process_reusing_the_pid_of_the_dumped_one_is_never_touched() {
    // The guardian's view: a pidfd of the paused process opened at the
    // dump. The process is killed, the dumper dies, and the pid goes to
    // another GPU process that another dump left paused (its own guardian's
    // business). Recovery through the pidfd must neither seize nor unpause it.
    let (sim, app, criu) = paused_app(1);
    let pid = app.pid();
    let pinned = kfd::Driver::pidfd_open(&sim.driver(criu), pid.0).unwrap();
    app.exit().unwrap();
    sim.exit_process(criu).unwrap();
    let stranger = sim
        .spawn_process_with(ProcessConfig {
            pid: Some(pid),
            ..ProcessConfig::default()
        })
        .unwrap();
    let mut other = Workload::launch_in(&sim, stranger, &Profile::Basic).unwrap();
    other.step().unwrap();
    let other_criu = sim.spawn_process().unwrap();
    let driver = sim.driver(other_criu);
    kfd::Driver::ptrace_seize(&driver, pid.0).unwrap();
    let pidfd = kfd::Driver::pidfd_open(&driver, pid.0).unwrap();
    let kfd_fd = other.kfd_fd().unwrap();
    let fd = kfd::Driver::pidfd_getfd(
        &driver,
        pidfd.as_fd(),
        std::os::fd::AsRawFd::as_raw_fd(&kfd_fd),
    )
    .unwrap();
    Kfd::from_fd(&driver, fd).process_info().unwrap();
    sim.exit_process(other_criu).unwrap();
    assert!(sim.kfd_state(pid).unwrap().queues_paused);

    let guardian = sim.spawn_process().unwrap();
    let result = unpause_process_pinned(&sim.driver(guardian), pid.0, pinned.as_fd());
    assert!(
        matches!(result, Err(RecoverError::NoSuchProcess { pid: p }) if p == pid.0),
        "{result:?}"
    );
    assert!(
        sim.kfd_state(pid).unwrap().queues_paused,
        "the other process's dump is not ours to end"
    );
    assert_eq!(sim.tracer_of(pid), None, "never seized");
    // Through a pidfd of its own process, recovery works as by pid.
    let own = kfd::Driver::pidfd_open(&sim.driver(guardian), pid.0).unwrap();
    let done = unpause_process_pinned(&sim.driver(guardian), pid.0, own.as_fd()).unwrap();
    assert!(done.was_paused);
}
