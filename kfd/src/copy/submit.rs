//! Copies: submitting an SDMA copy between a BO and a staging slot, waiting
//! for its fence, and the blocking copy loops built on them.

use std::os::fd::AsFd;
use std::time::Duration;

use kfd_sys::AMDGPU_HW_IP_DMA;

use super::{CopyEngine, Fence, ImportedBo, StagingSlot};
use crate::error::{Error, Result};
use crate::render::IbChunk;
use crate::Driver;

impl<D: Driver + Clone, F: AsFd> CopyEngine<D, F> {
    /// Submits a copy of `len` bytes from `bo` at `bo_offset` into the start
    /// of `slot`'s staging buffer. Returns at once; [`CopyEngine::wait`] for
    /// the fence before reading the slot.
    pub fn submit_read(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        slot: StagingSlot,
        len: usize,
    ) -> Result<Fence> {
        self.submit("SDMA read", bo, bo_offset, slot, len, true)
    }

    /// Submits a copy of the first `len` bytes of `slot`'s staging buffer
    /// into `bo` at `bo_offset`. Returns at once; the slot stays busy until
    /// [`CopyEngine::wait`] sees the copy finish.
    pub fn submit_write(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        slot: StagingSlot,
        len: usize,
    ) -> Result<Fence> {
        self.submit("SDMA write", bo, bo_offset, slot, len, false)
    }

    fn submit(
        &mut self,
        op: &'static str,
        bo: &ImportedBo,
        bo_offset: u64,
        slot: StagingSlot,
        len: usize,
        bo_to_host: bool,
    ) -> Result<Fence> {
        self.check_engine(op, bo.engine)?;
        let ctx = self
            .ctx
            .ok_or_else(|| Error::invalid(op, "the engine is closed"))?;
        let entry = self
            .bos
            .get(&bo.handle)
            .ok_or_else(|| Error::invalid(op, "the BO was released"))?;
        let bo_va = entry.va;
        let s = self.slot(op, slot)?;
        if s.in_flight.is_some() {
            return Err(Error::Busy {
                op,
                slot: slot.index,
            });
        }
        if len == 0 || len > s.buffer.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "length {len} is outside 1..={} (the staging slot)",
                    s.buffer.len()
                ),
            ));
        }
        let len64 = len as u64;
        if bo_offset.checked_add(len64).is_none_or(|end| end > bo.size) {
            return Err(Error::invalid(
                op,
                format!(
                    "{len} bytes at offset {bo_offset:#x} exceed the {:#x}-byte BO",
                    bo.size
                ),
            ));
        }
        let (src, dst) = if bo_to_host {
            (bo_va + bo_offset, s.va)
        } else {
            (s.va, bo_va + bo_offset)
        };
        let mut ib = Vec::with_capacity(self.format.ib_dwords_for(len64) as usize);
        self.format.build_copy(src, dst, len64, &mut ib)?;
        let ib_bytes: Vec<u8> = ib.iter().flat_map(|dw| dw.to_le_bytes()).collect();
        let (staging_handle, ib_handle, ib_va) = (s.handle, s.ib.handle, s.ib.va);
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        // The IB is ours alone: no submission reads it (the slot is idle).
        s.ib.map.write(0, &ib_bytes)?;
        let list = self
            .render
            .bo_list_create(&[bo.handle, staging_handle, ib_handle])?;
        // SAFETY: the IB only touches the BO's mapping and this slot's
        // staging mapping. The staging memory is owned by the slot, `&mut
        // self` proves no borrow from `staging`/`staging_mut` is alive, and
        // the slot is marked in flight right below, so the CPU cannot touch
        // it again until `wait` saw the fence signal (or teardown leaked it).
        let submitted = unsafe {
            self.render.cs_submit(
                ctx,
                Some(list),
                &[IbChunk {
                    va_start: ib_va,
                    ib_bytes: ib_bytes.len() as u32,
                    ip_type: AMDGPU_HW_IP_DMA,
                    ip_instance: 0,
                    ring: self.rings[slot.index % self.rings.len()],
                    flags: 0,
                }],
            )
        };
        let destroyed = self.render.bo_list_destroy(list);
        let fence = submitted?;
        if let Err(err) = destroyed {
            // The copy is queued but the caller gets an error instead of its
            // fence: finish it here so the slot is not left busy with a
            // fence nobody can wait for. The caller treats the chunk as not
            // copied, so the copy's own outcome adds nothing to the error.
            let _ = self.render.wait_cs(&fence, None);
            return Err(err);
        }
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        s.in_flight = Some(fence);
        s.in_flight_bo = Some(bo.handle);
        Ok(Fence {
            engine: self.id,
            slot: slot.index,
            fence,
        })
    }

    /// Waits for a copy (`None`: forever; `Some(ZERO)`: poll). Returns
    /// `true` once it finished, which frees its slot, `false` on timeout.
    ///
    /// A copy the device failed (VM fault, hang) returns the fence's error;
    /// the slot is free again but its bytes are undefined. Waiting for a
    /// fence that was already seen complete returns `true`.
    pub fn wait(&mut self, fence: &Fence, timeout: Option<Duration>) -> Result<bool> {
        const OP: &str = "wait for copy";
        self.check_engine(OP, fence.engine)?;
        let slot = fence.slot();
        self.slot(OP, slot)?;
        let s = self.slots[slot.index].as_mut().expect("slot checked above");
        if s.in_flight != Some(fence.fence) {
            return Ok(true);
        }
        match self.render.wait_cs(&fence.fence, timeout) {
            Ok(false) => Ok(false),
            Ok(true) => {
                s.in_flight = None;
                s.in_flight_bo = None;
                Ok(true)
            }
            Err(err) => {
                // EINVAL/ENOENT mean the kernel did not look at the fence
                // (bad context or ring): it may still run. Any other error
                // is the completed job's own error.
                if !matches!(err.errno(), libc::EINVAL | libc::ENOENT) {
                    s.in_flight = None;
                    s.in_flight_bo = None;
                }
                Err(err)
            }
        }
    }

    /// Blocking convenience: copies `out.len()` bytes of `bo` from
    /// `bo_offset` into `out`, chunk by chunk through `slot`.
    pub fn copy_bo_to_host(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        out: &mut [u8],
        slot: StagingSlot,
    ) -> Result<()> {
        let chunk = self.staging_len(slot)?;
        let mut done = 0usize;
        while done < out.len() {
            let len = (out.len() - done).min(chunk);
            let fence = self.submit_read(bo, bo_offset + done as u64, slot, len)?;
            self.wait(&fence, None)?;
            out[done..done + len].copy_from_slice(&self.staging(slot)?[..len]);
            done += len;
        }
        Ok(())
    }

    /// Blocking convenience: copies `data` into `bo` at `bo_offset`, chunk
    /// by chunk through `slot`.
    pub fn copy_host_to_bo(
        &mut self,
        bo: &ImportedBo,
        bo_offset: u64,
        data: &[u8],
        slot: StagingSlot,
    ) -> Result<()> {
        let chunk = self.staging_len(slot)?;
        let mut done = 0usize;
        while done < data.len() {
            let len = (data.len() - done).min(chunk);
            self.staging_mut(slot)?[..len].copy_from_slice(&data[done..done + len]);
            let fence = self.submit_write(bo, bo_offset + done as u64, slot, len)?;
            self.wait(&fence, None)?;
            done += len;
        }
        Ok(())
    }
}
