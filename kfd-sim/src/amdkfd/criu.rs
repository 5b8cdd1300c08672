//! `AMDKFD_IOC_CRIU_OP`: the PROCESS_INFO → CHECKPOINT → UNPAUSE and
//! RESTORE → RESUME state machine of spec §1.3/§1.6, with the kernel's
//! validation order and errno values.
//!
//! * Eviction is reference-counted per device: PROCESS_INFO and RESTORE add a
//!   level, UNPAUSE and the RESUME worker remove one; queues run at level 0.
//! * CHECKPOINT installs dma-buf fds (VRAM/GTT only, read-write iff WRITABLE,
//!   no CLOEXEC) in the *caller* and releases them all if anything fails.
//! * RESTORE is single-shot (a pdd that already has a DRM file is `EINVAL`),
//!   never rolls back what it created, installs the BOs' dma-buf fds (always
//!   read-write) once the BO stage succeeded even if a later stage fails, and
//!   must consume the private data exactly.
//! * RESUME replays SVM ranges, then needs the userptr block set by RESTORE;
//!   the "restore worker" (userptr revalidation, queue restart) is applied
//!   before RESUME returns, so queues are running at the next observation.
//!
//! This module never copies BO contents: that is userspace's job.

use std::ffi::c_int;

use kfd_sys::*;
use zerocopy::{FromBytes, IntoBytes};

use super::memory::{create_bo, export_fd, install, map_checked, NewAlloc};
use super::priv_data::*;
use super::process::{KfdProcess, Queue, SignalPage};
use super::queue::{
    is_sdma, mqd_size, sdma_doorbell, sdma_slots, KFD_QUEUE_TYPE_COMPUTE, MAX_QUEUES_PER_PROCESS,
    SDMA_DOORBELL_BASE,
};
use super::{init_vm, proc_mut, GPUVM_BASE};
use crate::hw::bo::{Domain, PAGE_SIZE};
use crate::kernel::fault::CRIU_OP_NAMES;
use crate::kernel::{copy_from_user, copy_to_user, typed, Ctx, FileKey, Pid, State};
use ::kfd::Errno;

/// Counts PROCESS_INFO reports and CHECKPOINT re-checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    devices: u32,
    bos: u32,
    objects: u32,
    priv_size: u64,
}

/// Whether an IDR entry is checkpointed: VA 0 or above `gpuvm_base`
/// (entries at `0 < va <= gpuvm_base` are trap-handler buffers).
fn checkpointed(va: u64) -> bool {
    va == 0 || va > GPUVM_BASE
}

