//! Scenarios for the SDMA engine as a whole: packets decoded and run
//! through VM snapshots of memfds and host memory, faults, short DMA,
//! fences and rings.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use kfd_sys::sdma::SDMA_OP_COPY;

use super::copy::BOUNCE_BYTES;
use super::engine::lock;
use super::memory::MemoryError;
use super::*;

/// Test memory: a heap buffer.
#[derive(Debug)]
struct Buffer {
    bytes: Mutex<Vec<u8>>,
}

impl Buffer {
    fn new(len: usize, fill: impl Fn(usize) -> u8) -> Arc<Self> {
        Arc::new(Buffer {
            bytes: Mutex::new((0..len).map(fill).collect()),
        })
    }
    fn read(&self) -> Vec<u8> {
        lock(&self.bytes).clone()
    }
}

impl DeviceMemory for Buffer {
    fn size(&self) -> u64 {
        lock(&self.bytes).len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let o = offset as usize;
        buf.copy_from_slice(&lock(&self.bytes)[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let o = offset as usize;
        lock(&self.bytes)[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
}

fn range(va: u64, memory: &Arc<Buffer>) -> VmRange {
    VmRange {
        va,
        len: memory.size(),
        readable: true,
        writable: true,
        backing: RangeBacking::Memory {
            memory: Arc::clone(memory) as Arc<dyn DeviceMemory>,
            offset: 0,
        },
    }
}

fn copy_packet(rules: SdmaRules, src: u64, dst: u64, bytes: u64) -> [u32; 7] {
    let count = if rules.count_is_bytes_minus_one {
        bytes - 1
    } else {
        bytes
    };
    [
        SDMA_OP_COPY,
        count as u32,
        0,
        src as u32,
        (src >> 32) as u32,
        dst as u32,
        (dst >> 32) as u32,
    ]
}

fn ib_buffer(dwords: &[u32]) -> Arc<Buffer> {
    let bytes: Vec<u8> = dwords.iter().flat_map(|d| d.to_le_bytes()).collect();
    let len = bytes.len().max(4);
    Buffer::new(len, |i| bytes.get(i).copied().unwrap_or(0))
}

fn run_job(engine: &SdmaEngine, vm: VmView, ib_va: u64, ib_bytes: u32) -> Result<(), JobError> {
    let fence = Fence::new();
    engine.submit(
        0,
        Job {
            ibs: vec![Ib {
                va: ib_va,
                bytes: ib_bytes,
            }],
            vm: Arc::new(vm),
            fence: Arc::clone(&fence),
            short_dma: None,
            dependencies: Vec::new(),
            on_done: None,
        },
    );
    fence
        .wait(Deadline::Infinite)
        .expect("infinite wait returns the outcome")
}

fn memory_range(va: u64, memory: Arc<dyn DeviceMemory>) -> VmRange {
    VmRange {
        va,
        len: memory.size(),
        readable: true,
        writable: true,
        backing: RangeBacking::Memory { memory, offset: 0 },
    }
}

/// Memfd to host memory, host to memfd, host to host and
/// PRT to host take the direct paths; the bytes and the statistics are
/// those of the bounce-buffer path, across pieces larger than one
/// bounce buffer and at unaligned offsets.
#[test]
fn direct_copies_between_memfds_and_host_memory() {
    let ai = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let len = 3 * BOUNCE_BYTES as usize + 123;
    let memfd = Arc::new(crate::hw::bo::Memfd::new("sdma-test", len as u64 + 4096).unwrap());
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8 + 1).collect();
    memfd.write_at(5, &pattern).unwrap();
    let mut host = vec![0u8; 2 * len + 4096];
    // SAFETY: `host` outlives every job below (each waits for its fence)
    // and is not otherwise accessed until the jobs are done.
    let user = Arc::new(unsafe { UserMemory::new(host.as_mut_ptr() as usize, host.len()) });
    let (m_va, h_va, p_va) = (0x10_0000_0000u64, 0x20_0000_0000u64, 0x30_0000_0000u64);
    let chunk = BOUNCE_BYTES;
    let mut packets = Vec::new();
    // memfd[5..] -> host[7..], in packets of at most one bounce buffer.
    let mut done = 0u64;
    while done < len as u64 {
        let n = (len as u64 - done).min(chunk);
        packets.extend(copy_packet(ai, m_va + 5 + done, h_va + 7 + done, n));
        done += n;
    }
    // host[7..7+4096] -> host[len+200..], PRT -> host[len+100..+64],
    // host[7..7+len] -> memfd[4096..].
    packets.extend(copy_packet(ai, h_va + 7, h_va + len as u64 + 200, 4096));
    packets.extend(copy_packet(ai, p_va, h_va + len as u64 + 100, 64));
    packets.extend(copy_packet(ai, h_va + 7, m_va + 4096, 4096));
    let ib = ib_buffer(&packets);
    let ib_va = 0x40_0000_0000u64;
    let engine = SdmaEngine::new("test", 1, ai);
    let vm = VmView::new(vec![
        memory_range(m_va, memfd.clone()),
        memory_range(h_va, user.clone()),
        VmRange {
            va: p_va,
            len: 4096,
            readable: true,
            writable: true,
            backing: RangeBacking::Prt,
        },
        range(ib_va, &ib),
    ]);
    host[len + 100..len + 164].fill(0xEE);
    run_job(&engine, vm, ib_va, (packets.len() * 4) as u32).unwrap();
    assert_eq!(&host[7..7 + len], &pattern[..]);
    assert_eq!(&host[len + 200..len + 200 + 4096], &pattern[..4096]);
    assert!(host[len + 100..len + 164].iter().all(|&b| b == 0));
    let mut back = vec![0u8; 4096];
    memfd.read_at(4096, &mut back).unwrap();
    assert_eq!(back, pattern[..4096]);
    let stats = engine.stats();
    assert_eq!(stats.bytes_copied, len as u64 + 4096 + 64 + 4096);
    assert_eq!(stats.faults.count, 0);
    drop(engine);
    drop(host);
}

/// A memfd read straight into host memory copies from the simulator's
/// mapping only where every page holds data: holes read as zeros through
/// `pread` and stay holes (a read fault through the mapping would have
/// allocated them), and the sealed size cannot change under the mapping,
/// not even through a re-open (a dma-buf fd).
#[test]
fn memfd_reads_map_resident_pages_only_and_leave_holes_unallocated() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    const MIB: usize = 1 << 20;
    let memfd = crate::hw::bo::Memfd::new("sdma-resident", 4 * MIB as u64).unwrap();
    let pattern: Vec<u8> = (0..MIB).map(|i| (i * 13 % 251) as u8 + 1).collect();
    memfd.write_at(MIB as u64, &pattern).unwrap();
    let blocks = || memfd.file().metadata().unwrap().blocks();
    let before = blocks();
    assert!(memfd.resident(MIB as u64, MIB).is_some());
    assert!(memfd.resident(MIB as u64 + 5, 4000).is_some());
    assert!(memfd.resident(0, 4096).is_none(), "a hole");
    assert!(
        memfd.resident(MIB as u64 - 1, 2).is_none(),
        "ends in data, starts in a hole"
    );
    assert!(
        memfd.resident(2 * MIB as u64 - 1, 2).is_none(),
        "runs into a hole"
    );
    assert!(
        memfd.resident(4 * MIB as u64 - 1, 2).is_none(),
        "past the end"
    );
    let mut host = vec![0xAAu8; 4 * MIB];
    for (at, len) in [(0, 4 * MIB), (MIB - 3, MIB + 6), (MIB + 7, 100)] {
        host.fill(0xAA);
        // SAFETY: `host` is ours and `len` bytes long at least.
        unsafe { memfd.read_to_host(at as u64, host.as_mut_ptr(), len) }.unwrap();
        for (i, &b) in host[..len].iter().enumerate() {
            let off = at + i;
            let want = if (MIB..2 * MIB).contains(&off) {
                pattern[off - MIB]
            } else {
                0
            };
            assert_eq!(b, want, "byte {off} of a read at {at}+{len}");
        }
    }
    assert_eq!(blocks(), before, "reading holes allocated pages");
    assert!(memfd.file().set_len(0).is_err());
    let reopened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", memfd.file().as_raw_fd()))
        .unwrap();
    assert!(reopened.set_len(8 * MIB as u64).is_err());
    assert!(reopened.set_len(MIB as u64).is_err());
    assert_eq!(memfd.file().metadata().unwrap().len(), 4 * MIB as u64);
}

#[test]
fn decode_count_per_family() {
    let ai = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let ci = GpuGeneration::from_gfx_target_version(70001).sdma_rules();
    let p = copy_packet(ai, 0x1_0000_2000, 0x3000, 0x1000);
    assert_eq!(p[1], 0xFFF);
    assert_eq!(
        decode_packet(&p, 0, ai).unwrap(),
        (
            Packet::LinearCopy {
                src: 0x1_0000_2000,
                dst: 0x3000,
                bytes: 0x1000
            },
            7
        )
    );
    // The same dwords mean one byte less on a pre-AI engine.
    assert_eq!(
        decode_packet(&p, 0, ci).unwrap().0,
        Packet::LinearCopy {
            src: 0x1_0000_2000,
            dst: 0x3000,
            bytes: 0xFFF
        }
    );
    let max = copy_packet(ai, 0, 0, 0x40_0000);
    assert!(decode_packet(&max, 0, ai).is_ok());
    let mut over = max;
    over[1] += 1;
    assert!(matches!(
        decode_packet(&over, 0, ai),
        Err(Malformed::CountTooLarge { .. })
    ));
    let over_ci = copy_packet(ci, 0, 0, 0x20_0000);
    assert!(matches!(
        decode_packet(&over_ci, 0, ci),
        Err(Malformed::CountTooLarge { max: 0x1F_FFFF, .. })
    ));
}

#[test]
fn decode_nops_and_malformed() {
    let ai = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    assert_eq!(
        decode_packet(&[0], 0, ai).unwrap(),
        (Packet::Nop { skip: 0 }, 1)
    );
    let burst = [2 << 16, 0xDEAD, 0xBEEF];
    assert_eq!(
        decode_packet(&burst, 0, ai).unwrap(),
        (Packet::Nop { skip: 2 }, 3)
    );
    assert!(matches!(
        decode_packet(&burst[..2], 0, ai),
        Err(Malformed::Truncated { .. })
    ));
    let p = copy_packet(ai, 0, 0, 16);
    assert!(matches!(
        decode_packet(&p[..6], 0, ai),
        Err(Malformed::Truncated { .. })
    ));
    assert!(matches!(
        decode_packet(&[0x0000_0002], 0, ai),
        Err(Malformed::Unsupported { .. })
    ));
    let mut tiled = p;
    tiled[0] = SDMA_OP_COPY | kfd_sys::sdma::SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(1);
    assert!(matches!(
        decode_packet(&tiled, 0, ai),
        Err(Malformed::Unsupported { .. })
    ));
    let mut bcast = p;
    bcast[0] |= 1 << 27;
    assert!(matches!(
        decode_packet(&bcast, 0, ai),
        Err(Malformed::Unsupported { .. })
    ));
    let mut swap = p;
    swap[2] = 1 << 16;
    assert!(matches!(
        decode_packet(&swap, 0, ai),
        Err(Malformed::EndianSwap { .. })
    ));
    let si = GpuGeneration::from_gfx_target_version(60001).sdma_rules();
    assert!(matches!(
        decode_packet(&p, 0, si),
        Err(Malformed::UnsupportedFamily { .. })
    ));
}

fn copy_round_trip(gfx: u64) {
    let rules = GpuGeneration::from_gfx_target_version(gfx).sdma_rules();
    let engine = SdmaEngine::new("test", 2, rules);
    let src = Buffer::new(8192, |i| (i * 7 + 3) as u8);
    let dst = Buffer::new(8192, |_| 0xEE);
    let mut ib = vec![0u32; 8];
    // 5000 bytes from src+100 to dst+10, split over two packets.
    ib.extend(copy_packet(rules, 0x10_0000 + 100, 0x20_0000 + 10, 3000));
    ib.extend(copy_packet(rules, 0x10_0000 + 3100, 0x20_0000 + 3010, 2000));
    ib.push(0);
    let ibb = ib_buffer(&ib);
    let vm = VmView::new(vec![
        range(0x10_0000, &src),
        range(0x20_0000, &dst),
        range(0x30_0000, &ibb),
    ]);
    run_job(&engine, vm, 0x30_0000, (ib.len() * 4) as u32).unwrap();
    let out = dst.read();
    let input = src.read();
    assert!(out[..10].iter().all(|b| *b == 0xEE));
    assert_eq!(&out[10..5010], &input[100..5100]);
    assert!(out[5010..].iter().all(|b| *b == 0xEE));
    let stats = engine.stats();
    assert_eq!(
        (stats.jobs, stats.failed_jobs, stats.bytes_copied),
        (1, 0, 5000)
    );
}

#[test]
fn copy_round_trip_ai() {
    copy_round_trip(90402);
}

#[test]
fn copy_round_trip_pre_ai() {
    copy_round_trip(80003);
}

#[test]
fn unmapped_destination_faults_and_drops_writes() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let src = Buffer::new(8192, |i| i as u8);
    let dst = Buffer::new(4096, |_| 0);
    // Copy 8192 bytes into a 4096-byte mapping: the second half faults.
    let ib = copy_packet(rules, 0x10_0000, 0x20_0000, 8192);
    let ibb = ib_buffer(&ib);
    let vm = VmView::new(vec![
        range(0x10_0000, &src),
        range(0x20_0000, &dst),
        range(0x40_0000, &ibb),
    ]);
    let err = run_job(&engine, vm, 0x40_0000, 28).unwrap_err();
    assert_eq!(
        err,
        JobError::VmFault {
            va: 0x20_1000,
            access: "write"
        }
    );
    assert_eq!(err.errno(), libc::ECANCELED);
    assert_eq!(&dst.read()[..], &src.read()[..4096]);
    let stats = engine.stats();
    assert_eq!(stats.faults.count, 1);
    assert_eq!(
        stats.faults.first,
        Some(VmFault {
            va: 0x20_1000,
            write: true
        })
    );
    assert_eq!(stats.bytes_copied, 4096);
}

#[test]
fn read_only_mapping_refuses_writes_and_ib_must_be_mapped() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let src = Buffer::new(4096, |_| 1);
    let dst = Buffer::new(4096, |_| 2);
    let ib = copy_packet(rules, 0x10_0000, 0x20_0000, 64);
    let ibb = ib_buffer(&ib);
    let mut ro = range(0x20_0000, &dst);
    ro.writable = false;
    let vm = VmView::new(vec![range(0x10_0000, &src), ro, range(0x40_0000, &ibb)]);
    let err = run_job(&engine, vm.clone(), 0x40_0000, 28).unwrap_err();
    assert!(matches!(err, JobError::VmFault { va: 0x20_0000, .. }));
    assert!(dst.read().iter().all(|b| *b == 2));
    let err = run_job(&engine, vm.clone(), 0x50_0000, 28).unwrap_err();
    assert_eq!(
        err,
        JobError::VmFault {
            va: 0x50_0000,
            access: "read"
        }
    );
    let err = run_job(&engine, vm, 0x40_0010, 28).unwrap_err();
    assert_eq!(
        err,
        JobError::Malformed(Malformed::MisalignedIb { va: 0x40_0010 })
    );
    assert_eq!(err.errno(), libc::ETIME);
    assert!(err.is_hang());
}

