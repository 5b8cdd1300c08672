//! The address ranges of exited processes' host memory, kept out of the host
//! process's hands until a restore maps them back.
//!
//! A simulated process's CPU memory ([`HostRegion`](super::process::HostRegion))
//! lives in the host process's address space, shared with every thread of the
//! host. On a real machine a process's exit frees its addresses in its own
//! address space, and CRIU later restores it into a fresh one where those
//! addresses are free by construction. Here an `munmap` at exit would hand the
//! range back to the host's allocator, and any `mmap` of another thread (a new
//! thread's signal stack, a `malloc` arena) could take it before the restore
//! maps the memory back at the same address with `MAP_FIXED_NOREPLACE`, which
//! then fails with `EEXIST`. So the range is retired instead: its pages are
//! freed (`MADV_DONTNEED`) and it is made inaccessible (`PROT_NONE`), but it
//! stays mapped, reserved, until a restore of exactly that range takes it
//! back ([`take`]) on any simulator of this host process.
//!
//! A retired range costs address space only, no memory. At most
//! [`KEPT_AT_MOST`] are kept, the oldest given back to the host first.
//! This module never touches a mapping it was not handed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use kfd::AnonymousMapping;

/// How many retired ranges are kept before the oldest is unmapped.
const KEPT_AT_MOST: usize = 4096;

struct Retired {
    /// By start address.
    ranges: BTreeMap<usize, AnonymousMapping>,
    /// Start addresses, oldest first.
    order: VecDeque<usize>,
}

static RETIRED: Mutex<Retired> = Mutex::new(Retired {
    ranges: BTreeMap::new(),
    order: VecDeque::new(),
});

fn lock() -> std::sync::MutexGuard<'static, Retired> {
    RETIRED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Retires `map`, the memory of a process that exited: its pages are freed
/// and the range stays reserved until [`take`] hands it to a restore.
pub(crate) fn keep(map: AnonymousMapping) {
    let (addr, len) = (map.addr(), map.len());
    // SAFETY: `addr..addr+len` is exactly the mapping `map` owns, and nothing
    // refers to its bytes any more: the simulator reaches host memory only
    // through its regions, from which this one was removed, and USERPTR BOs
    // over it were invalidated at the process's exit. MADV_DONTNEED on private
    // anonymous memory frees the pages (they read as zero if touched again);
    // PROT_NONE makes a stray access fault as it would after munmap. Failures
    // leave the pages mapped and accessible, which is safe.
    unsafe {
        libc::madvise(map.as_ptr().as_ptr().cast(), len, libc::MADV_DONTNEED);
        libc::mprotect(map.as_ptr().as_ptr().cast(), len, libc::PROT_NONE);
    }
    let mut retired = lock();
    if let Some(old) = retired.ranges.insert(addr, map) {
        // Unreachable while the kernel never maps one address twice; dropping
        // the stale entry unmaps nothing that is still retired.
        std::mem::forget(old);
    }
    retired.order.push_back(addr);
    while retired.order.len() > KEPT_AT_MOST {
        if let Some(oldest) = retired.order.pop_front() {
            retired.ranges.remove(&oldest);
        }
    }
}

/// The retired range `addr..addr+len`, if exactly that was retired: readable,
/// writable and zero-filled again, for a restore to fill. Retired ranges that
/// only overlap it are given back to the host (unmapped), so the caller's
/// `MAP_FIXED_NOREPLACE` finds them free.
pub(crate) fn take(addr: usize, len: usize) -> Option<AnonymousMapping> {
    let mut retired = lock();
    let end = addr.checked_add(len)?;
    if retired.ranges.get(&addr).is_some_and(|m| m.len() == len) {
        let map = retired.ranges.remove(&addr)?;
        retired.order.retain(|&a| a != addr);
        drop(retired);
        // SAFETY: `map` owns exactly this range, reserved PROT_NONE by `keep`
        // and referred to by nothing; making it read-write again exposes
        // zero-filled pages (freed with MADV_DONTNEED).
        let made_writable = unsafe {
            libc::mprotect(
                map.as_ptr().as_ptr().cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        } == 0;
        // On failure the mapping is dropped (unmapped) and the caller's
        // MAP_FIXED_NOREPLACE decides.
        return made_writable.then_some(map);
    }
    let overlapping: Vec<usize> = retired
        .ranges
        .range(..end)
        .filter(|(&a, m)| a + m.len() > addr)
        .map(|(&a, _)| a)
        .collect();
    for a in overlapping {
        retired.ranges.remove(&a);
        retired.order.retain(|&o| o != a);
    }
    None
}
