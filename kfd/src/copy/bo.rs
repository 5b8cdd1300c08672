//! BOs in the engine's VM: importing a dma-buf or adopting a handle, mapping
//! it (one mapping shared by repeated imports) and releasing it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use kfd_sys::{AMDGPU_VM_PAGE_READABLE, AMDGPU_VM_PAGE_WRITEABLE};

use super::{BoEntry, CopyEngine, ImportedBo, GPU_PAGE};
use crate::error::{Error, Result};
use crate::render::{dmabuf_size, GemHandle};
use crate::Driver;

impl<D: Driver + Clone, F: AsFd> CopyEngine<D, F> {
    /// Imports a BO's dma-buf (`PRIME_FD_TO_HANDLE`, size by `lseek`) and maps
    /// it into the engine's VM: readable, and writable if the fd was opened
    /// read-write. The dma-buf fd may be closed afterwards.
    ///
    /// Importing a dma-buf this DRM file already has a handle for (a BO
    /// created through the same file) would return that handle; the engine
    /// closes only handles it did not know before, but cannot tell a handle
    /// the *application* owns from a fresh import on a shared file: use
    /// [`CopyEngine::adopt_handle`] for BOs of the engine's own file.
    pub fn import_dmabuf(&mut self, dmabuf: BorrowedFd<'_>) -> Result<ImportedBo> {
        let size = dmabuf_size(dmabuf)?;
        if size == 0 {
            return Err(Error::protocol("import dma-buf", "dma-buf has size 0"));
        }
        let writable = fd_is_writable(dmabuf)?;
        let handle = self.render.prime_fd_to_handle(dmabuf)?;
        let flags = AMDGPU_VM_PAGE_READABLE
            | if writable {
                AMDGPU_VM_PAGE_WRITEABLE
            } else {
                0
            };
        self.map_bo(handle, size, flags, true)
    }

    /// Maps a BO that already has `handle` in the engine's DRM file (e.g. a
    /// render-node BO being restored). The handle is never closed by the
    /// engine.
    pub fn adopt_handle(&mut self, handle: GemHandle, size: u64) -> Result<ImportedBo> {
        if size == 0 {
            return Err(Error::invalid("adopt GEM handle", "BO size 0"));
        }
        self.map_bo(
            handle,
            size,
            AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE,
            false,
        )
    }

    fn map_bo(
        &mut self,
        handle: GemHandle,
        size: u64,
        flags: u32,
        owned: bool,
    ) -> Result<ImportedBo> {
        if let Some(entry) = self.bos.get_mut(&handle) {
            // The same BO again (PRIME returns the existing handle): share
            // the mapping.
            entry.refs += 1;
            return Ok(ImportedBo {
                engine: self.id,
                handle,
                size: entry.size,
                va: entry.va,
            });
        }
        let map_size = size.next_multiple_of(GPU_PAGE);
        let va = match self.va.alloc(map_size) {
            Ok(va) => va,
            Err(err) => {
                if owned {
                    // Keep the allocation error: it is the cause; a close
                    // failure of a handle we just got cannot be acted upon.
                    let _ = self.render.gem_close(handle);
                }
                return Err(err);
            }
        };
        if let Err(err) = self.render.gem_va_map(handle, va, 0, map_size, flags) {
            self.va.free(va)?;
            if owned {
                let _ = self.render.gem_close(handle);
            }
            return Err(err);
        }
        self.bos.insert(
            handle,
            BoEntry {
                size,
                map_size,
                va,
                refs: 1,
                owned,
            },
        );
        Ok(ImportedBo {
            engine: self.id,
            handle,
            size,
            va,
        })
    }

    /// Unmaps a BO (and closes its handle if the engine imported it) once
    /// its last [`ImportedBo`] is released. Refused (`EBUSY`) while a
    /// submission that touches it has not been waited for.
    pub fn release_bo(&mut self, bo: ImportedBo) -> Result<()> {
        const OP: &str = "release BO";
        self.check_engine(OP, bo.engine)?;
        let busy = self.slots.iter().position(|s| {
            s.as_ref()
                .is_some_and(|s| s.in_flight.is_some() && s.in_flight_bo == Some(bo.handle))
        });
        if let Some(slot) = busy {
            return Err(Error::Busy { op: OP, slot });
        }
        let Some(entry) = self.bos.get_mut(&bo.handle) else {
            return Err(Error::invalid(
                OP,
                format!("handle {} is not mapped", bo.handle.0),
            ));
        };
        entry.refs -= 1;
        if entry.refs > 0 {
            return Ok(());
        }
        let entry = self.bos.remove(&bo.handle).expect("entry checked above");
        self.unmap_bo(bo.handle, &entry)
    }

    pub(super) fn unmap_bo(&mut self, handle: GemHandle, entry: &BoEntry) -> Result<()> {
        let unmap = self
            .render
            .gem_va_unmap(handle, entry.va, 0, entry.map_size);
        if unmap.is_ok() {
            self.va.free(entry.va)?;
        }
        let close = if entry.owned {
            self.render.gem_close(handle)
        } else {
            Ok(())
        };
        unmap.and(close)
    }
}

/// Whether `fd` was opened for writing (`fcntl(F_GETFL)`): checkpoint
/// dma-bufs of non-WRITABLE BOs are read-only.
fn fd_is_writable(fd: BorrowedFd<'_>) -> Result<bool> {
    // SAFETY: F_GETFL takes no pointer argument.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(Error::from_io(
            "fcntl F_GETFL",
            &std::io::Error::last_os_error(),
        ));
    }
    Ok(flags & libc::O_ACCMODE != libc::O_RDONLY)
}
