//! Render-node files: a render node of a task with a KFD image becomes a
//! `dup` of the render file its KFD file uses for that GPU; one of a task
//! without (a render-only process) gets a compatible local GPU of its own
//! under the `KFD_*_CHECK` options. Either way the file's own DRM BOs are
//! re-created under their checkpointed handles, mapped at their GPU
//! addresses and filled from their pages files.
//!
//! This module never opens `/dev/kfd`: a render node whose GPU only the
//! task's KFD file can map waits for it with a retry.

use std::collections::BTreeSet;
use std::os::fd::AsFd;

use amdgpu_image::topology::device_node;
use amdgpu_image::{
    CriuKfd, CriuRenderNode, ImageName, ImageStore, ReadLimits, ValidatedRenderNode,
};
use amdgpu_topology::checks::{device_mismatches, rule, Reason};
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::options::CheckOptions;
use kfd::{Driver, GemCreate, GemHandle, RenderNode};
use kfd_sys::{
    AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_NOALLOC, AMDGPU_VM_PAGE_PRT, AMDGPU_VM_PAGE_READABLE,
    AMDGPU_VM_PAGE_WRITEABLE, DRM_CLOEXEC, DRM_RDWR,
};

use super::sharing::{publish, uses_shared_buffers};
use super::{Restored, Restorer, Sharing, TaskIdentity};
use crate::dump::local_topology;
use crate::error::{Error, Incompatibility};
use crate::transfer;
use crate::vma::Translation;

/// The GPU page size, the unit of `drm_bo_entry.alignment`.
const GPU_PAGE: u64 = 4096;

/// `AMDGPU_VM_PAGE_*` flags for `GEM_VA` from the page-table bits
/// `GET_MAPPING_INFO` reports (`AMDGPU_PTE_*`: executable 1<<4, readable
/// 1<<5, writeable 1<<6, PRT 1<<51, NOALLOC 1<<58). Other bits (memory
/// type, validity, fragment) are chosen again by the kernel.
pub fn gem_va_flags(pte: u64) -> u32 {
    const PTE_TO_VM: [(u64, u32); 5] = [
        (1 << 4, AMDGPU_VM_PAGE_EXECUTABLE),
        (1 << 5, AMDGPU_VM_PAGE_READABLE),
        (1 << 6, AMDGPU_VM_PAGE_WRITEABLE),
        (1 << 51, AMDGPU_VM_PAGE_PRT),
        (1 << 58, AMDGPU_VM_PAGE_NOALLOC),
    ];
    PTE_TO_VM
        .iter()
        .filter(|(pte_bit, _)| pte & pte_bit != 0)
        .fold(0, |flags, (_, vm)| flags | vm)
}

impl<D: Driver + Clone> Restorer<D> {
    /// Whether the restored task has a KFD image in the set: it restored
    /// one already, or the node's image lists its pid among the KFD
    /// processes using the GPU (`kfd_pids`), or (images without that list)
    /// an image of the set records its pid. A render-only image (`gpu_id`
    /// 0) answers no without looking: a process with `/dev/kfd` has every
    /// visible GPU among its KFD devices, so its KFD file would have named
    /// the GPU. When the set cannot be listed (a stream) and the image has
    /// no list, or the task's pid is unknown, the answer is yes: the node
    /// waits for the task's KFD file, as before render-only support.
    fn has_kfd_image<S: ImageStore>(
        &mut self,
        store: &S,
        msg: &CriuRenderNode,
        task: &TaskIdentity<'_>,
    ) -> Result<bool, Error> {
        if !self.restored.is_empty() {
            return Ok(true);
        }
        if msg.is_render_only() {
            return Ok(false);
        }
        // The image names the KFD processes that use the GPU: the task is
        // one of them or has no KFD file for this node (no listing needed,
        // so a stream can tell too).
        if let (false, Some(pid)) = (msg.kfd_pids.is_empty(), task.pid) {
            return Ok(msg.kfd_pids.contains(&pid));
        }
        if let Some(known) = self.task_has_kfd {
            return Ok(known);
        }
        let Some(pid) = task.pid else {
            log::warn!("the restored task's pid is unknown: its render nodes wait for a KFD file");
            return Ok(true);
        };
        let Ok(names) = store.list() else {
            log::debug!("the image set cannot be listed: render nodes wait for a KFD file");
            return Ok(true);
        };
        let mut found = false;
        for name in names.iter().filter(|n| matches!(n, ImageName::Kfd { .. })) {
            let kfd = store
                .read_message::<CriuKfd>(name, ReadLimits::default())
                .map_err(Error::image("reading a KFD image to find the task's"))?;
            if kfd.is_some_and(|k| k.pid == pid) {
                found = true;
                break;
            }
        }
        self.task_has_kfd = Some(found);
        Ok(found)
    }

