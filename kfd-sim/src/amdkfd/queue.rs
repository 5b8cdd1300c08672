//! User-mode queues: CREATE/DESTROY/UPDATE_QUEUE, SET_CU_MASK,
//! GET_QUEUE_WAVE_STATE and ALLOC_QUEUE_GWS, plus the simulated MQD and
//! control stack that CRIU checkpoints.
//!
//! A queue's MQD is a blob of the device's MQD size (2 KiB per XCC for
//! compute, 512 B for SDMA, the v9 sizes) whose first 64 bytes hold the
//! simulator's own queue descriptor: magic, q_id, type, ring, pointers,
//! doorbell and a dispatch counter the workload advances; the engine
//! registers a preemption saves follow it (`crate::hw::queues::ring`). A restored
//! queue continues from the counter and the registers in its restored MQD.
//! Doorbell ids follow SOC15 rules: compute queues take the lowest free id
//! below 0x100, SDMA queues the id their SDMA slot dictates (0x100 + 2 ×
//! sdma_id). This module never executes queue contents: after each change
//! it lets `crate::hw::queues` schedule the process's queues.

use std::ffi::c_int;

use kfd_sys::*;

use super::process::{KfdProcess, Queue};
use super::{bind, proc_mut};
use crate::kernel::{copy_from_user, copy_to_user, typed, Ctx, Gpu, Pid};
use ::kfd::Errno;

/// Kernel queue types (`enum kfd_queue_type`).
pub(crate) const KFD_QUEUE_TYPE_COMPUTE: u32 = 0;
pub(crate) const KFD_QUEUE_TYPE_SDMA: u32 = 1;
pub(crate) const KFD_QUEUE_TYPE_SDMA_XGMI: u32 = 4;
/// `KFD_QUEUE_TYPE_MAX` (compute, SDMA, HIQ, DIQ, SDMA_XGMI, SDMA_BY_ENG_ID).
pub(crate) const KFD_QUEUE_TYPE_MAX: u32 = 6;
/// Queue formats.
pub(crate) const KFD_QUEUE_FORMAT_PM4: u32 = 0;
pub(crate) const KFD_QUEUE_FORMAT_AQL: u32 = 1;
/// `KFD_MAX_NUM_OF_QUEUES_PER_PROCESS`: q_ids are below this.
pub(crate) const MAX_QUEUES_PER_PROCESS: u32 = 1024;
/// MQD sizes (v9): compute per XCC, SDMA.
pub(crate) const COMPUTE_MQD_SIZE: usize = 2048;
pub(crate) const SDMA_MQD_SIZE: usize = 512;
/// First doorbell id of SDMA queues on SOC15.
pub(crate) const SDMA_DOORBELL_BASE: u32 = 0x100;
/// Largest control stack the simulator accepts (bytes).
pub(crate) const MAX_CTL_STACK: u32 = 16 << 20;
const MQD_MAGIC: &[u8; 8] = b"SIMMQD01";

/// Whether `ktype` is an SDMA type.
pub(crate) fn is_sdma(ktype: u32) -> bool {
    ktype == KFD_QUEUE_TYPE_SDMA || ktype == KFD_QUEUE_TYPE_SDMA_XGMI
}

/// The device's MQD size for a queue type.
pub(crate) fn mqd_size(gpu: &Gpu, ktype: u32) -> usize {
    if is_sdma(ktype) {
        SDMA_MQD_SIZE
    } else {
        COMPUTE_MQD_SIZE * gpu.num_xcc as usize
    }
}

/// The doorbell id an SDMA slot dictates.
pub(crate) fn sdma_doorbell(sdma_id: u32) -> u32 {
    SDMA_DOORBELL_BASE + 2 * sdma_id
}

/// Number of SDMA queue slots of a GPU.
pub(crate) fn sdma_slots(gpu: &Gpu) -> u32 {
    gpu.sdma_engines.saturating_mul(gpu.sdma_queues_per_engine)
}

fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

