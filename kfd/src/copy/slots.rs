//! Staging slots: host buffers registered as userptr BOs, each with its own
//! IB, and the CPU's access to their bytes between copies.

use std::os::fd::AsFd;

use kfd_sys::{
    AMDGPU_GEM_DOMAIN_GTT, AMDGPU_GEM_USERPTR_ANONONLY, AMDGPU_GEM_USERPTR_REGISTER,
    AMDGPU_GEM_USERPTR_VALIDATE, AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_READABLE,
    AMDGPU_VM_PAGE_WRITEABLE,
};

use super::{CopyEngine, Ib, Slot, StagingBuffer, StagingSlot, GPU_PAGE};
use crate::error::{Error, Result};
use crate::render::{GemCreate, GemHandle};
use crate::Driver;

impl<D: Driver + Clone, F: AsFd> CopyEngine<D, F> {
    /// Registers `buffer` as a staging slot: a userptr BO over it
    /// (`ANONONLY | REGISTER | VALIDATE`), mapped into the VM, plus a GTT IB
    /// big enough for one copy of the whole buffer, CPU-mapped and mapped
    /// into the VM. The engine owns the buffer until
    /// [`CopyEngine::remove_staging`] gives it back.
    pub fn add_staging(&mut self, buffer: StagingBuffer) -> Result<StagingSlot> {
        let len = buffer.len() as u64;
        // SAFETY: `buffer` is page-aligned anonymous memory that the engine
        // owns from here on: it is only freed after the userptr BO is closed
        // (remove_staging / teardown), and the CPU only touches it through
        // `staging`/`staging_mut`, which refuse while a copy may run.
        let handle = unsafe {
            self.render.gem_userptr(
                buffer.as_ptr() as u64,
                len,
                AMDGPU_GEM_USERPTR_ANONONLY
                    | AMDGPU_GEM_USERPTR_REGISTER
                    | AMDGPU_GEM_USERPTR_VALIDATE,
            )
        }?;
        let va = match self.map_new(handle, len, rwx()) {
            Ok(va) => va,
            Err(err) => {
                let _ = self.render.gem_close(handle);
                return Err(err);
            }
        };
        let ib = match self.create_ib(len) {
            Ok(ib) => ib,
            Err(err) => {
                let _ = self.render.gem_va_unmap(handle, va, 0, len);
                let _ = self.va.free(va);
                let _ = self.render.gem_close(handle);
                return Err(err);
            }
        };
        self.slots.push(Some(Slot {
            buffer,
            handle,
            va,
            ib,
            in_flight: None,
            in_flight_bo: None,
        }));
        Ok(StagingSlot {
            engine: self.id,
            index: self.slots.len() - 1,
        })
    }

    /// Allocates VA for a fresh handle and maps it; frees the VA on failure.
    fn map_new(&mut self, handle: GemHandle, size: u64, flags: u32) -> Result<u64> {
        let va = self.va.alloc(size)?;
        if let Err(err) = self.render.gem_va_map(handle, va, 0, size, flags) {
            self.va.free(va)?;
            return Err(err);
        }
        Ok(va)
    }

    fn create_ib(&mut self, staging_len: u64) -> Result<Ib<D>> {
        let bytes = (self.format.ib_dwords_for(staging_len) * 4).next_multiple_of(GPU_PAGE);
        let map_len = usize::try_from(bytes)
            .map_err(|_| Error::invalid("create IB", format!("{bytes} bytes")))?;
        let handle = self.render.gem_create(&GemCreate {
            size: bytes,
            alignment: GPU_PAGE,
            domains: u64::from(AMDGPU_GEM_DOMAIN_GTT),
            flags: 0,
        })?;
        let result = (|| {
            let offset = self.render.gem_mmap_offset(handle)?;
            let map = self
                .render
                .mmap(offset, map_len, libc::PROT_READ | libc::PROT_WRITE)?;
            let va = self.map_new(handle, bytes, rwx())?;
            Ok(Ib {
                handle,
                va,
                size: bytes,
                map,
            })
        })();
        if result.is_err() {
            let _ = self.render.gem_close(handle);
        }
        result
    }

    /// Unregisters a staging slot and gives its buffer back (`EBUSY` while a
    /// copy using it has not been waited for).
    pub fn remove_staging(&mut self, slot: StagingSlot) -> Result<StagingBuffer> {
        const OP: &str = "remove staging slot";
        self.slot(OP, slot)?;
        if self.slots[slot.index]
            .as_ref()
            .is_some_and(|s| s.in_flight.is_some())
        {
            return Err(Error::Busy {
                op: OP,
                slot: slot.index,
            });
        }
        let s = self.slots[slot.index].take().expect("slot checked above");
        let (buffer, result) = self.teardown_slot(s);
        if let Err(err) = result {
            // The userptr BO may still exist: never free its memory.
            std::mem::forget(buffer);
            return Err(err);
        }
        Ok(buffer)
    }

    /// Releases a slot's GPU resources; returns the buffer and the first
    /// error. On an error the buffer must not be freed while the userptr BO
    /// may live: the caller decides (teardown leaks it then).
    pub(super) fn teardown_slot(&mut self, s: Slot<D>) -> (StagingBuffer, Result<()>) {
        let Slot {
            buffer,
            handle,
            va,
            ib,
            ..
        } = s;
        let mut first: Result<()> = Ok(());
        let mut keep = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        let Ib {
            handle: ib_handle,
            va: ib_va,
            size: ib_size,
            map,
        } = ib;
        keep(map.unmap());
        let r = self.render.gem_va_unmap(ib_handle, ib_va, 0, ib_size);
        if r.is_ok() {
            keep(self.va.free(ib_va));
        }
        keep(r);
        keep(self.render.gem_close(ib_handle));
        let len = buffer.len() as u64;
        let r = self.render.gem_va_unmap(handle, va, 0, len);
        if r.is_ok() {
            keep(self.va.free(va));
        }
        keep(r);
        keep(self.render.gem_close(handle));
        (buffer, first)
    }

    /// The length of a slot's staging buffer.
    pub fn staging_len(&self, slot: StagingSlot) -> Result<usize> {
        Ok(self.slot("staging length", slot)?.buffer.len())
    }

    /// A slot's bytes, for reading what a finished [`CopyEngine::submit_read`]
    /// copied (`EBUSY` while a copy may still run).
    pub fn staging(&self, slot: StagingSlot) -> Result<&[u8]> {
        const OP: &str = "read staging slot";
        let s = self.slot(OP, slot)?;
        if s.in_flight.is_some() {
            return Err(Error::Busy {
                op: OP,
                slot: slot.index,
            });
        }
        Ok(s.buffer.as_slice())
    }

    /// A slot's bytes, for filling before [`CopyEngine::submit_write`]
    /// (`EBUSY` while a copy may still run).
    pub fn staging_mut(&mut self, slot: StagingSlot) -> Result<&mut [u8]> {
        const OP: &str = "write staging slot";
        self.slot(OP, slot)?;
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        if s.in_flight.is_some() {
            return Err(Error::Busy {
                op: OP,
                slot: slot.index,
            });
        }
        Ok(s.buffer.as_mut_slice())
    }

    /// Whether a slot has no copy outstanding.
    pub fn is_idle(&self, slot: StagingSlot) -> Result<bool> {
        Ok(self.slot("staging slot state", slot)?.in_flight.is_none())
    }
}

fn rwx() -> u32 {
    AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE | AMDGPU_VM_PAGE_EXECUTABLE
}
