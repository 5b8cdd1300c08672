//! User-mode SDMA queues execute: the packets ROCr 5.2 and kfdtest put on
//! them move and write bytes through the process's GPU VM, a TRAP after a
//! fence to the event's slot fires the event and wakes WAIT_EVENTS, a
//! POLL_REGMEM waits for memory, and a packet the engine cannot execute
//! stops the queue with an error naming it.

mod queue_support;

use std::time::{Duration, Instant};

use kfd_sim::{QueueState, Sim, SimConfig};
use kfd_sys::*;
use queue_support::*;

fn sim() -> Sim {
    Sim::synthetic(1, SimConfig::default()).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn copies_fills_and_fences_through_the_vm() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let src = q.mem + SCRATCH;
    let back = q.mem + SCRATCH + (2 << 20);
    let data = pattern(3 << 20, 7);
    q.poke(SCRATCH, &data);
    // host -> VRAM in two packets (the second unaligned), VRAM -> host.
    q.place(&sdma_pkt::copy(src, VRAM_VA, 2 << 20));
    q.place(&sdma_pkt::copy(
        src + (2 << 20),
        VRAM_VA + (2 << 20),
        (1 << 20) - 3,
    ));
    q.place(&sdma_pkt::copy(VRAM_VA, back, (3 << 20) - 3));
    q.place(&sdma_pkt::fill(q.mem + MISC, 0xDEAD_BEEF, 16));
    q.place(&sdma_pkt::fence(q.mem + MISC + 64, 0x1234_5678));
    q.place(&sdma_pkt::atomic_add64(q.mem + MISC + 128, u64::MAX));
    q.place(&sdma_pkt::HDP_FLUSH);
    q.place(&sdma_pkt::timestamp(q.mem + MISC + 256));
    q.place(&[0, 0, 0]);
    q.poke(MISC + 128, &5u64.to_le_bytes());
    q.submit();
    let s = q.settle();
    assert_eq!(s.state, QueueState::Idle, "{s}");
    assert_eq!(s.read_pointer, q.wptr);
    assert_eq!(q.rptr(), q.wptr, "the engine writes its read pointer back");
    assert_eq!(
        q.peek(SCRATCH + (2 << 20), (3 << 20) - 3),
        data[..(3 << 20) - 3]
    );
    let fill = q.peek(MISC, 68);
    assert!(fill[..64]
        .chunks(4)
        .all(|d| d == 0xDEAD_BEEFu32.to_le_bytes()));
    assert_eq!(fill[64..68], 0x1234_5678u32.to_le_bytes(), "fence");
    assert_eq!(q.peek_u64(MISC + 128), 4, "ROCr's signal decrement");
    assert_ne!(q.peek_u64(MISC + 256), 0, "timestamp");
    let stats = sim.sdma_stats(sim.gpus()[0].gpu_id).unwrap();
    assert_eq!(stats.bytes_copied, (6 << 20) - 6, "{stats:?}");
}