#[test]
fn malformed_packet_stops_the_job_after_earlier_packets_ran() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let src = Buffer::new(4096, |_| 9);
    let dst = Buffer::new(4096, |_| 0);
    let mut ib = copy_packet(rules, 0x10_0000, 0x20_0000, 16).to_vec();
    ib.push(0x0000_00FF);
    ib.extend(copy_packet(rules, 0x10_0000, 0x20_0000 + 16, 16));
    let ibb = ib_buffer(&ib);
    let vm = VmView::new(vec![
        range(0x10_0000, &src),
        range(0x20_0000, &dst),
        range(0x40_0000, &ibb),
    ]);
    let err = run_job(&engine, vm, 0x40_0000, (ib.len() * 4) as u32).unwrap_err();
    assert!(matches!(
        err,
        JobError::Malformed(Malformed::Unsupported { dword: 7, .. })
    ));
    let out = dst.read();
    assert!(out[..16].iter().all(|b| *b == 9));
    assert!(out[16..].iter().all(|b| *b == 0));
}

#[test]
fn short_dma_moves_half_and_fails() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let src = Buffer::new(4096, |_| 5);
    let dst = Buffer::new(4096, |_| 0);
    let ib = copy_packet(rules, 0x10_0000, 0x20_0000, 4096);
    let ibb = ib_buffer(&ib);
    let vm = VmView::new(vec![
        range(0x10_0000, &src),
        range(0x20_0000, &dst),
        range(0x40_0000, &ibb),
    ]);
    let fence = Fence::new();
    engine.submit(
        0,
        Job {
            ibs: vec![Ib {
                va: 0x40_0000,
                bytes: 28,
            }],
            vm: Arc::new(vm),
            fence: Arc::clone(&fence),
            short_dma: Some(ShortDma { errno: libc::EIO }),
            dependencies: Vec::new(),
            on_done: None,
        },
    );
    let err = fence.wait(Deadline::Infinite).unwrap().unwrap_err();
    assert_eq!(
        err,
        JobError::ShortDma {
            moved: 2048,
            errno: libc::EIO
        }
    );
    let out = dst.read();
    assert!(out[..2048].iter().all(|b| *b == 5));
    assert!(out[2048..].iter().all(|b| *b == 0));
}

