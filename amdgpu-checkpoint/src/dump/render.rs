//! Render-node files: their DRM BOs (listed by `AMDGPU_GEM_LIST_HANDLES`,
//! or probed on a kernel without it), their contents, and their GPU named
//! by the user id of a dumped KFD file. A node offered before that KFD file
//! waits for it; one whose GPU no KFD file names is written render-only at
//! the dump's end (a process without `/dev/kfd`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use ::kfd::{Driver, GemHandle};
use amdgpu_image::topology::device_entry;
use amdgpu_image::{
    flags, CriuRenderNode, DrmBoEntry, DrmVmEntry, ImageName, ImageStore, KfdDeviceEntry,
    FORMAT_VERSION, PRODUCER,
};
use amdgpu_topology::devices::DeviceTopology;
use kfd_sys::{AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT, DRM_CLOEXEC};

use super::topology::local_topology;
use super::{Dumper, RenderDump};
use crate::error::Error;
use crate::transfer;

pub(super) struct PendingRender {
    pub(super) fd: OwnedFd,
    pub(super) minor: u32,
    pub(super) id: u32,
    /// The image written already, render-only, on a host without
    /// `DUMP_DEVICES_LATE` (whose end cannot fail the dump any more): a KFD
    /// file naming its GPU later renames it instead of writing it anew
    /// (into an images directory; a stream takes an image once, so there
    /// that KFD file's dump fails instead, see
    /// [`Error::StreamedRenderOnly`]).
    pub(super) written: Option<CriuRenderNode>,
}

impl<D: Driver + Clone> Dumper<D> {
    /// Dumps a render-node fd (minor `minor`) as CRIU file `id`: a
    /// `CriuRenderNode` naming the GPU by the user id its process knows it
    /// by. That id comes from the process's KFD file; when CRIU offers the
    /// render node first (its fd number is lower), the node is kept (a
    /// `dup`) and written as soon as a KFD file naming its GPU is dumped —
    /// upstream fails here. A node whose GPU no dumped KFD file names by
    /// the end of the dump belongs to a process without `/dev/kfd` and is
    /// written as a render-only image ([`Dumper::finish_render_only`]).
    ///
    /// Which task a render fd belongs to is not visible here (CRIU passes
    /// no pid, and a DRM file does not name its process): a node written
    /// with a KFD file's user id may still belong to a render-only process
    /// of the same GPU. Every image therefore also records the GPU's device
    /// entry, and restore decides by whether the restored task has a KFD
    /// image ([`crate::restore`]).
    ///
    /// The node's own DRM BOs (GEM objects it created) are saved with
    /// their handles, mmap offsets, GPU mappings and, for VRAM/GTT BOs, their
    /// contents; every exportable BO (also one it imported from another file
    /// or process) is named by the share handle of its buffer, which dma-buf
    /// files and KFD BOs of the same buffer carry too.
    pub fn dump_render_node<S: ImageStore>(
        &mut self,
        store: &S,
        fd: BorrowedFd<'_>,
        minor: u32,
        id: u32,
    ) -> Result<RenderDump, Error> {
        let own = fd
            .try_clone_to_owned()
            .map_err(Error::io("duplicating the render-node fd"))?;
        match self.user_gpu_of_minor(minor) {
            Some(gpu_id) => {
                let (dump, _) = self.write_render_node(store, own, minor, id, gpu_id)?;
                self.flush_pending_dmabufs(store)?;
                Ok(dump)
            }
            // A host without DUMP_DEVICES_LATE reports the dump a success
            // after its last DUMP_EXT_FILE: the image is written now, as
            // render-only, so a failure fails this file, into an images
            // directory and into a stream alike. Should a KFD file name
            // the GPU later, the image is renamed in a directory; a stream
            // cannot take it twice, and that KFD file's dump fails.
            None if self.config.unpause_early => {
                let copy = own
                    .try_clone()
                    .map_err(Error::io("duplicating the render-node fd"))?;
                let (dump, msg) = self.write_render_node(store, copy, minor, id, 0)?;
                log::info!(
                    "file {id}: no dumped KFD file names the GPU of renderD{minor} yet: written \
                     render-only ({} DRM BOs), renamed should a KFD file name its GPU",
                    dump.bos
                );
                self.pending_renders.push(PendingRender {
                    fd: own,
                    minor,
                    id,
                    written: Some(msg),
                });
                Ok(RenderDump {
                    gpu_id: None,
                    ..dump
                })
            }
            None => {
                log::info!(
                    "file {id}: no dumped KFD file names the GPU of renderD{minor} yet; \
                     its image waits for one (render-only if none comes)"
                );
                self.pending_renders.push(PendingRender {
                    fd: own,
                    minor,
                    id,
                    written: None,
                });
                Ok(RenderDump {
                    id,
                    minor,
                    gpu_id: None,
                    bos: 0,
                })
            }
        }
    }

