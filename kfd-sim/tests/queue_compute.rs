//! Compute queues execute: PM4 queues as kfdtest drives them (WRITE_DATA,
//! RELEASE_MEM with an interrupt, WAIT_REG_MEM, indirect buffers, NOPs) and
//! AQL queues as ROCr drives them (barrier-AND/OR packets with completion
//! signals and event mailboxes, the INVALID-header and read-index rules,
//! the PM4-IB vendor packet, kernel dispatches run by the wavefront
//! interpreter: a kernel assembled for gfx90a, its code object loaded into
//! the process's memory); a PM4 dispatch stops the queue with an error,
//! never completes as if it ran.

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
        reason.contains("gpu vm fault at 0x1000 (read) in the kernel descriptor of aql KERNEL_DISPATCH of kernel 0x1000 (1024x1x1 grid in 64x1x1 workgroups)"),
        "{reason}"
    );
    assert_eq!(s.read_pointer, 1, "stopped at the dispatch");
}

/// Where the dispatch tests place things in the process's memory.
const CODE: u64 = SCRATCH;
const KERNARG: u64 = SCRATCH + 64 * KIB;
const X: u64 = SCRATCH + 128 * KIB;
const Y: u64 = SCRATCH + 256 * KIB;

/// `y[i] = a * x[i] + y[i]` for `i < n`, one work-item each, in 64-wide
/// workgroups; kernel arguments `x`, `y` (pointers), `a` (f32), `n` (u32).
const SAXPY: &str = r#"
.amdgcn_target "amdgcn-amd-amdhsa--gfx90a"
.text
.globl saxpy
.p2align 8
.type saxpy,@function
saxpy:
  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dwordx2 s[8:9], s[0:1], 0x10
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s2, s2, 6
  v_add_u32_e32 v0, s2, v0
  v_cmp_gt_u32_e32 vcc, s9, v0
  s_and_saveexec_b64 s[10:11], vcc
  s_cbranch_execz .Ldone
  v_lshlrev_b32_e32 v1, 2, v0
  global_load_dword v2, v1, s[4:5]
  global_load_dword v3, v1, s[6:7]
  s_waitcnt vmcnt(0)
  v_fmac_f32_e32 v3, s8, v2
  global_store_dword v1, v3, s[6:7]
.Ldone:
  s_endpgm
.size saxpy, .-saxpy

.rodata
.p2align 6
.amdhsa_kernel saxpy
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_next_free_vgpr 4
  .amdhsa_next_free_sgpr 12
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
"#;

/// Assembles and links `source` for gfx90a with LLVM 15 (`llvm-mc-15`,
/// `ld.lld-15`): the code object, or `None` (skipped) without the tools.
fn assemble(source: &str) -> Option<Vec<u8>> {
    use std::process::Command;
    for tool in ["llvm-mc-15", "ld.lld-15"] {
        if Command::new(tool).arg("--version").output().is_err() {
            test_env::skip(format!("{tool} is not installed"));
            return None;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, obj, co) = (
        dir.path().join("k.s"),
        dir.path().join("k.o"),
        dir.path().join("k.co"),
    );
    std::fs::write(&src, source).unwrap();
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new("llvm-mc-15")
        .args([
            "-triple=amdgcn-amd-amdhsa",
            "-mcpu=gfx90a",
            "-filetype=obj",
            "-o",
        ])
        .arg(&obj)
        .arg(&src));
    run(Command::new("ld.lld-15")
        .arg("-shared")
        .arg("-o")
        .arg(&co)
        .arg(&obj));
    Some(std::fs::read(&co).unwrap())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Loads the PT_LOAD segments of code object `elf` at offset `off` of the
/// process's memory, as ROCr's loader places a code object; the GPU
/// address of symbol `symbol`.
fn load(q: &QueueProc, elf: &[u8], off: u64, symbol: &str) -> u64 {
    let (phoff, phentsize, phnum) = (
        u64_at(elf, 0x20) as usize,
        u16_at(elf, 0x36) as usize,
        u16_at(elf, 0x38) as usize,
    );
    for k in 0..phnum {
        let p = phoff + k * phentsize;
        if u32_at(elf, p) == 1 {
            let (at, vaddr, filesz) = (
                u64_at(elf, p + 8) as usize,
                u64_at(elf, p + 0x10),
                u64_at(elf, p + 0x20) as usize,
            );
            q.poke(off + vaddr, &elf[at..at + filesz]);
        }
    }
    let (shoff, shentsize, shnum) = (
        u64_at(elf, 0x28) as usize,
        u16_at(elf, 0x3a) as usize,
        u16_at(elf, 0x3c) as usize,
    );
    for k in 0..shnum {
        let sh = shoff + k * shentsize;
        if u32_at(elf, sh + 4) != 2 {
            continue; // not SHT_SYMTAB
        }
        let (at, size, link, entsize) = (
            u64_at(elf, sh + 0x18) as usize,
            u64_at(elf, sh + 0x20) as usize,
            u32_at(elf, sh + 0x28) as usize,
            u64_at(elf, sh + 0x38) as usize,
        );
        let strtab = u64_at(elf, shoff + link * shentsize + 0x18) as usize;
        for e in (at..at + size).step_by(entsize) {
            let name = &elf[strtab + u32_at(elf, e) as usize..];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap()];
            if name == symbol.as_bytes() {
                return q.mem + off + u64_at(elf, e + 8);
            }
        }
    }
    panic!("no symbol {symbol}")
}