fn counts(max_gpu: usize, p: &KfdProcess) -> Result<Counts, Errno> {
    let d = p.pdds.len();
    let bos = p
        .pdds
        .iter()
        .flat_map(|pdd| pdd.idr.values())
        .filter(|m| checkpointed(m.va))
        .count() as u64;
    let mut queue_bytes = 0u64;
    for q in p.queues.values() {
        if q.ktype != KFD_QUEUE_TYPE_COMPUTE && !is_sdma(q.ktype) {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        queue_bytes += QUEUE_HEADER + q.mqd.len() as u64 + q.ctl_stack.len() as u64;
    }
    let events = p.events.len() as u64;
    let svm = p.svm.len() as u64;
    let priv_size = PROCESS_RECORD
        + DEVICE_RECORD * d as u64
        + bo_record_size(max_gpu) * bos
        + queue_bytes
        + EVENT_RECORD * events
        + svm * svm_record_size(d);
    let objects = p.queues.len() as u64 + events + svm;
    Ok(Counts {
        devices: u32::try_from(d).map_err(|_| Errno(libc::EINVAL))?,
        bos: u32::try_from(bos).map_err(|_| Errno(libc::EINVAL))?,
        objects: u32::try_from(objects).map_err(|_| Errno(libc::EINVAL))?,
        priv_size,
    })
}

pub(crate) fn criu_op(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let mut a = typed(buf, |a: &mut kfd_ioctl_criu_args| *a);
    let r = match CRIU_OP_NAMES.get(a.op as usize) {
        None => Err(Errno(libc::EINVAL)),
        Some(name) => {
            crate::kernel::fault::check(ctx.st, &format!("CRIU_OP:{name}")).and_then(|()| {
                match a.op {
                    KFD_CRIU_OP_PROCESS_INFO => process_info(ctx, pid, &mut a),
                    KFD_CRIU_OP_CHECKPOINT => checkpoint(ctx, pid, &mut a),
                    KFD_CRIU_OP_UNPAUSE => unpause(ctx, pid),
                    KFD_CRIU_OP_RESTORE => restore(ctx, pid, &mut a),
                    _ => resume(ctx, &a),
                }
            })
        }
    };
    typed(buf, |out: &mut kfd_ioctl_criu_args| *out = a);
    // Evictions changed: queues stop at a packet boundary (their registers
    // into their MQDs before CHECKPOINT reads them) or run again.
    crate::amdkfd::scheduling::sync_process(ctx.sim, ctx.st, pid);
    if a.op == KFD_CRIU_OP_RESUME && Pid(a.pid) != pid {
        crate::amdkfd::scheduling::sync_process(ctx.sim, ctx.st, Pid(a.pid));
    }
    r.map(|()| 0)
}

/// The queue-restore path run once on every device.
fn restore_once(p: &mut KfdProcess) {
    for pdd in &mut p.pdds {
        pdd.eviction = pdd.eviction.saturating_sub(1);
    }
}

/// Evicts the queues of every pdd one level (`kfd_process_evict_queues`),
/// preempting each device's queues once its level is raised
/// ([`crate::hw::queues::preempt_device`]: a queue that misses the preemption
/// timeout fails the device's eviction with `ETIME`). Each device's
/// eviction is also a fault point `EVICT`: an injected `EIO` is tolerated
/// (the device counts as evicted, as after a GPU hang); any other error
/// rolls back the devices this call evicted and is returned.
fn evict_all(ctx: &mut Ctx<'_>, pid: Pid) -> Result<(), Errno> {
    let n = proc_mut(ctx.st, pid)?.pdds.len();
    for i in 0..n {
        let evicted = match crate::kernel::fault::check(ctx.st, "EVICT") {
            Err(e) if e.0 == libc::EIO => {
                proc_mut(ctx.st, pid)?.pdds[i].eviction += 1;
                Ok(())
            }
            Err(e) => Err(e),
            Ok(()) => {
                proc_mut(ctx.st, pid)?.pdds[i].eviction += 1;
                crate::amdkfd::scheduling::preempt_device(ctx.sim, ctx.st, pid, i).inspect_err(
                    |_| {
                        // The kernel keeps this device's raised level and its
                        // error path's queue restore takes it back: the same
                        // end, as the device was at level 0 (else nothing of it
                        // ran to preempt).
                        if let Ok(p) = proc_mut(ctx.st, pid) {
                            p.pdds[i].eviction = p.pdds[i].eviction.saturating_sub(1);
                        }
                    },
                )
            }
        };
        if let Err(e) = evicted {
            let p = proc_mut(ctx.st, pid)?;
            for pdd in &mut p.pdds[..i] {
                pdd.eviction = pdd.eviction.saturating_sub(1);
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Restores one eviction level on every pdd (`kfd_process_restore_queues`),
/// fault point `RESTORE_QUEUES`: an injected error leaves every level as it
/// was and is returned.
fn restore_all(st: &mut State, pid: Pid) -> Result<(), Errno> {
    crate::kernel::fault::check(st, "RESTORE_QUEUES")?;
    restore_once(proc_mut(st, pid)?);
    Ok(())
}

fn process_info(ctx: &mut Ctx<'_>, pid: Pid, a: &mut kfd_ioctl_criu_args) -> Result<(), Errno> {
    let max_gpu = ctx.sim.config.max_gpu_instance;
    let result = (|| {
        if proc_mut(ctx.st, pid)?.pdds.is_empty() {
            return Err(Errno(libc::ENODEV));
        }
        evict_all(ctx, pid)?;
        let p = proc_mut(ctx.st, pid)?;
        p.queues_paused = true;
        counts(max_gpu, p)
    })();
    // The lead thread's pid in its own active pid namespace.
    let own_pid = ctx
        .st
        .processes
        .get(&pid)
        .and_then(|p| p.ns_pid)
        .unwrap_or(pid.0);
    let p = proc_mut(ctx.st, pid)?;
    match result {
        Ok(c) => {
            a.pid = own_pid;
            a.num_devices = c.devices;
            a.num_bos = c.bos;
            a.num_objects = c.objects;
            a.priv_data_size = c.priv_size;
            Ok(())
        }
        Err(e) => {
            // The error path runs the queue-restore path once on every device
            // (which can undo an earlier PROCESS_INFO's level) and unpauses.
            restore_once(p);
            p.queues_paused = false;
            Err(e)
        }
    }
}

/// Closes dma-buf fds installed by a failing operation.
fn release_fds(fds: &[i32]) {
    for &fd in fds {
        // Created by this operation, never handed out.
        crate::kernel::close_user_fd(fd);
    }
}

fn checkpoint(ctx: &mut Ctx<'_>, pid: Pid, a: &mut kfd_ioctl_criu_args) -> Result<(), Errno> {
    if a.devices == 0 || a.bos == 0 || a.priv_data == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let max_gpu = ctx.sim.config.max_gpu_instance;
    let sim = ctx.sim;
    let p = proc_mut(ctx.st, pid)?;
    if p.pdds.is_empty() {
        return Err(Errno(libc::ENODEV));
    }
    if !p.queues_paused {
        return Err(Errno(libc::EINVAL));
    }
    let c = counts(max_gpu, p)?;
    if c.devices != a.num_devices
        || c.bos != a.num_bos
        || c.objects != a.num_objects
        || c.priv_size != a.priv_data_size
    {
        return Err(Errno(libc::EINVAL));
    }
    // Devices.
    let mut devices = Vec::new();
    for pdd in &p.pdds {
        let bucket = kfd_criu_device_bucket {
            user_gpu_id: pdd.user_gpu_id,
            actual_gpu_id: sim.gpus[pdd.gpu].id(),
            drm_fd: 0,
            pad: 0,
        };
        devices.extend_from_slice(bucket.as_bytes());
    }
    copy_to_user(a.devices, &devices)?;
    // Private data: process and device records, the BO hole, then objects.
    let mut w = Writer::default();
    write_process(&mut w, p.xnack);
    w.zeros((DEVICE_RECORD * u64::from(c.devices)) as usize);
    let bo_hole = w.buf.len();
    w.zeros((bo_record_size(max_gpu) * u64::from(c.bos)) as usize);
    for pdd_idx in 0..p.pdds.len() {
        for q in p.queues.values().filter(|q| q.pdd == pdd_idx) {
            QueueRecord {
                q_address: q.ring_base,
                q_size: q.ring_size,
                read_ptr_addr: q.read_ptr,
                write_ptr_addr: q.write_ptr,
                doorbell_off: 0,
                eop_ring_buffer_address: q.eop_addr,
                ctx_save_restore_area_address: q.ctx_save_addr,
                gpu_id: p.pdds[q.pdd].user_gpu_id,
                ktype: q.ktype,
                format: q.format,
                q_id: q.q_id,
                priority: q.priority,
                q_percent: q.percent,
                doorbell_id: q.doorbell_id,
                gws: u32::from(q.gws),
                sdma_id: q.sdma_id,
                eop_ring_buffer_size: q.eop_size,
                ctx_save_restore_area_size: q.ctx_save_size,
                ctl_stack_size: q.ctl_stack.len() as u32,
                mqd_size: q.mqd.len() as u32,
            }
            .write(&mut w);
            w.bytes(&q.mqd);
            w.bytes(&q.ctl_stack);
        }
    }
    let page_handle = match &p.signal_page {
        Some(SignalPage::User { handle, .. }) => *handle,
        _ => 0,
    };
    for (i, ev) in p.events.values().enumerate() {
        EventRecord {
            user_handle: if i == 0 { page_handle } else { 0 },
            event_id: ev.id,
            auto_reset: u32::from(ev.auto_reset),
            etype: ev.etype,
            signaled: u32::from(ev.signaled),
            exception: ev.exception,
        }
        .write(&mut w);
    }
    for r in &p.svm {
        let mut attrs = vec![
            (KFD_IOCTL_SVM_ATTR_PREFERRED_LOC, r.preferred_loc),
            (KFD_IOCTL_SVM_ATTR_PREFETCH_LOC, r.prefetch_loc),
            (KFD_IOCTL_SVM_ATTR_SET_FLAGS, r.flags),
            (KFD_IOCTL_SVM_ATTR_GRANULARITY, r.granularity),
        ];
        for (i, pdd) in p.pdds.iter().enumerate() {
            attrs.push((r.access[i], pdd.user_gpu_id));
        }
        SvmRecord {
            start_pages: r.start / PAGE_SIZE,
            size_pages: r.size / PAGE_SIZE,
            attrs,
        }
        .write(&mut w);
    }
    // BOs last.
    let mut plan = Vec::new();
    for (pdd_idx, pdd) in p.pdds.iter().enumerate() {
        for (&slot, mem) in pdd.idr.iter().filter(|(_, m)| checkpointed(m.va)) {
            let mapped: Vec<u32> = mem.mapped.iter().map(|&i| p.pdds[i].user_gpu_id).collect();
            plan.push((
                pdd_idx,
                slot,
                mem.clone(),
                pdd.user_gpu_id,
                sim.gpus[pdd.gpu].id(),
                mapped,
            ));
        }
    }
    let mut buckets = Vec::new();
    let mut records = Writer::default();
    let mut fds = Vec::new();
    for (_pdd, slot, mem, user_id, actual_id, mapped) in plan {
        let Some(bo) = ctx.st.bos.get(mem.bo) else {
            release_fds(&fds);
            return Err(Errno(libc::EINVAL));
        };
        let (offset, exportable) = match bo.domain {
            Domain::Doorbell => (KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(actual_id), false),
            Domain::Mmio => (KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID(actual_id), false),
            Domain::UserPtr => (bo.mmap_offset, false),
            Domain::Vram | Domain::Gtt => (bo.mmap_offset, true),
        };
        let dmabuf_fd = if exportable {
            let writable = mem.flags & KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE != 0;
            match export_fd(ctx.st, mem.bo, writable, false) {
                Ok(fd) => {
                    fds.push(fd);
                    fd as u32
                }
                Err(e) => {
                    release_fds(&fds);
                    return Err(e);
                }
            }
        } else {
            KFD_INVALID_FD
        };
        let bucket = kfd_criu_bo_bucket {
            addr: mem.va,
            size: mem.size,
            offset,
            restored_offset: 0,
            gpu_id: user_id,
            alloc_flags: mem.flags,
            dmabuf_fd,
            pad: 0,
        };
        buckets.extend_from_slice(bucket.as_bytes());
        BoRecord {
            user_addr: mem.user_addr,
            idr_handle: slot,
            mapped_gpuids: mapped,
        }
        .write(&mut records, max_gpu);
    }
    w.buf[bo_hole..bo_hole + records.buf.len()].copy_from_slice(&records.buf);
    let written = copy_to_user(a.bos, &buckets).and_then(|()| copy_to_user(a.priv_data, &w.buf));
    if let Err(e) = written {
        release_fds(&fds);
        return Err(e);
    }
    Ok(())
}

fn unpause(ctx: &mut Ctx<'_>, pid: Pid) -> Result<(), Errno> {
    if !proc_mut(ctx.st, pid)?.queues_paused {
        return Err(Errno(libc::EINVAL));
    }
    // A failed queue restore is returned and leaves the process paused.
    restore_all(ctx.st, pid)?;
    proc_mut(ctx.st, pid)?.queues_paused = false;
    Ok(())
}

fn restore(ctx: &mut Ctx<'_>, pid: Pid, a: &mut kfd_ioctl_criu_args) -> Result<(), Errno> {
    if (a.num_bos > 0 && a.bos == 0)
        || a.devices == 0
        || a.priv_data == 0
        || a.priv_data_size == 0
        || a.num_devices == 0
    {
        return Err(Errno(libc::EINVAL));
    }
    // 1. Evict; the RESUME worker brings the queues back.
    evict_all(ctx, pid)?;
    let mut r = UserReader::new(a.priv_data, a.priv_data_size);
    // 2. Process record.
    let rec = r.take(PROCESS_RECORD)?;
    if rd32(&rec, 0) != KFD_CRIU_PRIV_VERSION {
        return Err(Errno(libc::EINVAL));
    }
    let xnack = rd32(&rec, 4) == 1;
    let sim = ctx.sim;
    let p = proc_mut(ctx.st, pid)?;
    if xnack && !super::xnack_capable(sim, p) {
        return Err(Errno(libc::EPERM));
    }
    p.xnack = xnack;
    // 3. Devices.
    restore_devices(ctx, pid, a, &mut r)?;
    // 4. BOs.
    restore_bos(ctx, pid, a, &mut r)?;
    // 5. Objects.
    let devices = proc_mut(ctx.st, pid)?.pdds.len();
    for _ in 0..a.num_objects {
        let tag = rd32(&r.peek(4)?, 0);
        match tag {
            OBJ_QUEUE => restore_queue(ctx, pid, &mut r)?,
            OBJ_EVENT => restore_event(ctx.st, pid, &mut r)?,
            OBJ_SVM => {
                let b = r.take(svm_record_size(devices))?;
                let rec = SvmRecord::read(&b, devices);
                restore_svm_record(ctx.st, pid, &rec)?;
            }
            _ => return Err(Errno(libc::EINVAL)),
        }
    }
    // 6. Everything consumed exactly.
    if r.pos != a.priv_data_size {
        return Err(Errno(libc::EINVAL));
    }
    Ok(())
}

fn restore_devices(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    a: &kfd_ioctl_criu_args,
    r: &mut UserReader,
) -> Result<(), Errno> {
    let n = proc_mut(ctx.st, pid)?.pdds.len();
    if a.num_devices as usize != n {
        return Err(Errno(libc::EINVAL));
    }
    r.need(DEVICE_RECORD * u64::from(a.num_devices))?;
    let raw = copy_from_user(a.devices, n * std::mem::size_of::<kfd_criu_device_bucket>())?;
    let buckets: Vec<kfd_criu_device_bucket> = raw
        .chunks_exact(std::mem::size_of::<kfd_criu_device_bucket>())
        .filter_map(|c| kfd_criu_device_bucket::read_from_bytes(c).ok())
        .collect();
    for b in &buckets {
        if b.user_gpu_id == 0 {
            return Err(Errno(libc::EINVAL));
        }
        let gpu = ctx
            .sim
            .gpus
            .iter()
            .position(|g| g.id() == b.actual_gpu_id)
            .ok_or(Errno(libc::EINVAL))?;
        let p = proc_mut(ctx.st, pid)?;
        let pdd = p.pdd_by_gpu(gpu).ok_or(Errno(libc::EINVAL))?;
        p.pdds[pdd].user_gpu_id = b.user_gpu_id;
        if p.pdds[pdd].drm_file.is_some() {
            return Err(Errno(libc::EINVAL));
        }
        let drm = i32::try_from(b.drm_fd)
            .ok()
            .and_then(|fd| crate::kernel::user_fd(fd).ok())
            .ok_or(Errno(libc::EINVAL))?;
        let key = FileKey::of_raw(drm.raw()).map_err(|_| Errno(libc::EINVAL))?;
        init_vm(ctx, pid, pdd, key, drm.raw()).map_err(|_| Errno(libc::EINVAL))?;
        let sim = ctx.sim;
        super::doorbell_page(sim, proc_mut(ctx.st, pid)?, pdd)?;
    }
    r.skip(DEVICE_RECORD * u64::from(a.num_devices))
}

fn restore_bos(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    a: &kfd_ioctl_criu_args,
    r: &mut UserReader,
) -> Result<(), Errno> {
    let max_gpu = ctx.sim.config.max_gpu_instance;
    let rec_size = bo_record_size(max_gpu);
    r.need(rec_size * u64::from(a.num_bos))?;
    let bucket_size = std::mem::size_of::<kfd_criu_bo_bucket>();
    let raw = copy_from_user(a.bos, a.num_bos as usize * bucket_size)?;
    let mut buckets: Vec<kfd_criu_bo_bucket> = raw
        .chunks_exact(bucket_size)
        .filter_map(|c| kfd_criu_bo_bucket::read_from_bytes(c).ok())
        .collect();
    let mut records = Vec::with_capacity(buckets.len());
    for _ in 0..a.num_bos {
        records.push(BoRecord::read(&r.take(rec_size)?, max_gpu));
    }
    proc_mut(ctx.st, pid)?.userptr_blocked = true;
    let mut fds = Vec::new();
    for (bucket, rec) in buckets.iter_mut().zip(&records) {
        if let Err(e) = restore_bo(ctx, pid, bucket, rec) {
            release_fds(&fds);
            return Err(e);
        }
        if bucket.dmabuf_fd != KFD_INVALID_FD {
            fds.push(bucket.dmabuf_fd as i32);
        }
    }
    let out: Vec<u8> = buckets.iter().flat_map(|b| b.as_bytes().to_vec()).collect();
    if let Err(e) = copy_to_user(a.bos, &out) {
        release_fds(&fds);
        return Err(e);
    }
    Ok(())
}

fn restore_bo(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    bucket: &mut kfd_criu_bo_bucket,
    rec: &BoRecord,
) -> Result<(), Errno> {
    let sim = ctx.sim;
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(bucket.gpu_id).ok_or(Errno(libc::ENODEV))?;
    let gpu = p.pdds[pdd].gpu;
    let actual = sim.gpus[gpu].id();
    let flags = bucket.alloc_flags;
    let domain = super::memory::domain_of(flags)?;
    match domain {
        Domain::Doorbell if bucket.size != sim.gpus[gpu].doorbell_slice => {
            return Err(Errno(libc::EINVAL))
        }
        Domain::Mmio if bucket.size != PAGE_SIZE => return Err(Errno(libc::EINVAL)),
        _ => {}
    }
    let req = NewAlloc {
        pdd,
        va: bucket.addr,
        size: bucket.size,
        flags,
        user_addr: if domain == Domain::UserPtr {
            rec.user_addr
        } else {
            0
        },
        userptr_valid: false,
    };
    let (bo, size) = create_bo(ctx, pid, &req)?;
    install(ctx.st, pid, &req, bo, size, Some(rec.idr_handle), false)?;
    match domain {
        Domain::Doorbell => {
            bucket.restored_offset = KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(actual)
        }
        Domain::Mmio => bucket.restored_offset = KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID(actual),
        Domain::Vram | Domain::Gtt => {
            bucket.restored_offset = ctx.st.bos.get(bo).map(|b| b.mmap_offset).unwrap_or(0);
        }
        Domain::UserPtr => {}
    }
    let limit = proc_mut(ctx.st, pid)?
        .pdds
        .len()
        .min(rec.mapped_gpuids.len());
    for &id in rec.mapped_gpuids[..limit].iter().take_while(|&&id| id != 0) {
        let peer = proc_mut(ctx.st, pid)?
            .pdd_by_user_id(id)
            .ok_or(Errno(libc::EINVAL))?;
        map_checked(ctx.st, pid, pdd, rec.idr_handle, peer)?;
    }
    bucket.dmabuf_fd = if matches!(domain, Domain::Vram | Domain::Gtt) {
        export_fd(ctx.st, bo, true, false)? as u32
    } else {
        KFD_INVALID_FD
    };
    Ok(())
}

fn restore_queue(ctx: &mut Ctx<'_>, pid: Pid, r: &mut UserReader) -> Result<(), Errno> {
    let h = QueueRecord::read(&r.take(QUEUE_HEADER)?);
    let sim = ctx.sim;
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(h.gpu_id).ok_or(Errno(libc::EINVAL))?;
    let gpu = &sim.gpus[p.pdds[pdd].gpu];
    if h.ktype >= super::queue::KFD_QUEUE_TYPE_MAX
        || (h.ktype != KFD_QUEUE_TYPE_COMPUTE && !is_sdma(h.ktype))
    {
        return Err(Errno(libc::EINVAL));
    }
    if h.mqd_size as usize != mqd_size(gpu, h.ktype) {
        return Err(Errno(libc::EINVAL));
    }
    let blob = r.take(u64::from(h.mqd_size) + u64::from(h.ctl_stack_size))?;
    if h.q_id >= MAX_QUEUES_PER_PROCESS {
        return Err(Errno(libc::EINVAL));
    }
    if p.queues.contains_key(&h.q_id) {
        return Err(Errno(libc::ENOSPC));
    }
    if is_sdma(h.ktype) {
        if h.sdma_id >= sdma_slots(gpu) {
            return Err(Errno(libc::EINVAL));
        }
        if p.pdds[pdd].sdma_ids.contains(&h.sdma_id) {
            return Err(Errno(libc::EBUSY));
        }
        if h.doorbell_id != sdma_doorbell(h.sdma_id) {
            return Err(Errno(libc::EINVAL));
        }
    } else if gpu.is_soc15() {
        if h.doorbell_id >= SDMA_DOORBELL_BASE || p.pdds[pdd].doorbell_ids.contains(&h.doorbell_id)
        {
            return Err(Errno(libc::EINVAL));
        }
    } else if h.doorbell_id != h.q_id {
        return Err(Errno(libc::EINVAL));
    }
    let (mqd, ctl) = blob.split_at(h.mqd_size as usize);
    let q = Queue {
        q_id: h.q_id,
        pdd,
        ktype: h.ktype,
        format: h.format,
        ring_base: h.q_address,
        ring_size: h.q_size,
        read_ptr: h.read_ptr_addr,
        write_ptr: h.write_ptr_addr,
        priority: h.priority,
        percent: h.q_percent,
        doorbell_id: h.doorbell_id,
        sdma_id: if is_sdma(h.ktype) { h.sdma_id } else { 0 },
        eop_addr: h.eop_ring_buffer_address,
        eop_size: h.eop_ring_buffer_size,
        ctx_save_addr: h.ctx_save_restore_area_address,
        ctx_save_size: h.ctx_save_restore_area_size,
        gws: h.gws != 0,
        cu_mask: Vec::new(),
        mqd: mqd.to_vec(),
        ctl_stack: ctl.to_vec(),
    };
    super::doorbell_page(sim, p, pdd)?;
    super::queue::insert_queue(p, q);
    Ok(())
}

fn restore_event(st: &mut State, pid: Pid, r: &mut UserReader) -> Result<(), Errno> {
    let rec = EventRecord::read(&r.take(EVENT_RECORD)?);
    if rec.user_handle != 0 {
        let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
        if p.signal_page.is_some() {
            return Err(Errno(libc::EINVAL));
        }
        super::event::set_user_page(st, pid, rec.user_handle).map_err(|_| Errno(libc::EINVAL))?;
    }
    let keep = super::event::is_signal_type(rec.etype)
        || rec.etype == KFD_IOC_EVENT_MEMORY
        || rec.etype == KFD_IOC_EVENT_HW_EXCEPTION;
    if !keep {
        // Other event types (node change, ...) are dropped silently.
        return Ok(());
    }
    let id = super::event::add_event(st, pid, rec.etype, rec.auto_reset != 0, Some(rec.event_id))?;
    let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
    if let Some(ev) = p.events.get_mut(&id) {
        ev.exception = rec.exception;
        ev.signaled = rec.signaled != 0;
    }
    Ok(())
}

/// Queues an SVM record for RESUME, turning the per-device access pairs
/// back into attributes.
fn restore_svm_record(st: &mut State, pid: Pid, rec: &SvmRecord) -> Result<(), Errno> {
    let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
    let mut range = super::process::SvmRange {
        start: rec
            .start_pages
            .checked_mul(PAGE_SIZE)
            .ok_or(Errno(libc::EINVAL))?,
        size: rec
            .size_pages
            .checked_mul(PAGE_SIZE)
            .ok_or(Errno(libc::EINVAL))?,
        preferred_loc: KFD_IOCTL_SVM_LOCATION_UNDEFINED,
        prefetch_loc: KFD_IOCTL_SVM_LOCATION_UNDEFINED,
        flags: 0,
        granularity: super::svm::DEFAULT_GRANULARITY,
        access: vec![KFD_IOCTL_SVM_ATTR_NO_ACCESS; p.pdds.len()],
    };
    for &(t, v) in &rec.attrs {
        match t {
            KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => range.preferred_loc = v,
            KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => range.prefetch_loc = v,
            KFD_IOCTL_SVM_ATTR_SET_FLAGS => range.flags = v,
            KFD_IOCTL_SVM_ATTR_GRANULARITY => range.granularity = v,
            KFD_IOCTL_SVM_ATTR_ACCESS
            | KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
            | KFD_IOCTL_SVM_ATTR_NO_ACCESS => {
                let i = p.pdd_by_user_id(v).ok_or(Errno(libc::EINVAL))?;
                range.access[i] = t;
            }
            _ => return Err(Errno(libc::EINVAL)),
        }
    }
    p.svm_pending.push(range);
    Ok(())
}

fn resume(ctx: &mut Ctx<'_>, a: &kfd_ioctl_criu_args) -> Result<(), Errno> {
    let target = Pid(a.pid);
    let p = ctx.st.kfd_mut(target).ok_or(Errno(libc::ESRCH))?;
    // 1. Replay the SVM ranges collected at RESTORE, as SET_ATTR would.
    for range in std::mem::take(&mut p.svm_pending) {
        let mut attrs = vec![
            (KFD_IOCTL_SVM_ATTR_PREFERRED_LOC, range.preferred_loc),
            (KFD_IOCTL_SVM_ATTR_SET_FLAGS, range.flags),
            (KFD_IOCTL_SVM_ATTR_CLR_FLAGS, !range.flags),
            (KFD_IOCTL_SVM_ATTR_GRANULARITY, range.granularity),
        ];
        // An undefined prefetch location is replaced by a harmless SET_FLAGS=0.
        attrs.push(if range.prefetch_loc == KFD_IOCTL_SVM_LOCATION_UNDEFINED {
            (KFD_IOCTL_SVM_ATTR_SET_FLAGS, 0)
        } else {
            (KFD_IOCTL_SVM_ATTR_PREFETCH_LOC, range.prefetch_loc)
        });
        for (i, &t) in range.access.iter().enumerate() {
            attrs.push((t, p.pdds[i].user_gpu_id));
        }
        super::svm::set_attr(p, range.start, range.size, &attrs)?;
    }
    // 2. Userptr notifications must have been blocked by RESTORE.
    if !p.userptr_blocked {
        return Err(Errno(libc::EINVAL));
    }
    p.userptr_blocked = false;
    p.resumed += 1;
    // The restore worker: revalidate userptrs, restart the queues.
    restore_once(p);
    let bos: Vec<_> = p
        .pdds
        .iter()
        .flat_map(|pdd| pdd.idr.values().map(|m| m.bo))
        .collect();
    for id in bos {
        if let Some(bo) = ctx.st.bos.get_mut(id) {
            if let crate::hw::bo::Backing::UserPtr { valid, .. } = &mut bo.backing {
                *valid = true;
            }
        }
    }
    // A host process restored by real CRIU maps CRIU's copies of its BOs'
    // memory: they become the BOs' memory (see crate::remote).
    if ctx.st.processes.get(&target).is_some_and(|p| p.host) {
        super::adopt::adopt_restored_mappings(ctx.st, target)?;
    }
    Ok(())
}
