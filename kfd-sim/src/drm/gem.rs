//! GEM objects on a render node: create, close, mmap offsets, userptr,
//! GEM_OP, handle listing and renumbering, PRIME export/import, and GEM_VA.
//!
//! Each handler reads the argument from the marshalled buffer, applies the
//! kernel's checks in the kernel's order, and writes back exactly the fields
//! the kernel writes. Handlers never touch memory contents.

use kfd_sys as k;

use super::va::GPU_PAGE;
use super::{
    create_handle, delete_handle, kfd_ranges, read_arg, write_arg, Call, GemInfo, Step, VmTarget,
};
use crate::hw::bo::{Bo, BoId, Domain};
use crate::kernel::{copy_to_user, FileKey};
use ::kfd::Errno;

/// `AMDGPU_GEM_CREATE_DISCARDABLE` (newer than the installed header).
const GEM_CREATE_DISCARDABLE: u64 = 1 << 12;
/// `AMDGPU_GEM_CREATE_COHERENT`.
const GEM_CREATE_COHERENT: u64 = 1 << 13;
/// `AMDGPU_GEM_CREATE_UNCACHED`.
const GEM_CREATE_UNCACHED: u64 = 1 << 14;
/// `AMDGPU_GEM_CREATE_EXT_COHERENT`.
const GEM_CREATE_EXT_COHERENT: u64 = 1 << 15;
/// `AMDGPU_GEM_CREATE_GFX12_DCC`.
const GEM_CREATE_GFX12_DCC: u64 = 1 << 16;

/// `AMDGPU_GEM_CREATE_SETTABLE_MASK`: the create flags userspace may pass
/// (and GEM_LIST_HANDLES reports). CP_MQD_GFX9 and VRAM_WIPE_ON_RELEASE are
/// set by the kernel only.
pub(crate) const GEM_CREATE_SETTABLE: u64 = k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED
    | k::AMDGPU_GEM_CREATE_NO_CPU_ACCESS
    | k::AMDGPU_GEM_CREATE_CPU_GTT_USWC
    | k::AMDGPU_GEM_CREATE_VRAM_CLEARED
    | k::AMDGPU_GEM_CREATE_VRAM_CONTIGUOUS
    | k::AMDGPU_GEM_CREATE_VM_ALWAYS_VALID
    | k::AMDGPU_GEM_CREATE_EXPLICIT_SYNC
    | k::AMDGPU_GEM_CREATE_ENCRYPTED
    | k::AMDGPU_GEM_CREATE_PREEMPTIBLE
    | GEM_CREATE_DISCARDABLE
    | GEM_CREATE_COHERENT
    | GEM_CREATE_UNCACHED
    | GEM_CREATE_EXT_COHERENT
    | GEM_CREATE_GFX12_DCC;

const DOMAIN_CPU: u64 = k::AMDGPU_GEM_DOMAIN_CPU as u64;
const DOMAIN_GTT: u64 = k::AMDGPU_GEM_DOMAIN_GTT as u64;
const DOMAIN_VRAM: u64 = k::AMDGPU_GEM_DOMAIN_VRAM as u64;
const DOMAIN_ON_CHIP: u64 =
    (k::AMDGPU_GEM_DOMAIN_GDS | k::AMDGPU_GEM_DOMAIN_GWS | k::AMDGPU_GEM_DOMAIN_OA) as u64;

/// GPU PTE bits GET_MAPPING_INFO reports (`AMDGPU_PTE_*`), as the kernel
/// stores a mapping's flags after `amdgpu_gem_va_map_flags`.
const PTE_EXECUTABLE: u64 = 1 << 4;
const PTE_READABLE: u64 = 1 << 5;
const PTE_WRITEABLE: u64 = 1 << 6;
const PTE_PRT: u64 = 1 << 51;
const PTE_NOALLOC: u64 = 1 << 58;

fn done() -> Result<Step, Errno> {
    Ok(Step::Done(0))
}