    /// Render nodes waiting for their process's KFD file.
    pub fn pending_render_nodes(&self) -> usize {
        self.pending_renders.len()
    }

    pub(super) fn user_gpu_of_minor(&self, minor: u32) -> Option<u32> {
        let (local, _) = self.render_minors.iter().find(|(_, m)| **m == minor)?;
        self.user_gpu_ids.get(local).copied()
    }

    /// The pids of the dumped KFD processes using the GPU of `minor`.
    fn kfd_pids_of_minor(&self, minor: u32) -> Vec<u32> {
        self.render_minors
            .iter()
            .filter(|(_, m)| **m == minor)
            .filter_map(|(local, _)| self.kfd_pids.get(local))
            .flatten()
            .copied()
            .collect()
    }

    /// The local topology, parsed once.
    fn topology(&mut self) -> Result<&DeviceTopology, Error> {
        let parsed = match self.topology.take() {
            Some(parsed) => parsed,
            None => local_topology(&self.config.topology_root, &self.driver)?,
        };
        Ok(self.topology.insert(parsed))
    }

    /// The device entry of the GPU behind render minor `minor`, with the
    /// machine's own node and gpu ids.
    fn render_device(&mut self, minor: u32) -> Result<KfdDeviceEntry, Error> {
        let root = self.config.topology_root.display().to_string();
        let topology = self.topology()?;
        let node = topology
            .gpus()
            .find(|n| n.props.drm_render_minor == minor)
            .ok_or(Error::NoGpuOfRenderMinor { root, minor })?;
        Ok(device_entry(node, node.gpu_id, topology))
    }