#[test]
fn a_trap_after_a_fence_to_the_slot_fires_the_event() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let id = q.event.event_id;
    // Nothing signaled: an immediate wait times out, a 50 ms one waits.
    assert_eq!(
        q.wait_events(&[id], false, 0),
        Ok(KFD_IOC_WAIT_RESULT_TIMEOUT)
    );
    let start = Instant::now();
    assert_eq!(
        q.wait_events(&[id], false, 50),
        Ok(KFD_IOC_WAIT_RESULT_TIMEOUT)
    );
    assert!(
        start.elapsed() >= Duration::from_millis(50),
        "the wait blocked"
    );
    // A trap without the fence is ignored: the slot was never written.
    q.push(&sdma_pkt::trap(id));
    q.settle();
    assert_eq!(
        q.wait_events(&[id], false, 0),
        Ok(KFD_IOC_WAIT_RESULT_TIMEOUT)
    );
    // ROCr's completion: fence the event id into its slot, then trap.
    let slot = q.event_slot();
    let waiter = {
        let sim = sim.clone();
        let pid = q.pid();
        let kfd = q.p.kfd.try_clone().unwrap();
        std::thread::spawn(move || {
            let drv = sim.driver(pid);
            let mut data = [[0u8; 48]; 1];
            data[0][40..44].copy_from_slice(&id.to_ne_bytes());
            let mut w = kfd_ioctl_wait_events_args {
                events_ptr: data.as_mut_ptr() as u64,
                num_events: 1,
                wait_for_all: 1,
                timeout: 20_000,
                wait_result: 9,
            };
            ioctl(
                &drv,
                std::os::fd::AsFd::as_fd(&kfd),
                AMDKFD_IOC_WAIT_EVENTS,
                &mut w,
            )
            .unwrap();
            w.wait_result
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    q.place(&sdma_pkt::fence(slot, id));
    q.push(&sdma_pkt::trap(id));
    assert_eq!(
        waiter.join().unwrap(),
        KFD_IOC_WAIT_RESULT_COMPLETE,
        "the blocked wait woke"
    );
    // The kernel acknowledged the slot; the auto-reset event was consumed.
    let page = sim.read_gpu_memory(q.pid(), q.gpu, slot, 8).unwrap();
    assert_eq!(page, u64::MAX.to_le_bytes(), "slot acknowledged");
    assert_eq!(
        q.wait_events(&[id], false, 0),
        Ok(KFD_IOC_WAIT_RESULT_TIMEOUT)
    );
}

#[test]
fn poll_regmem_waits_for_memory() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    q.place(&sdma_pkt::poll_eq(q.mem + MISC, 1));
    q.place(&sdma_pkt::fence(q.mem + MISC + 8, 77));
    q.submit();
    let s = q.reach(QueueState::Waiting);
    assert_eq!(s.read_pointer, 0, "blocked at the poll");
    assert_eq!(q.peek(MISC + 8, 4), [0; 4]);
    q.poke(MISC, &1u32.to_le_bytes());
    q.settle();
    assert_eq!(q.peek(MISC + 8, 4), 77u32.to_le_bytes());
}

#[test]
fn an_unsupported_packet_stops_the_queue_naming_it() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let mut hw = kfd_ioctl_create_event_args {
        event_type: KFD_IOC_EVENT_HW_EXCEPTION,
        ..Default::default()
    };
    q.p.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut hw).unwrap();
    q.place(&sdma_pkt::fence(q.mem + MISC, 1));
    // SEM (opcode 7): not something ROCr or kfdtest issue.
    q.place(&[7, 0, 0, 0]);
    q.place(&sdma_pkt::fence(q.mem + MISC + 4, 2));
    q.submit();
    let s = q.settle();
    let QueueState::Hung(reason) = &s.state else {
        panic!("not stopped: {s}")
    };
    assert!(
        reason.contains("SEM") && reason.contains("opcode 7"),
        "{reason}"
    );
    assert_eq!(s.read_pointer, 16, "stopped at the packet");
    assert_eq!(
        q.peek(MISC, 8),
        [1, 0, 0, 0, 0, 0, 0, 0],
        "nothing after it ran"
    );
    assert_eq!(
        q.wait_events(&[hw.event_id], false, 5_000),
        Ok(KFD_IOC_WAIT_RESULT_COMPLETE),
        "a hang fires the process's HW_EXCEPTION events"
    );
}

#[test]
fn an_access_outside_the_vm_faults_and_fires_memory_events() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let mut mem = kfd_ioctl_create_event_args {
        event_type: KFD_IOC_EVENT_MEMORY,
        ..Default::default()
    };
    q.p.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut mem).unwrap();
    q.push(&sdma_pkt::fence(0x5000_0000_0000, 1));
    let s = q.settle();
    let QueueState::Hung(reason) = &s.state else {
        panic!("not stopped: {s}")
    };
    assert!(
        reason.contains("vm fault at 0x500000000000") && reason.contains("FENCE"),
        "{reason}"
    );
    let mut data = [[0u8; 48]; 1];
    data[0][40..44].copy_from_slice(&mem.event_id.to_ne_bytes());
    let mut w = kfd_ioctl_wait_events_args {
        events_ptr: data.as_mut_ptr() as u64,
        num_events: 1,
        wait_for_all: 0,
        timeout: 5_000,
        wait_result: 0,
    };
    q.p.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w).unwrap();
    assert_eq!(w.wait_result, KFD_IOC_WAIT_RESULT_COMPLETE);
    let va = u64::from_le_bytes(data[0][16..24].try_into().unwrap());
    assert_eq!(
        va, 0x5000_0000_0000,
        "the memory exception data names the address"
    );
    assert_eq!(
        u32::from_le_bytes(data[0][24..28].try_into().unwrap()),
        q.gpu
    );
}

#[test]
fn copies_take_time_at_the_configured_rate() {
    let sim = sim();
    sim.set_sdma_bandwidth(Some(32 << 20));
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let start = Instant::now();
    q.push(&sdma_pkt::copy(q.mem + SCRATCH, VRAM_VA, 2 << 20));
    q.settle();
    // 2 MiB at 32 MiB/s: 62 ms at least.
    assert!(
        start.elapsed() >= Duration::from_millis(60),
        "{:?}",
        start.elapsed()
    );
}

