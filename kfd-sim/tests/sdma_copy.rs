//! SDMA execution through the render node, as a userspace copier drives it:
//! userptr host buffers and a VRAM BO mapped with GEM_VA, an IB in a GTT
//! BO, CS and WAIT_CS. Round trips with the AI+ and pre-AI COUNT encodings,
//! VM faults on unmapped VA, malformed packets, and injected short DMAs.

mod drm_support;

use drm_support::packet;
use drm_support::{errno, open_render, sim_with, HostBuf, Render};
use kfd_sim::sdma::VmFault;
use kfd_sim::FaultSpec;
use kfd_sys as k;

const MIB: u64 = 1 << 20;
const SRC_VA: u64 = 0x10_0000_0000;
const VRAM_VA: u64 = 0x20_0000_0000;
const DST_VA: u64 = 0x30_0000_0000;
const IB_VA: u64 = 0x40_0000_0000;

/// An IB written into a CPU-mapped GTT BO and mapped at `IB_VA`.
fn load_ib(r: &Render, mut dwords: Vec<u32>) -> (u32, u32) {
    packet::pad(&mut dwords);
    let bytes = packet::bytes(&dwords);
    let handle = r.gem_create(64 << 10, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let mut map = r.cpu_map(handle, 64 << 10);
    map.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
    r.map(handle, IB_VA, 64 << 10).unwrap();
    (handle, bytes.len() as u32)
}

/// Runs `dwords` on DMA ring 0 and waits; returns the WAIT_CS result.
fn run(r: &Render, dwords: Vec<u32>) -> std::io::Result<u64> {
    let (ib, ib_bytes) = load_ib(r, dwords);
    let ctx = r.ctx_alloc().unwrap();
    let seq = r.submit(ctx, 0, IB_VA, ib_bytes, 0).unwrap();
    let result = r.wait(ctx, 0, seq, u64::MAX);
    r.va(k::AMDGPU_VA_OP_UNMAP, ib, IB_VA, 0, 64 << 10, 0)
        .unwrap();
    r.close(ib).unwrap();
    result
}

/// Copies `len` bytes host → VRAM → host in chunks of `chunk` bytes per
/// packet, with the COUNT encoding of the GPU's family.
fn round_trip(gfx: u64, len: usize, chunk: u32) {
    let ai = gfx >= 90000;
    let r = open_render(&sim_with(1, gfx), 0);
    let src = HostBuf::new(len, |i| (i * 31 % 251) as u8);
    let dst = HostBuf::new(len, |_| 0xEE);
    let hs = r.userptr(&src).unwrap();
    let hd = r.userptr(&dst).unwrap();
    let hv = r
        .gem_create(len as u64, k::AMDGPU_GEM_DOMAIN_VRAM, 0)
        .unwrap();
    r.map(hs, SRC_VA, len as u64).unwrap();
    r.map(hd, DST_VA, len as u64).unwrap();
    r.map(hv, VRAM_VA, len as u64).unwrap();
    let mut to_vram = Vec::new();
    let mut to_host = Vec::new();
    let mut done = 0u64;
    while done < len as u64 {
        let n = (len as u64 - done).min(u64::from(chunk)) as u32;
        to_vram.extend(packet::copy(ai, SRC_VA + done, VRAM_VA + done, n));
        to_host.extend(packet::copy(ai, VRAM_VA + done, DST_VA + done, n));
        done += u64::from(n);
    }
    assert_eq!(run(&r, to_vram).unwrap(), 0);
    assert_eq!(run(&r, to_host).unwrap(), 0);
    assert!(
        src.bytes() == dst.bytes(),
        "host -> vram -> host round trip, gfx {gfx}"
    );
    let stats = r.sim.sdma_stats(r.sim.gpus()[0].gpu_id).unwrap();
    assert_eq!(stats.bytes_copied, 2 * len as u64);
    assert_eq!((stats.failed_jobs, stats.faults.count), (0, 0));
}

#[test]
fn round_trip_ai_count_is_bytes_minus_one() {
    round_trip(90010, 3 * MIB as usize, 1 << 21);
}

#[test]
fn round_trip_pre_ai_count_is_bytes() {
    round_trip(80003, 3 * MIB as usize, (1 << 21) - 1);
}

#[test]
fn round_trip_gfx11_and_many_small_packets() {
    round_trip(110000, 64 << 10, 4096);
}

/// A host source, a VRAM destination of `vram_len` bytes, and the handles.
struct Setup {
    r: Render,
    src: HostBuf,
    vram: u32,
}

fn setup(gfx: u64, src_len: usize, vram_len: u64) -> Setup {
    let r = open_render(&sim_with(1, gfx), 0);
    let src = HostBuf::new(src_len, |i| (i % 200) as u8 + 1);
    let hs = r.userptr(&src).unwrap();
    r.map(hs, SRC_VA, src_len as u64).unwrap();
    let vram = r
        .gem_create(
            vram_len,
            k::AMDGPU_GEM_DOMAIN_VRAM,
            k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED,
        )
        .unwrap();
    r.map(vram, VRAM_VA, vram_len).unwrap();
    Setup { r, src, vram }
}

#[test]
fn copy_into_unmapped_va_faults_and_drops_the_writes() {
    let s = setup(90010, 2 * 4096, 4096);
    // 8 KiB into a 4 KiB mapping: the second page is unmapped.
    let result = run(&s.r, packet::copy(true, SRC_VA, VRAM_VA, 8192).to_vec());
    assert_eq!(errno(result), libc::ECANCELED);
    let vram = s.r.cpu_map(s.vram, 4096);
    assert!(
        vram.bytes() == &s.src.bytes()[..4096],
        "the mapped part was written"
    );
    let stats = s.r.sim.sdma_stats(s.r.sim.gpus()[0].gpu_id).unwrap();
    assert_eq!(stats.faults.count, 1);
    assert_eq!(
        stats.faults.first,
        Some(VmFault {
            va: VRAM_VA + 4096,
            write: true
        })
    );
    assert_eq!(stats.failed_jobs, 1);
}

#[test]
fn criu_style_count_on_ai_moves_one_extra_byte() {
    // COUNT = bytes (the upstream plugin's encoding) on an AI GPU copies
    // bytes + 1: the byte after the range is overwritten.
    let s = setup(90010, 4096, 8192);
    assert_eq!(
        run(&s.r, packet::copy(false, SRC_VA, VRAM_VA, 100).to_vec()).unwrap(),
        0
    );
    let vram = s.r.cpu_map(s.vram, 4096);
    assert_eq!(&vram.bytes()[..101], &s.src.bytes()[..101]);
    assert_eq!(vram.bytes()[101], 0);
    // At the very end of a mapping the extra byte is a VM fault.
    drop(vram);
    let result = run(
        &s.r,
        packet::copy(false, SRC_VA, VRAM_VA + 8192 - 16, 16).to_vec(),
    );
    assert_eq!(errno(result), libc::ECANCELED);
}

#[test]
fn malformed_packets_fail_with_etime_and_make_the_context_guilty() {
    let s = setup(90010, 4096, 4096);
    let mut too_big = packet::copy(true, SRC_VA, VRAM_VA, 16);
    too_big[1] = 0x40_0000; // 4 MiB + 1 bytes: over the per-packet maximum
    let (ib, ib_bytes) = load_ib(&s.r, too_big.to_vec());
    let ctx = s.r.ctx_alloc().unwrap();
    let seq = s.r.submit(ctx, 0, IB_VA, ib_bytes, 0).unwrap();
    assert_eq!(errno(s.r.wait(ctx, 0, seq, u64::MAX)), libc::ETIME);
    // The failed fence keeps its error on later polls.
    assert_eq!(errno(s.r.wait(ctx, 0, seq, 0)), libc::ETIME);
    assert_eq!(
        errno(s.r.submit(ctx, 0, IB_VA, ib_bytes, 0)),
        libc::ECANCELED
    );
    let mut q = k::drm_amdgpu_ctx_in {
        op: k::AMDGPU_CTX_OP_QUERY_STATE2,
        ctx_id: ctx,
        ..Default::default()
    };
    s.r.ioctl(k::DRM_IOCTL_AMDGPU_CTX, &mut q).unwrap();
    let flags = u64::from(q.op) | (u64::from(q.flags) << 32);
    assert_ne!(flags & k::AMDGPU_CTX_QUERY2_FLAGS_GUILTY, 0);
    assert_ne!(flags & k::AMDGPU_CTX_QUERY2_FLAGS_RESET, 0);
    // An unknown opcode and a misaligned IB hang the engine the same way.
    let ctx2 = s.r.ctx_alloc().unwrap();
    let mut map = s.r.cpu_map(ib, 4096);
    map.bytes_mut()[..4].copy_from_slice(&0x0000_00FFu32.to_le_bytes());
    drop(map);
    let seq = s.r.submit(ctx2, 0, IB_VA, ib_bytes, 0).unwrap();
    assert_eq!(errno(s.r.wait(ctx2, 0, seq, u64::MAX)), libc::ETIME);
    let ctx3 = s.r.ctx_alloc().unwrap();
    let seq = s.r.submit(ctx3, 0, IB_VA + 16, 32, 0).unwrap();
    assert_eq!(errno(s.r.wait(ctx3, 0, seq, u64::MAX)), libc::ETIME);
}

#[test]
fn injected_short_dma_moves_half_and_reports_the_error() {
    let s = setup(90010, 8192, 8192);
    s.r.sim
        .inject("SDMA_SHORT=EIO".parse::<FaultSpec>().unwrap());
    let result = run(&s.r, packet::copy(true, SRC_VA, VRAM_VA, 8192).to_vec());
    assert_eq!(errno(result), libc::EIO);
    let vram = s.r.cpu_map(s.vram, 8192);
    assert!(vram.bytes()[..4096] == s.src.bytes()[..4096]);
    assert!(
        vram.bytes()[4096..].iter().all(|b| *b == 0),
        "the rest was never written"
    );
    drop(vram);
    // The fault fired once: the next copy is whole.
    assert_eq!(
        run(&s.r, packet::copy(true, SRC_VA, VRAM_VA, 8192).to_vec()).unwrap(),
        0
    );
}

#[test]
fn jobs_snapshot_the_vm_and_keep_memory_alive() {
    // Unmapping and closing everything right after CS does not disturb the job.
    let s = setup(90010, 4096, 4096);
    let dst = HostBuf::new(4096, |_| 0);
    let hd = s.r.userptr(&dst).unwrap();
    s.r.map(hd, DST_VA, 4096).unwrap();
    let (ib, ib_bytes) = load_ib(&s.r, packet::copy(true, SRC_VA, DST_VA, 4096).to_vec());
    let ctx = s.r.ctx_alloc().unwrap();
    let seq = s.r.submit(ctx, 0, IB_VA, ib_bytes, 2).unwrap();
    s.r.va(k::AMDGPU_VA_OP_UNMAP, ib, IB_VA, 0, 64 << 10, 0)
        .unwrap();
    s.r.close(ib).unwrap();
    assert_eq!(s.r.wait(ctx, 2, seq, u64::MAX).unwrap(), 0);
    assert!(dst.bytes() == s.src.bytes());
}
