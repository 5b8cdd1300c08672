//! Compute queues execute: PM4 queues as kfdtest drives them (WRITE_DATA,
//! RELEASE_MEM with an interrupt, WAIT_REG_MEM, indirect buffers, NOPs) and
//! AQL queues as ROCr drives them (barrier-AND/OR packets with completion
//! signals and event mailboxes, the INVALID-header and read-index rules,
//! the PM4-IB vendor packet); a kernel dispatch stops the queue with an
//! error, never completes as if it ran.

mod queue_support;

use std::time::Duration;

use kfd_sim::{QueueState, Sim, SimConfig};
use kfd_sys::*;
use queue_support::*;

fn sim() -> Sim {
    Sim::synthetic(1, SimConfig::default()).unwrap()
}

#[test]
fn pm4_write_data_release_mem_and_an_indirect_buffer() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Pm4);
    let id = q.event.event_id;
    let ib = q.mem + SCRATCH;
    // The IB: WRITE_DATA, then WAIT_REG_MEM on what it wrote (kfdtest's
    // dispatch IB ends that way).
    let mut ib_dw = pm4_pkt::write_data(q.mem + MISC + 16, &[0xCAFE]);
    ib_dw.extend(pm4_pkt::wait_mem_eq(q.mem + MISC + 16, 0xCAFE));
    let bytes: Vec<u8> = ib_dw.iter().flat_map(|d| d.to_le_bytes()).collect();
    q.poke(SCRATCH, &bytes);
    q.place(&pm4_pkt::nop(4));
    q.place(&pm4_pkt::write_data(q.mem + MISC, &[1, 2, 3]));
    q.place(&pm4_pkt::indirect(ib, ib_dw.len() as u32));
    q.place(&[0xFFFF_1002]); // kfdtest's one-dword NOP
    q.place(&pm4_pkt::release_mem(q.event_slot(), id, id));
    q.submit();
    assert_eq!(
        q.wait_events(&[id], false, 10_000),
        Ok(KFD_IOC_WAIT_RESULT_COMPLETE)
    );
    let s = q.settle();
    assert_eq!(s.read_pointer, q.wptr, "{s}");
    assert_eq!(
        q.rptr(),
        q.wptr % (RING_BYTES / 4),
        "a 32-bit dword read pointer"
    );
    assert_eq!(q.peek(MISC, 12), [1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
    assert_eq!(q.peek(MISC + 16, 4), 0xCAFEu32.to_le_bytes());
}

#[test]
fn pm4_wait_reg_mem_blocks_until_memory_matches() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Pm4);
    q.place(&pm4_pkt::wait_mem_eq(q.mem + MISC, 5));
    q.place(&pm4_pkt::write_data(q.mem + MISC + 8, &[9]));
    q.submit();
    q.reach(QueueState::Waiting);
    q.poke(MISC, &5u32.to_le_bytes());
    q.settle();
    assert_eq!(q.peek(MISC + 8, 4), 9u32.to_le_bytes());
}

#[test]
fn pm4_dispatch_fails_visibly() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Pm4);
    q.place(&pm4_pkt::dispatch_direct(64, 1, 1));
    q.place(&pm4_pkt::write_data(q.mem + MISC, &[1]));
    q.submit();
    let s = q.settle();
    let QueueState::Hung(reason) = &s.state else {
        panic!("a dispatch completed: {s}")
    };
    assert!(
        reason.contains("DISPATCH_DIRECT") && reason.contains("needs a shader"),
        "{reason}"
    );
    assert_eq!(q.peek(MISC, 4), [0; 4], "nothing after it ran");
}

/// AQL packet helpers (`hsa.h` layouts).
fn barrier(and: bool, deps: &[u64], completion: u64) -> [u32; 16] {
    let mut p = [0u32; 16];
    p[0] = if and { 3 } else { 5 } | (1 << 8);
    for (i, d) in deps.iter().enumerate() {
        p[2 + 2 * i] = lo(*d);
        p[3 + 2 * i] = hi(*d);
    }
    p[14] = lo(completion);
    p[15] = hi(completion);
    p
}

/// An `amd_signal_t` at `off` of the process's memory: value, mailbox, id.
fn signal(q: &QueueProc, off: u64, value: i64, mailbox: u64, event: u32) -> u64 {
    let mut s = vec![0u8; 64];
    s[0..8].copy_from_slice(&1i64.to_le_bytes());
    s[8..16].copy_from_slice(&value.to_le_bytes());
    s[16..24].copy_from_slice(&mailbox.to_le_bytes());
    s[24..28].copy_from_slice(&event.to_le_bytes());
    q.poke(off, &s);
    q.mem + off
}

fn signal_value(q: &QueueProc, sig: u64) -> i64 {
    q.peek_u64(sig - q.mem + 8) as i64
}

