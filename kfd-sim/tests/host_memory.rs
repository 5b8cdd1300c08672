//! Process-owned host memory: what CRIU's pages dump captures of a simulated
//! application's CPU memory (`host_memory_of`), its release at exit, and its
//! restore at the same address on another simulated machine
//! (`restore_host_memory`, `MAP_FIXED_NOREPLACE` semantics).

use kfd_sim::workload::{CpuMemory, Profile, Workload};
use kfd_sim::{Accounting, HostMemorySnapshot, Pid, ProcessConfig, Sim, SimConfig, SimError};

use std::sync::{Mutex, MutexGuard, PoisonError};

const PAGE: usize = 4096;

/// Every test here maps and unmaps host memory; between a process's exit
/// and the restore of its memory at the same address, a concurrent test's
/// `mmap` could land in the freed range (the kernel reuses the highest free
/// gap first). Tests in this binary therefore run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn sim() -> Sim {
    Sim::synthetic(1, SimConfig::default()).unwrap()
}

fn spawn_as(sim: &Sim, pid: Pid) -> Pid {
    sim.spawn_process_with(ProcessConfig {
        pid: Some(pid),
        ..ProcessConfig::default()
    })
    .unwrap()
}

fn errno_of(e: &SimError) -> Option<i32> {
    match e {
        SimError::HostMemoryAt { errno, .. } => Some(errno.0),
        _ => None,
    }
}

#[test]
fn owned_memory_is_listed_for_its_process_only() {
    let _serial = serial();
    let sim = sim();
    let a = sim.spawn_process().unwrap();
    let b = sim.spawn_process().unwrap();
    let addr = sim.alloc_host_memory_for(a, 3 * PAGE + 1).unwrap();
    assert_eq!(addr % PAGE as u64, 0);
    assert!(sim.write_host_memory(addr + 5, b"userptr"));
    let shared = sim.alloc_host_memory(PAGE).unwrap();

    let dumped = sim.host_memory_of(a);
    assert_eq!(dumped.len(), 1);
    assert_eq!(dumped[0].addr, addr);
    assert_eq!(dumped[0].bytes.len(), 4 * PAGE, "rounded up to pages");
    assert_eq!(&dumped[0].bytes[5..12], b"userptr");
    assert!(dumped[0].bytes[..5].iter().all(|&x| x == 0));
    assert!(sim.host_memory_of(b).is_empty());
    assert!(
        sim.host_memory_of(a).iter().all(|r| r.addr != shared),
        "simulator-owned memory belongs to no process"
    );
}

#[test]
fn allocating_for_a_missing_process_fails() {
    let _serial = serial();
    let sim = sim();
    let err = sim.alloc_host_memory_for(Pid(4242), PAGE).unwrap_err();
    assert!(matches!(err, SimError::NoSuchProcess(Pid(4242))), "{err}");
}

#[test]
fn exit_unmaps_owned_memory_and_keeps_the_simulators() {
    let _serial = serial();
    let sim = sim();
    let pid = sim.spawn_process().unwrap();
    let owned = sim.alloc_host_memory_for(pid, PAGE).unwrap();
    let shared = sim.alloc_host_memory(PAGE).unwrap();
    assert!(sim.write_host_memory(owned, &[1; 16]));
    assert!(sim.write_host_memory(shared, &[2; 16]));
    sim.exit_process(pid).unwrap();
    assert_eq!(sim.read_host_memory(owned, 16), None);
    assert!(!sim.write_host_memory(owned, &[3]));
    assert!(sim.host_memory_of(pid).is_empty());
    assert_eq!(sim.read_host_memory(shared, 16), Some(vec![2; 16]));
}

