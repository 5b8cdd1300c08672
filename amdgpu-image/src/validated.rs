//! Validated messages: [`ValidatedKfd`] and [`ValidatedRenderNode`] wrap a
//! decoded message once its counts, ids, sizes and addresses are consistent,
//! and then answer the questions restore asks (which GPUs, which BOs go into
//! which pages file) with no further checks needed. The chain reader and the
//! set's validation ([`crate::validate`], which re-exports them) both build
//! on them.
//!
//! Nothing here panics or allocates more than the messages already hold;
//! nothing here writes.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::chunks::{check_chunk_size, BoChunks, ChecksumAlgo, ChunkFieldError, ChunkSource};
use crate::messages::{flags, CriuKfd, CriuRenderNode, DrmBoEntry, KfdBoEntry, FORMAT_VERSION};
use crate::pages::{PagesBo, PagesLayout};
use crate::{Error, ImageName, Problem, PAGE_SIZE};

/// KFD memory types whose sizes the kernel requires to be page multiples.
const PAGE_ALIGNED_TYPES: u32 =
    flags::KFD_VRAM | flags::KFD_GTT | flags::KFD_DOORBELL | flags::KFD_MMIO_REMAP;

/// The largest `shared_mem_size` (hsakmt's `/dev/shm/hsakmt_shared_mem`)
/// an image may record: libhsakmt makes an 8-byte table, and restore
/// creates an object of this size when the machine has none.
pub const MAX_SHARED_MEM_SIZE: u64 = 1 << 20;

/// A `criu_kfd` message whose contents are consistent.
///
/// Guarantees: `num_of_bos` equals the BO entries; `num_of_gpus` / `num_of_cpus`
/// equal the GPU (`gpu_id != 0`) / CPU entries; GPU ids and node ids are
/// unique; iolinks point at listed nodes; every BO names a listed GPU, has
/// exactly one memory type, does not wrap the address space, has a page
/// multiple size where the kernel requires it, and carries a checksum only if
/// its contents are saved; per-GPU pages totals fit in `u64`; the image does
/// not name its own dump as its parent; `shared_mem_size` is 0 or holds the
/// magic and is at most [`MAX_SHARED_MEM_SIZE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedKfd {
    pub(crate) id: u32,
    pub(crate) msg: CriuKfd,
}

impl ValidatedKfd {
    /// Validates the message of `amdgpu-kfd-<id>.img`.
    pub fn new(id: u32, msg: CriuKfd) -> Result<Self, Error> {
        let problems = Self::problems(id, &msg);
        if problems.is_empty() {
            Ok(Self { id, msg })
        } else {
            Err(Error::Invalid(problems))
        }
    }