impl Queue {
    /// Writes the simulator's descriptor into every XCC's MQD, keeping the
    /// dispatch counter.
    pub(crate) fn write_mqd(&mut self, xcc_size: usize) {
        let dispatched = self.dispatched();
        let n = (self.mqd.len() / xcc_size.max(1)).max(1);
        for x in 0..n {
            let base = x * xcc_size;
            if self.mqd.len() < base + 64 {
                break;
            }
            let m = &mut self.mqd[base..base + 64];
            m[..8].copy_from_slice(MQD_MAGIC);
            put_u32(m, 8, self.q_id);
            put_u32(m, 12, self.ktype);
            put_u64(m, 16, self.ring_base);
            put_u64(m, 24, self.ring_size);
            put_u64(m, 32, self.read_ptr);
            put_u64(m, 40, self.write_ptr);
            put_u32(m, 48, self.doorbell_id);
            put_u32(m, 52, self.priority);
            put_u64(m, 56, dispatched);
        }
    }

    /// The dispatch counter stored in the MQD.
    pub(crate) fn dispatched(&self) -> u64 {
        get_u64(&self.mqd, 56)
    }

    /// Advances the dispatch counter by one packet and refreshes the wave
    /// state in the control stack (deterministic in the counter).
    pub(crate) fn advance(&mut self) {
        let next = self.dispatched().wrapping_add(1);
        if self.mqd.len() >= 64 {
            put_u64(&mut self.mqd, 56, next);
        }
        if self.ctl_stack.len() >= 16 {
            let slot = (next as usize * 8) % (self.ctl_stack.len() - 8);
            let word = next.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(self.q_id);
            self.ctl_stack[slot..slot + 8].copy_from_slice(&word.to_le_bytes());
        }
    }

    /// Whether the queue can run at all (ring set up, non-zero percentage).
    pub(crate) fn is_active(&self) -> bool {
        self.ring_size > 0 && self.ring_base != 0 && self.percent > 0
    }
}

/// `KFD_IOC_QUEUE_TYPE_*` → (kernel type, format), `EINVAL` for others.
fn kernel_type(user: u32) -> Result<(u32, u32), Errno> {
    match user {
        KFD_IOC_QUEUE_TYPE_COMPUTE => Ok((KFD_QUEUE_TYPE_COMPUTE, KFD_QUEUE_FORMAT_PM4)),
        KFD_IOC_QUEUE_TYPE_SDMA => Ok((KFD_QUEUE_TYPE_SDMA, KFD_QUEUE_FORMAT_PM4)),
        KFD_IOC_QUEUE_TYPE_COMPUTE_AQL => Ok((KFD_QUEUE_TYPE_COMPUTE, KFD_QUEUE_FORMAT_AQL)),
        KFD_IOC_QUEUE_TYPE_SDMA_XGMI => Ok((KFD_QUEUE_TYPE_SDMA_XGMI, KFD_QUEUE_FORMAT_PM4)),
        // SDMA_BY_ENG_ID (1.16) is not simulated.
        _ => Err(Errno(libc::EINVAL)),
    }
}

/// The lowest free compute doorbell id of pdd `pdd` (SOC15) or the q_id (older).
fn compute_doorbell(gpu: &Gpu, p: &KfdProcess, pdd: usize, q_id: u32) -> Result<u32, Errno> {
    if !gpu.is_soc15() {
        return Ok(q_id);
    }
    (0..SDMA_DOORBELL_BASE)
        .find(|id| !p.pdds[pdd].doorbell_ids.contains(id))
        .ok_or(Errno(libc::ENOSPC))
}

/// Inserts a queue after the id checks, reserving its doorbell and SDMA ids.
pub(crate) fn insert_queue(p: &mut KfdProcess, q: Queue) {
    let pdd = &mut p.pdds[q.pdd];
    pdd.doorbell_ids.insert(q.doorbell_id);
    if is_sdma(q.ktype) {
        pdd.sdma_ids.insert(q.sdma_id);
    }
    p.queues.insert(q.q_id, q);
}

