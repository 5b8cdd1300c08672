//! Render-node contexts, BO lists, INFO queries, command submission checks
//! and WAIT_CS through `kfd::Driver`, success and error paths.

mod drm_support;

use drm_support::{errno, open_render, render, sim_with, HostBuf};
use kfd_sys as k;

const MIB: u64 = 1 << 20;

fn ctx_op(
    r: &drm_support::Render,
    op: u32,
    ctx_id: u32,
    flags: u32,
) -> std::io::Result<k::drm_amdgpu_ctx_in> {
    let mut a = k::drm_amdgpu_ctx_in {
        op,
        flags,
        ctx_id,
        priority: 0,
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_CTX, &mut a)?;
    Ok(a)
}

#[test]
fn contexts_alloc_free_and_query() {
    let r = render();
    assert_eq!(r.ctx_alloc().unwrap(), 1);
    assert_eq!(r.ctx_alloc().unwrap(), 2);
    assert_eq!(
        errno(ctx_op(&r, k::AMDGPU_CTX_OP_ALLOC_CTX, 0, 1)),
        libc::EINVAL
    );
    ctx_op(&r, k::AMDGPU_CTX_OP_FREE_CTX, 1, 0).unwrap();
    assert_eq!(
        errno(ctx_op(&r, k::AMDGPU_CTX_OP_FREE_CTX, 1, 0)),
        libc::EINVAL
    );
    assert_eq!(
        errno(ctx_op(&r, k::AMDGPU_CTX_OP_FREE_CTX, 2, 1)),
        libc::EINVAL
    );
    // The lowest free id is reused; garbage priority is accepted.
    let mut a = k::drm_amdgpu_ctx_in {
        op: k::AMDGPU_CTX_OP_ALLOC_CTX,
        flags: 0,
        ctx_id: 0,
        priority: 12345,
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_CTX, &mut a).unwrap();
    assert_eq!(a.op, 1);
    let q = ctx_op(&r, k::AMDGPU_CTX_OP_QUERY_STATE, 2, 0).unwrap();
    // out.state = {u64 flags, u32 hangs, u32 reset_status}: no reset.
    assert_eq!(
        (q.op, q.flags, q.ctx_id, q.priority),
        (0, 0, 0, k::AMDGPU_CTX_NO_RESET as i32)
    );
    assert_eq!(
        errno(ctx_op(&r, k::AMDGPU_CTX_OP_QUERY_STATE, 9, 0)),
        libc::EINVAL
    );
    assert_eq!(
        errno(ctx_op(&r, k::AMDGPU_CTX_OP_QUERY_STATE2, 2, 1)),
        libc::EINVAL
    );
    assert_eq!(errno(ctx_op(&r, 77, 2, 0)), libc::EINVAL);
}

fn bo_list(r: &drm_support::Render, op: u32, list: u32, handles: &[u32]) -> std::io::Result<u32> {
    let entries: Vec<k::drm_amdgpu_bo_list_entry> = handles
        .iter()
        .map(|&bo_handle| k::drm_amdgpu_bo_list_entry {
            bo_handle,
            bo_priority: 0,
        })
        .collect();
    let mut a = k::drm_amdgpu_bo_list_in {
        operation: op,
        list_handle: list,
        bo_number: entries.len() as u32,
        bo_info_size: std::mem::size_of::<k::drm_amdgpu_bo_list_entry>() as u32,
        bo_info_ptr: entries.as_ptr() as u64,
    };
    r.ioctl(k::DRM_IOCTL_AMDGPU_BO_LIST, &mut a)?;
    Ok(a.operation)
}