    /// Every problem of the message of `amdgpu-kfd-<id>.img`.
    pub fn problems(id: u32, msg: &CriuKfd) -> Vec<Problem> {
        let file = ImageName::Kfd { id }.to_string();
        let mut out = Vec::new();
        let mut p = |path: String, message: String| out.push(Problem::new(&file, path, message));

        if msg.num_of_bos != msg.bo_entries.len() as u64 {
            p(
                "criu_kfd.num_of_bos".into(),
                format!(
                    "is {} but the image has {} bo entries",
                    msg.num_of_bos,
                    msg.bo_entries.len()
                ),
            );
        }
        let gpus = msg.device_entries.iter().filter(|d| d.is_gpu()).count() as u64;
        let cpus = msg.device_entries.len() as u64 - gpus;
        if u64::from(msg.num_of_gpus) != gpus {
            p(
                "criu_kfd.num_of_gpus".into(),
                format!(
                    "is {} but the image has {gpus} gpu device entries",
                    msg.num_of_gpus
                ),
            );
        }
        if u64::from(msg.num_of_cpus) != cpus {
            p(
                "criu_kfd.num_of_cpus".into(),
                format!(
                    "is {} but the image has {cpus} cpu device entries",
                    msg.num_of_cpus
                ),
            );
        }
        if let Some(v) = msg.format_version.filter(|&v| v > FORMAT_VERSION) {
            p(
                "criu_kfd.format_version".into(),
                format!("{v} is newer than the supported {FORMAT_VERSION}; update amdgpu-criu-rs"),
            );
        }
        if let Some(Err(e)) = msg.chunk_size.map(check_chunk_size) {
            p("criu_kfd.chunk_size".into(), e.to_string());
        }
        for (field, id) in [
            ("dump_id", &msg.dump_id),
            ("parent_dump_id", &msg.parent_dump_id),
        ] {
            if let Some(id) = id.as_ref().filter(|id| id.len() != 16) {
                p(
                    format!("criu_kfd.{field}"),
                    format!("{} bytes, 16 expected", id.len()),
                );
            }
        }
        if let Some(e) = own_parent(&msg.dump_id, &msg.parent_dump_id) {
            p("criu_kfd.parent_dump_id".into(), e);
        }
        match msg.shared_mem_size {
            0 | 4..=MAX_SHARED_MEM_SIZE => {}
            1..=3 => p(
                "criu_kfd.shared_mem_size".into(),
                format!(
                    "{} bytes cannot hold the 4-byte magic of hsakmt's shared memory",
                    msg.shared_mem_size
                ),
            ),
            size => p(
                "criu_kfd.shared_mem_size".into(),
                format!(
                    "{size} bytes, beyond the {MAX_SHARED_MEM_SIZE} this format accepts for \
                     hsakmt's shared memory (libhsakmt makes an 8-byte table)"
                ),
            ),
        }

        let node_ids: BTreeSet<u32> = msg.device_entries.iter().map(|d| d.node_id).collect();
        let mut seen_nodes = HashSet::new();
        let mut seen_gpus = HashSet::new();
        for (i, d) in msg.device_entries.iter().enumerate() {
            let at = |f: &str| format!("criu_kfd.device_entries[{i}].{f}");
            if !seen_nodes.insert(d.node_id) {
                p(
                    at("node_id"),
                    format!("node id {} appears twice", d.node_id),
                );
            }
            if d.is_gpu() {
                if !seen_gpus.insert(d.gpu_id) {
                    p(
                        at("gpu_id"),
                        format!("gpu id {:#x} appears twice", d.gpu_id),
                    );
                }
                if d.cpu_cores_count != 0 {
                    p(
                        at("cpu_cores_count"),
                        "is non-zero on a gpu entry (restore would take it for a cpu)".into(),
                    );
                }
            } else if d.cpu_cores_count == 0 {
                p(
                    at("gpu_id"),
                    "0 on an entry without cpu cores: neither a gpu nor a cpu".into(),
                );
            }
            for (j, link) in d.iolinks.iter().enumerate() {
                if !node_ids.contains(&link.node_to_id) {
                    p(
                        format!("criu_kfd.device_entries[{i}].iolinks[{j}].node_to_id"),
                        format!("no device entry has node id {}", link.node_to_id),
                    );
                }
            }
        }

        let mut gpu_totals: BTreeMap<u32, u64> = BTreeMap::new();
        for (i, bo) in msg.bo_entries.iter().enumerate() {
            let at = |f: &str| format!("criu_kfd.bo_entries[{i}].{f}");
            if !seen_gpus.contains(&bo.gpu_id) {
                p(
                    at("gpu_id"),
                    format!("{:#x} is not a checkpointed gpu", bo.gpu_id),
                );
            }
            if bo.addr.checked_add(bo.size).is_none() {
                p(
                    at("size"),
                    format!("addr {:#x} + size {:#x} overflows", bo.addr, bo.size),
                );
            }
            let mem_type = bo.alloc_flags & flags::KFD_MEM_TYPE_MASK;
            if mem_type.count_ones() != 1 {
                p(
                    at("alloc_flags"),
                    format!(
                        "{:#x} does not name exactly one memory type",
                        bo.alloc_flags
                    ),
                );
            }
            if mem_type & PAGE_ALIGNED_TYPES != 0 && bo.size % PAGE_SIZE != 0 {
                p(
                    at("size"),
                    format!(
                        "{:#x} is not a multiple of the {PAGE_SIZE}-byte page",
                        bo.size
                    ),
                );
            }
            if bo.content_checksum.is_some() && !bo.has_contents() {
                p(
                    at("content_checksum"),
                    "set on a bo whose contents are not saved".into(),
                );
            }
            if (bo.chunk_digests.is_some() || bo.chunk_sources.is_some()) && !bo.has_contents() {
                p(
                    at("chunk_digests"),
                    "set on a bo whose contents are not saved".into(),
                );
            } else if let Err(e) = bo.chunks(i, msg.chunk_size) {
                p(at("chunk_digests"), e.to_string());
            } else if let Ok(Some(chunks)) = bo.chunks(i, msg.chunk_size) {
                if chunks.sources.contains(&ChunkSource::Parent) && msg.parent_dump_id.is_none() {
                    p(
                        at("chunk_sources"),
                        "references the parent image set but the image names no parent_dump_id"
                            .into(),
                    );
                }
            }
            if bo.has_contents() {
                let total = gpu_totals.entry(bo.gpu_id).or_insert(0);
                match total.checked_add(bo.size) {
                    Some(t) => *total = t,
                    None => p(
                        at("size"),
                        "the gpu's pages file would exceed 2^64 bytes".into(),
                    ),
                }
            }
        }
        out
    }

