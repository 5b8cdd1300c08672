//! A checkpoint taken while the GPU is busy: a process streams copies the
//! way ROCr does (`kfd_sim::workload::copy_stream`: SDMA rings in its own
//! memory, completion signals, event traps), more than the simulated rate
//! drains, with part of them queued behind a gate. The emulated CRIU, with
//! the plugin, dumps it: the dump preempts the queues mid-ring and the
//! saved queue state says where each ring stopped. Restored (on the same
//! machine and on one numbered differently) and resumed, the queues go on
//! from the saved read pointers: every copy finishes, every signal
//! completes, and the process ends where an uninterrupted twin ends.
//!
//! The hang case of criu#2663, "restore success but process hang forever":
//! a restored process waits on a signal only its restored queue can
//! complete, through an event only that queue's trap delivers. Every wait
//! here is bounded: a restore that gets the read pointer wrong fails the
//! test within the bound (shown by a restore from an image whose saved read
//! pointer was moved to the write pointer), it never hangs CI.

use std::time::Duration;

use amdgpu_image::{DirStore, ImageName, ImageStore};
use criu_host_emulator::{EmulatorError, TaskFile};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::copy_stream::{CopyOp, CopyStream, CopyStreamConfig, CopyStreamError};
use kfd_sim::{saved_queues, synthetic_system, QueueState, Sim, SimConfig};

mod common;

use common::{device_vmas, kfd_image, vmas_of, Dirs, KFD_ID};

/// The bound on every wait: far above what the copies take (a few hundred
/// ms at the rate below), far below CI's patience.
const BOUND: Duration = Duration::from_secs(60);
const RATE: u64 = 128 << 20;
const BUFFER: u64 = 4 << 20;

/// The tests of this binary restore processes at the addresses their
/// memory had: one at a time (and the plugin's log lines kept out of the
/// output).
fn serial() -> Capture {
    Capture::start()
}

fn machine(seed: Option<u64>) -> Sim {
    let system = synthetic_system(2);
    let system = match seed {
        Some(seed) => amdgpu_topology::renumbered(&system, seed),
        None => system,
    };
    let sim = Sim::new(system, SimConfig::default()).unwrap();
    sim.set_sdma_bandwidth(Some(RATE));
    sim
}

fn launch(sim: &Sim) -> CopyStream {
    CopyStream::launch(
        sim,
        &CopyStreamConfig {
            gpus: 2,
            buffer_bytes: BUFFER,
        },
    )
    .unwrap()
}

/// The copies: on each GPU host to VRAM (in flight at the checkpoint), a
/// gate, then VRAM to host, and GPU 0's VRAM to GPU 1's.
fn submit(s: &CopyStream) {
    for gpu in 0..2 {
        s.copy(CopyOp::HostToDevice { gpu, bytes: BUFFER }).unwrap();
        s.gate(gpu).unwrap();
        s.copy(CopyOp::DeviceToHost { gpu, bytes: BUFFER }).unwrap();
    }
    s.copy(CopyOp::DeviceToDevice {
        from: 0,
        to: 1,
        bytes: BUFFER - 4096,
    })
    .unwrap();
}

/// The CRIU files of a stream: /dev/kfd, then its render nodes.
fn files(s: &CopyStream) -> (Vec<TaskFile<'_>>, Vec<u32>) {
    let mut files = vec![TaskFile {
        fd: s.kfd_fd(),
        id: KFD_ID,
    }];
    for (i, fd) in s.render_fds().into_iter().enumerate() {
        files.push(TaskFile {
            fd,
            id: KFD_ID + 1 + i as u32,
        });
    }
    let ids = files.iter().map(|f| f.id).collect();
    (files, ids)
}