#[test]
fn prt_ranges_read_zero_and_swallow_writes() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let dst = Buffer::new(4096, |_| 0x55);
    let mut ib = copy_packet(rules, 0x10_0000, 0x20_0000, 128).to_vec();
    ib.extend(copy_packet(rules, 0x20_0000, 0x10_0000, 128));
    let ibb = ib_buffer(&ib);
    let prt = VmRange {
        va: 0x10_0000,
        len: 0x1000,
        readable: true,
        writable: true,
        backing: RangeBacking::Prt,
    };
    let vm = VmView::new(vec![prt, range(0x20_0000, &dst), range(0x40_0000, &ibb)]);
    run_job(&engine, vm, 0x40_0000, 56).unwrap();
    let out = dst.read();
    assert!(out[..128].iter().all(|b| *b == 0));
    assert!(out[128..].iter().all(|b| *b == 0x55));
}

#[test]
fn fence_wait_polls_and_times_out() {
    let fence = Fence::new();
    assert_eq!(fence.wait(Deadline::Poll), None);
    assert_eq!(fence.wait(Deadline::At(Instant::now())), None);
    assert_eq!(Deadline::from_monotonic_ns(0), Deadline::Poll);
    assert_eq!(Deadline::from_monotonic_ns(u64::MAX), Deadline::Infinite);
    assert_eq!(Deadline::from_monotonic_ns(1 << 63), Deadline::Infinite);
    fence.signal(Ok(()));
    fence.signal(Err(JobError::RingLost));
    assert_eq!(fence.wait(Deadline::Poll), Some(Ok(())));
    assert_eq!(fence.outcome(), Some(Ok(())));
}