#[test]
fn aql_barriers_signal_completion_and_release_slots() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    // Empty AQL slots hold INVALID headers.
    for i in 0..(RING_BYTES / 64) {
        q.poke(RING + i * 64, &1u16.to_le_bytes());
    }
    let id = q.event.event_id;
    let dep = signal(&q, MISC, 1, 0, 0);
    let done_and = signal(&q, MISC + 64, 1, 0, 0);
    let done_or = signal(&q, MISC + 128, 1, q.event_slot(), id);
    q.place(&barrier(true, &[dep, 0], done_and));
    q.place(&barrier(false, &[dep, done_and], done_or));
    q.submit();
    let s = q.reach(QueueState::Waiting);
    assert_eq!(
        (s.state.clone(), s.read_pointer),
        (QueueState::Waiting, 0),
        "{s}"
    );
    assert_eq!(signal_value(&q, done_and), 1);
    // The dependency resolves: the AND completes, then the OR (its
    // completion signal has a mailbox: the event fires).
    q.poke(MISC + 8, &0i64.to_le_bytes());
    assert_eq!(
        q.wait_events(&[id], false, 10_000),
        Ok(KFD_IOC_WAIT_RESULT_COMPLETE)
    );
    q.settle();
    assert_eq!(
        (signal_value(&q, done_and), signal_value(&q, done_or)),
        (0, 0)
    );
    assert_eq!(q.rptr(), 2, "read_dispatch_id advanced past both");
    assert_eq!(
        q.peek(RING, 2),
        1u16.to_le_bytes(),
        "header back to INVALID"
    );
    assert_eq!(q.peek(RING + 64, 2), 1u16.to_le_bytes());
}

/// A completion signal's decrement is an atomic instruction, as the CP's:
/// ROCr's CPU side updates the same signal (`hsa_signal_add`, a wait's
/// store) while queues complete packets on it, and no update is lost.
#[test]
fn aql_signal_decrements_and_cpu_atomics_on_one_signal_lose_no_update() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const SIGNAL_VA: u64 = 0x7F20_0000_0000;
    // One ring's worth of packets but one slot: no wrap.
    const PACKETS: u64 = RING_BYTES / 64 - 1;
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let map = q.gtt_page(SIGNAL_VA);
    // SAFETY: the mapping is page aligned, readable and writable until the
    // munmap below, after the last use of `value`; the signal's value is
    // the second word, only accessed atomically by the test.
    let value = unsafe { AtomicU64::from_ptr(map.as_ptr().cast::<u64>().add(1)) };
    value.store(PACKETS, Ordering::SeqCst);
    let cpu_adds = with_cpu_adds(value, || {
        for _ in 0..PACKETS {
            q.place(&barrier(true, &[], SIGNAL_VA));
        }
        q.submit();
        let s = q.settle();
        assert_eq!(s.read_pointer, q.wptr, "{s}");
    });
    let v = value.load(Ordering::SeqCst);
    assert_eq!(
        (v & 0xFFFF_FFFF, v >> 32),
        (0, cpu_adds),
        "(signal value left by the decrements, cpu adds that landed)"
    );
    // SAFETY: the mapping made above; `value` is not used past this point.
    unsafe { ::kfd::Driver::munmap(&q.p.drv, map, 4096) }.unwrap();
}

#[test]
fn aql_waits_for_a_header_written_last() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let done = signal(&q, MISC, 1, 0, 0);
    let mut p = barrier(true, &[], done);
    let header = p[0];
    p[0] = 1; // INVALID, as the producer leaves it while filling the slot
    q.place(&p);
    q.submit();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        q.status().read_pointer,
        0,
        "an INVALID header is not processed"
    );
    q.poke(RING, &header.to_le_bytes());
    q.settle();
    assert_eq!(signal_value(&q, done), 0);
}

#[test]
fn aql_pm4_ib_runs_and_a_kernel_dispatch_stops_the_queue() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let ib_dw = pm4_pkt::write_data(q.mem + MISC + 256, &[0x55]);
    let bytes: Vec<u8> = ib_dw.iter().flat_map(|d| d.to_le_bytes()).collect();
    q.poke(SCRATCH, &bytes);
    let done = signal(&q, MISC, 1, 0, 0);
    // ROCr's amd_aql_pm4_ib: vendor type, format 1, an INDIRECT_BUFFER.
    let jump = pm4_pkt::indirect(q.mem + SCRATCH, ib_dw.len() as u32);
    let mut p = [0u32; 16];
    p[0] = (1 << 16) | (1 << 8);
    p[1..5].copy_from_slice(&jump);
    p[5] = 0xA;
    p[14] = lo(done);
    p[15] = hi(done);
    q.place(&p);
    let mut dispatch = [0u32; 16];
    dispatch[0] = 2 | (1 << 8) | (3 << 16); // KERNEL_DISPATCH, setup 3 dims
    dispatch[1] = 64 | (1 << 16);
    dispatch[2] = 1;
    dispatch[3] = 1024;
    dispatch[4] = 1;
    dispatch[5] = 1;
    dispatch[8] = 0x1000;
    q.place(&dispatch);
    q.submit();
    let s = q.settle();
    assert_eq!(
        q.peek(MISC + 256, 4),
        0x55u32.to_le_bytes(),
        "the PM4 IB ran"
    );
    assert_eq!(signal_value(&q, done), 0);
    let QueueState::Hung(reason) = &s.state else {
        panic!("a dispatch completed: {s}")
    };
    assert!(
        reason.contains("KERNEL_DISPATCH of a 1024x1x1 grid") && reason.contains("needs a shader"),
        "{reason}"
    );
    assert_eq!(s.read_pointer, 1, "stopped at the dispatch");
}
