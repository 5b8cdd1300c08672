//! KFD memory ioctls: ALLOC/FREE/MAP/UNMAP, GET_DMABUF_INFO, IMPORT_DMABUF
//! and EXPORT_DMABUF, with the kernel's checks in the kernel's order (spec
//! §2.1, §3). Handles are `user_gpu_id << 32 | idr_slot`. This module never
//! copies BO contents.

use std::ffi::c_int;

use kfd_sys::*;

use super::process::{KfdMem, KfdProcess};
use super::{bind, proc_mut};
use crate::hw::bo::{BoId, Domain, PAGE_SIZE};
use crate::kernel::{copy_from_user, typed, Ctx, Pid, State};
use ::kfd::Errno;

/// `MAKE_HANDLE(gpu_id, idr)`.
pub(crate) fn make_handle(gpu_id: u32, slot: u32) -> u64 {
    (u64::from(gpu_id) << 32) | u64::from(slot)
}

/// `(GET_GPU_ID(handle), GET_IDR_HANDLE(handle))`.
pub(crate) fn split_handle(handle: u64) -> (u32, u32) {
    ((handle >> 32) as u32, handle as u32)
}

/// The memory domain selected by KFD allocation flags (checked in the
/// allocator's order), or `EINVAL` when no type bit is set.
pub(crate) fn domain_of(flags: u32) -> Result<Domain, Errno> {
    if flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 {
        Ok(Domain::Vram)
    } else if flags & KFD_IOC_ALLOC_MEM_FLAGS_GTT != 0 {
        Ok(Domain::Gtt)
    } else if flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
        Ok(Domain::UserPtr)
    } else if flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
        Ok(Domain::Doorbell)
    } else if flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0 {
        Ok(Domain::Mmio)
    } else {
        Err(Errno(libc::EINVAL))
    }
}

/// Whether `[va, va+size)` intersects an SVM range of the process.
pub(crate) fn overlaps_svm(p: &KfdProcess, va: u64, size: u64) -> bool {
    let end = va.saturating_add(size);
    p.svm.iter().any(|r| r.start < end && va < r.start + r.size)
}

/// What an allocation request becomes, before it is placed in the IDR.
pub(crate) struct NewAlloc {
    pub(crate) pdd: usize,
    pub(crate) va: u64,
    pub(crate) size: u64,
    pub(crate) flags: u32,
    pub(crate) user_addr: u64,
    /// Whether USERPTR pages are looked up now (false in CRIU RESTORE).
    pub(crate) userptr_valid: bool,
}

/// Creates the BO for an allocation (the part of
/// `amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu` after the chardev checks):
/// returns the BO and the real size. Doorbell/MMIO size rules are checked by
/// the callers, which differ in order.
pub(crate) fn create_bo(ctx: &mut Ctx<'_>, pid: Pid, req: &NewAlloc) -> Result<(BoId, u64), Errno> {
    let domain = domain_of(req.flags)?;
    let mut size = req.size;
    if req.flags & KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM != 0 {
        // The kernel allocates half and maps it twice (spec §2.1).
        size >>= 1;
    }
    let size = size.div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE;
    let gpu = proc_mut(ctx.st, pid)?.pdds[req.pdd].gpu;
    super::mem_limit::reserve(ctx.sim, &ctx.st.bos, gpu, domain, size)?;
    let sim = ctx.sim;
    let st: &mut State = ctx.st;
    let id = match domain {
        Domain::Vram | Domain::Gtt => st.bos.create_memory(gpu, size, domain, req.flags)?,
        Domain::UserPtr => {
            st.bos
                .create_userptr(gpu, req.user_addr, size, req.flags, req.userptr_valid)?
        }
        Domain::Doorbell => {
            let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
            let page = super::doorbell_page(sim, p, req.pdd)?;
            st.bos.create_aperture(gpu, size, domain, req.flags, page)?
        }
        Domain::Mmio => {
            let page = sim.gpus[gpu].mmio_page.clone();
            st.bos.create_aperture(gpu, size, domain, req.flags, page)?
        }
    };
    st.bos.mark_kfd_limit(id);
    Ok((id, size))
}