/// Dumps `app` (and ends it, as `criu dump` does); checks that the dump
/// paused every queue mid-ring.
fn dump(dirs: &Dirs, sim: &Sim, app: CopyStream) {
    let (f, _) = files(&app);
    dirs.emulator(sim, |_| {})
        .dump(app.pid(), &f, &device_vmas(sim))
        .expect("the dump succeeds");
    drop(f);
    let image = kfd_image(dirs.images.path());
    let queues = saved_queues(
        &image.priv_data,
        image
            .device_entries
            .iter()
            .filter(|d| d.gpu_id != 0)
            .count(),
        image.bo_entries.len(),
        image.num_of_objects as usize,
        sim.config().max_gpu_instance,
    )
    .unwrap();
    assert_eq!(queues.len(), 2, "{queues:?}");
    for q in &queues {
        assert!(q.mid_ring() && !q.hung, "paused mid-ring: {q:?}");
    }
    app.exit().unwrap();
}

fn round_trip(restore_on: Option<u64>) {
    let _serial = serial();
    let origin = machine(None);
    let dirs = Dirs::new();
    let app = launch(&origin);
    let twin = launch(&origin);
    submit(&app);
    submit(&twin);
    let (pid, mem) = (app.pid(), app.memory());
    dump(&dirs, &origin, app);
    // The uninterrupted run.
    twin.open_all().unwrap();
    twin.wait_all(BOUND).unwrap();
    let expected = twin.fingerprint().unwrap();

    let target = match restore_on {
        Some(seed) => machine(Some(seed)),
        None => origin.clone(),
    };
    // /dev/kfd and the two render nodes.
    let ids: Vec<u32> = (KFD_ID..=KFD_ID + 2).collect();
    let vmas = vmas_of(&kfd_image(dirs.images.path()));
    let task = dirs
        .emulator(&target, |_| {})
        .restore(pid, &ids, &vmas)
        .expect("the restore succeeds");
    assert_eq!(task.resume_answer, 0);
    let restored = CopyStream::attach(&target, pid, mem).unwrap();
    restored.open_all().unwrap();
    restored
        .wait_all(BOUND)
        .expect("every copy the checkpoint left in the rings finishes");
    assert_eq!(
        restored.fingerprint().unwrap(),
        expected,
        "the restored process ends where the uninterrupted one does"
    );
    for q in restored.queues() {
        let s = target.queue_status(pid, q).unwrap();
        assert!(s.settled(), "queue {q}: {s}");
    }
    drop(task);
    restored.exit().unwrap();
    twin.exit().unwrap();
}

#[test]
fn copies_in_flight_finish_after_a_restore_on_the_same_machine() {
    round_trip(None);
}

#[test]
fn copies_in_flight_finish_after_a_restore_on_a_renumbered_machine() {
    round_trip(Some(5));
}