fn round_up_page(size: u64) -> Option<u64> {
    size.checked_add(GPU_PAGE - 1).map(|s| s & !(GPU_PAGE - 1))
}

/// The GEM facts of a BO that was never created through GEM_CREATE (a KFD
/// allocation), as amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu sets them.
pub(crate) fn derived_gem_info(bo: &Bo) -> GemInfo {
    let kflags = bo.alloc_flags;
    let mut flags = 0;
    if kflags & k::KFD_IOC_ALLOC_MEM_FLAGS_COHERENT != 0 {
        flags |= GEM_CREATE_COHERENT;
    }
    if kflags & k::KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED != 0 {
        flags |= GEM_CREATE_UNCACHED;
    }
    if kflags & k::KFD_IOC_ALLOC_MEM_FLAGS_EXT_COHERENT != 0 {
        flags |= GEM_CREATE_EXT_COHERENT;
    }
    let domains = match bo.domain {
        Domain::Vram => {
            flags |= k::AMDGPU_GEM_CREATE_VRAM_WIPE_ON_RELEASE;
            flags |= if kflags & k::KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC != 0 {
                k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED
            } else {
                k::AMDGPU_GEM_CREATE_NO_CPU_ACCESS
            };
            DOMAIN_VRAM
        }
        Domain::Gtt | Domain::UserPtr => DOMAIN_GTT,
        Domain::Doorbell => k::AMDGPU_GEM_DOMAIN_DOORBELL as u64,
        Domain::Mmio => k::AMDGPU_GEM_DOMAIN_MMIO_REMAP as u64,
    };
    GemInfo {
        preferred_domains: domains,
        flags,
        alignment_pages: 1,
        userptr_flags: match bo.domain {
            Domain::UserPtr if kflags & k::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE == 0 => {
                Some(k::AMDGPU_GEM_USERPTR_READONLY | k::AMDGPU_GEM_USERPTR_REGISTER)
            }
            Domain::UserPtr => Some(k::AMDGPU_GEM_USERPTR_REGISTER),
            _ => None,
        },
        userptr_owner: None,
    }
}