/// An AQL KERNEL_DISPATCH packet (`hsa_kernel_dispatch_packet_t`): barrier
/// bit, system-scope acquire and release, one dimension.
fn kernel_dispatch(grid: u32, group: u16, kd: u64, kernarg: u64, completion: u64) -> [u32; 16] {
    let mut p = [0u32; 16];
    p[0] = 2 | (1 << 8) | (2 << 9) | (2 << 11) | (1 << 16);
    p[1] = u32::from(group) | (1 << 16);
    p[2] = 1;
    p[3] = grid;
    p[4] = 1;
    p[5] = 1;
    p[8] = lo(kd);
    p[9] = hi(kd);
    p[10] = lo(kernarg);
    p[11] = hi(kernarg);
    p[14] = lo(completion);
    p[15] = hi(completion);
    p
}

/// The saxpy kernel loaded and its arguments placed (`x` at `x_va`): the
/// kernel descriptor's address.
fn saxpy_setup(q: &QueueProc, x_va: u64, n: u32, a: f32) -> Option<u64> {
    let co = assemble(SAXPY)?;
    let kd = load(q, &co, CODE, "saxpy.kd");
    let mut args = Vec::new();
    args.extend_from_slice(&x_va.to_le_bytes());
    args.extend_from_slice(&(q.mem + Y).to_le_bytes());
    args.extend_from_slice(&a.to_le_bytes());
    args.extend_from_slice(&n.to_le_bytes());
    q.poke(KERNARG, &args);
    Some(kd)
}

#[test]
fn aql_kernel_dispatch_runs_saxpy_and_signals_completion() {
    const N: u32 = 1000;
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let Some(kd) = saxpy_setup(&q, q.mem + X, N, 2.5) else {
        return;
    };
    let x: Vec<u8> = (0..N + 64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let y: Vec<u8> = (0..N + 64)
        .flat_map(|i| (1.0 - i as f32).to_le_bytes())
        .collect();
    q.poke(X, &x);
    q.poke(Y, &y);
    let id = q.event.event_id;
    let done = signal(&q, MISC, 1, q.event_slot(), id);
    // 1000 work-items: 16 workgroups, the last one partial.
    q.place(&kernel_dispatch(N, 64, kd, q.mem + KERNARG, done));
    q.submit();
    assert_eq!(
        q.wait_events(&[id], false, 30_000),
        Ok(KFD_IOC_WAIT_RESULT_COMPLETE)
    );
    let s = q.settle();
    assert_eq!(
        (s.state.clone(), s.read_pointer),
        (QueueState::Idle, 1),
        "{s}"
    );
    assert_eq!(signal_value(&q, done), 0);
    assert_eq!(
        q.peek(RING, 2),
        1u16.to_le_bytes(),
        "header back to INVALID"
    );
    let out = q.peek(Y, (N as usize + 64) * 4);
    for i in 0..N + 64 {
        let k = i as usize * 4;
        let got = f32::from_le_bytes(out[k..k + 4].try_into().unwrap());
        let want = if i < N {
            2.5 * i as f32 + (1.0 - i as f32)
        } else {
            1.0 - i as f32
        };
        assert_eq!(got, want, "y[{i}]");
    }
}

#[test]
fn aql_kernel_dispatch_that_faults_stops_the_queue_and_fires_memory_events() {
    const BAD: u64 = 0x5000_0000_0000;
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let Some(kd) = saxpy_setup(&q, BAD, 64, 1.0) else {
        return;
    };
    let mut mem = kfd_ioctl_create_event_args {
        event_type: KFD_IOC_EVENT_MEMORY,
        ..Default::default()
    };
    q.p.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut mem).unwrap();
    let id = q.event.event_id;
    let done = signal(&q, MISC, 1, q.event_slot(), id);
    q.place(&kernel_dispatch(64, 64, kd, q.mem + KERNARG, done));
    q.submit();
    // The memory exception ends the wait; the completion never comes.
    let mut data = [[0u8; 48]; 2];
    data[0][40..44].copy_from_slice(&mem.event_id.to_ne_bytes());
    data[1][40..44].copy_from_slice(&id.to_ne_bytes());
    let mut w = kfd_ioctl_wait_events_args {
        events_ptr: data.as_mut_ptr() as u64,
        num_events: 2,
        wait_for_all: 0,
        timeout: 30_000,
        wait_result: 0,
    };
    q.p.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w).unwrap();
    assert_eq!(w.wait_result, KFD_IOC_WAIT_RESULT_COMPLETE);
    assert_eq!(
        u64::from_le_bytes(data[0][16..24].try_into().unwrap()),
        BAD,
        "the memory exception data names the address"
    );
    let s = q.settle();
    let QueueState::Hung(reason) = &s.state else {
        panic!("not stopped: {s}")
    };
    assert!(
        reason.contains("gpu vm fault at 0x500000000000 (read) in aql KERNEL_DISPATCH")
            && reason.contains("global_load_dword"),
        "{reason}"
    );
    assert_eq!(s.read_pointer, 0, "stopped at the dispatch");
    assert_eq!(signal_value(&q, done), 1, "never signalled");
}