#[test]
fn bo_lists_create_update_destroy() {
    let r = render();
    let a = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let b = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_VRAM, 0).unwrap();
    assert_eq!(
        bo_list(&r, k::AMDGPU_BO_LIST_OP_CREATE, 0, &[a, b]).unwrap(),
        1
    );
    assert_eq!(
        bo_list(&r, k::AMDGPU_BO_LIST_OP_CREATE, 0, &[a]).unwrap(),
        2
    );
    assert_eq!(
        errno(bo_list(&r, k::AMDGPU_BO_LIST_OP_CREATE, 0, &[a, 40])),
        libc::ENOENT
    );
    assert_eq!(
        bo_list(&r, k::AMDGPU_BO_LIST_OP_UPDATE, 2, &[b]).unwrap(),
        2
    );
    assert_eq!(
        errno(bo_list(&r, k::AMDGPU_BO_LIST_OP_UPDATE, 7, &[b])),
        libc::ENOENT
    );
    assert_eq!(
        bo_list(&r, k::AMDGPU_BO_LIST_OP_DESTROY, 1, &[]).unwrap(),
        0
    );
    // Destroying an unknown list succeeds.
    assert_eq!(
        bo_list(&r, k::AMDGPU_BO_LIST_OP_DESTROY, 1, &[]).unwrap(),
        0
    );
    assert_eq!(errno(bo_list(&r, 9, 0, &[])), libc::EINVAL);
    assert_eq!(
        bo_list(&r, k::AMDGPU_BO_LIST_OP_CREATE, 0, &[b]).unwrap(),
        1
    );
}

fn info<T>(
    r: &drm_support::Render,
    query: u32,
    ip_type: u32,
    ip_instance: u32,
    out: &mut T,
    size: u32,
) -> std::io::Result<i32> {
    // drm_amdgpu_info with the query_hw_ip member of its request union.
    let mut a = [0u8; 32];
    a[0..8].copy_from_slice(&(out as *mut T as u64).to_ne_bytes());
    a[8..12].copy_from_slice(&size.to_ne_bytes());
    a[12..16].copy_from_slice(&query.to_ne_bytes());
    a[16..20].copy_from_slice(&ip_type.to_ne_bytes());
    a[20..24].copy_from_slice(&ip_instance.to_ne_bytes());
    assert_eq!(std::mem::size_of::<k::drm_amdgpu_info>(), a.len());
    r.ioctl(k::DRM_IOCTL_AMDGPU_INFO, &mut a)
}

#[test]
fn info_queries() {
    let r = render();
    let mut word = 0u32;
    info(&r, k::AMDGPU_INFO_ACCEL_WORKING, 0, 0, &mut word, 4).unwrap();
    assert_eq!(word, 1);
    assert_eq!(
        errno(info(&r, k::AMDGPU_INFO_ACCEL_WORKING, 0, 0, &mut word, 0)),
        libc::EINVAL
    );
    let mut null_pointer = [0u8; 32];
    null_pointer[8..12].copy_from_slice(&4u32.to_ne_bytes());
    assert_eq!(
        errno(r.ioctl(k::DRM_IOCTL_AMDGPU_INFO, &mut null_pointer)),
        libc::EINVAL
    );
    assert_eq!(errno(info(&r, 0x7777, 0, 0, &mut word, 4)), libc::EINVAL);

    let mut ip = k::drm_amdgpu_info_hw_ip::default();
    let size = std::mem::size_of::<k::drm_amdgpu_info_hw_ip>() as u32;
    info(
        &r,
        k::AMDGPU_INFO_HW_IP_INFO,
        k::AMDGPU_HW_IP_DMA,
        0,
        &mut ip,
        size,
    )
    .unwrap();
    // gfx90a: 2 PCIe + 3 XGMI SDMA engines, SDMA 4.x.
    assert_eq!(
        (
            ip.ib_start_alignment,
            ip.ib_size_alignment,
            ip.available_rings
        ),
        (256, 4, 0b11111)
    );
    assert_eq!(ip.hw_ip_version_major, 4);
    assert_eq!(
        errno(info(
            &r,
            k::AMDGPU_INFO_HW_IP_INFO,
            k::AMDGPU_HW_IP_DMA,
            1,
            &mut ip,
            size
        )),
        libc::EINVAL
    );
    assert_eq!(
        errno(info(&r, k::AMDGPU_INFO_HW_IP_INFO, 42, 0, &mut ip, size)),
        libc::EINVAL
    );
    // Only the requested prefix is written.
    let mut prefix = [0xAAu8; 8];
    info(
        &r,
        k::AMDGPU_INFO_HW_IP_INFO,
        k::AMDGPU_HW_IP_DMA,
        0,
        &mut prefix,
        4,
    )
    .unwrap();
    assert_eq!(&prefix[..4], &4u32.to_ne_bytes());
    assert_eq!(&prefix[4..], &[0xAA; 4]);

    info(
        &r,
        k::AMDGPU_INFO_HW_IP_COUNT,
        k::AMDGPU_HW_IP_DMA,
        0,
        &mut word,
        4,
    )
    .unwrap();
    assert_eq!(word, 1);
    info(
        &r,
        k::AMDGPU_INFO_HW_IP_COUNT,
        k::AMDGPU_HW_IP_GFX,
        0,
        &mut word,
        4,
    )
    .unwrap();
    assert_eq!(word, 0);

    let mut heaps = k::drm_amdgpu_info_vram_gtt::default();
    let size = std::mem::size_of::<k::drm_amdgpu_info_vram_gtt>() as u32;
    info(&r, k::AMDGPU_INFO_VRAM_GTT, 0, 0, &mut heaps, size).unwrap();
    let vram = r.sim.gpus()[0].vram_bytes;
    assert_eq!(
        (heaps.vram_size, heaps.vram_cpu_accessible_size),
        (vram, vram)
    );
    assert_eq!(heaps.gtt_size, r.sim.config().system_memory_bytes);

    let mut dev = k::drm_amdgpu_info_device::default();
    let size = std::mem::size_of::<k::drm_amdgpu_info_device>() as u32;
    info(&r, k::AMDGPU_INFO_DEV_INFO, 0, 0, &mut dev, size).unwrap();
    assert_eq!(dev.family, k::AMDGPU_FAMILY_AI);
    assert_eq!(dev.device_id, 29711);
    assert_eq!(dev.virtual_address_offset, 64 << 10);
    assert_eq!(dev.virtual_address_max, 0x0000_8000_0000_0000);
    assert_eq!(dev.virtual_address_alignment, 4096);
    assert_eq!(dev.high_va_offset, 0xFFFF_8000_0000_0000);
    assert_eq!(
        dev.high_va_max,
        0xFFFF_8000_0000_0000 | ((1 << 48) - (4 << 20) - 8192)
    );
}