#[test]
fn memory_moves_to_another_machine_at_the_same_address() {
    let _serial = serial();
    let origin = sim();
    let target = Sim::synthetic(2, SimConfig::default()).unwrap();
    let pid = origin.spawn_process().unwrap();
    let first = origin.alloc_host_memory_for(pid, 2 * PAGE).unwrap();
    let second = origin.alloc_host_memory_for(pid, PAGE).unwrap();
    let pattern: Vec<u8> = (0..2 * PAGE).map(|i| (i * 7 % 251) as u8).collect();
    assert!(origin.write_host_memory(first, &pattern));
    assert!(origin.write_host_memory(second + 100, b"tail"));
    let dumped = origin.host_memory_of(pid);
    assert_eq!(dumped.len(), 2);
    assert!(dumped.windows(2).all(|w| w[0].addr < w[1].addr));

    // The checkpointed process ends; CRIU recreates it on the target.
    origin.exit_process(pid).unwrap();
    let restored = spawn_as(&target, pid);
    for r in &dumped {
        target
            .restore_host_memory(restored, r.addr, &r.bytes)
            .unwrap();
    }
    assert_eq!(target.read_host_memory(first, 2 * PAGE), Some(pattern));
    assert_eq!(
        target.read_host_memory(second + 100, 4),
        Some(b"tail".to_vec())
    );
    assert_eq!(target.host_memory_of(restored), dumped);

    // Restored memory is the process's own again: it goes with it.
    target.exit_process(restored).unwrap();
    assert_eq!(target.read_host_memory(first, 1), None);
}

/// The `Rss:` of the `/proc/self/smaps` entry holding `addr`, in KiB.
fn resident_kib(addr: u64) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                ))
            });
        if let Some((start, end)) = range {
            inside = (start..end).contains(&addr);
        } else if inside {
            if let Some(kib) = line.strip_prefix("Rss:") {
                return kib.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    None
}

#[test]
fn an_exited_process_leaves_its_range_to_the_restore_not_to_the_host() {
    let _serial = serial();
    let origin = sim();
    let target = Sim::synthetic(2, SimConfig::default()).unwrap();
    let pid = origin.spawn_process().unwrap();
    let addr = origin.alloc_host_memory_for(pid, 4 * PAGE).unwrap();
    assert!(origin.write_host_memory(addr, &[0x5a; 4 * PAGE]));
    let dumped = origin.host_memory_of(pid);
    origin.exit_process(pid).unwrap();

    // Between the exit and the restore, another thread of the host process
    // maps memory (a new thread's signal stack, a malloc arena): the kernel
    // must not give it the checkpointed process's range, or the restore at
    // that address fails with EEXIST. Asking for exactly that range shows it.
    let squatted = std::thread::spawn(move || {
        kfd::AnonymousOptions::new(kfd::Sharing::Private)
            .fixed_at(addr as usize)
            .map(4 * PAGE)
    })
    .join()
    .unwrap();
    match squatted {
        Ok(_) => panic!("the host process mapped {addr:#x} after the process's exit"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "reserved: {e}"),
    }
    assert_eq!(
        resident_kib(addr),
        Some(0),
        "an exited process's pages are freed"
    );
    assert_eq!(
        origin.read_host_memory(addr, 1),
        None,
        "not the simulator's any more"
    );

    // The machine goes too; the restore elsewhere maps the memory back.
    drop(origin);
    let restored = spawn_as(&target, pid);
    target
        .restore_host_memory(restored, addr, &dumped[0].bytes)
        .unwrap();
    assert_eq!(target.host_memory_of(restored), dumped);
}

#[test]
fn a_short_restore_fills_the_rest_of_the_page_with_zeros() {
    let _serial = serial();
    let origin = sim();
    let target = sim();
    let pid = origin.spawn_process().unwrap();
    let addr = origin.alloc_host_memory_for(pid, PAGE).unwrap();
    origin.exit_process(pid).unwrap();
    let restored = spawn_as(&target, pid);
    target.restore_host_memory(restored, addr, b"abc").unwrap();
    let got = target.host_memory_of(restored);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].bytes.len(), PAGE);
    assert_eq!(&got[0].bytes[..3], b"abc");
    assert!(got[0].bytes[3..].iter().all(|&x| x == 0));
}