/// One wave: adds 1 to the 32-bit word `out[1]`, counts to `n` in a scalar
/// loop (three instructions a turn), then stores the count at `out[0]`;
/// kernel arguments `out` (pointer), `n` (u32).
const SPIN: &str = r#"
.amdgcn_target "amdgcn-amd-amdhsa--gfx90a"
.text
.globl spin
.p2align 8
.type spin,@function
spin:
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_load_dword s6, s[0:1], 0x8
  v_mov_b32_e32 v0, 0
  v_mov_b32_e32 v2, 1
  s_waitcnt lgkmcnt(0)
  global_atomic_add v0, v2, s[4:5] offset:4
  s_mov_b32 s7, 0
.Lloop:
  s_add_u32 s7, s7, 1
  s_cmp_lt_u32 s7, s6
  s_cbranch_scc1 .Lloop
  v_mov_b32_e32 v1, s7
  global_store_dword v0, v1, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
.size spin, .-spin

.rodata
.p2align 6
.amdhsa_kernel spin
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr 4
  .amdhsa_next_free_sgpr 8
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
"#;

/// Every work-item adds 1 to the 64-bit word at `counter` (a
/// `global_atomic_add_x2`); kernel argument `counter` (pointer).
const COUNT: &str = r#"
.amdgcn_target "amdgcn-amd-amdhsa--gfx90a"
.text
.globl count
.p2align 8
.type count,@function
count:
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32_e32 v1, 0
  v_mov_b32_e32 v2, 1
  v_mov_b32_e32 v3, 0
  s_waitcnt lgkmcnt(0)
  global_atomic_add_x2 v1, v[2:3], s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
.size count, .-count

.rodata
.p2align 6
.amdhsa_kernel count
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_next_free_vgpr 4
  .amdhsa_next_free_sgpr 8
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
"#;