pub(crate) fn create_queue(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_create_queue_args| *a);
    if a.queue_percentage & 0xFF > KFD_MAX_QUEUE_PERCENTAGE
        || a.queue_priority > KFD_MAX_QUEUE_PRIORITY
    {
        return Err(Errno(libc::EINVAL));
    }
    if a.ring_size != 0 && !a.ring_size.is_power_of_two() {
        return Err(Errno(libc::EINVAL));
    }
    let ring_size = a.ring_size.max(KFD_MIN_QUEUE_RING_SIZE);
    let (ktype, format) = kernel_type(a.queue_type)?;
    if a.ctl_stack_size > MAX_CTL_STACK {
        return Err(Errno(libc::EINVAL));
    }
    let sim = ctx.sim;
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::EINVAL))?;
    bind(p, pdd).map_err(|_| Errno(libc::ESRCH))?;
    let gpu = &sim.gpus[p.pdds[pdd].gpu];
    super::doorbell_page(sim, p, pdd)?;
    let q_id = (0..MAX_QUEUES_PER_PROCESS)
        .find(|id| !p.queues.contains_key(id))
        .ok_or(Errno(libc::ENOSPC))?;
    let (sdma_id, doorbell_id) = if is_sdma(ktype) {
        let id = (0..sdma_slots(gpu))
            .find(|id| !p.pdds[pdd].sdma_ids.contains(id))
            .ok_or(Errno(libc::ENOMEM))?;
        (id, sdma_doorbell(id))
    } else {
        (0, compute_doorbell(gpu, p, pdd, q_id)?)
    };
    let mut q = Queue {
        q_id,
        pdd,
        ktype,
        format,
        ring_base: a.ring_base_address,
        ring_size: u64::from(ring_size),
        read_ptr: a.read_pointer_address,
        write_ptr: a.write_pointer_address,
        priority: a.queue_priority,
        percent: a.queue_percentage & 0xFF,
        doorbell_id,
        sdma_id,
        eop_addr: a.eop_buffer_address,
        eop_size: u32::try_from(a.eop_buffer_size).unwrap_or(u32::MAX),
        ctx_save_addr: a.ctx_save_restore_address,
        ctx_save_size: a.ctx_save_restore_size,
        gws: false,
        cu_mask: Vec::new(),
        mqd: vec![0; mqd_size(gpu, ktype)],
        ctl_stack: if is_sdma(ktype) {
            Vec::new()
        } else {
            vec![0; a.ctl_stack_size as usize]
        },
    };
    q.write_mqd(if is_sdma(ktype) {
        SDMA_MQD_SIZE
    } else {
        COMPUTE_MQD_SIZE
    });
    let slice_offset = if gpu.is_soc15() {
        u64::from(doorbell_id) * 8
    } else {
        0
    };
    insert_queue(p, q);
    crate::amdkfd::scheduling::sync_process(sim, ctx.st, pid);
    typed(buf, |out: &mut kfd_ioctl_create_queue_args| {
        out.queue_id = q_id;
        out.ring_size = ring_size;
        out.doorbell_offset = KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(a.gpu_id) | slice_offset;
        Ok(0)
    })
}

/// Removes queue `q_id`, releasing its ids.
pub(crate) fn remove_queue(p: &mut KfdProcess, q_id: u32) -> Result<Queue, Errno> {
    let q = p.queues.remove(&q_id).ok_or(Errno(libc::EINVAL))?;
    let pdd = &mut p.pdds[q.pdd];
    pdd.doorbell_ids.remove(&q.doorbell_id);
    if is_sdma(q.ktype) {
        pdd.sdma_ids.remove(&q.sdma_id);
    }
    Ok(q)
}

pub(crate) fn destroy_queue(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let q_id = typed(buf, |a: &mut kfd_ioctl_destroy_queue_args| a.queue_id);
    remove_queue(proc_mut(ctx.st, pid)?, q_id)?;
    // The queue is preempted and its engine stops before the call returns.
    crate::amdkfd::scheduling::sync_process(ctx.sim, ctx.st, pid);
    Ok(0)
}

