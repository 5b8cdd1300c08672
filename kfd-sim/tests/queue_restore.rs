//! A queue restored by CRIU resumes where its checkpoint stopped it: the
//! read pointer RESTORE put into its MQD is where its engine starts, also
//! when the queue's configuration changed between the restore and the
//! queue's first run (an engine that never ran has no registers of its own
//! to save over the MQD's). Under real CRIU that change is RESUME itself,
//! which gives the process CRIU's copies of its memory (the doorbell page
//! among them, see `kfd-sim-preload/tests/real_criu_restore.rs`); here the
//! process moves its ring with UPDATE_QUEUE.

mod queue_support;

use std::os::fd::AsFd;
use std::time::Duration;

use kfd_sim::{QueueState, Sim, SimConfig};
use kfd_sys::*;
use queue_support::*;

fn sim() -> Sim {
    Sim::synthetic(1, SimConfig::default()).unwrap()
}

/// Waits (bounded) until `pred` holds of the queue's status.
fn wait_status(
    sim: &Sim,
    pid: kfd_sim::Pid,
    q_id: u32,
    pred: impl Fn(&kfd_sim::QueueStatus) -> bool,
) -> kfd_sim::QueueStatus {
    let mut last = None;
    for _ in 0..6000 {
        last = sim.queue_status(pid, q_id);
        if last.as_ref().is_some_and(&pred) {
            return last.unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("queue {q_id} never reached the state wanted: {last:?}");
}

/// An SDMA queue checkpointed while its engine waits at a POLL_REGMEM,
/// behind an atomic add it executed, is restored into a new process that
/// moves the ring (UPDATE_QUEUE) before RESUME: the queue starts at the
/// poll, so once the poll is released the work behind it runs and the add
/// before it does not run again.
#[test]
fn a_restored_queue_whose_configuration_changes_before_it_runs_keeps_the_mqds_read_pointer() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let (counter, release, after) = (MISC, MISC + 64, MISC + 128);
    q.place(&sdma_pkt::atomic_add64(q.mem + counter, 1));
    let at_poll = q.wptr;
    q.place(&sdma_pkt::poll_eq(q.mem + release, 1));
    q.place(&sdma_pkt::fence(q.mem + after, 0xC0DE));
    q.submit();
    let q_id = q.queue.queue_id;
    let s = wait_status(&sim, q.pid(), q_id, |s| {
        s.state == QueueState::Waiting && s.read_pointer == at_poll
    });
    assert_eq!(q.peek_u64(counter), 1, "the add ran once: {s}");

    // CRIU's dump: the queue is preempted at the poll, its registers saved.
    let old = q.pid();
    let criu = criu_for(&sim, old);
    let d = dump(&criu, q.p.kfd.as_fd());
    let saved = kfd_sim::saved_queues(
        &d.priv_data,
        d.devices.len(),
        d.bos.len(),
        d.info.num_objects as usize,
        sim.config().max_gpu_instance,
    )
    .unwrap();
    assert_eq!(
        saved
            .iter()
            .map(|s| (s.read_pointer, s.write_pointer))
            .collect::<Vec<_>>(),
        [(at_poll, q.wptr)],
        "the checkpoint holds the queue mid-ring"
    );
    let memory = sim.host_memory_of(old);
    let (mem, wptr) = (q.mem, q.wptr);
    drop(q);
    sim.exit_process(old).unwrap();

    // The restore: the process's memory in place, then its GPU state.
    let pid = sim.spawn_process().unwrap();
    for region in &memory {
        sim.restore_host_memory(pid, region.addr, &region.bytes)
            .unwrap();
    }
    let r = restore(&sim, pid, &d);
    // The process moves its ring before the queue first runs.
    let ring = sim
        .read_host_memory(mem + RING, RING_BYTES as usize)
        .unwrap();
    assert!(sim.write_host_memory(mem + SCRATCH, &ring));
    let mut u = kfd_ioctl_update_queue_args {
        ring_base_address: mem + SCRATCH,
        queue_id: q_id,
        ring_size: RING_BYTES as u32,
        queue_percentage: 100,
        queue_priority: 7,
    };
    ioctl(
        &sim.driver(pid),
        r.kfd.as_fd(),
        AMDKFD_IOC_UPDATE_QUEUE,
        &mut u,
    )
    .unwrap();
    let tracer = criu_for(&sim, pid);
    resume(&tracer, pid).unwrap();

    let s = wait_status(&sim, pid, q_id, |s| s.state == QueueState::Waiting);
    assert_eq!(
        (s.read_pointer, s.write_pointer),
        (at_poll, wptr),
        "the restored queue waits at the poll it was checkpointed at: {s}"
    );
    assert!(sim.write_host_memory(mem + release, &1u32.to_le_bytes()));
    sim.wait_queues_settled(pid, Duration::from_secs(30))
        .unwrap_or_else(|busy| panic!("the restored queue did not finish: {busy:?}"));
    let s = sim.queue_status(pid, q_id).unwrap();
    assert_eq!(s.read_pointer, wptr, "{s}");
    let word = |off: u64| {
        u64::from_le_bytes(
            sim.read_host_memory(mem + off, 8)
                .unwrap()
                .try_into()
                .unwrap(),
        )
    };
    assert_eq!(word(after) as u32, 0xC0DE, "the work behind the poll ran");
    assert_eq!(
        word(counter),
        1,
        "the add before the poll did not run again"
    );
}
