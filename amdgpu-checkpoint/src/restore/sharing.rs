//! Dma-buf files and the buffers files and tasks share: [`Sharing`] (the
//! handle table and CRIU's fd store), publishing a re-created buffer,
//! finding an imported one, and sizing the table ([`shared_buffer_count`]).
//!
//! This module never re-creates a buffer: the KFD and render-node restores
//! do, and publish it here; a file whose buffer nobody published yet gets
//! a retry.

use std::os::fd::{BorrowedFd, OwnedFd};

use amdgpu_image::{
    flags, CriuDmabufNode, CriuKfd, CriuRenderNode, ImageName, ImageStore, ReadLimits,
};
use kfd::Driver;

use super::{BufferWait, Restored, Restorer};
use crate::error::Error;
use crate::handles::HandleTable;

/// What CRIU offers a restored task for buffers shared between tasks.
pub struct Sharing<'a> {
    /// The handle table every restored task shares (`RESTORE_INIT`); `None`
    /// where the host made none (then the task makes a private one on first
    /// use, which shares buffers between its own files only).
    pub table: Option<&'a HandleTable>,
    /// `fdstore_add(fd)`: parks a copy of `fd` in CRIU's fd store.
    pub fdstore_add: &'a dyn Fn(BorrowedFd<'_>) -> std::io::Result<i32>,
    /// `fdstore_get(id)`: a new fd of the file parked under `id`.
    pub fdstore_get: &'a dyn Fn(i32) -> std::io::Result<OwnedFd>,
    /// How the task waits for a buffer another task re-creates.
    pub wait: BufferWait,
    /// CRIU's `set_fds_event(pid)`: wakes restored task `pid` (as
    /// [`TaskIdentity::pid`](super::TaskIdentity) names it) if it sleeps
    /// waiting for a file, for a task that waits for a buffer
    /// ([`BufferWait::Retry`]).
    pub wake_task: &'a dyn Fn(u32),
}

fn no_fd_store_add(_: BorrowedFd<'_>) -> std::io::Result<i32> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
}

fn no_fd_store_get(_: i32) -> std::io::Result<OwnedFd> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
}

fn no_other_task(_: u32) {}

impl Sharing<'static> {
    /// Buffers shared between the files of one process only: no table
    /// shared with other restored processes, no fd store, no waiting (a
    /// tool that restores one process at a time, without CRIU, and asks
    /// again itself).
    pub fn within_process() -> Self {
        Sharing {
            table: None,
            fdstore_add: &no_fd_store_add,
            fdstore_get: &no_fd_store_get,
            wait: BufferWait::Never,
            wake_task: &no_other_task,
        }
    }
}

impl std::fmt::Debug for Sharing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sharing")
            .field("table", &self.table)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl<D: Driver + Clone> Restorer<D> {
    /// A dma-buf file: a `dup` of the dma-buf RESTORE returned for one of
    /// this task's BOs, or a new fd of a buffer another file or task
    /// published; a retry while nobody did yet.
    pub(super) fn restore_dmabuf(
        &mut self,
        id: u32,
        msg: &CriuDmabufNode,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        match self.shared_dmabuf(msg.gem_handle, sharing)? {
            Some(dmabuf) => Ok(Restored::File(dmabuf)),
            None => {
                log::debug!(
                    "dma-buf file {id} (buffer {}) waits for the file that re-creates its buffer",
                    msg.gem_handle
                );
                Ok(Restored::WaitForBuffer)
            }
        }
    }

    /// A new fd of the dma-buf of buffer `key`: from this task's KFD BOs,
    /// else from the shared table; `None` while nobody published it.
    pub(super) fn shared_dmabuf(
        &mut self,
        key: u32,
        sharing: &Sharing<'_>,
    ) -> Result<Option<OwnedFd>, Error> {
        if let Some(dmabuf) = self.dmabufs.get(&key) {
            return dmabuf.try_clone().map(Some).map_err(Error::io(format!(
                "duplicating the dma-buf of buffer {key}"
            )));
        }
        let Some(store_id) = self.table(sharing).lookup(key) else {
            return Ok(None);
        };
        (sharing.fdstore_get)(store_id)
            .map(Some)
            .map_err(Error::io(format!(
                "fetching the dma-buf of buffer {key} from CRIU's fd store (id {store_id})"
            )))
    }

    /// The shared table, or this task's own where the host made none.
    fn table<'t>(&'t mut self, sharing: &Sharing<'t>) -> &'t HandleTable {
        match sharing.table {
            Some(table) => table,
            None => self
                .private_table
                .get_or_insert_with(|| HandleTable::private(crate::handles::UNSIZED_CAPACITY)),
        }
    }
}