    /// The ext-file id of the image.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The validated message.
    pub fn message(&self) -> &CriuKfd {
        &self.msg
    }

    /// Gives the message back.
    pub fn into_message(self) -> CriuKfd {
        self.msg
    }

    /// GPU device entries, in image order.
    pub fn gpus(&self) -> impl Iterator<Item = &crate::KfdDeviceEntry> {
        self.msg.device_entries.iter().filter(|d| d.is_gpu())
    }

    /// CPU device entries, in image order.
    pub fn cpus(&self) -> impl Iterator<Item = &crate::KfdDeviceEntry> {
        self.msg.device_entries.iter().filter(|d| !d.is_gpu())
    }

    /// The BOs of `gpu_id` whose contents are in its pages file, in file
    /// order: for a BO with chunks stored elsewhere
    /// ([`ValidatedKfd::has_references`]), the bytes of its chunks stored
    /// here, each verified by its digest.
    pub fn pages_layout(&self, gpu_id: u32) -> PagesLayout {
        layout_of(&self.msg, gpu_id, true)
    }

    /// The layout as a reader that ignores our chunk fields sees it (the C
    /// plugin: every BO's full size in its pages file, no checksums). For
    /// an image whose chunks are all here it equals
    /// [`pages_layout`](Self::pages_layout) but for the checksums; for one
    /// with references its total differs
    /// from the pages file's length header, so such a reader refuses the
    /// file instead of restoring the wrong bytes.
    pub fn compat_pages_layout(&self, gpu_id: u32) -> PagesLayout {
        layout_of(&self.msg, gpu_id, false)
    }

    /// The checksum algorithm of the image's BOs.
    pub fn checksum_algo(&self) -> ChecksumAlgo {
        ChecksumAlgo::of(self.msg.format_version, self.msg.chunk_size)
    }

    /// The chunks of every BO of `gpu_id` whose contents are saved, in
    /// pages-file order; empty when the image records no chunk digests.
    pub fn bo_chunks(&self, gpu_id: u32) -> Vec<BoChunks> {
        self.msg
            .bo_entries
            .iter()
            .enumerate()
            .filter(|(_, b)| b.gpu_id == gpu_id && b.has_contents())
            .filter_map(|(i, b)| b.chunks(i, self.msg.chunk_size).ok().flatten())
            .collect()
    }

    /// Whether any BO has chunks stored elsewhere (in the parent chain or
    /// elsewhere in the set): such an image needs this crate's chain
    /// reader, and readers that ignore chunk fields refuse its pages files.
    pub fn has_references(&self) -> bool {
        self.msg.bo_entries.iter().enumerate().any(|(i, b)| {
            b.chunks(i, self.msg.chunk_size)
                .ok()
                .flatten()
                .is_some_and(|c| c.has_references())
        })
    }

    /// Every pages file of the image (one per GPU, image order) with its layout.
    pub fn pages_files(&self) -> Vec<(ImageName, PagesLayout)> {
        self.gpus()
            .map(|d| {
                (
                    ImageName::Pages {
                        id: self.id,
                        gpu_id: d.gpu_id,
                    },
                    self.pages_layout(d.gpu_id),
                )
            })
            .collect()
    }
}

impl KfdBoEntry {
    /// The chunks this entry (index `entry` of its image, whose chunk size
    /// is `chunk_size`) records in tags 130/131: `Ok(None)` without
    /// digests, an error naming what does not fit the BO.
    pub fn chunks(
        &self,
        entry: usize,
        chunk_size: Option<u64>,
    ) -> Result<Option<BoChunks>, ChunkFieldError> {
        BoChunks::from_fields(
            entry,
            self.size,
            chunk_size,
            self.chunk_digests.as_deref(),
            self.chunk_sources.as_deref(),
        )
    }
}

