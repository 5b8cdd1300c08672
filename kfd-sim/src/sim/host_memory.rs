//! Host memory the simulator owns for simulated applications: the
//! [`Sim`] API over [`HostRegion`]s (allocate, list with contents as CRIU's
//! pages dump would, map back in place, read and write).
//!
//! This module never maps memory except through [`HostRegion`] and never
//! replaces an existing mapping.

use std::ffi::c_int;

use ::kfd::Errno;

use super::Sim;
use crate::kernel::{HostMemorySnapshot, HostRegion, Pid, SimError};

impl Sim {
    /// Allocates `len` bytes (rounded up to pages) of zeroed host memory that
    /// lives as long as the simulator: CPU memory of a simulated application,
    /// e.g. the target of a USERPTR allocation. A process restored on this
    /// simulator finds it at the same address without anyone carrying it,
    /// standing in for CRIU's restore of CPU memory in place. Memory that
    /// must follow a process to another simulator is allocated with
    /// [`Sim::alloc_host_memory_for`].
    pub fn alloc_host_memory(&self, len: usize) -> Result<u64, SimError> {
        let len = len.max(1).div_ceil(4096) * 4096;
        let region =
            HostRegion::new(len, None).map_err(|e| SimError::HostMemory { len, errno: e })?;
        let addr = region.addr();
        self.lock().host_regions.insert(addr, region);
        Ok(addr as u64)
    }

    /// Allocates `len` bytes (rounded up to pages) of zeroed host memory in
    /// process `pid` (an anonymous `mmap` of that process): listed by
    /// [`Sim::host_memory_of`] and unmapped when the process exits, so a
    /// checkpoint must carry it ([`Sim::restore_host_memory`]) as CRIU's
    /// pages dump carries a real process's memory.
    pub fn alloc_host_memory_for(&self, pid: Pid, len: usize) -> Result<u64, SimError> {
        let len = len.max(1).div_ceil(4096) * 4096;
        let mut st = self.lock();
        if !st.processes.contains_key(&pid) {
            return Err(SimError::NoSuchProcess(pid));
        }
        let region =
            HostRegion::new(len, Some(pid)).map_err(|e| SimError::HostMemory { len, errno: e })?;
        let addr = region.addr();
        st.host_regions.insert(addr, region);
        Ok(addr as u64)
    }

    /// The host memory of process `pid` ([`Sim::alloc_host_memory_for`] and
    /// [`Sim::restore_host_memory`] regions) with its current contents, in
    /// address order: what CRIU's pages dump of the process captures. Empty
    /// for a process without such memory or without a live process.
    pub fn host_memory_of(&self, pid: Pid) -> Vec<HostMemorySnapshot> {
        let st = self.lock();
        st.host_regions
            .values()
            .filter(|r| r.owner == Some(pid))
            .filter_map(|r| {
                Some(HostMemorySnapshot {
                    addr: r.addr() as u64,
                    bytes: st.read_host(r.addr() as u64, r.len())?,
                })
            })
            .collect()
    }

    /// Maps host memory for process `pid` at exactly `addr` (page aligned;
    /// `bytes.len()` rounded up to pages, the rest zero) and fills it with
    /// `bytes`, as CRIU's restorer maps a process's memory back in place
    /// (`MAP_FIXED_NOREPLACE`: an error, never a replacement, when the range
    /// is taken in the host process or by another region of this simulator).
    /// The range an exited process's memory left reserved is free for it,
    /// on this simulator or another one of the host process. The region
    /// belongs to `pid` as if allocated by [`Sim::alloc_host_memory_for`].
    pub fn restore_host_memory(&self, pid: Pid, addr: u64, bytes: &[u8]) -> Result<(), SimError> {
        let len = bytes.len().div_ceil(4096) * 4096;
        let at = |errno: c_int| SimError::HostMemoryAt {
            addr,
            len,
            errno: Errno(errno),
        };
        let start = usize::try_from(addr).map_err(|_| at(libc::EINVAL))?;
        if start == 0 || start % 4096 != 0 || len == 0 || start.checked_add(len).is_none() {
            return Err(at(libc::EINVAL));
        }
        let mut st = self.lock();
        if !st.processes.contains_key(&pid) {
            return Err(SimError::NoSuchProcess(pid));
        }
        if st.host_regions.values().any(|r| r.overlaps(start, len)) {
            return Err(at(libc::EEXIST));
        }
        let region = HostRegion::new_at(start, len, pid).map_err(|e| SimError::HostMemoryAt {
            addr,
            len,
            errno: e,
        })?;
        st.host_regions.insert(start, region);
        if !st.write_host(addr, bytes) {
            // The region was just inserted over exactly this range.
            st.host_regions.remove(&start);
            return Err(at(libc::EFAULT));
        }
        Ok(())
    }

    /// Reads simulator-owned host memory; `None` when the range is not inside
    /// one allocation of [`Sim::alloc_host_memory`].
    pub fn read_host_memory(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.lock().read_host(addr, len)
    }

    /// Writes simulator-owned host memory; false when the range is not inside
    /// one allocation of [`Sim::alloc_host_memory`].
    pub fn write_host_memory(&self, addr: u64, data: &[u8]) -> bool {
        self.lock().write_host(addr, data)
    }
}