/// Whether a file of the image set uses another file's buffer: a dma-buf
/// file, or a render node with an imported BO (true when the store cannot
/// list, as a stream cannot). Without it no dma-buf is kept open in the
/// task (it would stay open in the restored application).
pub(super) fn uses_shared_buffers<S: ImageStore>(store: &S) -> bool {
    let Ok(names) = store.list() else {
        return true;
    };
    names.iter().any(|name| match name {
        ImageName::Dmabuf { .. } => true,
        ImageName::RenderNode { .. } => store
            .read_message::<CriuRenderNode>(name, ReadLimits::default())
            .map_or(true, |msg| {
                msg.is_some_and(|m| m.bo_entries.iter().any(|b| b.is_import != 0))
            }),
        _ => false,
    })
}

/// Parks `dmabuf` in CRIU's fd store and publishes it as buffer `key`,
/// unless the key is published already (another task re-created the same
/// buffer first; the first one is kept).
pub(super) fn publish(
    table: &HandleTable,
    sharing: &Sharing<'_>,
    key: u32,
    dmabuf: BorrowedFd<'_>,
) -> Result<(), Error> {
    if table.lookup(key).is_some() {
        return Ok(());
    }
    let store_id = (sharing.fdstore_add)(dmabuf).map_err(Error::io(format!(
        "parking the dma-buf of buffer {key} in CRIU's fd store"
    )))?;
    table
        .publish(key, store_id)
        .map_err(|source| Error::Publish { key, source })?;
    Ok(())
}

/// The buffers of an image set that its files may share (KFD BOs with a
/// handle, DRM BOs): the capacity of the [`HandleTable`] the restored tasks
/// share. `None` when no file of the set can use another's buffer (no
/// dma-buf file, no render node); [`crate::handles::UNSIZED_CAPACITY`] for
/// a store that cannot be listed (a stream).
pub fn shared_buffer_count(store: &impl ImageStore) -> Result<Option<usize>, Error> {
    let Ok(names) = store.list() else {
        return Ok(Some(crate::handles::UNSIZED_CAPACITY));
    };
    if !names
        .iter()
        .any(|n| matches!(n, ImageName::Dmabuf { .. } | ImageName::RenderNode { .. }))
    {
        return Ok(None);
    }
    let limits = ReadLimits::default();
    let mut buffers = 0usize;
    for name in &names {
        match name {
            ImageName::Kfd { .. } => {
                if let Some(msg) = store
                    .read_message::<CriuKfd>(name, limits)
                    .map_err(Error::image("reading a KFD image to size the handle table"))?
                {
                    buffers += msg
                        .bo_entries
                        .iter()
                        .filter(|b| b.handle != flags::NO_HANDLE)
                        .count();
                }
            }
            ImageName::RenderNode { .. } => {
                if let Some(msg) =
                    store
                        .read_message::<CriuRenderNode>(name, limits)
                        .map_err(Error::image(
                            "reading a render-node image to size the handle table",
                        ))?
                {
                    buffers += msg.bo_entries.len();
                }
            }
            _ => {}
        }
    }
    Ok(Some(buffers.max(1)))
}