#[test]
fn addresses_at_the_top_of_the_va_space_fault_without_overflow() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let top = 0xFFFF_FFFF_FFFF_FFE0;
    let err = run_job(&engine, VmView::default(), top, 64).unwrap_err();
    assert_eq!(
        err,
        JobError::VmFault {
            va: top,
            access: "read"
        }
    );
    let ib = ib_buffer(&copy_packet(rules, u64::MAX - 3, u64::MAX - 3, 64));
    let vm = VmView::new(vec![range(0x40_0000, &ib)]);
    let err = run_job(&engine, vm, 0x40_0000, 28).unwrap_err();
    assert!(matches!(err, JobError::VmFault { .. }));
}

/// xorshift64*: a small deterministic generator for robustness tests.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

#[test]
fn arbitrary_ibs_decode_and_run_without_panicking() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let target = Buffer::new(8192, |_| 0);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..200 {
        let len = (next(&mut seed) % 40) as usize + 1;
        let ib: Vec<u32> = (0..len)
            .map(|i| {
                let r = next(&mut seed);
                match (r % 4, i % 7) {
                    // Mostly plausible headers and small addresses, so
                    // copies land inside, across and outside the mapping.
                    (0, _) => SDMA_OP_COPY,
                    (1, 1) => (r >> 8) as u32 % 0x3000,
                    (1, _) => 0x10_0000 + (r >> 8) as u32 % 0x4000,
                    _ => (r >> 16) as u32,
                }
            })
            .collect();
        let mut at = 0;
        while at < ib.len() {
            match decode_packet(&ib, at, rules) {
                Ok((_, used)) => {
                    assert!(used >= 1 && at + used <= ib.len(), "round {round}");
                    at += used;
                }
                Err(_) => break,
            }
        }
        let ibb = ib_buffer(&ib);
        let vm = VmView::new(vec![range(0x10_0000, &target), range(0x40_0000, &ibb)]);
        // Any outcome is fine; the fence must signal.
        let _ = run_job(&engine, vm, 0x40_0000, (ib.len() * 4) as u32);
    }
    assert_eq!(engine.stats().jobs, 200);
}

#[test]
fn out_of_range_ring_fails_the_fence() {
    let rules = GpuGeneration::from_gfx_target_version(90008).sdma_rules();
    let engine = SdmaEngine::new("test", 1, rules);
    let fence = Fence::new();
    engine.submit(
        3,
        Job {
            ibs: vec![],
            vm: Arc::new(VmView::default()),
            fence: Arc::clone(&fence),
            short_dma: None,
            dependencies: Vec::new(),
            on_done: None,
        },
    );
    assert_eq!(fence.outcome(), Some(Err(JobError::RingLost)));
}