#[test]
fn dev_info_family_follows_the_gfx_target_version() {
    for (gfx, family) in [
        (80003, k::AMDGPU_FAMILY_VI),
        (90402, k::AMDGPU_FAMILY_AI),
        (100300, k::AMDGPU_FAMILY_NV),
        (110000, k::AMDGPU_FAMILY_GC_11_0_0),
    ] {
        let r = open_render(&sim_with(1, gfx), 0);
        let mut dev = k::drm_amdgpu_info_device::default();
        let size = std::mem::size_of::<k::drm_amdgpu_info_device>() as u32;
        info(&r, k::AMDGPU_INFO_DEV_INFO, 0, 0, &mut dev, size).unwrap();
        assert_eq!(dev.family, family, "gfx {gfx}");
        if gfx < 90000 {
            // A 40-bit VM: no high half.
            assert_eq!(dev.virtual_address_max, (1 << 40) - (4 << 20) - 8192);
            assert_eq!(dev.high_va_offset, 0);
        }
    }
}

fn ib_chunk(ib: &mut k::drm_amdgpu_cs_chunk_ib, length_dw: u32) -> k::drm_amdgpu_cs_chunk {
    k::drm_amdgpu_cs_chunk {
        chunk_id: k::AMDGPU_CHUNK_ID_IB,
        length_dw,
        chunk_data: ib as *mut k::drm_amdgpu_cs_chunk_ib as u64,
    }
}

