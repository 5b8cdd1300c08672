//! Validation: the checks that make an image safe to act on.
//!
//! [`ValidatedKfd`] and [`ValidatedRenderNode`] wrap a decoded message once
//! its counts, ids, sizes and addresses are consistent, and then answer the
//! questions restore asks (which GPUs, which BOs go into which pages file) with
//! no further checks needed. [`verify_set`] checks a whole image set in a
//! store: every message (and its [`seal`](crate::seal)), every pages file's
//! length and every recorded checksum, and the references between files,
//! naming missing images by what references them.
//!
//! Problems are collected, not stopped at: each names the file, the field path
//! and what is wrong. Nothing here panics or allocates more than the
//! messages already hold; nothing here writes.

use std::collections::{BTreeMap, HashSet};

use crate::framing::ReadLimits;
use crate::messages::{flags, CriuDmabufNode, CriuKfd, CriuRenderNode};
use crate::pages::{PagesLayout, PagesReader};
use crate::seal::Coverage;
use crate::store::ImageStore;
use crate::{Error, ImageKind, ImageName, Problem};

use crate::validated::with_user_gpu_id;
pub use crate::validated::{ValidatedKfd, ValidatedRenderNode, MAX_SHARED_MEM_SIZE};

/// What [`verify_set`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetReport {
    /// Every problem found, in file order.
    pub problems: Vec<Problem>,
    /// Image files examined.
    pub files: usize,
    /// BOs whose bytes were read back.
    pub bos_read: usize,
    /// BOs whose checksum was verified.
    pub checksums_verified: usize,
    /// Pages bytes read back.
    pub bytes_read: u64,
    /// Messages whose every byte a matching `message_checksum` covered.
    pub messages_covered: usize,
    /// Messages that decoded but carry no `message_checksum` (the C
    /// plugin's images): only their well-formedness and consistency were
    /// checked. File names, in file order.
    pub messages_not_covered: Vec<String>,
    /// Chunks referenced from elsewhere in the set or from the parent
    /// chain, read there and verified by their digest.
    pub references_verified: u64,
    /// Image sets read: 1 for a set alone, 2 with its parent, and so on.
    pub chain_depth: usize,
    /// Files a writer started and never finished
    /// ([`DirStore::unfinished`](crate::DirStore::unfinished)): the dump
    /// was interrupted and the set is incomplete whatever the rest says.
    pub unfinished: Vec<String>,
}

impl SetReport {
    /// Whether no problem was found and no file was left unfinished.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.unfinished.is_empty()
    }
}

/// A KFD image of ours, its pid and its GPUs (gpu_id, render minor).
type KfdProcess = (ImageName, u32, Vec<(u32, u32)>);

/// Size of the buffer pages files are verified through.
const VERIFY_CHUNK: usize = 1 << 20;