    fn write_render_node<S: ImageStore>(
        &mut self,
        store: &S,
        own: OwnedFd,
        minor: u32,
        id: u32,
        gpu_id: u32,
    ) -> Result<(RenderDump, CriuRenderNode), Error> {
        let device = self.render_device(minor)?;
        // Names the GPU in transfer errors: the user id, else the machine's.
        let named_gpu = if gpu_id != 0 { gpu_id } else { device.gpu_id };
        let node = kfd::RenderNode::from_fd(self.driver.clone(), own);
        let handles = match node.gem_list_handles() {
            Ok(handles) => handles,
            // Kernels without GEM_LIST_HANDLES cannot list DRM BOs. Upstream
            // then dumped "0 BOs" and succeeded, losing any BO the file had
            // (criu#3015). Handles are allocated lowest-free from 1, so a
            // file with BOs almost always has one of the lowest handles:
            // probe them, and refuse when one exists. A file whose BOs all
            // sit above the probed range (all low handles closed) is found
            // by its fdinfo: memory in its VM that neither the KFD BOs of
            // the processes using the GPU nor page tables account for.
            Err(e) if e.errno() == libc::EINVAL => {
                if let Some(handle) = (1..=UNLISTED_HANDLE_PROBE).find(|&h| {
                    match node.gem_mmap_offset(GemHandle(h)) {
                        Ok(_) => true,
                        Err(e) => e.errno() != libc::ENOENT,
                    }
                }) {
                    return Err(Error::Unlistable {
                        reason: format!(
                            "file {id}: renderD{minor} holds DRM buffers (GEM handle {handle} \
                             exists) but this kernel cannot list them (no \
                             AMDGPU_GEM_LIST_HANDLES, added in Linux 6.16); the dump would lose \
                             them, so it is refused: update the kernel"
                        ),
                    });
                }
                self.refuse_unseen_drm_memory(&node, minor, id)?;
                Vec::new()
            }
            Err(e) => {
                return Err(Error::Kfd {
                    step: "listing the render node's BOs (AMDGPU_GEM_LIST_HANDLES)",
                    source: e,
                })
            }
        };
        let plan = self.chunk_plan(store)?;
        let mut contents = transfer::ContentReport::default();
        let mut bo_entries = Vec::with_capacity(handles.len());
        for (index, listed) in handles.iter().enumerate() {
            let handle = GemHandle(listed.gem_handle);
            let is_import = listed.flags & AMDGPU_GEM_LIST_HANDLES_FLAG_IS_IMPORT != 0;
            // BOs without CPU access (and userptrs) have no mmap offset
            // (EPERM): nothing of them can be mapped, so 0 = no translation.
            let offset = match node.gem_mmap_offset(handle) {
                Ok(offset) => offset,
                Err(e) if e.errno() == libc::EPERM => 0,
                Err(e) => {
                    return Err(Error::Kfd {
                        step: "reading a DRM BO's mmap offset (AMDGPU_GEM_MMAP)",
                        source: e,
                    })
                }
            };
            let vms = node.gem_mapping_info(handle).map_err(Error::kfd(
                "reading a DRM BO's GPU mappings (AMDGPU_GEM_OP)",
            ))?;
            let in_gpu_memory = listed.preferred_domains
                & u64::from(flags::GEM_DOMAIN_VRAM | flags::GEM_DOMAIN_GTT)
                != 0;
            // The buffer's dma-buf names it across files and processes.
            // Userptr and VM-always-valid BOs cannot be exported (EPERM):
            // nothing else can share them either.
            let dmabuf = match node.prime_handle_to_fd(handle, DRM_CLOEXEC) {
                Ok(dmabuf) => Some(dmabuf),
                Err(e) if e.errno() == libc::EPERM && !in_gpu_memory => None,
                Err(e) => {
                    return Err(Error::Kfd {
                        step: "exporting a DRM BO (PRIME_HANDLE_TO_FD)",
                        source: e,
                    })
                }
            };
            let share_handle = match &dmabuf {
                Some(dmabuf) => Some(self.dmabuf_handle(dmabuf.as_fd())?),
                None => None,
            };
            // A buffer another dumped BO re-creates (the same GEM object
            // shared by dma-buf on one device, which the kernel does not flag)
            // is imported at restore, as is one imported from another device.
            let is_import =
                is_import || share_handle.is_some_and(|key| self.created.contains(&key));
            match (is_import, share_handle) {
                (false, Some(key)) => {
                    self.created.insert(key);
                }
                (true, Some(key)) => self.imported.push((key, id, listed.gem_handle)),
                (true, None) => {
                    return Err(Error::ImportUnexportable {
                        id,
                        minor,
                        handle: listed.gem_handle,
                    })
                }
                (false, None) => {}
            }
            let dumped = match (&dmabuf, in_gpu_memory) {
                (Some(dmabuf), true) => {
                    let name = ImageName::DrmPages {
                        id,
                        minor,
                        bo_index: index as u32,
                    };
                    Some(transfer::dump_drm_bo(
                        &self.driver,
                        store,
                        &name,
                        transfer::DrmDevice {
                            gpu_id: named_gpu,
                            render_minor: minor,
                        },
                        dmabuf.as_fd(),
                        listed.size,
                        &self.config.options,
                        Some(&plan),
                        Some(&self.staging),
                    )?)
                }
                _ => None,
            };
            let dumped = dumped
                .map(|bo| {
                    contents.bytes += bo.bytes;
                    contents.stored_bytes += bo.stored_bytes;
                    render_chunks(bo)
                })
                .transpose()?;
            bo_entries.push(DrmBoEntry {
                addr: vms.last().map_or(0, |vm| vm.addr),
                size: listed.size,
                offset,
                alloc_flags: listed.alloc_flags,
                alignment: listed.alignment,
                preferred_domains: listed.preferred_domains as u32,
                handle: listed.gem_handle,
                is_import: u32::from(is_import),
                num_of_vms: vms.len() as u32,
                vm_entries: vms
                    .iter()
                    .map(|vm| DrmVmEntry {
                        addr: vm.addr,
                        size: vm.size,
                        offset: vm.offset,
                        flags: vm.flags,
                    })
                    .collect(),
                content_checksum: dumped.as_ref().map(|c| c.checksum),
                share_handle,
                chunk_digests: dumped
                    .as_ref()
                    .map(|c| amdgpu_image::chunks::encode_digests(&c.digests)),
                chunk_sources: dumped.and_then(|c| c.sources),
            });
        }
        let sources = || {
            bo_entries
                .iter()
                .filter_map(|b| b.chunk_sources.as_deref())
                .flatten()
        };
        let references_parent = sources().any(|&s| s == amdgpu_image::ChunkSource::Parent as u8);
        crate::incremental::log_written(
            &format!("file {id} (renderD{minor})"),
            contents.stored_bytes,
            contents.bytes,
            references_parent,
        );
        let mut msg = CriuRenderNode {
            gpu_id: 0,
            referencing_gpu_id: None,
            dump_id: Some(plan.dump_id().to_vec()),
            parent_dump_id: if references_parent {
                plan.parent_dump_id().map(<[u8]>::to_vec)
            } else {
                None
            },
            id,
            drm_render_minor: minor,
            num_of_bos: bo_entries.len() as u64,
            bo_entries,
            producer: Some(PRODUCER.to_owned()),
            format_version: Some(FORMAT_VERSION),
            message_checksum: None,
            device: Some(device),
            chunk_size: Some(amdgpu_image::CHUNK_SIZE),
            kfd_pids: Vec::new(),
        };
        self.name_render_gpu(&mut msg, gpu_id);
        store
            .write_message(&ImageName::RenderNode { id }, &msg)
            .map_err(Error::image("writing the render-node image"))?;
        let dump = RenderDump {
            id,
            minor,
            gpu_id: Some(gpu_id),
            bos: msg.bo_entries.len(),
        };
        Ok((dump, msg))
    }