/// Places a new BO in pdd `req.pdd`'s IDR at `slot` (or the lowest free
/// one), grants its VM's render file mmap access, and accounts VRAM.
/// Returns the slot. A taken slot frees the BO and fails with `ENOMEM`
/// (the RESTORE rule); IDR exhaustion is `EFAULT`.
pub(crate) fn install(
    st: &mut State,
    pid: Pid,
    req: &NewAlloc,
    bo: BoId,
    size: u64,
    slot: Option<u32>,
    imported: bool,
) -> Result<u32, Errno> {
    let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
    let pdd = &mut p.pdds[req.pdd];
    let slot = match slot {
        Some(s) if pdd.idr.contains_key(&s) || s >= i32::MAX as u32 => Err(Errno(libc::ENOMEM)),
        Some(s) => Ok(s),
        None => pdd.free_slot().ok_or(Errno(libc::EFAULT)),
    };
    let slot = match slot {
        Ok(s) => s,
        Err(e) => {
            // The fresh BO has no handle yet: one reference taken and dropped frees it.
            st.bos.add_handle(bo);
            st.bos.drop_handle(bo);
            return Err(e);
        }
    };
    pdd.idr.insert(
        slot,
        KfdMem {
            bo,
            va: req.va,
            size,
            flags: req.flags,
            mapped: Default::default(),
            user_addr: req.user_addr,
            imported,
        },
    );
    if req.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 && !imported {
        pdd.vram_usage += size;
    }
    let drm_file = pdd.drm_file;
    st.bos.add_handle(bo);
    if let (Some(key), Some(b)) = (drm_file, st.bos.get_mut(bo)) {
        b.allowed_files.insert(key);
    }
    Ok(slot)
}

pub(crate) fn alloc_memory_of_gpu(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    buf: &mut [u8],
) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_alloc_memory_of_gpu_args| *a);
    if a.size == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let p = proc_mut(ctx.st, pid)?;
    if overlaps_svm(p, a.va_addr, a.size) {
        return Err(Errno(libc::EADDRINUSE));
    }
    let pdd = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::EINVAL))?;
    let gpu = p.pdds[pdd].gpu;
    let flags = a.flags;
    if flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC != 0
        && flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0
        && !ctx.sim.gpus[gpu].info.large_bar
    {
        return Err(Errno(libc::EINVAL));
    }
    bind(p, pdd)?;
    if flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 && a.size != ctx.sim.gpus[gpu].doorbell_slice {
        return Err(Errno(libc::EINVAL));
    }
    if flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL == 0
        && flags & KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP != 0
        && a.size != PAGE_SIZE
    {
        return Err(Errno(libc::EINVAL));
    }
    let domain = domain_of(flags)?;
    if domain == Domain::UserPtr && a.mmap_offset == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let req = NewAlloc {
        pdd,
        va: a.va_addr,
        size: a.size,
        flags,
        user_addr: if domain == Domain::UserPtr {
            a.mmap_offset
        } else {
            0
        },
        userptr_valid: true,
    };
    let (bo, size) = create_bo(ctx, pid, &req)?;
    let slot = install(ctx.st, pid, &req, bo, size, None, false)?;
    let offset = ctx.st.bos.get(bo).map(|b| b.mmap_offset).unwrap_or(0);
    typed(buf, |out: &mut kfd_ioctl_alloc_memory_of_gpu_args| {
        out.handle = make_handle(a.gpu_id, slot);
        out.mmap_offset = if domain == Domain::Mmio {
            // MMIO is mapped through /dev/kfd; the offset embeds the id as passed.
            KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID(a.gpu_id)
        } else {
            offset
        };
        Ok(0)
    })
}

/// Removes allocation `slot` of pdd `pdd` (not mapped anywhere).
pub(crate) fn release_slot(st: &mut State, pid: Pid, pdd: usize, slot: u32) -> Result<(), Errno> {
    let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
    let mem = p.pdds[pdd].idr.remove(&slot).ok_or(Errno(libc::EINVAL))?;
    if mem.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 && !mem.imported {
        p.pdds[pdd].vram_usage = p.pdds[pdd].vram_usage.saturating_sub(mem.size);
    }
    st.bos.drop_handle(mem.bo);
    Ok(())
}

pub(crate) fn free_memory_of_gpu(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    buf: &mut [u8],
) -> Result<c_int, Errno> {
    let handle = typed(buf, |a: &mut kfd_ioctl_free_memory_of_gpu_args| a.handle);
    let p = proc_mut(ctx.st, pid)?;
    if let Some(super::process::SignalPage::User { handle: h, .. }) = &p.signal_page {
        if *h == handle {
            return Err(Errno(libc::EPERM));
        }
    }
    let (gpu_id, slot) = split_handle(handle);
    let pdd = p.pdd_by_user_id(gpu_id).ok_or(Errno(libc::EINVAL))?;
    let mem = p.pdds[pdd].idr.get(&slot).ok_or(Errno(libc::EINVAL))?;
    if !mem.mapped.is_empty() {
        return Err(Errno(libc::EBUSY));
    }
    release_slot(ctx.st, pid, pdd, slot)?;
    Ok(0)
}

