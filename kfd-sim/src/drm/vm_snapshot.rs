//! What an engine sees of a render file's GPU VM: the KFD allocations
//! mapped into it (a compute VM), the owner of a userptr BO's memory, the
//! memory each BO shows, and [`vm_view`], the snapshot an SDMA job or a
//! user-mode queue reads and writes through.
//!
//! Reads state only: this module never changes a VM or a BO.

use std::sync::Arc;

use crate::hw::bo::{Backing, BoId, Domain};
use crate::hw::sdma::{RangeBacking, UserMemory, VmRange, VmView};
use crate::kernel::{FileKey, Pid, Shared, State};

use super::{DrmDevice, DrmFile, VmTarget};

/// A KFD allocation mapped into a compute VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KfdRange {
    /// GPU VA.
    pub(crate) va: u64,
    /// Size in bytes.
    pub(crate) size: u64,
    /// The BO.
    pub(crate) bo: BoId,
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`.
    pub(crate) flags: u32,
}

/// KFD allocations mapped (MAP_MEMORY_TO_GPU) into the VM of render file
/// `key`: non-empty only when the file became a KFD process's compute VM.
/// As in the kernel, an allocation occupies VA in the VM only while mapped
/// (`kfd_mem_attach` at the first map, `amdgpu_vm_bo_unmap` at unmap).
pub(crate) fn kfd_ranges(st: &State, key: FileKey) -> Vec<KfdRange> {
    let mut out = Vec::new();
    for (kfd, this) in compute_vm_of(st, key) {
        for other in &kfd.pdds {
            for mem in other.idr.values() {
                if mem.mapped.contains(&this) && mem.size != 0 {
                    out.push(KfdRange {
                        va: mem.va,
                        size: mem.size,
                        bo: mem.bo,
                        flags: mem.flags,
                    });
                }
            }
        }
    }
    out
}

/// The KFD processes whose compute VM render file `key` became, each with
/// the index of its pdd on that file.
fn compute_vm_of(
    st: &State,
    key: FileKey,
) -> impl Iterator<Item = (&crate::amdkfd::process::KfdProcess, usize)> + '_ {
    st.processes
        .values()
        .filter_map(|process| process.kfd.as_ref())
        .flat_map(move |kfd| {
            kfd.pdds
                .iter()
                .enumerate()
                .filter(move |(_, pdd)| pdd.drm_file == Some(key))
                .map(move |(this, _)| (kfd, this))
        })
}

/// The process whose memory userptr BO `bo` wraps: the creator of a GEM
/// userptr, or the KFD process holding a KFD userptr allocation.
pub(crate) fn userptr_owner(st: &State, device: &DrmDevice, bo: &crate::hw::bo::Bo) -> Option<Pid> {
    if bo.domain != Domain::UserPtr {
        return None;
    }
    if let Some(owner) = device.gem_info(bo).userptr_owner {
        return Some(owner);
    }
    st.processes
        .iter()
        .find(|(_, p)| {
            p.kfd.as_ref().is_some_and(|k| {
                k.pdds
                    .iter()
                    .any(|pdd| pdd.idr.values().any(|m| m.bo == bo.id))
            })
        })
        .map(|(pid, _)| *pid)
}

/// How an engine reaches the host memory of this process's userptr BOs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UserptrAccess {
    /// Directly, under the ioctl contract that keeps it mapped for the
    /// submission (command submission jobs).
    Direct,
    /// Through `process_vm_readv`/`writev` on this process, so memory the
    /// application unmapped faults instead of crashing the simulator
    /// (user-mode queues, which run on their own schedule).
    Checked,
}

/// The memory a BO shows to the engine, if it has any right now.
pub(crate) fn bo_memory(
    bo: &crate::hw::bo::Bo,
    access: UserptrAccess,
) -> Option<Arc<dyn crate::hw::sdma::DeviceMemory>> {
    match &bo.backing {
        Backing::Memory(m) | Backing::Aperture(m) => {
            Some(m.clone() as Arc<dyn crate::hw::sdma::DeviceMemory>)
        }
        Backing::UserPtr {
            addr,
            valid: true,
            space,
        } => host_memory(*space, *addr, bo.size, access),
        Backing::UserPtr { valid: false, .. } => None,
    }
}

/// `len` bytes of host memory at `addr` of `space`, as an engine reaches
/// them (a userptr BO's pages, an SVM range's).
fn host_memory(
    space: crate::kernel::Space,
    addr: u64,
    len: u64,
    access: UserptrAccess,
) -> Option<Arc<dyn crate::hw::sdma::DeviceMemory>> {
    let len = usize::try_from(len).ok()?;
    Some(match space {
        crate::kernel::Space::Local if access == UserptrAccess::Checked => {
            Arc::new(UserMemory::checked(addr, len))
        }
        crate::kernel::Space::Local => {
            let addr = usize::try_from(addr).ok()?;
            // SAFETY: the host range is the application's memory, which the
            // kfd::Driver::ioctl contract keeps valid until the device is
            // done with it (the submission that uses this view).
            Arc::new(unsafe { UserMemory::new(addr, len) })
        }
        crate::kernel::Space::Remote(pid) => Arc::new(UserMemory::remote(pid, addr, len)),
    })
}

/// The SVM ranges of the KFD process whose compute VM is render file
/// `key`, as the GPU sees them: every range the GPU was given access to
/// (`KFD_IOCTL_SVM_ATTR_ACCESS` or `ACCESS_IN_PLACE`; XNACK on gives every
/// GPU access by default) is mapped at its CPU address, and shows the
/// process's memory there. The kernel maps such a range on the GPUs of its
/// access bitmaps (`svm_range_validate_and_map`, `kfd_svm.c`), read-only
/// with `KFD_IOCTL_SVM_FLAG_GPU_RO`; a GPU outside them faults
/// (`svm_range_restore_pages`: "GPU doesn't have access"). Where the range
/// lives (system memory or migrated to VRAM) does not change what it
/// shows: CPU faults migrate it back, so the simulator keeps its pages in
/// the process's memory. It is always reached checked: an SVM range of a
/// simulated process need not be a real mapping of this host process.
fn svm_ranges(st: &State, key: FileKey) -> Vec<VmRange> {
    let mut out = Vec::new();
    for (kfd, this) in compute_vm_of(st, key) {
        for range in &kfd.svm {
            let granted = range.access.get(this).is_some_and(|&a| {
                a == kfd_sys::KFD_IOCTL_SVM_ATTR_ACCESS
                    || a == kfd_sys::KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
            });
            if !granted {
                continue;
            }
            let Some(memory) =
                host_memory(kfd.space, range.start, range.size, UserptrAccess::Checked)
            else {
                continue;
            };
            out.push(VmRange {
                va: range.start,
                len: range.size,
                readable: true,
                writable: range.flags & kfd_sys::KFD_IOCTL_SVM_FLAG_GPU_RO == 0,
                backing: RangeBacking::Memory { memory, offset: 0 },
            });
        }
    }
    out
}

/// The snapshot a queue engine reads memory through
/// ([`crate::hw::queues::VmViewOf`]): render file `key`'s VM on GPU `gpu`,
/// userptr pages checked; `None` when the file is gone.
pub(crate) fn engine_vm_view(
    shared: &Shared,
    st: &State,
    gpu: usize,
    key: FileKey,
) -> Option<VmView> {
    let render = st.render(key)?;
    Some(vm_view(
        st,
        &shared.gpus[gpu].drm,
        &render.drm,
        key,
        UserptrAccess::Checked,
    ))
}

/// Snapshot of render file `key`'s VM for an engine: its GEM_VA mappings
/// and the KFD allocations mapped into it.
pub(crate) fn vm_view(
    st: &State,
    device: &DrmDevice,
    file: &DrmFile,
    key: FileKey,
    access: UserptrAccess,
) -> VmView {
    let mut ranges = Vec::new();
    for m in file.vm.iter() {
        let readable = m.flags & kfd_sys::AMDGPU_VM_PAGE_READABLE != 0;
        let mut writable = m.flags & kfd_sys::AMDGPU_VM_PAGE_WRITEABLE != 0;
        let backing = match m.target {
            VmTarget::Prt => RangeBacking::Prt,
            VmTarget::Bo(id) => {
                let Some(bo) = st.bos.get(id) else { continue };
                let Some(memory) = bo_memory(bo, access) else {
                    continue;
                };
                if bo.domain == Domain::UserPtr {
                    let ro = device
                        .gem_info(bo)
                        .userptr_flags
                        .is_some_and(|f| f & kfd_sys::AMDGPU_GEM_USERPTR_READONLY != 0);
                    writable &= !ro;
                }
                RangeBacking::Memory {
                    memory,
                    offset: m.offset,
                }
            }
        };
        ranges.push(VmRange {
            va: m.start,
            len: m.size,
            readable,
            writable,
            backing,
        });
    }
    for r in kfd_ranges(st, key) {
        let Some(bo) = st.bos.get(r.bo) else { continue };
        let Some(memory) = bo_memory(bo, access) else {
            continue;
        };
        ranges.push(VmRange {
            va: r.va,
            len: r.size.min(bo.size),
            readable: true,
            writable: r.flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE != 0,
            backing: RangeBacking::Memory { memory, offset: 0 },
        });
    }
    ranges.extend(svm_ranges(st, key));
    VmView::new(ranges)
}