#[test]
fn restore_never_replaces_a_mapping() {
    let _serial = serial();
    let origin = sim();
    let target = sim();
    let pid = origin.spawn_process().unwrap();
    let addr = origin.alloc_host_memory_for(pid, PAGE).unwrap();
    assert!(origin.write_host_memory(addr, b"still here"));
    let other = target.spawn_process().unwrap();

    // The checkpointed process still runs: the host process has the range.
    let err = target
        .restore_host_memory(other, addr, &[0xee; PAGE])
        .unwrap_err();
    assert_eq!(errno_of(&err), Some(libc::EEXIST), "{err}");
    assert_eq!(
        origin.read_host_memory(addr, 10),
        Some(b"still here".to_vec()),
        "the existing mapping is untouched"
    );
    assert!(target.host_memory_of(other).is_empty());

    // A range this simulator already holds, even partly, is taken too.
    let mine = target.alloc_host_memory_for(other, 2 * PAGE).unwrap();
    let err = target
        .restore_host_memory(other, mine + PAGE as u64, &[1; PAGE])
        .unwrap_err();
    assert_eq!(errno_of(&err), Some(libc::EEXIST), "{err}");
}

#[test]
fn restore_rejects_bad_ranges_and_missing_processes() {
    let _serial = serial();
    let sim = sim();
    let pid = sim.spawn_process().unwrap();
    let probe = sim.alloc_host_memory_for(pid, PAGE).unwrap();
    sim.exit_process(pid).unwrap();
    let pid = sim.spawn_process().unwrap();
    for (addr, len) in [(probe + 1, PAGE), (probe, 0), (0, PAGE)] {
        let err = sim
            .restore_host_memory(pid, addr, &vec![0; len])
            .unwrap_err();
        assert_eq!(errno_of(&err), Some(libc::EINVAL), "{addr:#x}+{len}: {err}");
    }
    let err = sim
        .restore_host_memory(Pid(4242), probe, &[0; PAGE])
        .unwrap_err();
    assert!(matches!(err, SimError::NoSuchProcess(_)), "{err}");
    assert!(sim.host_memory_of(pid).is_empty());
}

fn userptr_addrs(w: &Workload) -> Vec<u64> {
    let mut v: Vec<u64> = w
        .describe()
        .unwrap()
        .bos
        .iter()
        .filter(|b| b.user_addr != 0)
        .map(|b| b.user_addr)
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn a_workload_with_process_memory_keeps_its_userptr_targets_in_it() {
    let _serial = serial();
    let sim = sim();
    let before: Accounting = sim.accounting();
    let mut w = Workload::launch_with_memory(&sim, &Profile::Basic, CpuMemory::Process).unwrap();
    w.step().unwrap();
    let pid = w.pid();
    let userptrs = userptr_addrs(&w);
    assert!(!userptrs.is_empty(), "the basic profile has USERPTR BOs");
    let dumped: Vec<HostMemorySnapshot> = sim.host_memory_of(pid);
    for addr in &userptrs {
        assert!(
            dumped.iter().any(|r| r.addr == *addr),
            "USERPTR target {addr:#x} is process memory"
        );
    }
    assert!(sim.accounting().pinned_userptr_pages > 0);
    w.exit().unwrap();
    assert!(sim.host_memory_of(pid).is_empty());
    for addr in &userptrs {
        assert_eq!(sim.read_host_memory(*addr, 1), None, "{addr:#x} unmapped");
    }
    assert_eq!(sim.accounting(), before, "nothing is left behind");
}

#[test]
fn a_default_workload_keeps_using_simulator_memory() {
    let _serial = serial();
    let sim = sim();
    let w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let pid = w.pid();
    let userptrs = userptr_addrs(&w);
    assert!(!userptrs.is_empty());
    assert!(sim.host_memory_of(pid).is_empty());
    w.exit().unwrap();
    for addr in &userptrs {
        assert!(
            sim.read_host_memory(*addr, 1).is_some(),
            "{addr:#x} outlives the process"
        );
    }
}