/// Maps allocation (`pdd`, `slot`) into the VM of pdd `peer`
/// (`amdgpu_amdkfd_gpuvm_map_memory_to_gpu`): already mapped is a no-op; a
/// misaligned VA or an overlap with another mapping of that VM is `EINVAL`.
pub(crate) fn map_one(p: &mut KfdProcess, pdd: usize, slot: u32, peer: usize) -> Result<(), Errno> {
    bind(p, peer)?;
    let mem = p.pdds[pdd].idr.get(&slot).ok_or(Errno(libc::ENOMEM))?;
    if mem.mapped.contains(&peer) {
        return Ok(());
    }
    if mem.va % PAGE_SIZE != 0 {
        return Err(Errno(libc::EINVAL));
    }
    let (va, end) = (mem.va, mem.va.saturating_add(mem.size));
    if p.pdds[peer].vm_overlap(va, end).is_some() {
        return Err(Errno(libc::EINVAL));
    }
    p.pdds[peer].vm_maps.insert(va, (end, pdd, slot));
    if let Some(mem) = p.pdds[pdd].idr.get_mut(&slot) {
        mem.mapped.insert(peer);
    }
    Ok(())
}

/// [`map_one`] after checking the peer VM's GEM_VA mappings: a KFD mapping
/// overlapping one made through GEM_VA on the same VM is `EINVAL` too
/// (spec §4.3: both live in one address space).
pub(crate) fn map_checked(
    st: &mut State,
    pid: Pid,
    pdd: usize,
    slot: u32,
    peer: usize,
) -> Result<(), Errno> {
    let p = st.kfd(pid).ok_or(Errno(libc::ESRCH))?;
    bind(p, peer)?;
    let mem = p.pdds[pdd].idr.get(&slot).ok_or(Errno(libc::ENOMEM))?;
    if !mem.mapped.contains(&peer) {
        let (va, end) = (mem.va, mem.va.saturating_add(mem.size));
        let overlap = p.pdds[peer]
            .drm_file
            .and_then(|key| st.render(key))
            .is_some_and(|r| r.drm.vm.iter().any(|m| m.start < end && va < m.end()));
        if overlap {
            return Err(Errno(libc::EINVAL));
        }
    }
    map_one(st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?, pdd, slot, peer)
}

fn map_or_unmap(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8], map: bool) -> Result<c_int, Errno> {
    // Both argument structs have the same layout.
    let a = typed(buf, |a: &mut kfd_ioctl_map_memory_to_gpu_args| *a);
    if a.n_devices == 0 || a.n_success > a.n_devices {
        return Err(Errno(libc::EINVAL));
    }
    let ids = copy_from_user(a.device_ids_array_ptr, a.n_devices as usize * 4)?;
    let ids: Vec<u32> = ids
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let p = proc_mut(ctx.st, pid)?;
    let (gpu_id, slot) = split_handle(a.handle);
    let pdd = p.pdd_by_user_id(gpu_id).ok_or(Errno(libc::EINVAL))?;
    if map {
        bind(p, pdd)?;
    }
    if !p.pdds[pdd].idr.contains_key(&slot) {
        return Err(Errno(if map { libc::ENOMEM } else { libc::EINVAL }));
    }
    let mut n_success = a.n_success;
    let mut result = Ok(0);
    for (i, &id) in ids.iter().enumerate().skip(a.n_success as usize) {
        let Some(peer) = proc_mut(ctx.st, pid)?.pdd_by_user_id(id) else {
            result = Err(Errno(libc::EINVAL));
            break;
        };
        let r = if map {
            map_checked(ctx.st, pid, pdd, slot, peer)
        } else {
            let p = proc_mut(ctx.st, pid)?;
            let unmapped = p.pdds[pdd]
                .idr
                .get_mut(&slot)
                .and_then(|mem| mem.mapped.remove(&peer).then_some(mem.va));
            match unmapped {
                Some(va) => {
                    p.pdds[peer].vm_maps.remove(&va);
                    Ok(())
                }
                None => Err(Errno(libc::EINVAL)),
            }
        };
        if let Err(e) = r {
            result = Err(e);
            break;
        }
        n_success = i as u32 + 1;
    }
    typed(buf, |out: &mut kfd_ioctl_map_memory_to_gpu_args| {
        out.n_success = n_success
    });
    result
}

pub(crate) fn map_memory_to_gpu(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    buf: &mut [u8],
) -> Result<c_int, Errno> {
    map_or_unmap(ctx, pid, buf, true)
}

pub(crate) fn unmap_memory_from_gpu(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    buf: &mut [u8],
) -> Result<c_int, Errno> {
    map_or_unmap(ctx, pid, buf, false)
}