/// A doorbell rung right after `CREATE_QUEUE`, before the engine took the
/// queue up, is work the queue holds: an eviction that comes at once keeps
/// it in the write pointer (the hardware's MQD takes the doorbell's value
/// at the unmap), and it runs when the queue is restored. ROCr rings its
/// first SDMA copy within microseconds of creating the queue, and a
/// checkpoint can come in between.
#[test]
fn a_doorbell_rung_before_the_engine_ran_survives_an_eviction() {
    let sim = sim();
    for round in 0..20 {
        let mut q = QueueProc::new(&sim, Kind::Sdma);
        let flag = q.mem + MISC + 512;
        q.push(&sdma_pkt::poll_eq(flag, 1));
        q.push(&sdma_pkt::fence(q.mem + MISC + 576, 0xC0DE));
        sim.evict_queues(q.pid()).unwrap();
        let s = q.status();
        assert_eq!(
            s.write_pointer, q.wptr,
            "round {round}: rung work lost: {s}"
        );
        q.poke(MISC + 512, &1u32.to_le_bytes());
        sim.restore_queues(q.pid()).unwrap();
        let s = q.settle();
        assert_eq!(s.read_pointer, q.wptr, "round {round}: {s}");
        assert_eq!(q.peek(MISC + 576, 4), 0xC0DEu32.to_le_bytes());
    }
}

/// CRIU's PROCESS_INFO evicts the process's queues, and an eviction whose
/// preemption does not finish within `queue_preemption_timeout_ms` fails
/// (`unmap_queues_cpsch` answers `amdkfd_fence_wait_timeout`'s `-ETIME`,
/// `kfd_process_evict_queues` returns it, and PROCESS_INFO's error path
/// runs the queue restore and clears the pause): the call fails with
/// `ETIME`, no eviction level is left, and the queue, caught inside a
/// long copy, runs on to the end of its ring instead of being reset.
#[test]
fn process_info_fails_with_etime_when_a_queue_misses_its_preemption_deadline() {
    use std::os::fd::AsFd;
    let sim = sim();
    // 2 MiB at 4 MiB/s: the engine stays inside one packet for 500 ms.
    sim.set_sdma_bandwidth(Some(4 << 20));
    sim.set_queue_preemption_timeout(Duration::from_millis(50));
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    q.push(&sdma_pkt::copy(q.mem + SCRATCH, VRAM_VA, 2 << 20));
    q.push(&sdma_pkt::fence(q.mem + MISC + 576, 0xC0DE));
    // Inside the copy: busy at one read pointer for 20 ms, which the
    // fence after it never is.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let before = q.status();
        std::thread::sleep(Duration::from_millis(20));
        let after = q.status();
        if before.state == QueueState::Busy
            && after.state == QueueState::Busy
            && after.read_pointer == before.read_pointer
            && after.write_pointer > after.read_pointer
        {
            break;
        }
        assert!(Instant::now() < deadline, "the copy never started: {after}");
    }
    let kfd = q.p.kfd.as_fd();
    assert_eq!(
        process_info(&q.p.drv, kfd).map(|_| ()),
        Err(libc::ETIME),
        "the eviction's preemption timed out"
    );
    let k = sim.kfd_state(q.pid()).unwrap();
    assert!(!k.queues_paused, "not paused");
    assert_eq!(k.eviction_levels, vec![0], "no eviction level left");
    assert_eq!(
        unpause(&q.p.drv, kfd),
        Err(libc::EINVAL),
        "nothing to unpause"
    );
    // The queue was not reset: the copy and the fence after it complete.
    let s = q.settle();
    assert_eq!(s.state, QueueState::Idle, "{s}");
    assert_eq!(s.read_pointer, q.wptr, "{s}");
    assert_eq!(q.peek(MISC + 576, 4), 0xC0DEu32.to_le_bytes());
    // With the engine idle, the next PROCESS_INFO preempts it in time.
    process_info(&q.p.drv, kfd).unwrap();
    assert_eq!(q.status().state, QueueState::Preempted);
    unpause(&q.p.drv, kfd).unwrap();
    assert_eq!(sim.kfd_state(q.pid()).unwrap().eviction_levels, vec![0]);
}

