//! The DRM buffer the `multi` processes share, as a DDP group does:
//! created and filled in the root, PRIME-exported, imported and mapped by
//! the others, who also hold a dma-buf fd of it; after the restore, the
//! checks that it is one buffer again.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use criu_host_emulator::RestoredTask;
use kfd_sim::{Pid, Sim};

use super::workload::Process;
use super::Stop;

/// Bytes of the DRM buffer the `multi` processes exchange.
const SHARED_BYTES: usize = 1 << 20;
/// Its GPU address in every process: below the workload's KFD BOs (from
/// 1 << 40) and inside the 40-bit VM of pre-gfx9 GPUs (Polaris, Carrizo)
/// as well as the 48-bit one of gfx9 and later.
const SHARED_VA: u64 = 1 << 39;

/// A DRM buffer the root process created on its first GPU's render node
/// and the other processes imported there and hold as a dma-buf fd.
pub(super) struct Exchange {
    /// The root's GEM handle.
    handle: kfd::GemHandle,
    /// (pid, GEM handle) of each import.
    pub(super) imports: Vec<(Pid, kfd::GemHandle)>,
    /// (pid, dma-buf fd, CRIU file id) of each held dma-buf.
    pub(super) held: Vec<(Pid, OwnedFd, u32)>,
    /// What the root wrote into it.
    pattern: Vec<u8>,
}

fn exchange_failed(what: &str, e: impl std::fmt::Display) -> Stop {
    Stop::Failed(format!("sharing a DRM buffer: {what}: {e}"))
}

/// Sets up the [`Exchange`]: GEM_CREATE + GEM_VA + fill in the root,
/// PRIME export, and in every other process PRIME import + GEM_VA and a
/// held dma-buf fd (a new CRIU file id).
pub(super) fn exchange_buffer(processes: &mut [Process]) -> Result<Exchange, Stop> {
    use kfd_sys::{AMDGPU_GEM_DOMAIN_VRAM, AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE};
    let render = |p: &Process| -> Result<kfd::RenderNode<kfd_sim::SimDriver, OwnedFd>, Stop> {
        let app = p
            .app
            .as_ref()
            .ok_or_else(|| exchange_failed("process", "not running"))?;
        let fd = app
            .render_fds()
            .first()
            .ok_or_else(|| exchange_failed("render node", "none open"))?
            .try_clone_to_owned()
            .map_err(|e| exchange_failed("duplicating the render fd", e))?;
        Ok(kfd::RenderNode::from_fd(app.driver().clone(), fd))
    };
    let (root, others) = processes
        .split_first_mut()
        .ok_or_else(|| exchange_failed("processes", "none"))?;
    let node = render(root)?;
    let handle = node
        .gem_create(&kfd::GemCreate {
            size: SHARED_BYTES as u64,
            alignment: 4096,
            domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
            flags: 0,
        })
        .map_err(|e| exchange_failed("GEM_CREATE", e))?;
    let rw = AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE;
    node.gem_va_map(handle, SHARED_VA, 0, SHARED_BYTES as u64, rw)
        .map_err(|e| exchange_failed("GEM_VA", e))?;
    let pattern: Vec<u8> = (0..SHARED_BYTES)
        .map(|i| (i.wrapping_mul(131) % 251) as u8)
        .collect();
    write_shared(&node, handle, 0, &pattern)?;
    let dmabuf = node
        .prime_handle_to_fd(handle, kfd_sys::DRM_RDWR | kfd_sys::DRM_CLOEXEC)
        .map_err(|e| exchange_failed("PRIME_HANDLE_TO_FD", e))?;
    let first_id = others
        .iter()
        .chain(std::iter::once(&*root))
        .flat_map(|p| p.file_ids.iter().copied())
        .max()
        .unwrap_or(0)
        + 1;
    let mut imports = Vec::new();
    let mut held = Vec::new();
    for (p, id) in others.iter_mut().zip(first_id..) {
        let theirs = render(p)?;
        let imported = theirs
            .prime_fd_to_handle(dmabuf.as_fd())
            .map_err(|e| exchange_failed("PRIME_FD_TO_HANDLE", e))?;
        theirs
            .gem_va_map(imported, SHARED_VA, 0, SHARED_BYTES as u64, rw)
            .map_err(|e| exchange_failed("GEM_VA of the import", e))?;
        imports.push((p.pid, imported));
        let fd = dmabuf
            .try_clone()
            .map_err(|e| exchange_failed("duplicating the dma-buf", e))?;
        held.push((p.pid, fd, id));
        p.file_ids.push(id);
    }
    Ok(Exchange {
        handle,
        imports,
        held,
        pattern,
    })
}

