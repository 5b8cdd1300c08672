//! A restored host process's CPU mappings of its BOs become the BOs'
//! memory again.
//!
//! On a GPU, CRIU restores a BO's CPU mapping as a mapping of the device
//! file at the BO's new mmap offset (the plugin's `UPDATE_VMA_MAP`), so the
//! process and the GPU share the BO's memory again. Here a BO's mapping is a
//! mapping of the simulator's memfd, which real CRIU dumps and restores as
//! shared memory: the restored process maps CRIU's new memfd, whose bytes
//! are the dump's. When `CRIU_OP RESUME` resumes a host process (CRIU has
//! made every mapping final and the task is still stopped), each KFD BO the
//! process maps at its GPU VA (as the thunk maps every CPU-visible BO) gets
//! CRIU's memfd as its memory, first filled with what the BO holds (what
//! the plugin restored), holes kept; the mapping is then accounted as the
//! process's.
//!
//! What it does not reach: mappings at another address than the BO's VA
//! (libdrm's `amdgpu_bo_cpu_map` of render-node BOs) and the GPU's HDP
//! flush page (shared by every process; what a process writes there has no
//! effect in the simulator either) stay CRIU's copies. This module never
//! runs for processes of this host process ([`crate::Sim::spawn_process`]).

use std::fs::File;
use std::sync::Arc;

use kfd_sys::{KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR};

use crate::hw::bo::{Backing, Memfd};
use std::os::fd::AsRawFd;

use crate::kernel::Pid;
use crate::kernel::{CpuMapping, FileKey, State};
use ::kfd::Errno;

/// One line of `/proc/PID/maps` backed by one of the simulator's memfds
/// (as CRIU restores it: a memfd of the same name).
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemfdMapping {
    start: u64,
    end: u64,
    /// Offset in the file, bytes.
    offset: u64,
    inode: u64,
}

/// The mappings of `pid` whose file is a memfd the simulator named.
fn memfd_mappings(maps: &str) -> Vec<MemfdMapping> {
    maps.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let range = f.next()?;
            let _perms = f.next()?;
            let offset = u64::from_str_radix(f.next()?, 16).ok()?;
            let _dev = f.next()?;
            let inode = f.next()?.parse().ok()?;
            let path = f.next()?;
            if !path.starts_with("/memfd:kfd-sim-") {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some(MemfdMapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset,
                inode,
            })
        })
        .collect()
}

/// The mappings that show `[va, va + size)` of one file from its start:
/// every memfd mapping inside the range, all of one inode, each at the
/// file offset its distance from `va` says; `None` when there is none or
/// they disagree.
fn mapping_of(maps: &[MemfdMapping], va: u64, size: u64) -> Option<Vec<MemfdMapping>> {
    let end = va.checked_add(size)?;
    let inside: Vec<MemfdMapping> = maps
        .iter()
        .filter(|m| m.start >= va && m.end <= end)
        .cloned()
        .collect();
    let first = inside.first()?;
    let consistent = inside
        .iter()
        .all(|m| m.inode == first.inode && m.offset == m.start - va);
    consistent.then_some(inside)
}