    /// Names the GPU of a render-node image: the user gpu_id `gpu_id` of
    /// the KFD file that names it, or 0 (render-only), and the KFD
    /// processes that may own the fd.
    fn name_render_gpu(&self, msg: &mut CriuRenderNode, gpu_id: u32) {
        let references = msg.bo_entries.iter().any(|b| b.chunk_sources.is_some());
        // An image with references names its GPU in referencing_gpu_id
        // and 0 here: the C plugin, which would restore the BOs without
        // the referenced chunks, finds no GPU and refuses the file.
        msg.gpu_id = if references { 0 } else { gpu_id };
        msg.referencing_gpu_id = (references && gpu_id != 0).then_some(gpu_id);
        // Which tasks may own the fd: only a named GPU has any.
        msg.kfd_pids = if gpu_id == 0 {
            Vec::new()
        } else {
            self.kfd_pids_of_minor(msg.drm_render_minor)
        };
    }

    /// Writes pending render node `render`'s image naming user gpu_id
    /// `gpu_id`: renames the one written render-only, or writes it.
    fn write_pending_render<S: ImageStore>(
        &mut self,
        store: &S,
        render: PendingRender,
        gpu_id: u32,
    ) -> Result<RenderDump, Error> {
        let Some(mut msg) = render.written else {
            return self
                .write_render_node(store, render.fd, render.minor, render.id, gpu_id)
                .map(|(dump, _)| dump);
        };
        if store.as_dir().is_none() {
            return Err(Error::StreamedRenderOnly {
                id: render.id,
                minor: render.minor,
                gpu_id,
            });
        }
        self.name_render_gpu(&mut msg, gpu_id);
        store
            .write_message(&ImageName::RenderNode { id: render.id }, &msg)
            .map_err(Error::image("renaming the GPU of a render-node image"))?;
        Ok(RenderDump {
            id: render.id,
            minor: render.minor,
            gpu_id: Some(gpu_id),
            bos: msg.bo_entries.len(),
        })
    }

    /// On a kernel that cannot list DRM BOs, with none among the probed
    /// handles of render node `node` (renderD`minor`, file `id`): refuses
    /// the file when its fdinfo shows memory in its VM beyond what the KFD
    /// BOs of the processes using the GPU and page tables account for (DRM
    /// BOs at handles the probe does not reach); dumps it without BOs, with
    /// a warning, otherwise.
    fn refuse_unseen_drm_memory<F: AsFd>(
        &self,
        node: &kfd::RenderNode<D, F>,
        minor: u32,
        id: u32,
    ) -> Result<(), Error> {
        let probed = format!("GEM handles 1..={UNLISTED_HANDLE_PROBE}");
        let vm = node
            .fdinfo()
            .ok()
            .and_then(|text| crate::drm_fdinfo::vm_bytes(&text));
        let Some(vm) = vm else {
            log::warn!(
                "file {id}: the kernel cannot list DRM BOs (no AMDGPU_GEM_LIST_HANDLES); \
                 renderD{minor} has none among {probed} and its fdinfo reports no memory, \
                 so BOs above those handles cannot be told: dumped without BOs"
            );
            return Ok(());
        };
        let (known, buffers) = self
            .render_minors
            .iter()
            .filter(|(_, m)| **m == minor)
            .filter_map(|(local, _)| self.kfd_bos_of_gpu.get(local))
            .fold((0u64, 0u64), |(b, n), (kb, kn)| {
                (b.saturating_add(*kb), n.saturating_add(*kn))
            });
        let allowance = crate::drm_fdinfo::unlisted_allowance(known, buffers);
        let unseen = vm.saturating_sub(known);
        if unseen > allowance {
            return Err(Error::Unlistable {
                reason: format!(
                    "file {id}: renderD{minor} holds {vm} bytes of GPU memory (its fdinfo), \
                     {unseen} more than the {known} bytes of KFD BOs of the processes using \
                     its GPU (page tables allowed for), yet none of {probed} exists: DRM \
                     buffers at higher handles, which this kernel cannot list (no \
                     AMDGPU_GEM_LIST_HANDLES, added in Linux 6.16); the dump would lose them, \
                     so it is refused: update the kernel"
                ),
            });
        }
        log::warn!(
            "file {id}: the kernel cannot list DRM BOs (no AMDGPU_GEM_LIST_HANDLES); \
             renderD{minor} has none among {probed}, and its fdinfo's {vm} bytes are its \
             processes' KFD BOs and page tables: dumped without BOs"
        );
        Ok(())
    }