#[test]
fn cs_argument_checks() {
    let r = render();
    let ctx = r.ctx_alloc().unwrap();
    let mut ib = k::drm_amdgpu_cs_chunk_ib {
        va_start: 16 * MIB,
        ib_bytes: 32,
        ip_type: k::AMDGPU_HW_IP_DMA,
        ..Default::default()
    };
    assert_eq!(
        errno(r.submit_chunks(ctx, 0, &[])),
        libc::EINVAL,
        "no chunks"
    );
    let chunk = ib_chunk(&mut ib, 8);
    assert_eq!(
        errno(r.submit_chunks(ctx + 5, 0, &[chunk])),
        libc::EINVAL,
        "unknown ctx"
    );
    assert_eq!(
        errno(r.submit_chunks(ctx, 3, &[chunk])),
        libc::ENOENT,
        "unknown bo list"
    );
    let short = ib_chunk(&mut ib, 7);
    assert_eq!(
        errno(r.submit_chunks(ctx, 0, &[short])),
        libc::EINVAL,
        "ib chunk too short"
    );
    let bad_id = k::drm_amdgpu_cs_chunk {
        chunk_id: 0x42,
        ..chunk
    };
    assert_eq!(
        errno(r.submit_chunks(ctx, 0, &[bad_id])),
        libc::EINVAL,
        "unknown chunk id"
    );
    for (ip_type, instance, ring) in [
        (k::AMDGPU_HW_IP_DMA, 0, 5),
        (k::AMDGPU_HW_IP_DMA, 1, 0),
        (k::AMDGPU_HW_IP_GFX, 0, 0),
        (99, 0, 0),
    ] {
        let mut bad = k::drm_amdgpu_cs_chunk_ib {
            ip_type,
            ip_instance: instance,
            ring,
            ..ib
        };
        let c = ib_chunk(&mut bad, 8);
        assert_eq!(
            errno(r.submit_chunks(ctx, 0, &[c])),
            libc::EINVAL,
            "ip {ip_type} instance {instance} ring {ring}"
        );
    }
    // Only a dependency chunk: no IB.
    let mut dep = k::drm_amdgpu_cs_chunk_dep::default();
    let dep_chunk = k::drm_amdgpu_cs_chunk {
        chunk_id: k::AMDGPU_CHUNK_ID_DEPENDENCIES,
        length_dw: 0,
        chunk_data: &mut dep as *mut k::drm_amdgpu_cs_chunk_dep as u64,
    };
    assert_eq!(
        errno(r.submit_chunks(ctx, 0, &[dep_chunk])),
        libc::EINVAL,
        "no ib"
    );
    // A BO list handle and a BO_HANDLES chunk together.
    let bo = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let list = bo_list(&r, k::AMDGPU_BO_LIST_OP_CREATE, 0, &[bo]).unwrap();
    let entries = [k::drm_amdgpu_bo_list_entry {
        bo_handle: bo,
        bo_priority: 0,
    }];
    let mut inline = k::drm_amdgpu_bo_list_in {
        bo_number: 1,
        bo_info_size: 8,
        bo_info_ptr: entries.as_ptr() as u64,
        ..Default::default()
    };
    let handles = k::drm_amdgpu_cs_chunk {
        chunk_id: k::AMDGPU_CHUNK_ID_BO_HANDLES,
        length_dw: 6,
        chunk_data: &mut inline as *mut k::drm_amdgpu_bo_list_in as u64,
    };
    assert_eq!(
        errno(r.submit_chunks(ctx, list, &[chunk, handles])),
        libc::EINVAL
    );
    // Valid submissions (the IB is unmapped: the job faults, the CS itself succeeds).
    assert_eq!(r.submit_chunks(ctx, 0, &[chunk, handles]).unwrap(), 1);
    assert_eq!(r.submit_chunks(ctx, list, &[chunk]).unwrap(), 2);
    assert_eq!(errno(r.wait(ctx, 0, 2, u64::MAX)), libc::ECANCELED);
}

#[test]
fn wait_cs_checks_and_statuses() {
    let r = render();
    let ctx = r.ctx_alloc().unwrap();
    assert_eq!(errno(r.wait(ctx + 1, 0, 1, 0)), libc::EINVAL, "unknown ctx");
    assert_eq!(errno(r.wait(ctx, 9, 1, 0)), libc::EINVAL, "bad ring");
    assert_eq!(
        errno(r.wait(ctx, 0, 1, 0)),
        libc::EINVAL,
        "not submitted yet"
    );
    // Sequence 0 was never a job: done.
    assert_eq!(r.wait(ctx, 0, 0, 0).unwrap(), 0);
    // An IB of NOPs in a userptr buffer.
    let host = HostBuf::new(4096, |_| 0);
    let h = r.userptr(&host).unwrap();
    r.map(h, 16 * MIB, 4096).unwrap();
    let seq = r.submit(ctx, 0, 16 * MIB, 64, 1).unwrap();
    assert_eq!(seq, 1);
    assert_eq!(r.wait(ctx, 1, seq, u64::MAX).unwrap(), 0, "infinite wait");
    assert_eq!(r.wait(ctx, 1, seq, 0).unwrap(), 0, "poll of a done fence");
    assert_eq!(r.wait(ctx, 1, u64::MAX, 0).unwrap(), 0, "latest");
    // Sequences are per (context, ring).
    assert_eq!(r.submit(ctx, 0, 16 * MIB, 64, 1).unwrap(), 2);
    assert_eq!(r.submit(ctx, 0, 16 * MIB, 64, 0).unwrap(), 1);
    let other = r.ctx_alloc().unwrap();
    assert_eq!(r.submit(other, 0, 16 * MIB, 64, 1).unwrap(), 1);
    // The IB lives in host memory: wait before it goes away.
    assert_eq!(r.wait(ctx, 1, 2, u64::MAX).unwrap(), 0);
    assert_eq!(r.wait(ctx, 0, 1, u64::MAX).unwrap(), 0);
    assert_eq!(r.wait(other, 1, 1, u64::MAX).unwrap(), 0);
}