/// DRM_IOCTL_AMDGPU_GEM_CREATE (`amdgpu_gem_create_ioctl`).
pub(super) fn gem_create(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_gem_create_in = read_arg(buf);
    let mut flags = args.domain_flags;
    if args.domains & k::AMDGPU_GEM_DOMAIN_DOORBELL as u64 != 0 {
        return Err(Errno(libc::EINVAL));
    }
    if flags & !GEM_CREATE_SETTABLE != 0 {
        return Err(Errno(libc::EINVAL));
    }
    if args.domains & !(k::AMDGPU_GEM_DOMAIN_MASK as u64) != 0 {
        return Err(Errno(libc::EINVAL));
    }
    // The simulated GPUs have no TMZ.
    if flags & k::AMDGPU_GEM_CREATE_ENCRYPTED != 0 {
        return Err(Errno(libc::EINVAL));
    }
    if args.domains & DOMAIN_ON_CHIP != 0 {
        if flags & k::AMDGPU_GEM_CREATE_VM_ALWAYS_VALID != 0 {
            return Err(Errno(libc::EINVAL));
        }
        // GDS/GWS/OA are on-chip resources the simulator does not have.
        return Err(Errno(libc::ENOMEM));
    }
    let size = round_up_page(args.bo_size).ok_or(Errno(libc::ENOMEM))?;
    if size == 0 {
        return Err(Errno(libc::EINVAL));
    }
    // What is left of this GPU's VRAM and of system memory (GTT BOs of all
    // GPUs share it), after every live BO of the store, KFD ones included.
    let gpu = call.gpu;
    let used = |domain: Domain, any_gpu: bool| -> u64 {
        call.st
            .bos
            .iter()
            .filter(|b| b.domain == domain && (any_gpu || b.gpu == gpu))
            .map(|b| b.size)
            .sum()
    };
    let vram_left = call
        .device()
        .facts_vram_bytes()
        .saturating_sub(used(Domain::Vram, false));
    let gtt_left = call
        .shared
        .config
        .system_memory_bytes
        .saturating_sub(used(Domain::Gtt, true));
    let mut domains = args.domains & 0xFFFF_FFFF;
    let domain = loop {
        if domains & DOMAIN_VRAM != 0 && size <= vram_left {
            break Domain::Vram;
        }
        if domains & (DOMAIN_GTT | DOMAIN_CPU) != 0 || domains == 0 {
            if size <= gtt_left {
                break Domain::Gtt;
            }
            return Err(Errno(libc::ENOMEM));
        }
        // `amdgpu_gem_create_ioctl`'s retries: drop CPU_ACCESS_REQUIRED,
        // then let a VRAM-only request fall back to GTT.
        if flags & k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED != 0 {
            flags &= !k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED;
            continue;
        }
        if domains == DOMAIN_VRAM {
            domains |= DOMAIN_GTT;
            continue;
        }
        return Err(Errno(libc::ENOMEM));
    };
    let mut kfd_flags = k::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | k::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;
    kfd_flags |= match domain {
        Domain::Vram => k::KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
        _ => k::KFD_IOC_ALLOC_MEM_FLAGS_GTT,
    };
    if flags & k::AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED != 0 {
        kfd_flags |= k::KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC;
    }
    let key = call.key;
    let info = GemInfo {
        preferred_domains: domains,
        flags,
        alignment_pages: args.alignment.div_ceil(GPU_PAGE),
        userptr_flags: None,
        userptr_owner: None,
    };
    let id = call.st.bos.create_memory(gpu, size, domain, kfd_flags)?;
    let (file, bos) = call.parts()?;
    let handle = match create_handle(file, bos, key, id, false) {
        Ok(h) => h,
        Err(e) => {
            bos.drop_handle(id);
            return Err(e);
        }
    };
    call.device().set_gem_info(id, info, &call.st.bos);
    buf[..std::mem::size_of::<k::drm_amdgpu_gem_create>()].fill(0);
    write_arg(buf, 0, &handle);
    done()
}

/// DRM_IOCTL_GEM_CLOSE (`drm_gem_close_ioctl`).
pub(super) fn gem_close(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_gem_close = read_arg(buf);
    let key = call.key;
    let (file, bos) = call.parts()?;
    delete_handle(file, bos, key, args.handle)?;
    done()
}

/// DRM_IOCTL_AMDGPU_GEM_MMAP (`amdgpu_mode_dumb_mmap`).
pub(super) fn gem_mmap(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_gem_mmap_in = read_arg(buf);
    let gem = call.file()?.handle(args.handle, libc::ENOENT)?;
    let bo = call.st.bos.get(gem.bo).ok_or(Errno(libc::ENOENT))?;
    let info = call.device().gem_info(bo);
    if bo.domain == Domain::UserPtr || info.flags & k::AMDGPU_GEM_CREATE_NO_CPU_ACCESS != 0 {
        return Err(Errno(libc::EPERM));
    }
    let addr_ptr = if gem.foreign_import {
        let gpu = call.gpu;
        call.st.bos.import_offset(gpu, gem.bo)?
    } else {
        bo.mmap_offset
    };
    let out = k::drm_amdgpu_gem_mmap_out { addr_ptr };
    write_arg(buf, 0, &out);
    done()
}

/// Whether `[addr, addr+size)` is fully covered by mappings of this process,
/// and whether any of them is file-backed (`/proc/self/maps`).
fn host_range_mapping(addr: u64, size: u64) -> Result<(bool, bool), Errno> {
    let maps =
        std::fs::read_to_string(crate::kernel::maps_path()).map_err(|_| Errno(libc::EFAULT))?;
    let end = addr.checked_add(size).ok_or(Errno(libc::EFAULT))?;
    let mut vmas: Vec<(u64, u64, bool)> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let Some(range) = fields.next() else { continue };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else {
            continue;
        };
        let inode = fields.nth(3).unwrap_or("0");
        let path = fields.next().unwrap_or("");
        let file_backed = inode != "0" || (path.starts_with('/') && !path.is_empty());
        vmas.push((lo, hi, file_backed));
    }
    vmas.sort_unstable();
    let mut cursor = addr;
    let mut any_file = false;
    for (lo, hi, file_backed) in vmas {
        if hi <= cursor {
            continue;
        }
        if lo > cursor || cursor >= end {
            break;
        }
        any_file |= file_backed;
        cursor = hi;
    }
    Ok((cursor >= end, any_file))
}