/// A long dispatch yields between slices of its instructions: an eviction
/// parks the queue inside it (the kernel has not finished), and once the
/// queue runs again the dispatch goes on where it was, not from its start.
#[test]
fn aql_kernel_dispatch_is_preempted_inside_and_resumes_where_it_was() {
    const TURNS: u32 = 4_000_000;
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let Some(co) = assemble(SPIN) else {
        return;
    };
    let kd = load(&q, &co, CODE, "spin.kd");
    let out = q.mem + Y;
    let mut args = out.to_le_bytes().to_vec();
    args.extend_from_slice(&TURNS.to_le_bytes());
    q.poke(KERNARG, &args);
    let done = signal(&q, MISC, 1, 0, 0);
    q.place(&kernel_dispatch(1, 1, kd, q.mem + KERNARG, done));
    q.submit();
    q.reach(QueueState::Busy);
    sim.evict_queues(q.pid()).unwrap();
    let s = q.status();
    assert_eq!(
        (s.state.clone(), s.read_pointer),
        (QueueState::Preempted, 0),
        "{s}"
    );
    // Busy is published before the step that starts the dispatch, which
    // runs a slice of it before it sees the request.
    assert_eq!(
        q.peek(Y, 8),
        [0, 0, 0, 0, 1, 0, 0, 0],
        "parked inside the kernel: started, not finished"
    );
    assert_eq!(signal_value(&q, done), 1);
    sim.restore_queues(q.pid()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while signal_value(&q, done) != 0 {
        assert!(std::time::Instant::now() < deadline, "{}", q.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        (
            u32::from_le_bytes(q.peek(Y, 4).try_into().unwrap()),
            u32::from_le_bytes(q.peek(Y + 4, 4).try_into().unwrap())
        ),
        (TURNS, 1),
        "(the count, how often the kernel started)"
    );
}

/// A shader's atomics are atomic against the host: the work-items' 64-bit
/// adds and a CPU thread's adds on the same word in a GTT BO lose no update.
#[test]
fn aql_kernel_atomics_and_cpu_atomics_on_one_word_lose_no_update() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const COUNTER_VA: u64 = 0x7F20_0000_0000;
    const ITEMS: u32 = 64 * 256;
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let Some(co) = assemble(COUNT) else {
        return;
    };
    let kd = load(&q, &co, CODE, "count.kd");
    q.poke(KERNARG, &COUNTER_VA.to_le_bytes());
    let map = q.gtt_page(COUNTER_VA);
    // SAFETY: the mapping is page aligned, readable and writable until the
    // munmap below, after the last use of `word`; the word is only accessed
    // atomically by the test.
    let word = unsafe { AtomicU64::from_ptr(map.as_ptr().cast::<u64>()) };
    word.store(0, Ordering::SeqCst);
    let done = signal(&q, MISC, 1, 0, 0);
    let cpu_adds = with_cpu_adds(word, || {
        q.place(&kernel_dispatch(ITEMS, 64, kd, q.mem + KERNARG, done));
        q.submit();
        let s = q.settle();
        assert_eq!(s.read_pointer, 1, "{s}");
    });
    assert_eq!(signal_value(&q, done), 0);
    let v = word.load(Ordering::SeqCst);
    assert_eq!(
        (v & 0xFFFF_FFFF, v >> 32),
        (u64::from(ITEMS), cpu_adds),
        "(work-item adds that landed, cpu adds that landed)"
    );
    // SAFETY: the mapping made above; `word` is not used past this point.
    unsafe { ::kfd::Driver::munmap(&q.p.drv, map, 4096) }.unwrap();
}

/// A kernel of one instruction before its end: `{body}` names it.
fn one_instruction_kernel(name: &str, body: &str, private_bytes: u32) -> String {
    format!(
        r#"
.amdgcn_target "amdgcn-amd-amdhsa--gfx90a"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
  {body}
  s_endpgm
.size {name}, .-{name}

.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_private_segment_fixed_size {private_bytes}
  .amdhsa_next_free_vgpr 1
  .amdhsa_next_free_sgpr 1
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
"#
    )
}

/// Dispatches `kernel` of `source` (one 64-wide workgroup) and waits until
/// the queue settles: its status and the completion signal's value.
fn dispatch_and_settle(source: &str, kernel: &str) -> Option<(kfd_sim::QueueStatus, i64)> {
    let sim = sim();
    let mut q = QueueProc::new(&sim, Kind::Aql);
    let co = assemble(source)?;
    let kd = load(&q, &co, CODE, &format!("{kernel}.kd"));
    let done = signal(&q, MISC, 1, 0, 0);
    q.place(&kernel_dispatch(64, 64, kd, q.mem + KERNARG, done));
    q.submit();
    Some((q.settle(), signal_value(&q, done)))
}

#[test]
fn aql_kernel_that_traps_stops_the_queue() {
    let Some((s, signal)) =
        dispatch_and_settle(&one_instruction_kernel("trap", "s_trap 2", 0), "trap")
    else {
        return;
    };
    let QueueState::Hung(reason) = &s.state else {
        panic!("not stopped: {s}")
    };
    assert!(
        reason.contains("wave 0 of workgroup [0, 0, 0] executed s_trap 2 at pc"),
        "{reason}"
    );
    assert_eq!((s.read_pointer, signal), (0, 1));
}

#[test]
fn aql_kernel_with_a_private_segment_stops_the_queue_naming_scratch() {
    let Some((s, signal)) =
        dispatch_and_settle(&one_instruction_kernel("private", "s_nop 0", 16), "private")
    else {
        return;
    };
    let QueueState::Hung(reason) = &s.state else {
        panic!("not stopped: {s}")
    };
    assert!(
        reason.contains("needs a private segment of 16 bytes per work-item")
            && reason.contains("scratch"),
        "{reason}"
    );
    assert_eq!((s.read_pointer, signal), (0, 1));
}