#[test]
fn wait_cs_reports_busy_until_the_fence_signals() {
    let r = render();
    // One byte per second: a 4 KiB copy cannot finish while the test runs.
    r.sim.set_sdma_bandwidth(Some(1));
    let (_host, ctx) = one_page_copy_ib(&r);
    let seq = r.submit(ctx, 0, 16 * MIB, 32, 0).unwrap();
    // A deadline in the past polls.
    assert_eq!(r.wait(ctx, 0, seq, 1).unwrap(), 1);
    // An absolute CLOCK_MONOTONIC deadline 5 ms ahead expires.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(rc, 0);
    let deadline = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64 + 5_000_000;
    assert_eq!(r.wait(ctx, 0, seq, deadline).unwrap(), 1);
    // Lifting the limit lets the job finish; an infinite wait sees it done.
    r.sim.set_sdma_bandwidth(None);
    assert_eq!(r.wait(ctx, 0, seq, u64::MAX).unwrap(), 0);
}

#[test]
fn a_gpu_bandwidth_limit_holds_every_ring_until_lifted() {
    let r = render();
    // One byte per second for the GPU: neither ring's 4 KiB copy can
    // finish while the test runs, though no ring has a limit of its own.
    r.sim.set_sdma_gpu_bandwidth(Some(1));
    let (_host, ctx) = one_page_copy_ib(&r);
    let seqs: Vec<u64> = (0..2)
        .map(|ring| r.submit(ctx, 0, 16 * MIB, 32, ring).unwrap())
        .collect();
    for (ring, &seq) in seqs.iter().enumerate() {
        assert_eq!(
            r.wait(ctx, ring as u32, seq, 1).unwrap(),
            1,
            "ring {ring} is busy"
        );
    }
    r.sim.set_sdma_gpu_bandwidth(None);
    for (ring, &seq) in seqs.iter().enumerate() {
        assert_eq!(
            r.wait(ctx, ring as u32, seq, u64::MAX).unwrap(),
            0,
            "ring {ring} is done"
        );
    }
}

/// A userptr page pair mapped at 16 MiB holding an IB (at 16 MiB, 32
/// bytes) that copies its second page onto itself, and a context to submit
/// it in; the host buffer must outlive the submissions.
fn one_page_copy_ib(r: &drm_support::Render) -> (HostBuf, u32) {
    let host = HostBuf::new(2 * 4096, |_| 0);
    let h = r.userptr(&host).unwrap();
    r.map(h, 16 * MIB, 2 * 4096).unwrap();
    let mut ib = drm_support::packet::copy(true, 16 * MIB + 4096, 16 * MIB + 4096, 4096).to_vec();
    drm_support::packet::pad(&mut ib);
    host_write(&host, &drm_support::packet::bytes(&ib));
    (host, r.ctx_alloc().unwrap())
}

fn host_write(buf: &HostBuf, bytes: &[u8]) {
    // SAFETY: `buf` is a live mapping of at least `bytes.len()` bytes and no
    // job reads it yet.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.addr() as *mut u8, bytes.len()) };
}