/// DRM_IOCTL_AMDGPU_GEM_USERPTR (`amdgpu_gem_userptr_ioctl`).
pub(super) fn gem_userptr(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_gem_userptr = read_arg(buf);
    let known = k::AMDGPU_GEM_USERPTR_READONLY
        | k::AMDGPU_GEM_USERPTR_ANONONLY
        | k::AMDGPU_GEM_USERPTR_VALIDATE
        | k::AMDGPU_GEM_USERPTR_REGISTER;
    if !(args.addr | args.size).is_multiple_of(GPU_PAGE) {
        return Err(Errno(libc::EINVAL));
    }
    if args.flags & !known != 0 {
        return Err(Errno(libc::EINVAL));
    }
    if args.flags & (k::AMDGPU_GEM_USERPTR_READONLY | k::AMDGPU_GEM_USERPTR_REGISTER) == 0 {
        // Writable userptr memory needs an MMU notifier.
        return Err(Errno(libc::EACCES));
    }
    if args.size == 0 {
        return Err(Errno(libc::EINVAL));
    }
    if args.flags & k::AMDGPU_GEM_USERPTR_VALIDATE != 0 {
        let (covered, file_backed) = host_range_mapping(args.addr, args.size)?;
        if !covered {
            return Err(Errno(libc::EFAULT));
        }
        if file_backed && args.flags & k::AMDGPU_GEM_USERPTR_ANONONLY != 0 {
            return Err(Errno(libc::EPERM));
        }
    }
    let mut kfd_flags = k::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | k::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;
    if args.flags & k::AMDGPU_GEM_USERPTR_READONLY == 0 {
        kfd_flags |= k::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
    }
    let gpu = call.gpu;
    let key = call.key;
    let id = call
        .st
        .bos
        .create_userptr(gpu, args.addr, args.size, kfd_flags, true)?;
    let (file, bos) = call.parts()?;
    let handle = match create_handle(file, bos, key, id, false) {
        Ok(h) => h,
        Err(e) => {
            bos.drop_handle(id);
            return Err(e);
        }
    };
    let info = GemInfo {
        preferred_domains: DOMAIN_GTT,
        flags: 0,
        alignment_pages: 0,
        userptr_flags: Some(args.flags),
        userptr_owner: Some(call.caller),
    };
    call.device().set_gem_info(id, info, &call.st.bos);
    call.device().note_userptr_pinned(&call.st.bos);
    let mut out = args;
    out.handle = handle;
    write_arg(buf, 0, &out);
    done()
}

/// The mappings of `bo` in the VM of file `key`, as GET_MAPPING_INFO
/// reports them (VA order).
fn mappings_of(call: &mut Call<'_>, bo: BoId) -> Result<Vec<k::drm_amdgpu_gem_vm_entry>, Errno> {
    let key = call.key;
    let mut entries: Vec<(u64, k::drm_amdgpu_gem_vm_entry)> = call
        .file()?
        .vm
        .iter()
        .filter(|m| m.target == VmTarget::Bo(bo))
        .map(|m| {
            (
                m.start,
                k::drm_amdgpu_gem_vm_entry {
                    addr: m.start,
                    size: m.size,
                    offset: m.offset,
                    flags: pte_flags(m.flags),
                },
            )
        })
        .collect();
    for r in kfd_ranges(call.st, key).into_iter().filter(|r| r.bo == bo) {
        let mut flags = PTE_READABLE | PTE_EXECUTABLE;
        if r.flags & k::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE != 0 {
            flags |= PTE_WRITEABLE;
        }
        let size = r.size.div_ceil(GPU_PAGE) * GPU_PAGE;
        entries.push((
            r.va,
            k::drm_amdgpu_gem_vm_entry {
                addr: r.va,
                size,
                offset: 0,
                flags,
            },
        ));
    }
    entries.sort_by_key(|(va, _)| *va);
    Ok(entries.into_iter().map(|(_, e)| e).collect())
}