impl DrmBoEntry {
    /// The chunks this entry records in tags 130/150; see
    /// [`KfdBoEntry::chunks`].
    pub fn chunks(
        &self,
        entry: usize,
        chunk_size: Option<u64>,
    ) -> Result<Option<BoChunks>, ChunkFieldError> {
        BoChunks::from_fields(
            entry,
            self.size,
            chunk_size,
            self.chunk_digests.as_deref(),
            self.chunk_sources.as_deref(),
        )
    }
}

fn layout_of(msg: &CriuKfd, gpu_id: u32, chunks: bool) -> PagesLayout {
    let algo = ChecksumAlgo::of(msg.format_version, msg.chunk_size);
    let mut list = Vec::new();
    let mut digests = Vec::new();
    for (entry, b) in msg.bo_entries.iter().enumerate() {
        if b.gpu_id != gpu_id || !b.has_contents() {
            continue;
        }
        let recorded = if chunks {
            b.chunks(entry, msg.chunk_size).ok().flatten()
        } else {
            None
        };
        match recorded {
            Some(c) if c.has_references() => {
                list.push(PagesBo {
                    entry,
                    size: c.stored_len(),
                    checksum: None,
                });
                digests.push(Some(
                    c.digests
                        .iter()
                        .zip(&c.sources)
                        .filter(|(_, s)| **s == ChunkSource::Here)
                        .map(|(d, _)| *d)
                        .collect(),
                ));
            }
            other => {
                list.push(PagesBo {
                    entry,
                    size: b.size,
                    // A reader ignoring our fields checks no checksum.
                    checksum: b.content_checksum.filter(|_| chunks),
                });
                digests.push(other.map(|c| c.digests));
            }
        }
    }
    // Validation proved the per-GPU sum fits.
    let layout = PagesLayout::new(list).unwrap_or_default();
    let algo = if chunks { algo } else { ChecksumAlgo::V1 };
    let digests = if chunks { digests } else { Vec::new() };
    let plain = layout.clone();
    layout.with_chunks(algo, digests).unwrap_or(plain)
}

/// What is wrong with an image naming its own dump as its parent: a chain
/// that loops at its first link.
fn own_parent(dump_id: &Option<Vec<u8>>, parent_dump_id: &Option<Vec<u8>>) -> Option<String> {
    (dump_id.is_some() && dump_id == parent_dump_id).then(|| {
        "equals dump_id: an image set cannot be its own parent (the chain would loop)".into()
    })
}

/// A `criu_render_node` message whose contents are consistent.
///
/// Guarantees: `gpu_id` is non-zero, or 0 in a render-only image that
/// carries a device entry; a device entry describes a GPU and names the
/// node's render minor; `num_of_bos` equals the BO entries; each
/// BO's `num_of_vms` equals its VM entries; BO and VM ranges do not wrap; BO
/// sizes are page multiples (GEM rounds them); each VM mapping lies inside
/// its BO; the image does not name its own dump as its parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedRenderNode {
    pub(crate) id: u32,
    pub(crate) msg: CriuRenderNode,
}

impl ValidatedRenderNode {
    /// Validates the message of `amdgpu-renderD-<id>.img`. An image with
    /// chunk references stores its gpu_id in `referencing_gpu_id` (tag 152)
    /// and 0 in `gpu_id` (so the C plugin refuses it): the validated
    /// message has it back in `gpu_id`.
    pub fn new(id: u32, msg: CriuRenderNode) -> Result<Self, Error> {
        let problems = Self::problems(id, &msg);
        if problems.is_empty() {
            Ok(Self {
                id,
                msg: with_user_gpu_id(msg),
            })
        } else {
            Err(Error::Invalid(problems))
        }
    }