    /// The local GPU standing in for the GPU of a render-only node: the one
    /// already chosen for its checkpointed render minor in this task, else
    /// a local GPU that passes the property checks
    /// ([`device_mismatches`] under the `KFD_*_CHECK` options) and has at
    /// least as many valid io links, not yet taken by another checkpointed
    /// GPU of this task; the same render minor is preferred, then the same
    /// gpu_id, then node order. Returns `(local gpu_id, local minor)`.
    fn render_only_gpu(&mut self, id: u32, msg: &CriuRenderNode) -> Result<(u32, u32), Error> {
        let minor = msg.drm_render_minor;
        let local = local_topology(&self.config.topology_root, &self.driver)?;
        if let Some(&gpu) = self.render_only.get(&minor) {
            if let Some(node) = local.gpus().find(|n| n.gpu_id == gpu) {
                return Ok((gpu, node.props.drm_render_minor));
            }
        }
        let device = msg.device.as_ref().ok_or_else(|| Error::Incompatible {
            problems: vec![Incompatibility::RenderWithoutDevice { id, minor }],
        })?;
        let taken: BTreeSet<u32> = self.render_only.values().copied().collect();
        let candidates = render_only_candidates(device, &local, self.config.options.checks());
        let compatible: Vec<_> = candidates
            .as_ref()
            .map(|ids| {
                local
                    .gpus()
                    .filter(|n| ids.contains(&n.gpu_id))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let free: Vec<_> = compatible
            .iter()
            .filter(|n| !taken.contains(&n.gpu_id))
            .collect();
        let pinned = match self
            .config
            .options
            .device_map()
            .pin_of(&device_node(device), &local)
        {
            None => None,
            Some(Ok(gpu)) => Some(gpu),
            Some(Err(source)) => {
                return Err(Error::Incompatible {
                    problems: vec![Incompatibility::RenderDeviceMap { id, minor, source }],
                })
            }
        };
        if let Some(gpu) = pinned {
            if !free.iter().any(|n| n.gpu_id == gpu) {
                let problem = match local.gpus().find(|n| n.gpu_id == gpu) {
                    Some(node) if !compatible.iter().any(|c| c.gpu_id == gpu) => {
                        Incompatibility::PinnedMismatch {
                            id,
                            minor,
                            gpu_id: device.gpu_id,
                            local_gpu: gpu,
                            mismatches: device_mismatches(
                                &device_node(device),
                                node,
                                self.config.options.checks(),
                            ),
                        }
                    }
                    _ => Incompatibility::PinnedTaken {
                        id,
                        minor,
                        gpu_id: device.gpu_id,
                        local_gpu: gpu,
                    },
                };
                return Err(Error::Incompatible {
                    problems: vec![problem],
                });
            }
        }
        let chosen = free
            .iter()
            .find(|n| pinned == Some(n.gpu_id))
            .or_else(|| {
                free.iter()
                    .find(|n| pinned.is_none() && n.props.drm_render_minor == minor)
            })
            .or_else(|| {
                free.iter()
                    .find(|n| pinned.is_none() && n.gpu_id == device.gpu_id)
            })
            .or_else(|| free.first().filter(|_| pinned.is_none()));
        let Some(node) = chosen else {
            let problem = match &candidates {
                Err(closest) => Incompatibility::NoStandIn {
                    id,
                    minor,
                    gpu_id: device.gpu_id,
                    device_id: device.device_id,
                    closest: closest.clone(),
                },
                Ok(_) => Incompatibility::AllTaken {
                    id,
                    minor,
                    compatible: compatible.iter().map(|n| n.gpu_id).collect(),
                },
            };
            return Err(Error::Incompatible {
                problems: vec![problem],
            });
        };
        log::info!(
            "render-node file {id}: renderD{minor} (GPU {:#x}, no KFD process) restored on \
             local GPU {:#x} (renderD{})",
            device.gpu_id,
            node.gpu_id,
            node.props.drm_render_minor
        );
        self.render_only.insert(minor, node.gpu_id);
        Ok((node.gpu_id, node.props.drm_render_minor))
    }

    /// `RESTORE_EXT_FILE` of a render-node image: the task's render file
    /// for the GPU, or a retry while the file has to wait.
    pub(super) fn restore_render_node<S: ImageStore>(
        &mut self,
        store: &S,
        id: u32,
        msg: CriuRenderNode,
        task: &TaskIdentity<'_>,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        let image = ValidatedRenderNode::new(id, msg)
            .map_err(Error::image("validating the render-node image"))?;
        let msg = image.message();
        let mapped = self.gpu_map.get(&msg.gpu_id).copied();
        let (local_id, file, local_minor) = match mapped {
            Some(local_id) => {
                let (Some(file), Some(&local_minor)) = (
                    self.render_files.get(&local_id).cloned(),
                    self.render_minors.get(&local_id),
                ) else {
                    return Err(Error::NoRenderFile { gpu_id: local_id });
                };
                (local_id, file, local_minor)
            }
            None if self.has_kfd_image(store, msg, task)? => {
                if !self.restored.is_empty() {
                    return Err(Error::RenderGpuNotRestored {
                        id,
                        gpu_id: msg.gpu_id,
                        minor: msg.drm_render_minor,
                    });
                }
                log::debug!(
                    "render-node file {id} (GPU {:#x}) waits for the task's KFD file",
                    msg.gpu_id
                );
                return Ok(Restored::WaitForKfd);
            }
            None => {
                // No KFD process: nothing asked CRIU for the fd floor yet.
                if self.fd_floor.is_none() {
                    match task.pid {
                        Some(pid) => {
                            self.fd_floor = (task.find_unused_fd)(pid);
                            log::debug!(
                                "render nodes go at fd {:?} or above (pid {pid})",
                                self.fd_floor
                            );
                        }
                        None => log::warn!(
                            "render-node file {id}: the task's pid is unknown, so its render \
                             file is not moved above the task's fds"
                        ),
                    }
                }
                let (local_id, local_minor) = self.render_only_gpu(id, msg)?;
                let pci = local_topology(&self.config.topology_root, &self.driver)?
                    .gpus()
                    .find(|n| n.gpu_id == local_id)
                    .and_then(amdgpu_topology::device_map::pci_address);
                let file = self.render_file(local_id, local_minor, pci.as_deref())?;
                (local_id, file, local_minor)
            }
        };
        // Names the GPU in transfer errors: the user id, else the local one.
        let named_gpu = if msg.gpu_id != 0 && mapped.is_some() {
            msg.gpu_id
        } else {
            local_id
        };
        // Every render node of one GPU in the task becomes this one DRM file
        // (also KFD's VM): its BOs are re-created there under their handles.
        let node = RenderNode::from_fd(self.driver.clone(), file.as_fd());
        let mut waiting = 0usize;
        // Without a shared table this task's own files find the buffers
        // here (hosts without RESTORE_INIT).
        let keep_local = sharing.table.is_none() && uses_shared_buffers(store);
        // Chunks stored in the parent chain or elsewhere in the set are found
        // through one index of the set, as for KFD BOs.
        let resolver = crate::incremental::resolver_for(
            store,
            image.has_references(),
            &format!("render-node file {id}"),
        )?;
        for (index, bo) in msg.bo_entries.iter().enumerate() {
            // Two files of one GPU listing the same handle collapse into one
            // BO, as with the C plugin; a retry skips BOs already re-created.
            if self
                .drm_bos_done
                .contains(&(bo.handle, msg.drm_render_minor))
            {
                continue;
            }
            let handle = GemHandle(bo.handle);
            let key = bo.buffer_key();
            let (created, dmabuf) = if bo.is_import != 0 {
                let Some(dmabuf) = self.shared_dmabuf(key, sharing)? else {
                    log::debug!(
                        "render-node file {id}: imported BO {} waits for buffer {key}",
                        bo.handle
                    );
                    waiting += 1;
                    continue;
                };
                let imported = node
                    .prime_fd_to_handle(dmabuf.as_fd())
                    .map_err(Error::kfd("importing a shared buffer (PRIME_FD_TO_HANDLE)"))?;
                (imported, Some(dmabuf))
            } else {
                let created = node
                    .gem_create(&GemCreate {
                        size: bo.size,
                        // GEM_LIST_HANDLES reports the alignment in GPU
                        // pages; GEM_CREATE takes bytes.
                        alignment: bo.alignment.saturating_mul(GPU_PAGE),
                        domains: u64::from(bo.preferred_domains),
                        flags: bo.alloc_flags,
                    })
                    .map_err(Error::kfd("re-creating a DRM BO (AMDGPU_GEM_CREATE)"))?;
                (created, None)
            };
            if created != handle {
                node.gem_change_handle(created, handle).map_err(Error::kfd(
                    "giving a DRM BO its checkpointed handle (GEM_CHANGE_HANDLE; needs a kernel with it)",
                ))?;
            }
            self.drm_bos_done.insert((bo.handle, msg.drm_render_minor));
            // An import of a KFD BO in the DRM file that is KFD's VM lists
            // KFD's own mapping of it, which RESTORE already re-created:
            // only what is missing is mapped.
            let present = if bo.is_import != 0 {
                node.gem_mapping_info(handle).map_err(Error::kfd(
                    "reading an imported BO's GPU mappings (AMDGPU_GEM_OP)",
                ))?
            } else {
                Vec::new()
            };
            for vm in &bo.vm_entries {
                if present
                    .iter()
                    .any(|p| p.addr == vm.addr && p.size == vm.size)
                {
                    continue;
                }
                node.gem_va_map(handle, vm.addr, vm.offset, vm.size, gem_va_flags(vm.flags))
                    .map_err(Error::kfd("mapping a DRM BO (AMDGPU_GEM_VA)"))?;
            }
            // Offset 0: the BO had no CPU mapping at dump (no CPU access).
            if bo.offset != 0 {
                let new_offset = node.gem_mmap_offset(handle).map_err(Error::kfd(
                    "reading a DRM BO's mmap offset (AMDGPU_GEM_MMAP)",
                ))?;
                self.translations.push(Translation {
                    addr: bo.addr,
                    old_offset: bo.offset,
                    new_offset,
                    file: Some(file.clone()),
                });
            }
            let needs_export = bo.restore_needs_contents()
                || (bo.is_import == 0
                    && bo.share_handle.is_some()
                    && (sharing.table.is_some() || keep_local));
            let dmabuf = match dmabuf {
                Some(dmabuf) => Some(dmabuf),
                None if needs_export => Some(
                    node.prime_handle_to_fd(handle, DRM_RDWR | DRM_CLOEXEC)
                        .map_err(Error::kfd("exporting a DRM BO (PRIME_HANDLE_TO_FD)"))?,
                ),
                None => None,
            };
            // Importers in other tasks find this buffer through the table.
            if let (0, Some(_), Some(table), Some(dmabuf)) = (
                bo.is_import,
                bo.share_handle,
                sharing.table,
                dmabuf.as_ref(),
            ) {
                publish(table, sharing, key, dmabuf.as_fd())?;
            }
            if let (0, Some(_), true, Some(dmabuf)) =
                (bo.is_import, bo.share_handle, keep_local, dmabuf.as_ref())
            {
                if !self.dmabufs.contains_key(&key) {
                    let kept = match self.fd_floor {
                        Some(floor) => crate::sys::dup_at_least(dmabuf.as_fd(), floor),
                        None => dmabuf.try_clone(),
                    }
                    .map_err(Error::io(format!("keeping the dma-buf of buffer {key}")))?;
                    self.dmabufs.insert(key, kept);
                }
            }
            if bo.restore_needs_contents() {
                let (name, layout) = image
                    .drm_pages(index)
                    .ok_or(Error::DrmBoNoPagesFile { id, bo: index })?;
                let dmabuf = dmabuf
                    .as_ref()
                    .ok_or(Error::DrmBoNotExported { id, bo: index })?;
                let chained = resolver.as_ref().and_then(|r| {
                    image
                        .bo_chunks(index)
                        .filter(|c| c.has_references())
                        .map(|c| (r, c))
                });
                transfer::restore_drm_bo(
                    &self.driver,
                    store,
                    &name,
                    layout,
                    chained,
                    transfer::DrmDevice {
                        gpu_id: named_gpu,
                        render_minor: local_minor,
                    },
                    dmabuf.as_fd(),
                    &self.config.options,
                )?;
            }
        }
        if waiting > 0 {
            log::info!(
                "render-node file {id}: {waiting} imported BOs wait for their exporters; retrying"
            );
            return Ok(Restored::WaitForBuffer);
        }
        file.try_clone()
            .map(Restored::File)
            .map_err(Error::io(format!(
                "duplicating the render file of GPU {local_id:#x}"
            )))
    }
}

/// The local GPUs (gpu_ids, node order) that can stand in for the GPU a
/// render-only node recorded as `device`, or, when none can, every mismatch
/// of the closest local GPU (empty when the machine has no GPU). A local GPU
/// qualifies when it passes the property rules of the `KFD_*_CHECK` options
/// ([`device_mismatches`]) and has, as for KFD processes, at least as many
/// valid io links (the entry stores only valid ones). Hive and CPU placement
/// are not asked of a process without KFD queues. What restore chooses from
/// and what `amdgpu-criu check` reports.
pub fn render_only_candidates(
    device: &amdgpu_image::KfdDeviceEntry,
    local: &DeviceTopology,
    options: &CheckOptions,
) -> Result<Vec<u32>, Vec<Reason>> {
    let checkpointed = device_node(device);
    let mut compatible = Vec::new();
    let mut closest: Option<Vec<Reason>> = None;
    for node in local.gpus() {
        let reasons = render_only_mismatches(&checkpointed, node, local, options);
        if reasons.is_empty() {
            compatible.push(node.gpu_id);
        } else if closest.as_ref().is_none_or(|c| reasons.len() < c.len()) {
            closest = Some(reasons);
        }
    }
    if compatible.is_empty() {
        Err(closest.unwrap_or_default())
    } else {
        Ok(compatible)
    }
}

/// Why local GPU `dest` of `local` cannot stand in for the checkpointed GPU
/// of a render-only node (see [`render_only_candidates`]).
fn render_only_mismatches(
    checkpointed: &amdgpu_topology::devices::DeviceNode,
    dest: &amdgpu_topology::devices::DeviceNode,
    local: &DeviceTopology,
    options: &CheckOptions,
) -> Vec<Reason> {
    let mut reasons = device_mismatches(checkpointed, dest, options);
    let want = checkpointed.iolinks.len();
    let have = dest
        .iolinks
        .iter()
        .filter(|l| local.link_is_valid(l))
        .count();
    if want > have {
        reasons.push(Reason {
            gpu: Some(checkpointed.gpu_id),
            check: rule::VALID_IO_LINKS,
            checkpointed: want as u64,
            local: have as u64,
            local_gpu: Some(dest.gpu_id),
        });
    }
    reasons
}