/// `amdgpu_gem_va_map_flags`: the PTE bits a GEM_VA flag word becomes.
fn pte_flags(vm_flags: u32) -> u64 {
    let mut pte = 0;
    if vm_flags & k::AMDGPU_VM_PAGE_READABLE != 0 {
        pte |= PTE_READABLE;
    }
    if vm_flags & k::AMDGPU_VM_PAGE_WRITEABLE != 0 {
        pte |= PTE_WRITEABLE;
    }
    if vm_flags & k::AMDGPU_VM_PAGE_EXECUTABLE != 0 {
        pte |= PTE_EXECUTABLE;
    }
    if vm_flags & k::AMDGPU_VM_PAGE_PRT != 0 {
        pte |= PTE_PRT;
    }
    if vm_flags & k::AMDGPU_VM_PAGE_NOALLOC != 0 {
        pte |= PTE_NOALLOC;
    }
    pte
}

/// DRM_IOCTL_AMDGPU_GEM_OP (`amdgpu_gem_op_ioctl`).
pub(super) fn gem_op(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let mut args: k::drm_amdgpu_gem_op = read_arg(buf);
    let gem = call.file()?.handle(args.handle, libc::ENOENT)?;
    let bo = call.st.bos.get(gem.bo).ok_or(Errno(libc::ENOENT))?;
    let info = call.device().gem_info(bo);
    match args.op {
        k::AMDGPU_GEM_OP_GET_GEM_CREATE_INFO => {
            let out = k::drm_amdgpu_gem_create_in {
                bo_size: bo.size,
                alignment: info.alignment_pages * GPU_PAGE,
                domains: info.preferred_domains,
                domain_flags: info.flags,
            };
            copy_to_user(args.value, zerocopy::IntoBytes::as_bytes(&out))?;
        }
        k::AMDGPU_GEM_OP_SET_PLACEMENT => {
            if gem.foreign_import && args.value & DOMAIN_VRAM != 0 {
                return Err(Errno(libc::EINVAL));
            }
            if bo.domain == Domain::UserPtr {
                return Err(Errno(libc::EPERM));
            }
            let id = bo.id;
            let placed = GemInfo {
                preferred_domains: args.value & (DOMAIN_VRAM | DOMAIN_GTT | DOMAIN_CPU),
                ..info
            };
            call.device().set_gem_info(id, placed, &call.st.bos);
        }
        k::AMDGPU_GEM_OP_GET_MAPPING_INFO => {
            if args.padding != 0 {
                return Err(Errno(libc::EINVAL));
            }
            let entries = mappings_of(call, gem.bo)?;
            let n = entries.len();
            if n > 0 && n <= args.num_entries as usize {
                let bytes: Vec<u8> = entries
                    .iter()
                    .flat_map(|e| zerocopy::IntoBytes::as_bytes(e).to_vec())
                    .collect();
                copy_to_user(args.value, &bytes)?;
            }
            args.num_entries = u32::try_from(n).unwrap_or(u32::MAX);
            write_arg(buf, 0, &args);
        }
        _ => return Err(Errno(libc::EINVAL)),
    }
    done()
}

/// DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES (`amdgpu_gem_list_handles_ioctl`).
pub(super) fn gem_list_handles(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let mut args: k::drm_amdgpu_gem_list_handles = read_arg(buf);
    let handles: Vec<(u32, super::GemHandle)> =
        call.file()?.handles.iter().map(|(h, g)| (*h, *g)).collect();
    let count = u32::try_from(handles.len()).map_err(|_| Errno(libc::EOVERFLOW))?;
    if args.num_entries < count || count == 0 {
        args.num_entries = count;
        write_arg(buf, 0, &args);
        return done();
    }
    let mut bytes = Vec::with_capacity(
        handles.len() * std::mem::size_of::<k::drm_amdgpu_gem_list_handles_entry>(),
    );
    for (handle, gem) in &handles {
        let bo = call.st.bos.get(gem.bo).ok_or(Errno(libc::ENOENT))?;
        let info = call.device().gem_info(bo);
        let entry = k::drm_amdgpu_gem_list_handles_entry {
            gem_handle: *handle,
            flags: if gem.foreign_import {
                k::AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT
            } else {
                0
            },
            size: bo.size.div_ceil(GPU_PAGE) * GPU_PAGE,
            preferred_domains: info.preferred_domains,
            alloc_flags: info.flags & GEM_CREATE_SETTABLE,
            alignment: info.alignment_pages,
        };
        bytes.extend_from_slice(zerocopy::IntoBytes::as_bytes(&entry));
    }
    args.num_entries = count;
    write_arg(buf, 0, &args);
    copy_to_user(args.entries, &bytes)?;
    done()
}

/// DRM_IOCTL_GEM_CHANGE_HANDLE (`drm_gem_change_handle_ioctl`).
pub(super) fn gem_change_handle(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_gem_change_handle = read_arg(buf);
    if args.new_handle > i32::MAX as u32 {
        return Err(Errno(libc::EINVAL));
    }
    let file = call.file()?;
    let gem = file.handle(args.handle, libc::ENOENT)?;
    if args.handle == args.new_handle {
        return done();
    }
    if file.handles.contains_key(&args.new_handle) {
        // idr_alloc() of an exact id that is taken.
        return Err(Errno(libc::ENOSPC));
    }
    file.handles.remove(&args.handle);
    file.handles.insert(args.new_handle, gem);
    done()
}

/// DRM_IOCTL_PRIME_HANDLE_TO_FD (`drm_prime_handle_to_fd_ioctl` +
/// `amdgpu_gem_prime_export`).
pub(super) fn prime_handle_to_fd(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let mut args: k::drm_prime_handle = read_arg(buf);
    if args.flags & !(k::DRM_CLOEXEC | k::DRM_RDWR) != 0 {
        return Err(Errno(libc::EINVAL));
    }
    let gem = call.file()?.handle(args.handle, libc::ENOENT)?;
    let bo = call.st.bos.get(gem.bo).ok_or(Errno(libc::ENOENT))?;
    let info = call.device().gem_info(bo);
    if bo.domain == Domain::UserPtr || info.flags & k::AMDGPU_GEM_CREATE_VM_ALWAYS_VALID != 0 {
        return Err(Errno(libc::EPERM));
    }
    crate::kernel::fault::check(call.st, "DMABUF_EXPORT")?;
    let writable = args.flags & k::DRM_RDWR != 0;
    let cloexec = args.flags & k::DRM_CLOEXEC != 0;
    let fd = call.st.bos.export_dmabuf(gem.bo, writable, cloexec)?;
    args.fd = crate::kernel::install_fd(fd)?;
    write_arg(buf, 0, &args);
    done()
}

/// DRM_IOCTL_PRIME_FD_TO_HANDLE (`drm_prime_fd_to_handle_ioctl` +
/// `amdgpu_gem_prime_import`): the same dma-buf always yields the same
/// handle in a file; a dma-buf of this device (GEM or KFD) is the same
/// object; one of another device is a foreign import.
pub(super) fn prime_fd_to_handle(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let mut args: k::drm_prime_handle = read_arg(buf);
    let id = call.st.bos.lookup_dmabuf(args.fd)?;
    let gpu = call.gpu;
    let key: FileKey = call.key;
    let foreign = call.st.bos.get(id).is_some_and(|bo| bo.gpu != gpu);
    let (file, bos) = call.parts()?;
    let handle = match file.handle_of(id) {
        Some(h) => h,
        None => create_handle(file, bos, key, id, foreign)?,
    };
    args.handle = handle;
    write_arg(buf, 0, &args);
    done()
}