/// Makes the memfds host process `pid` maps its KFD BOs with the BOs'
/// memory (see the module docs). Returns how many memfds it adopted.
pub(crate) fn adopt_restored_mappings(st: &mut State, pid: Pid) -> Result<usize, Errno> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{}/maps", pid.0)) else {
        // The process is gone: nothing maps its BOs.
        return Ok(0);
    };
    let maps = memfd_mappings(&maps);
    if maps.is_empty() {
        return Ok(0);
    }
    // (va, size, the BO's memory) of every CPU-visible KFD BO.
    let mut wanted: Vec<(u64, u64, Arc<Memfd>)> = Vec::new();
    let Some(kfd) = st.kfd(pid) else {
        return Ok(0);
    };
    for pdd in &kfd.pdds {
        for mem in pdd.idr.values() {
            if mem.flags & (KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP)
                != 0
            {
                continue;
            }
            let memory = match st.bos.get(mem.bo).map(|b| &b.backing) {
                Some(Backing::Memory(m) | Backing::Aperture(m)) => m.clone(),
                _ => continue,
            };
            wanted.push((mem.va, mem.size, memory));
        }
    }
    let mut adopted = 0;
    let peer = libc::pid_t::try_from(pid.0).map_err(|_| Errno(libc::ESRCH))?;
    for (va, size, memory) in wanted {
        let Some(found) = mapping_of(&maps, va, size) else {
            continue;
        };
        let link = format!(
            "/proc/{}/map_files/{:x}-{:x}",
            pid.0, found[0].start, found[0].end
        );
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&link)
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        // A memfd shared by two BOs (or mapped twice) is adopted once.
        if FileKey::of_raw(file.as_raw_fd())? == memory.key() {
            continue;
        }
        if file.metadata().map_err(|_| Errno(libc::EIO))?.len() != memory.size() {
            // Not this BO's memory after all (another size).
            continue;
        }
        adopt(st, &memory, file)?;
        for m in &found {
            st.remote_maps.insert(
                (peer, m.start as usize),
                CpuMapping {
                    len: (m.end - m.start) as usize,
                },
            );
        }
        adopted += 1;
    }
    Ok(adopted)
}

/// `file` (CRIU's memfd) becomes the memory `old` was: filled from it,
/// then put in its place in every BO, doorbell slice and events page.
fn adopt(st: &mut State, old: &Arc<Memfd>, file: File) -> Result<(), Errno> {
    old.copy_into(&file)?;
    let new = Arc::new(Memfd::adopt(file)?);
    st.bos.replace_memory(old, &new);
    for p in st.processes.values_mut() {
        let Some(kfd) = p.kfd.as_mut() else {
            continue;
        };
        for pdd in &mut kfd.pdds {
            if pdd
                .doorbell_page
                .as_ref()
                .is_some_and(|d| Arc::ptr_eq(d, old))
            {
                pdd.doorbell_page = Some(new.clone());
            }
        }
        if let Some(crate::amdkfd::process::SignalPage::Kernel(page)) = &mut kfd.signal_page {
            if Arc::ptr_eq(page, old) {
                *page = new.clone();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
7f0000000000-7f0000200000 rw-s 00000000 00:01 4242 /memfd:kfd-sim-vram (deleted)
7f0000200000-7f0000300000 rw-s 00000000 00:01 4243 /memfd:kfd-sim-gtt (deleted)
7f0000300000-7f0000301000 rw-s 00000000 00:01 17 /memfd:other (deleted)
7f0000400000-7f0000401000 rw-p 00000000 00:00 0
7f0000500000-7f0000600000 rw-s 00000000 00:01 4244 /memfd:kfd-sim-gtt (deleted)
7f0000600000-7f0000700000 r--s 00100000 00:01 4244 /memfd:kfd-sim-gtt (deleted)
";

    #[test]
    fn only_the_simulators_memfds_are_candidates() {
        let maps = memfd_mappings(MAPS);
        assert_eq!(maps.len(), 4, "{maps:?}");
        assert!(maps.iter().all(|m| m.inode != 17));
    }

    #[test]
    fn a_bo_is_found_at_its_va_whole_or_in_consistent_pieces() {
        let maps = memfd_mappings(MAPS);
        let vram = mapping_of(&maps, 0x7f00_0000_0000, 2 << 20).unwrap();
        assert_eq!(vram.len(), 1);
        assert_eq!(vram[0].inode, 4242);
        // Split by an mprotect: two pieces of one file at matching offsets.
        let split = mapping_of(&maps, 0x7f00_0050_0000, 2 << 20).unwrap();
        assert_eq!(split.len(), 2);
        // Nothing at this VA.
        assert!(mapping_of(&maps, 0x7e00_0000_0000, 4096).is_none());
        // A range whose pieces are other files.
        assert!(mapping_of(&maps, 0x7f00_0000_0000, 3 << 20).is_none());
    }
}