    /// Every problem of the message of `amdgpu-renderD-<id>.img`.
    pub fn problems(id: u32, msg: &CriuRenderNode) -> Vec<Problem> {
        let file = ImageName::RenderNode { id }.to_string();
        let mut out = Vec::new();
        let mut p = |path: String, message: String| out.push(Problem::new(&file, path, message));
        let mut references = false;
        let mut references_parent = false;
        for (i, bo) in msg.bo_entries.iter().enumerate() {
            match bo.chunks(i, msg.chunk_size) {
                Err(e) => p(
                    format!("criu_render_node.bo_entries[{i}].chunk_digests"),
                    e.to_string(),
                ),
                Ok(Some(c)) => {
                    references |= c.has_references();
                    references_parent |= c.sources.contains(&ChunkSource::Parent);
                }
                Ok(None) => {}
            }
        }
        if let Some(e) = own_parent(&msg.dump_id, &msg.parent_dump_id) {
            p("criu_render_node.parent_dump_id".into(), e);
        }
        if references_parent && msg.parent_dump_id.is_none() {
            p(
                "criu_render_node.parent_dump_id".into(),
                "bos reference the parent image set but the image names no parent_dump_id".into(),
            );
        }
        match (msg.referencing_gpu_id, references) {
            (Some(_), _) if msg.gpu_id != 0 => p(
                "criu_render_node.referencing_gpu_id".into(),
                format!(
                    "is set but gpu_id is {:#x}, not 0 (one of them must name the gpu)",
                    msg.gpu_id
                ),
            ),
            (Some(0), _) => p(
                "criu_render_node.referencing_gpu_id".into(),
                "is 0, not a gpu".into(),
            ),
            (None, true) if msg.gpu_id != 0 => p(
                "criu_render_node.gpu_id".into(),
                format!(
                    "is {:#x} in an image whose bos reference chunks stored elsewhere: the C \
                     plugin would restore it without them (such an image names its gpu in \
                     referencing_gpu_id, with gpu_id 0)",
                    msg.gpu_id
                ),
            ),
            _ => {}
        }
        let user_gpu_id = msg.referencing_gpu_id.unwrap_or(msg.gpu_id);
        match &msg.device {
            None if user_gpu_id == 0 => {
                p(
                    "criu_render_node.gpu_id".into(),
                    "is 0, not a gpu (and no device entry describes the gpu)".into(),
                );
            }
            None => {}
            Some(device) => {
                if device.gpu_id == 0 {
                    p(
                        "criu_render_node.device.gpu_id".into(),
                        "is 0: the device entry does not describe a gpu".into(),
                    );
                }
                if device.drm_render_minor != msg.drm_render_minor {
                    p(
                        "criu_render_node.device.drm_render_minor".into(),
                        format!(
                            "is {} but the node is renderD{}",
                            device.drm_render_minor, msg.drm_render_minor
                        ),
                    );
                }
            }
        }
        if msg.num_of_bos != msg.bo_entries.len() as u64 {
            p(
                "criu_render_node.num_of_bos".into(),
                format!(
                    "is {} but the image has {} bo entries",
                    msg.num_of_bos,
                    msg.bo_entries.len()
                ),
            );
        }
        if let Some(v) = msg.format_version.filter(|&v| v > FORMAT_VERSION) {
            p(
                "criu_render_node.format_version".into(),
                format!("{v} is newer than the supported {FORMAT_VERSION}; update amdgpu-criu-rs"),
            );
        }
        if let Some(Err(e)) = msg.chunk_size.map(check_chunk_size) {
            p("criu_render_node.chunk_size".into(), e.to_string());
        }
        for (i, bo) in msg.bo_entries.iter().enumerate() {
            let at = |f: &str| format!("criu_render_node.bo_entries[{i}].{f}");
            if u64::from(bo.num_of_vms) != bo.vm_entries.len() as u64 {
                p(
                    at("num_of_vms"),
                    format!(
                        "is {} but the bo has {} vm entries",
                        bo.num_of_vms,
                        bo.vm_entries.len()
                    ),
                );
            }
            if bo.addr.checked_add(bo.size).is_none() {
                p(
                    at("size"),
                    format!("addr {:#x} + size {:#x} overflows", bo.addr, bo.size),
                );
            }
            if bo.size % PAGE_SIZE != 0 {
                p(
                    at("size"),
                    format!(
                        "{:#x} is not a multiple of the {PAGE_SIZE}-byte page",
                        bo.size
                    ),
                );
            }
            for (j, vm) in bo.vm_entries.iter().enumerate() {
                let at = |f: &str| format!("criu_render_node.bo_entries[{i}].vm_entries[{j}].{f}");
                if vm.addr.checked_add(vm.size).is_none() {
                    p(
                        at("size"),
                        format!("addr {:#x} + size {:#x} overflows", vm.addr, vm.size),
                    );
                }
                if vm
                    .offset
                    .checked_add(vm.size)
                    .is_none_or(|end| end > bo.size)
                {
                    p(
                        at("offset"),
                        format!(
                            "mapping {:#x}+{:#x} extends past the bo's {:#x} bytes",
                            vm.offset, vm.size, bo.size
                        ),
                    );
                }
            }
        }
        out
    }