#[test]
fn cs_waits_for_a_free_fence_slot_after_32_jobs_in_flight() {
    let r = render();
    r.sim.set_sdma_bandwidth(Some(1));
    let host = HostBuf::new(2 * 4096, |_| 0);
    let h = r.userptr(&host).unwrap();
    r.map(h, 16 * MIB, 2 * 4096).unwrap();
    let mut ib =
        drm_support::packet::copy(true, 16 * MIB + 4096, 16 * MIB + 4096 + 64, 16).to_vec();
    drm_support::packet::pad(&mut ib);
    host_write(&host, &drm_support::packet::bytes(&ib));
    let ctx = r.ctx_alloc().unwrap();
    for seq in 1..=32 {
        assert_eq!(r.submit(ctx, 0, 16 * MIB, 32, 0).unwrap(), seq);
    }
    assert_eq!(r.wait(ctx, 0, 1, 0).unwrap(), 1, "throttled: still busy");
    // Lift the limit a little later from another thread; the 33rd CS must
    // block until job 1 is done (amdgpu_ctx_wait_prev_fence).
    let sim = r.sim.clone();
    let lifter = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        sim.set_sdma_bandwidth(None);
    });
    assert_eq!(r.submit(ctx, 0, 16 * MIB, 32, 0).unwrap(), 33);
    assert_eq!(
        r.wait(ctx, 0, 1, 0).unwrap(),
        0,
        "job 1 finished before CS 33 returned"
    );
    lifter.join().unwrap();
    assert_eq!(r.wait(ctx, 0, 33, u64::MAX).unwrap(), 0);
    // Fences older than the last 32 are forgotten and count as done.
    assert_eq!(r.wait(ctx, 0, 1, u64::MAX).unwrap(), 0);
}

/// An IB copying 16 bytes inside a 2-page userptr buffer mapped at 16 MiB.
fn copy_ib(r: &drm_support::Render, host: &HostBuf) -> (k::drm_amdgpu_cs_chunk_ib, u32) {
    let h = r.userptr(host).unwrap();
    r.map(h, 16 * MIB, 2 * 4096).unwrap();
    let mut ib =
        drm_support::packet::copy(true, 16 * MIB + 4096, 16 * MIB + 4096 + 64, 16).to_vec();
    drm_support::packet::pad(&mut ib);
    host_write(host, &drm_support::packet::bytes(&ib));
    let chunk = k::drm_amdgpu_cs_chunk_ib {
        va_start: 16 * MIB,
        ib_bytes: 32,
        ip_type: k::AMDGPU_HW_IP_DMA,
        ..Default::default()
    };
    (chunk, h)
}