/// Validates the whole image set of a store: every message, every pages
/// file (length header, exact length, checksums), and the references between
/// files (pages files of listed GPUs, render nodes of checkpointed GPUs,
/// dma-bufs of known GEM handles, no stray pages files).
///
/// Problems go into the report; only failing to list the store is an error.
/// An image that cannot be decoded or validated is one problem: the files it
/// would reference are not checked (nor called strays), and the cross-file
/// checks that need its contents are skipped.
pub fn verify_set<S: ImageStore>(store: &S, limits: ReadLimits) -> Result<SetReport, Error> {
    let names = store.list()?;
    let mut report = SetReport {
        files: names.len(),
        unfinished: match store.as_dir() {
            Some(dir) => dir.unfinished()?,
            None => Vec::new(),
        },
        ..SetReport::default()
    };
    let mut referenced: HashSet<ImageName> = HashSet::new();
    let mut kfd_gpus: HashSet<u32> = HashSet::new();
    let mut handles: HashSet<u32> = HashSet::new();
    let mut imports: Vec<(ImageName, u32, u32)> = Vec::new();
    let mut scratch = Vec::new();
    // Ids of images that could not be decoded: their files are neither
    // checked nor called strays, and cross-file checks that need them are skipped.
    let mut broken_kfd: HashSet<u32> = HashSet::new();
    let mut broken_render: HashSet<u32> = HashSet::new();
    // Per KFD image of ours: its pid and GPUs (gpu_id, render minor).
    let mut kfd_processes: Vec<KfdProcess> = Vec::new();
    // (gpu_id, pid) pairs some render image of ours covers.
    let mut render_of: HashSet<(u32, u32)> = HashSet::new();
    let mut render_pids: HashSet<u32> = HashSet::new();
    // A pages file whose message image is missing makes that image broken
    // too: what it would have told (gpus, handles) is unknown.
    let present: HashSet<ImageName> = names.iter().copied().collect();
    for name in &names {
        match name.kind() {
            ImageKind::Pages if !present.contains(&ImageName::Kfd { id: name.id() }) => {
                broken_kfd.insert(name.id());
            }
            ImageKind::DrmPages if !present.contains(&ImageName::RenderNode { id: name.id() }) => {
                broken_render.insert(name.id());
            }
            _ => {}
        }
    }

    for name in names.iter().filter(|n| n.kind() == ImageKind::Kfd) {
        let Some(msg) = read(store, name, limits, &mut report) else {
            broken_kfd.insert(name.id());
            continue;
        };
        let msg: CriuKfd = msg;
        let problems = ValidatedKfd::problems(name.id(), &msg);
        if !problems.is_empty() {
            report.problems.extend(problems);
            broken_kfd.insert(name.id());
            continue;
        }
        let kfd = ValidatedKfd { id: name.id(), msg };
        kfd_gpus.extend(kfd.gpus().map(|d| d.gpu_id));
        if kfd.msg.format_version.is_some() {
            kfd_processes.push((
                *name,
                kfd.msg.pid,
                kfd.gpus().map(|d| (d.gpu_id, d.drm_render_minor)).collect(),
            ));
        }
        handles.extend(
            kfd.message()
                .bo_entries
                .iter()
                .map(|b| b.handle)
                .filter(|&h| h != flags::NO_HANDLE),
        );
        for (pages, layout) in kfd.pages_files() {
            referenced.insert(pages);
            verify_pages(store, &pages, layout, true, &mut scratch, &mut report);
        }
    }

    for name in names.iter().filter(|n| n.kind() == ImageKind::RenderNode) {
        let Some(msg) = read(store, name, limits, &mut report) else {
            broken_render.insert(name.id());
            continue;
        };
        let msg: CriuRenderNode = msg;
        let problems = ValidatedRenderNode::problems(name.id(), &msg);
        if !problems.is_empty() {
            report.problems.extend(problems);
            broken_render.insert(name.id());
            continue;
        }
        let rn = ValidatedRenderNode {
            id: name.id(),
            msg: with_user_gpu_id(msg),
        };
        for &pid in &rn.msg.kfd_pids {
            render_of.insert((rn.msg.gpu_id, pid));
            render_pids.insert(pid);
        }
        // A render-only image (gpu_id 0) names no KFD gpu; its device
        // entry was checked above.
        if broken_kfd.is_empty() && !rn.msg.is_render_only() && !kfd_gpus.contains(&rn.msg.gpu_id) {
            report.problems.push(Problem::new(
                name,
                "criu_render_node.gpu_id",
                format!(
                    "{:#x} is not a gpu of any kfd image in the set",
                    rn.msg.gpu_id
                ),
            ));
        }
        // Dma-buf files and imports name a buffer by its share handle (the
        // GEM handle in images without one); imports re-create nothing.
        handles.extend(
            rn.msg
                .bo_entries
                .iter()
                .filter(|b| b.is_import == 0)
                .map(|b| b.buffer_key()),
        );
        imports.extend(
            rn.msg
                .bo_entries
                .iter()
                .filter(|b| b.is_import != 0 && b.share_handle.is_some())
                .map(|b| (*name, b.handle, b.buffer_key())),
        );
        for (i, bo) in rn.msg.bo_entries.iter().enumerate() {
            let Some((pages, layout)) = rn.drm_pages(i) else {
                continue;
            };
            referenced.insert(pages);
            verify_pages(
                store,
                &pages,
                layout,
                bo.restore_needs_contents(),
                &mut scratch,
                &mut report,
            );
        }
    }

    if broken_kfd.is_empty() && broken_render.is_empty() {
        for (name, handle, key) in &imports {
            if !handles.contains(key) {
                report.problems.push(Problem::new(
                    name,
                    "drm_bo_entry.share_handle",
                    format!(
                        "bo {handle} imports buffer {key}, which no bo of the set re-creates \
                         (restore would wait for it forever)"
                    ),
                ));
            }
        }
    }

    for name in names.iter().filter(|n| n.kind() == ImageKind::Dmabuf) {
        let Some(msg) = read(store, name, limits, &mut report) else {
            continue;
        };
        let msg: CriuDmabufNode = msg;
        let all_known = broken_kfd.is_empty() && broken_render.is_empty();
        if all_known && !handles.contains(&msg.gem_handle) {
            report.problems.push(Problem::new(
                name,
                "criu_dmabuf_node.gem_handle",
                format!(
                    "{} is not the handle of any bo in the set (restore would wait for it forever)",
                    msg.gem_handle
                ),
            ));
        }
    }

    // Pages files whose message image is gone: one problem naming the
    // missing image and every file that references it.
    let mut orphans: BTreeMap<ImageName, Vec<ImageName>> = BTreeMap::new();
    for name in &names {
        let owner = match name.kind() {
            ImageKind::Pages => ImageName::Kfd { id: name.id() },
            ImageKind::DrmPages => ImageName::RenderNode { id: name.id() },
            _ => continue,
        };
        if !present.contains(&owner) {
            orphans.entry(owner).or_default().push(*name);
        }
    }
    for (owner, files) in &orphans {
        let what = if owner.kind() == ImageKind::Kfd {
            "the process's bo list and gpus"
        } else {
            "the render node's bo list"
        };
        report.problems.push(Problem::new(
            owner,
            "",
            format!(
                "missing ({what}); referenced by {} {}: {}",
                files.len(),
                if files.len() == 1 { "file" } else { "files" },
                files
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    // A process of ours whose render images cover some of its GPUs but not
    // all: the dump writes one per render node the process had open, and
    // ROCm opens the render node of every GPU it uses.
    if broken_render.is_empty() {
        for (kfd, pid, gpus) in &kfd_processes {
            if !render_pids.contains(pid) {
                continue;
            }
            let with: Vec<_> = gpus
                .iter()
                .filter(|(g, _)| render_of.contains(&(*g, *pid)))
                .collect();
            for (gpu_id, minor) in gpus
                .iter()
                .filter(|(g, _)| !render_of.contains(&(*g, *pid)))
            {
                report.problems.push(Problem::new(
                    format!("amdgpu-renderD-?.img (gpu {gpu_id:#x}, renderD{minor})"),
                    "",
                    format!(
                        "missing: {kfd} (pid {pid}) uses gpu {gpu_id:#x} and its other \
                         {} {} have a render node image naming the process",
                        with.len(),
                        if with.len() == 1 { "gpu" } else { "gpus" }
                    ),
                ));
            }
        }
    }

    for name in &names {
        let stray = match name.kind() {
            ImageKind::Pages => {
                !broken_kfd.contains(&name.id())
                    && present.contains(&ImageName::Kfd { id: name.id() })
            }
            ImageKind::DrmPages => {
                !broken_render.contains(&name.id())
                    && present.contains(&ImageName::RenderNode { id: name.id() })
            }
            _ => false,
        };
        if stray && !referenced.contains(name) {
            report.problems.push(Problem::new(
                name,
                "",
                "not referenced by any image of the set",
            ));
        }
    }
    // Chunks stored elsewhere: found, from the right parent, unchanged.
    let (references, problems) = crate::chain::verify_references(store, limits);
    report.problems.extend(problems);
    report.references_verified = references.chunks_verified;
    report.chain_depth = references.depth.max(1);
    report.problems.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(report)
}

fn read<S: ImageStore, M: crate::ImageMessage>(
    store: &S,
    name: &ImageName,
    limits: ReadLimits,
    report: &mut SetReport,
) -> Option<M> {
    match store.read_message_covered::<M>(name, limits) {
        Ok(Some((m, coverage))) => {
            match coverage {
                Coverage::Verified => report.messages_covered += 1,
                Coverage::NotCovered => report.messages_not_covered.push(name.to_string()),
            }
            Some(m)
        }
        Ok(None) => {
            report
                .problems
                .push(Problem::new(name, "", "listed but cannot be opened"));
            None
        }
        Err(e) => {
            report.problems.push(Problem::from_error(name, &e));
            None
        }
    }
}

fn verify_pages<S: ImageStore>(
    store: &S,
    name: &ImageName,
    layout: PagesLayout,
    required: bool,
    scratch: &mut Vec<u8>,
    report: &mut SetReport,
) {
    let src = match store.open(name) {
        Ok(Some(src)) => src,
        Ok(None) => {
            if required {
                report
                    .problems
                    .push(Problem::new(name, "", "missing (restore reads it)"));
            }
            return;
        }
        Err(e) => {
            report.problems.push(Problem::from_error(name, &e));
            return;
        }
    };
    let file = name.to_string();
    let checksums = layout.bos().iter().filter(|b| b.checksum.is_some()).count();
    let bos = layout.bos().len();
    let total = layout.total_len();
    // Small sets (tests, fuzzing) need no megabyte buffer.
    let want = (total.min(VERIFY_CHUNK as u64) as usize).max(1);
    if scratch.len() < want {
        scratch.resize(want, 0);
    }
    match PagesReader::new(src, &file, layout).and_then(|r| r.verify_all(scratch)) {
        Ok(()) => {
            report.bos_read += bos;
            report.checksums_verified += checksums;
            report.bytes_read += total;
        }
        Err(e) => report.problems.push(Problem::from_error(name, &e)),
    }
}