    /// Writes the images of pending render nodes whose GPU is now known.
    pub(super) fn flush_pending_renders<S: ImageStore>(&mut self, store: &S) -> Result<(), Error> {
        let pending = std::mem::take(&mut self.pending_renders);
        let mut first_error = None;
        for render in pending {
            match self.user_gpu_of_minor(render.minor) {
                Some(gpu_id) => {
                    let (id, minor) = (render.id, render.minor);
                    match self.write_pending_render(store, render, gpu_id) {
                        Ok(_) => log::info!("file {id}: renderD{minor} of GPU {gpu_id:#x} dumped"),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                None => self.pending_renders.push(render),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes every render node still waiting for a KFD file as a
    /// render-only image (`gpu_id` 0 and the GPU's device entry): no dumped
    /// KFD process uses its GPU, so its process has no `/dev/kfd` (a process
    /// with one has every visible GPU among its KFD devices). Called once
    /// every file is dumped (`DUMP_DEVICES_LATE`, or `exit` in CRIU without
    /// that hook); then resolves dma-bufs of the nodes' BOs. Returns how
    /// many images were written; every node is tried, the first error is
    /// returned.
    pub fn finish_render_only<S: ImageStore>(&mut self, store: &S) -> Result<usize, Error> {
        let mut written = 0;
        let mut first_error = None;
        for render in std::mem::take(&mut self.pending_renders) {
            let (id, minor) = (render.id, render.minor);
            let gpu_id = self.user_gpu_of_minor(minor).unwrap_or(0);
            if gpu_id == 0 && render.written.is_some() {
                // Written render-only already, when it was dumped.
                continue;
            }
            match self.write_pending_render(store, render, gpu_id) {
                Ok(dump) => {
                    written += 1;
                    log::info!(
                        "file {id}: renderD{minor} dumped without a KFD process ({} DRM BOs)",
                        dump.bos
                    );
                }
                Err(e) => {
                    log::error!("file {id}: renderD{minor}: {e}");
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.flush_pending_dmabufs(store) {
            first_error.get_or_insert(e);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }
}

/// GEM handles probed on a kernel without `AMDGPU_GEM_LIST_HANDLES`.
const UNLISTED_HANDLE_PROBE: u32 = 256;

/// What the image records of one dumped DRM BO's contents.
#[derive(Debug)]
struct RenderChunks {
    checksum: u64,
    digests: Vec<amdgpu_image::chunks::Digest>,
    /// Chunk sources as `chunk_sources` stores them, when a chunk is
    /// stored elsewhere.
    sources: Option<Vec<u8>>,
}

/// The checksum, digests and sources of a DRM BO's own pages file, which
/// holds that one BO (entry 0): anything else is an error, never a
/// checksum of 0 that restore would then refuse as a damaged file.
fn render_chunks(bo: transfer::ContentReport) -> Result<RenderChunks, Error> {
    fn only<T>(list: Vec<(usize, T)>, what: &'static str) -> Result<T, Error> {
        let mut list = list.into_iter();
        match (list.next(), list.next()) {
            (Some((0, item)), None) => Ok(item),
            _ => Err(Error::DrmContents { what }),
        }
    }
    let checksum = only(bo.checksums, "checksum")?;
    let digests = only(bo.digests, "list of chunk digests")?;
    let sources = match bo.sources.is_empty() {
        true => None,
        false => Some(only(bo.sources, "list of chunk sources")?),
    }
    .filter(|s| s.iter().any(|s| *s != amdgpu_image::ChunkSource::Here))
    .map(|s| s.iter().map(|s| *s as u8).collect());
    Ok(RenderChunks {
        checksum,
        digests,
        sources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::contents::tests::report;

    #[test]
    fn a_render_bo_without_exactly_one_checksum_is_an_error() {
        assert!(render_chunks(report(&[0])).is_ok());
        for bad in [&[][..], &[0, 0][..], &[1][..]] {
            let err = render_chunks(report(bad)).unwrap_err();
            assert!(err.to_string().contains("DRM BO"), "{bad:?}: {err}");
        }
    }
}