/// SDMA ATOMIC is an atomic instruction on the memory
/// (`TC_OP_ATOMIC_ADD_RTN_64`), as ROCr's signals need: the runtime
/// updates the same words with the CPU's atomics while the engines do. A
/// CPU thread adding to the word the engine's ATOMIC packets add to, all
/// the while they run, loses no update of either side.
#[test]
fn sdma_atomics_and_cpu_atomics_on_one_word_lose_no_update() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const WORD_VA: u64 = 0x7F20_0000_0000;
    // 32 bytes each: they fit the 64 KiB ring without wrapping.
    const PACKETS: u64 = 2000;
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let map = q.gtt_page(WORD_VA);
    // SAFETY: the mapping is page aligned, readable and writable until the
    // munmap below, after the last use of `word`; the test only accesses
    // it atomically.
    let word = unsafe { AtomicU64::from_ptr(map.as_ptr().cast::<u64>()) };
    let cpu_adds = with_cpu_adds(word, || {
        for _ in 0..PACKETS {
            q.place(&sdma_pkt::atomic_add64(WORD_VA, 1));
        }
        q.submit();
        let s = q.settle();
        assert_eq!(s.state, QueueState::Idle, "{s}");
        assert_eq!(s.read_pointer, q.wptr, "{s}");
    });
    let value = word.load(Ordering::SeqCst);
    assert_eq!(
        (value & 0xFFFF_FFFF, value >> 32),
        (PACKETS, cpu_adds),
        "(engine adds, cpu adds) that landed"
    );
    // SAFETY: the mapping made above; `word` is not used past this point.
    unsafe { ::kfd::Driver::munmap(&q.p.drv, map, 4096) }.unwrap();
}

/// An SVM range is mapped on the GPUs given access to it, at its CPU
/// address, and shows the process's memory there (`kfd_svm.c`,
/// `svm_range_validate_and_map`; kfdtest's `KFDSVMRangeTest.MigrateTest`
/// copies between SVM ranges with SDMA); `KFD_IOCTL_SVM_FLAG_GPU_RO` maps
/// it read-only.
#[test]
fn svm_ranges_show_the_process_memory_to_the_gpus_given_access() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    const LEN: u64 = 2 << 20;
    let svm = sim.alloc_host_memory_for(q.pid(), LEN as usize).unwrap();
    svm_set(
        &q.p,
        svm,
        LEN,
        &[
            (KFD_IOCTL_SVM_ATTR_SET_FLAGS, KFD_IOCTL_SVM_FLAG_HOST_ACCESS),
            (KFD_IOCTL_SVM_ATTR_ACCESS, q.gpu),
        ],
    )
    .unwrap();
    let data = pattern(1 << 20, 3);
    q.poke(SCRATCH, &data);
    // Host buffer -> SVM, a fill of the SVM range's second half, and the
    // first half back out into the host buffer after the fill.
    q.place(&sdma_pkt::copy(q.mem + SCRATCH, svm, 1 << 20));
    q.place(&sdma_pkt::fill(svm + (1 << 20), 0xA5A5_5A5A, 1 << 18));
    q.place(&sdma_pkt::copy(svm, q.mem + SCRATCH + (1 << 20), 1 << 20));
    q.submit();
    let s = q.settle();
    assert_eq!(s.state, QueueState::Idle, "{s}");
    assert_eq!(sim.read_host_memory(svm, 1 << 20).unwrap(), data);
    assert!(sim
        .read_host_memory(svm + (1 << 20), 1 << 20)
        .unwrap()
        .chunks(4)
        .all(|d| d == 0xA5A5_5A5Au32.to_le_bytes()));
    assert_eq!(q.peek(SCRATCH + (1 << 20), 1 << 20), data);

    // Read-only for the GPU: reads still land, the first write faults.
    svm_set(
        &q.p,
        svm,
        LEN,
        &[(KFD_IOCTL_SVM_ATTR_SET_FLAGS, KFD_IOCTL_SVM_FLAG_GPU_RO)],
    )
    .unwrap();
    q.place(&sdma_pkt::copy(svm, q.mem + SCRATCH, 4096));
    q.push(&sdma_pkt::fence(svm, 1));
    let s = q.settle();
    let QueueState::Hung(reason) = &s.state else {
        panic!("a write to a GPU read-only SVM range did not fault: {s}")
    };
    assert!(
        reason.contains(&format!("vm fault at {svm:#x}")),
        "{reason}"
    );
}

/// With XNACK off (the default) a new SVM range gives no GPU access, so the
/// GPU faults on it until the application grants access (`svm_range_new`
/// leaves `bitmap_access` empty; `svm_range_restore_pages` refuses a GPU
/// outside it).
#[test]
fn an_svm_range_without_gpu_access_faults() {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Sdma);
    let svm = sim.alloc_host_memory_for(q.pid(), 1 << 20).unwrap();
    svm_set(
        &q.p,
        svm,
        1 << 20,
        &[(KFD_IOCTL_SVM_ATTR_SET_FLAGS, KFD_IOCTL_SVM_FLAG_HOST_ACCESS)],
    )
    .unwrap();
    q.push(&sdma_pkt::fill(svm, 7, 16));
    let s = q.settle();
    let QueueState::Hung(reason) = &s.state else {
        panic!("a GPU without access wrote an SVM range: {s}")
    };
    assert!(
        reason.contains(&format!("vm fault at {svm:#x}")),
        "{reason}"
    );
    assert!(sim
        .read_host_memory(svm, 64)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
}