    /// The ext-file id of the image.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The validated message.
    pub fn message(&self) -> &CriuRenderNode {
        &self.msg
    }

    /// Gives the message back.
    pub fn into_message(self) -> CriuRenderNode {
        self.msg
    }

    /// The drm-pages file of BO `index` and its one-BO layout: for a BO
    /// with chunks stored elsewhere, the bytes of its chunks stored in the
    /// file, each verified by its digest (as
    /// [`ValidatedKfd::pages_layout`]).
    pub fn drm_pages(&self, index: usize) -> Option<(ImageName, PagesLayout)> {
        let bo = self.msg.bo_entries.get(index)?;
        let name = self.drm_pages_name(index)?;
        let algo = ChecksumAlgo::of(self.msg.format_version, self.msg.chunk_size);
        let chunks = self.bo_chunks(index);
        let (size, checksum, digests) = match chunks {
            Some(c) if c.has_references() => {
                let here = c
                    .digests
                    .iter()
                    .zip(&c.sources)
                    .filter(|(_, s)| **s == ChunkSource::Here)
                    .map(|(d, _)| *d)
                    .collect();
                (c.stored_len(), None, Some(here))
            }
            other => (bo.size, bo.content_checksum, other.map(|c| c.digests)),
        };
        let layout = PagesLayout::new(vec![PagesBo {
            entry: index,
            size,
            checksum,
        }])?;
        let layout = layout.with_chunks(algo, vec![digests])?;
        Some((name, layout))
    }

    /// The drm-pages file of BO `index` and its layout as a reader that
    /// ignores our chunk fields sees it: the BO's full size, no checksum.
    pub fn compat_drm_pages(&self, index: usize) -> Option<(ImageName, PagesLayout)> {
        let bo = self.msg.bo_entries.get(index)?;
        let layout = PagesLayout::from_sizes([bo.size])?;
        Some((self.drm_pages_name(index)?, layout))
    }

    fn drm_pages_name(&self, index: usize) -> Option<ImageName> {
        Some(ImageName::DrmPages {
            id: self.id,
            minor: self.msg.drm_render_minor,
            bo_index: u32::try_from(index).ok()?,
        })
    }

    /// The chunks BO `index` records (its digests and where each chunk is
    /// stored); `None` without digests.
    pub fn bo_chunks(&self, index: usize) -> Option<BoChunks> {
        let bo = self.msg.bo_entries.get(index)?;
        bo.chunks(index, self.msg.chunk_size).ok().flatten()
    }

    /// The checksum algorithm of the image's BOs.
    pub fn checksum_algo(&self) -> ChecksumAlgo {
        ChecksumAlgo::of(self.msg.format_version, self.msg.chunk_size)
    }

    /// Whether any BO has chunks stored elsewhere (in the parent chain or
    /// elsewhere in the set); see [`ValidatedKfd::has_references`].
    pub fn has_references(&self) -> bool {
        (0..self.msg.bo_entries.len())
            .any(|i| self.bo_chunks(i).is_some_and(|c| c.has_references()))
    }

    /// The message as a standalone image stores it: no chunk sources, no
    /// parent, the gpu_id in `gpu_id` (what `flatten` writes).
    pub fn into_standalone_message(self) -> CriuRenderNode {
        let mut msg = self.msg;
        for bo in &mut msg.bo_entries {
            bo.chunk_sources = None;
        }
        msg.parent_dump_id = None;
        msg.referencing_gpu_id = None;
        msg
    }
}

/// A render-node message with the gpu_id of an image with chunk
/// references (tag 152) back in `gpu_id`.
pub(crate) fn with_user_gpu_id(mut msg: CriuRenderNode) -> CriuRenderNode {
    if let (0, Some(gpu_id)) = (msg.gpu_id, msg.referencing_gpu_id) {
        msg.gpu_id = gpu_id;
    }
    msg
}