/// The hang case: the one wait of the restored process ends only if its
/// queue resumes from the saved read pointer (the gate, then the copy, then
/// the trap) and the trap's event reaches WAIT_EVENTS.
fn hang_case(tamper: bool) -> Result<(), CopyStreamError> {
    let _serial = serial();
    let origin = machine(None);
    let dirs = Dirs::new();
    let app = launch(&origin);
    app.gate(0).unwrap();
    let ticket = app
        .copy(CopyOp::HostToDevice {
            gpu: 0,
            bytes: BUFFER,
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (pid, mem) = (app.pid(), app.memory());
    let (f, ids) = files(&app);
    dirs.emulator(&origin, |_| {})
        .dump(pid, &f, &device_vmas(&origin))
        .unwrap();
    drop(f);
    app.exit().unwrap();
    if tamper {
        // A restore that loses its place: every saved read pointer moved
        // to the write pointer (the rings look consumed).
        let store = DirStore::open_dir(dirs.images.path()).unwrap();
        let mut image = kfd_image(dirs.images.path());
        let mut at = 0;
        while let Some(i) = image.priv_data[at..].windows(4).position(|w| w == b"EXQ1") {
            let regs = at + i;
            let wptr: [u8; 8] = image.priv_data[regs + 16..regs + 24].try_into().unwrap();
            image.priv_data[regs + 8..regs + 16].copy_from_slice(&wptr);
            at = regs + 4;
        }
        store
            .write_message(&ImageName::Kfd { id: KFD_ID }, &image)
            .unwrap();
    }
    let target = machine(Some(9));
    let vmas = vmas_of(&kfd_image(dirs.images.path()));
    let task = dirs
        .emulator(&target, |_| {})
        .restore(pid, &ids, &vmas)
        .expect("the restore succeeds");
    let restored = CopyStream::attach(&target, pid, mem).unwrap();
    restored.open_all().unwrap();
    let bound = if tamper {
        Duration::from_secs(2)
    } else {
        BOUND
    };
    let outcome = restored.wait(ticket, bound);
    drop(task);
    restored.exit().unwrap();
    outcome
}

/// A queue caught inside a copy longer than the kernel's preemption
/// timeout cannot be paused: PROCESS_INFO fails with `ETIME` and the kernel
/// rolls its eviction back. The dump fails with an error naming the cause,
/// and the process is left running: not paused, no eviction level, and
/// its copies finish.
#[test]
fn a_queue_that_cannot_be_preempted_in_time_fails_the_dump_and_the_process_runs_on() {
    let log = serial();
    let sim = machine(None);
    // A 4 MiB copy at 4 MiB/s keeps its engine inside one packet for a
    // second, the dump's steps before PROCESS_INFO included; the kernel
    // waits 50 ms for a preemption.
    sim.set_sdma_bandwidth(Some(4 << 20));
    sim.set_queue_preemption_timeout(Duration::from_millis(50));
    let dirs = Dirs::new();
    let app = launch(&sim);
    let ticket = app
        .copy(CopyOp::HostToDevice {
            gpu: 0,
            bytes: BUFFER,
        })
        .unwrap();
    // Inside the copy: a queue busy at one read pointer for 20 ms, which
    // none of the short packets around the copy is.
    let busy = std::time::Instant::now() + BOUND;
    let in_copy = |q: u32| {
        let before = sim.queue_status(app.pid(), q).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let after = sim.queue_status(app.pid(), q).unwrap();
        before.state == QueueState::Busy
            && after.state == QueueState::Busy
            && after.read_pointer == before.read_pointer
            && after.write_pointer > after.read_pointer
    };
    while !app.queues().into_iter().any(in_copy) {
        assert!(std::time::Instant::now() < busy, "the copy never started");
    }
    let (f, _) = files(&app);
    let err = dirs
        .emulator(&sim, |_| {})
        .dump(app.pid(), &f, &device_vmas(&sim))
        .expect_err("the dump cannot pause the process");
    drop(f);
    assert!(
        matches!(err, EmulatorError::Hook { errno, .. } if errno == -libc::ETIME),
        "{err}"
    );
    assert!(
        log.lines()
            .iter()
            .any(|(level, line)| *level == Level::Error
                && line.contains("CRIU_OP PROCESS_INFO")
                && line.contains("a GPU queue could not be preempted in time")),
        "{:#?}",
        log.lines()
    );
    let k = sim.kfd_state(app.pid()).unwrap();
    assert!(!k.queues_paused, "the process was left paused");
    assert!(
        k.eviction_levels.iter().all(|&l| l == 0),
        "an eviction level was left: {:?}",
        k.eviction_levels
    );
    app.wait(ticket, BOUND)
        .expect("the copy the dump could not preempt finishes");
    sim.wait_queues_settled(app.pid(), BOUND)
        .expect("the queues consume their rings");
    for q in app.queues() {
        let s = sim.queue_status(app.pid(), q).unwrap();
        assert_eq!(s.state, QueueState::Idle, "queue {q}: {s}");
    }
    app.exit().unwrap();
}

#[test]
fn a_restored_wait_ends_when_the_queue_resumes_from_its_saved_read_pointer() {
    hang_case(false).expect("the restored queue completes the signal and delivers its event");
}

#[test]
fn a_restore_that_loses_the_read_pointer_fails_within_the_bound() {
    let err = hang_case(true).expect_err("the signal cannot complete");
    assert!(
        matches!(err, CopyStreamError::Timeout { value: 1, .. }),
        "a timeout, not a hang: {err}"
    );
}