pub(crate) fn update_queue(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_update_queue_args| *a);
    if a.queue_percentage & 0xFF > KFD_MAX_QUEUE_PERCENTAGE
        || a.queue_priority > KFD_MAX_QUEUE_PRIORITY
    {
        return Err(Errno(libc::EINVAL));
    }
    if a.ring_size != 0 && !a.ring_size.is_power_of_two() {
        return Err(Errno(libc::EINVAL));
    }
    let q = proc_mut(ctx.st, pid)?
        .queues
        .get_mut(&a.queue_id)
        .ok_or(Errno(libc::EFAULT))?;
    q.ring_base = a.ring_base_address;
    q.ring_size = u64::from(a.ring_size);
    q.percent = a.queue_percentage & 0xFF;
    q.priority = a.queue_priority;
    let xcc = if is_sdma(q.ktype) {
        SDMA_MQD_SIZE
    } else {
        COMPUTE_MQD_SIZE
    };
    q.write_mqd(xcc);
    crate::amdkfd::scheduling::sync_process(ctx.sim, ctx.st, pid);
    Ok(0)
}

pub(crate) fn set_cu_mask(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_set_cu_mask_args| *a);
    if a.num_cu_mask == 0 || a.num_cu_mask % 32 != 0 {
        return Err(Errno(libc::EINVAL));
    }
    // The kernel caps the mask at 32 × 32 CUs and ignores the rest.
    let words = (a.num_cu_mask / 32).min(32) as usize;
    let bytes = copy_from_user(a.cu_mask_ptr, words * 4)?;
    let mask: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let q = proc_mut(ctx.st, pid)?
        .queues
        .get_mut(&a.queue_id)
        .ok_or(Errno(libc::EFAULT))?;
    q.cu_mask = mask;
    Ok(0)
}

pub(crate) fn get_queue_wave_state(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    buf: &mut [u8],
) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_get_queue_wave_state_args| *a);
    let p = proc_mut(ctx.st, pid)?;
    let q = p.queues.get(&a.queue_id).ok_or(Errno(libc::EINVAL))?;
    // Wave state can only be read from a compute queue that is not running.
    if q.ktype != KFD_QUEUE_TYPE_COMPUTE || (q.is_active() && p.queues_running(q.pdd)) {
        return Err(Errno(libc::EINVAL));
    }
    let stack = q.ctl_stack.clone();
    let save = q.ctx_save_size;
    copy_to_user(a.ctl_stack_address, &stack)?;
    typed(buf, |out: &mut kfd_ioctl_get_queue_wave_state_args| {
        out.ctl_stack_used_size = stack.len() as u32;
        out.save_area_used_size = save.saturating_sub(stack.len() as u32);
        Ok(0)
    })
}

pub(crate) fn alloc_queue_gws(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_alloc_queue_gws_args| *a);
    let sim = ctx.sim;
    let p = proc_mut(ctx.st, pid)?;
    let q = p.queues.get(&a.queue_id).ok_or(Errno(libc::EINVAL))?;
    let gpu = p.pdds[q.pdd].gpu;
    let node_gws = sim
        .system
        .node(sim.gpus[gpu].info.node_id)
        .map_or(0, |n| n.prop("num_gws"));
    if node_gws == 0 {
        return Err(Errno(libc::ENODEV));
    }
    let pdd = q.pdd;
    let want = a.num_gws != 0;
    if want
        && p.queues
            .values()
            .any(|o| o.pdd == pdd && o.gws && o.q_id != a.queue_id)
    {
        return Err(Errno(libc::EBUSY));
    }
    if let Some(q) = p.queues.get_mut(&a.queue_id) {
        q.gws = want;
    }
    typed(buf, |out: &mut kfd_ioctl_alloc_queue_gws_args| {
        out.first_gws = 0;
        Ok(0)
    })
}