#[test]
fn user_fence_chunk_writes_the_sequence_number() {
    let r = render();
    let host = HostBuf::new(2 * 4096, |_| 0);
    let (mut ib, _) = copy_ib(&r, &host);
    let ctx = r.ctx_alloc().unwrap();
    let fence_bo = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let big_bo = r.gem_create(8192, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    let chunk = ib_chunk(&mut ib, 8);
    let submit_with_fence = |handle: u32, offset: u32| {
        let mut f = k::drm_amdgpu_cs_chunk_fence { handle, offset };
        let fence = k::drm_amdgpu_cs_chunk {
            chunk_id: k::AMDGPU_CHUNK_ID_FENCE,
            length_dw: 2,
            chunk_data: &mut f as *mut k::drm_amdgpu_cs_chunk_fence as u64,
        };
        r.submit_chunks(ctx, 0, &[chunk, fence])
    };
    assert_eq!(errno(submit_with_fence(99, 0)), libc::EINVAL, "unknown bo");
    assert_eq!(
        errno(submit_with_fence(big_bo, 0)),
        libc::EINVAL,
        "not one page"
    );
    assert_eq!(
        errno(submit_with_fence(fence_bo, 4090)),
        libc::EINVAL,
        "past the page"
    );
    let seq = submit_with_fence(fence_bo, 8).unwrap();
    let seq2 = submit_with_fence(fence_bo, 16).unwrap();
    assert_eq!(r.wait(ctx, 0, seq2, u64::MAX).unwrap(), 0);
    let map = r.cpu_map(fence_bo, 4096);
    assert_eq!(
        u64::from_le_bytes(map.bytes()[8..16].try_into().unwrap()),
        seq
    );
    assert_eq!(
        u64::from_le_bytes(map.bytes()[16..24].try_into().unwrap()),
        seq2
    );
}

#[test]
fn dependencies_order_jobs_across_rings() {
    let r = render();
    let host = HostBuf::new(2 * 4096, |_| 0);
    let (mut ib, _) = copy_ib(&r, &host);
    let ctx = r.ctx_alloc().unwrap();
    r.sim.set_sdma_bandwidth(Some(1));
    let first = r.submit(ctx, 0, 16 * MIB, 32, 0).unwrap();
    let dep = |ctx_id: u32, handle: u64| k::drm_amdgpu_cs_chunk_dep {
        ip_type: k::AMDGPU_HW_IP_DMA,
        ip_instance: 0,
        ring: 0,
        ctx_id,
        handle,
    };
    let submit_after = |d: k::drm_amdgpu_cs_chunk_dep| {
        let mut d = d;
        let mut ib1 = k::drm_amdgpu_cs_chunk_ib { ring: 1, ..ib };
        let chunk = ib_chunk(&mut ib1, 8);
        let deps = k::drm_amdgpu_cs_chunk {
            chunk_id: k::AMDGPU_CHUNK_ID_DEPENDENCIES,
            length_dw: (std::mem::size_of::<k::drm_amdgpu_cs_chunk_dep>() / 4) as u32,
            chunk_data: &mut d as *mut k::drm_amdgpu_cs_chunk_dep as u64,
        };
        r.submit_chunks(ctx, 0, &[chunk, deps])
    };
    assert_eq!(
        errno(submit_after(dep(ctx + 7, first))),
        libc::EINVAL,
        "unknown ctx"
    );
    assert_eq!(
        errno(submit_after(dep(ctx, first + 1))),
        libc::EINVAL,
        "not submitted"
    );
    let second = submit_after(dep(ctx, first)).unwrap();
    // Ring 1 is idle, but the job waits for ring 0's throttled job.
    assert_eq!(r.wait(ctx, 1, second, 0).unwrap(), 1);
    r.sim.set_sdma_bandwidth(None);
    assert_eq!(r.wait(ctx, 1, second, u64::MAX).unwrap(), 0);
    assert_eq!(r.wait(ctx, 0, first, 0).unwrap(), 0);
    // Syncobjs do not exist in the simulator: naming one fails.
    let mut sem = [1u32; 2];
    let chunk = ib_chunk(&mut ib, 8);
    let syncobj = k::drm_amdgpu_cs_chunk {
        chunk_id: k::AMDGPU_CHUNK_ID_SYNCOBJ_IN,
        length_dw: 1,
        chunk_data: sem.as_mut_ptr() as u64,
    };
    assert_eq!(
        errno(r.submit_chunks(ctx, 0, &[chunk, syncobj])),
        libc::EINVAL
    );
    let empty = k::drm_amdgpu_cs_chunk {
        length_dw: 0,
        ..syncobj
    };
    let seq = r.submit_chunks(ctx, 0, &[chunk, empty]).unwrap();
    assert_eq!(r.wait(ctx, 0, seq, u64::MAX).unwrap(), 0);
}

#[test]
fn bo_lists_refuse_another_process_userptr() {
    let r = render();
    let host = HostBuf::new(4096, |_| 0);
    let mine = r.userptr(&host).unwrap();
    let gtt = r.gem_create(4096, k::AMDGPU_GEM_DOMAIN_GTT, 0).unwrap();
    // Another process using the same open file (an fd passed over a socket).
    let other = drm_support::Render {
        sim: r.sim.clone(),
        drv: r.sim.driver(r.sim.spawn_process().unwrap()),
        fd: r.fd.try_clone().unwrap(),
    };
    assert_eq!(
        errno(bo_list(
            &other,
            k::AMDGPU_BO_LIST_OP_CREATE,
            0,
            &[gtt, mine]
        )),
        libc::EPERM
    );
    assert_eq!(
        bo_list(&other, k::AMDGPU_BO_LIST_OP_CREATE, 0, &[gtt]).unwrap(),
        1
    );
    assert_eq!(
        bo_list(&r, k::AMDGPU_BO_LIST_OP_CREATE, 0, &[gtt, mine]).unwrap(),
        2
    );
}