/// Creates a dma-buf fd for `bo` (fault point `DMABUF_EXPORT`) and returns
/// the raw fd, now owned by the calling process.
pub(crate) fn export_fd(
    st: &mut State,
    bo: BoId,
    writable: bool,
    cloexec: bool,
) -> Result<i32, Errno> {
    crate::kernel::fault::check(st, "DMABUF_EXPORT")?;
    crate::kernel::install_fd(st.bos.export_dmabuf(bo, writable, cloexec)?)
}

pub(crate) fn get_dmabuf_info(
    ctx: &mut Ctx<'_>,
    _pid: Pid,
    buf: &mut [u8],
) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_get_dmabuf_info_args| *a);
    let fd = i32::try_from(a.dmabuf_fd).map_err(|_| Errno(libc::EBADF))?;
    let id = ctx.st.bos.lookup_dmabuf(fd)?;
    let bo = ctx.st.bos.get(id).ok_or(Errno(libc::EINVAL))?;
    let mut flags = match bo.domain {
        Domain::Vram => KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
        Domain::Gtt => KFD_IOC_ALLOC_MEM_FLAGS_GTT,
        _ => return Err(Errno(libc::EINVAL)),
    };
    if bo.alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC != 0 {
        flags |= KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC;
    }
    let size = bo.size;
    let gpu_id = ctx.sim.gpus[bo.gpu].id();
    // amdgpu_amdkfd_get_dmabuf_info: the BO's GEM_METADATA, through
    // amdgpu_bo_get_metadata, only when the caller gave a buffer (its size
    // is then the capacity, EINVAL when too small, and becomes the size of
    // the copy); without one the size is left as passed.
    let mut metadata_size = a.metadata_size;
    let mut result = Ok(0);
    if a.metadata_ptr != 0 {
        let data = &bo.metadata.data;
        if (a.metadata_size as usize) < data.len() {
            result = Err(Errno(libc::EINVAL));
        } else {
            metadata_size = data.len() as u32;
            if crate::kernel::copy_to_user(a.metadata_ptr, data).is_err() {
                result = Err(Errno(libc::EFAULT));
            }
        }
    }
    typed(buf, |out: &mut kfd_ioctl_get_dmabuf_info_args| {
        // The size is set before the metadata is read; the rest only after.
        out.size = size;
        if result.is_ok() {
            out.metadata_size = metadata_size;
            out.gpu_id = gpu_id;
            out.flags = flags;
        }
    });
    result
}

pub(crate) fn import_dmabuf(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_import_dmabuf_args| *a);
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::EINVAL))?;
    bind(p, pdd)?;
    let fd = i32::try_from(a.dmabuf_fd).map_err(|_| Errno(libc::EBADF))?;
    let id = ctx.st.bos.lookup_dmabuf(fd)?;
    let bo = ctx.st.bos.get(id).ok_or(Errno(libc::EINVAL))?;
    let domain_flag = match bo.domain {
        Domain::Vram => KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
        Domain::Gtt => KFD_IOC_ALLOC_MEM_FLAGS_GTT,
        _ => return Err(Errno(libc::EINVAL)),
    };
    let size = bo.size;
    let req = NewAlloc {
        pdd,
        va: a.va_addr,
        size,
        flags: domain_flag | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE,
        user_addr: 0,
        userptr_valid: true,
    };
    let slot = install(ctx.st, pid, &req, id, size, None, true)?;
    typed(buf, |out: &mut kfd_ioctl_import_dmabuf_args| {
        out.handle = make_handle(a.gpu_id, slot);
        Ok(0)
    })
}

pub(crate) fn export_dmabuf(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_export_dmabuf_args| *a);
    let (gpu_id, slot) = split_handle(a.handle);
    // EXPORT_DMABUF resolves the handle's gpu against the topology (actual ids).
    let gpu = ctx
        .sim
        .gpus
        .iter()
        .position(|g| g.id() == gpu_id)
        .ok_or(Errno(libc::EINVAL))?;
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_gpu(gpu).ok_or(Errno(libc::EINVAL))?;
    let mem = p.pdds[pdd].idr.get(&slot).ok_or(Errno(libc::EINVAL))?;
    let bo = mem.bo;
    match ctx.st.bos.get(bo).map(|b| b.domain) {
        Some(Domain::Vram | Domain::Gtt) => {}
        Some(Domain::UserPtr) => return Err(Errno(libc::EPERM)),
        _ => return Err(Errno(libc::EINVAL)),
    }
    let fd = export_fd(ctx.st, bo, true, a.flags & libc::O_CLOEXEC as u32 != 0)?;
    typed(buf, |out: &mut kfd_ioctl_export_dmabuf_args| {
        out.dmabuf_fd = fd as u32;
        Ok(0)
    })
}