fn write_shared<F: AsFd>(
    node: &kfd::RenderNode<kfd_sim::SimDriver, F>,
    handle: kfd::GemHandle,
    at: usize,
    bytes: &[u8],
) -> Result<(), Stop> {
    let offset = node
        .gem_mmap_offset(handle)
        .map_err(|e| exchange_failed("GEM_MMAP", e))?;
    let mut map = node
        .mmap(offset, SHARED_BYTES, libc::PROT_READ | libc::PROT_WRITE)
        .map_err(|e| exchange_failed("mmap", e))?;
    map.write(at, bytes)
        .map_err(|e| exchange_failed("writing the buffer", e))
}

fn read_shared<F: AsFd>(
    node: &kfd::RenderNode<kfd_sim::SimDriver, F>,
    handle: kfd::GemHandle,
    at: usize,
    len: usize,
) -> Result<Vec<u8>, String> {
    let offset = node.gem_mmap_offset(handle).map_err(|e| e.to_string())?;
    let map = node
        .mmap(offset, SHARED_BYTES, libc::PROT_READ)
        .map_err(|e| e.to_string())?;
    let mut out = vec![0u8; len];
    map.read(at, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

fn file_identity(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::File::from(fd.try_clone_to_owned().ok()?)
        .metadata()
        .ok()?;
    Some((meta.dev(), meta.ino()))
}

impl Exchange {
    /// What is wrong with the buffer after the restore: the root's contents,
    /// each import's mapping and sharing (a write through the root is read
    /// through the import), each held dma-buf being the root's buffer.
    pub(super) fn problems(
        &self,
        sim: &Sim,
        processes: &[Process],
        tasks: &[RestoredTask],
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let render_of = |pid: Pid| {
            let p = processes.iter().find(|p| p.pid == pid)?;
            let id = *p.file_ids.get(1)?;
            let task = tasks.iter().find(|t| t.pid == pid)?;
            let (_, fd) = task.files.iter().find(|(i, _)| *i == id)?;
            Some(kfd::RenderNode::from_fd(sim.driver(pid), fd.as_fd()))
        };
        let Some(root_pid) = processes.first().map(|p| p.pid) else {
            return problems;
        };
        let Some(root) = render_of(root_pid) else {
            return vec![format!(
                "shared buffer: pid {root_pid} has no restored render node"
            )];
        };
        match read_shared(&root, self.handle, 0, SHARED_BYTES) {
            Ok(bytes) if bytes == self.pattern => {}
            Ok(_) => problems.push("shared buffer: contents differ after the restore".into()),
            Err(e) => problems.push(format!("shared buffer: reading it in pid {root_pid}: {e}")),
        }
        for (k, (pid, handle)) in self.imports.iter().enumerate() {
            let Some(node) = render_of(*pid) else {
                problems.push(format!(
                    "shared buffer: pid {pid} has no restored render node"
                ));
                continue;
            };
            match node.gem_mapping_info(*handle) {
                Ok(vms) if vms.iter().any(|v| v.addr == SHARED_VA) => {}
                Ok(_) => problems.push(format!(
                    "shared buffer: pid {pid}'s import is not mapped at {SHARED_VA:#x}"
                )),
                Err(e) => problems.push(format!("shared buffer: pid {pid}'s import: {e}")),
            }
            let stamp = [0xC3, k as u8, 0x3C, 0x99];
            let at = 4096 * (k + 1);
            if let Err(Stop::Failed(e) | Stop::Usage(e)) =
                write_shared(&root, self.handle, at, &stamp)
            {
                problems.push(e);
                continue;
            }
            match read_shared(&node, *handle, at, stamp.len()) {
                Ok(seen) if seen == stamp => {}
                Ok(_) => problems.push(format!(
                    "shared buffer: pid {pid}'s import is a copy, not the root's buffer"
                )),
                Err(e) => problems.push(format!("shared buffer: reading pid {pid}'s import: {e}")),
            }
        }
        let root_export = root
            .prime_handle_to_fd(self.handle, kfd_sys::DRM_CLOEXEC)
            .ok()
            .and_then(|fd| file_identity(fd.as_fd()));
        for (pid, _, id) in &self.held {
            let held = tasks
                .iter()
                .find(|t| t.pid == *pid)
                .and_then(|t| t.files.iter().find(|(i, _)| i == id))
                .and_then(|(_, fd)| file_identity(fd.as_fd()));
            if held.is_none() || held != root_export {
                problems.push(format!(
                    "shared buffer: pid {pid}'s dma-buf (file {id}) is not the root's buffer"
                ));
            }
        }
        problems
    }
}