/// `AMDGPU_VM_*` flags GEM_VA accepts for a normal mapping.
const VA_VALID_FLAGS: u32 = k::AMDGPU_VM_DELAY_UPDATE
    | k::AMDGPU_VM_PAGE_READABLE
    | k::AMDGPU_VM_PAGE_WRITEABLE
    | k::AMDGPU_VM_PAGE_EXECUTABLE
    | k::AMDGPU_VM_MTYPE_MASK
    | k::AMDGPU_VM_PAGE_NOALLOC;
/// Flags GEM_VA accepts for a PRT mapping.
const VA_PRT_FLAGS: u32 = k::AMDGPU_VM_DELAY_UPDATE | k::AMDGPU_VM_PAGE_PRT;

/// DRM_IOCTL_AMDGPU_GEM_VA (`amdgpu_gem_va_ioctl`).
pub(super) fn gem_va(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_gem_va = read_arg(buf);
    let key = call.key;
    let va = call
        .file()?
        .vm
        .check_ioctl_range(args.va_address, args.map_size)
        .map_err(|e| Errno(e.errno()))?;
    if args.flags & !VA_VALID_FLAGS != 0 && args.flags & !VA_PRT_FLAGS != 0 {
        return Err(Errno(libc::EINVAL));
    }
    let op = args.operation;
    if !matches!(
        op,
        k::AMDGPU_VA_OP_MAP
            | k::AMDGPU_VA_OP_UNMAP
            | k::AMDGPU_VA_OP_CLEAR
            | k::AMDGPU_VA_OP_REPLACE
    ) {
        return Err(Errno(libc::EINVAL));
    }
    let prt = args.flags & k::AMDGPU_VM_PAGE_PRT != 0;
    let target = if op != k::AMDGPU_VA_OP_CLEAR && !prt {
        let gem = call.file()?.handle(args.handle, libc::ENOENT)?;
        VmTarget::Bo(gem.bo)
    } else {
        VmTarget::Prt
    };
    let target_size = match target {
        VmTarget::Bo(id) => Some(call.st.bos.get(id).ok_or(Errno(libc::ENOENT))?.size),
        VmTarget::Prt => None,
    };
    let kfd = if matches!(op, k::AMDGPU_VA_OP_MAP) {
        kfd_ranges(call.st, key)
    } else {
        Vec::new()
    };
    let vm = &mut call.file()?.vm;
    let result = match op {
        k::AMDGPU_VA_OP_MAP => {
            // A compute VM also holds the KFD allocations: overlapping one
            // is the same EINVAL as overlapping a GEM mapping.
            let end = va.saturating_add(args.map_size);
            let kfd_hit = kfd
                .iter()
                .find(|r| r.va < end && va < r.va.saturating_add(r.size))
                .map(|r| r.va);
            match vm.map(
                va,
                args.map_size,
                args.offset_in_bo,
                target_size,
                args.flags,
                target,
            ) {
                Ok(()) => match kfd_hit {
                    Some(existing) => {
                        // The kernel keeps one interval tree and refuses
                        // before inserting: take the new mapping out again.
                        let _ = vm.unmap(va, |t| *t == target);
                        Err(super::va::VaError::Overlap {
                            va,
                            size: args.map_size,
                            existing,
                        })
                    }
                    None => Ok(()),
                },
                Err(e) => Err(e),
            }
        }
        k::AMDGPU_VA_OP_UNMAP => vm.unmap(va, |t| *t == target).map(|_| ()),
        k::AMDGPU_VA_OP_CLEAR => vm.clear(va, args.map_size),
        _ => vm.replace(
            va,
            args.map_size,
            args.offset_in_bo,
            target_size,
            args.flags,
            target,
        ),
    };
    result.map_err(|e| Errno(e.errno()))?;
    done()
}
