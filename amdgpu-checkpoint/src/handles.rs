//! The buffer handle table every restored task shares: which CRIU fd-store
//! id holds a dma-buf of each checkpointed buffer (§6.6 of the upstream
//! description).
//!
//! A task that re-creates a buffer (a KFD BO through `CRIU_OP RESTORE`, a DRM
//! BO through `GEM_CREATE`) parks a dma-buf of it in CRIU's fd store and
//! publishes `buffer key → fd-store id` here; a task that imported the buffer
//! (a DRM import, a dma-buf fd) looks the key up and fetches the dma-buf from
//! the fd store, or asks CRIU to retry while the key is absent.
//!
//! The table must be shared by tasks CRIU forks after `RESTORE_INIT`, so on a
//! real host it lives in an anonymous `MAP_SHARED` mapping made before fork
//! ([`HandleTable::shared`]); the emulator, whose tasks are threads of one
//! process, shares a heap table through an `Arc` ([`HandleTable::private`]).
//! Slots are single 64-bit atomics written once with compare-and-swap, so
//! the table needs no lock (a lock held by a task that dies would block the
//! others) and a key is never published twice.
//!
//! After the key slots come [`WAITER_SLOTS`] slots of tasks waiting for a
//! key (their pids, [`HandleTable::add_waiter`]): under real CRIU a task
//! whose file asked for a retry sleeps until another task sends it a file,
//! which a plugin publishing a buffer never does, so the publisher wakes
//! the waiters itself.
//!
//! This module never talks to CRIU or to the kernel beyond the mapping
//! ([`kfd::AnonymousMapping`]).

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use kfd::{AnonymousMapping, AnonymousOptions};

/// Slots of a table whose image set cannot be listed (an image stream):
/// 64 Ki buffers, 512 KiB of address space, touched only as slots fill.
pub const UNSIZED_CAPACITY: usize = 1 << 16;

/// Tasks that can wait for buffers at once; more are not recorded (they
/// are woken by the next file another task sends them, as without it).
pub const WAITER_SLOTS: usize = 64;

/// Why a key could not be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// Every slot holds another key.
    #[error("the shared buffer handle table is full ({capacity} buffers)")]
    Full {
        /// Slots of the table.
        capacity: usize,
    },
    /// A fd-store id that cannot be recorded (negative).
    #[error("fd-store id {0} cannot be recorded")]
    BadId(i32),
}

enum Memory {
    /// `MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE`, unmapped on drop.
    Shared(AnonymousMapping),
    Heap(Box<[AtomicU64]>),
}

/// Buffer key to CRIU fd-store id, shared by every restored task.
pub struct HandleTable {
    memory: Memory,
}

impl std::fmt::Debug for HandleTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandleTable")
            .field("capacity", &self.capacity())
            .field("used", &self.len())
            .field("shared", &matches!(self.memory, Memory::Shared { .. }))
            .finish()
    }
}

/// Empty slots are 0; a used slot packs `key << 32 | (id + 1)` (ids are
/// never negative, so the low half of a used slot is never 0).
fn pack(key: u32, id: i32) -> u64 {
    (u64::from(key) << 32) | (u64::from(id as u32) + 1)
}

fn unpack(slot: u64) -> Option<(u32, i32)> {
    (slot != 0).then(|| {
        (
            (slot >> 32) as u32,
            ((slot & 0xffff_ffff) - 1) as u32 as i32,
        )
    })
}

impl HandleTable {
    /// A table in this process's heap (tasks that are threads, or a host
    /// without `RESTORE_INIT`, whose tasks cannot share memory anyway).
    pub fn private(capacity: usize) -> HandleTable {
        let slots: Vec<AtomicU64> = (0..capacity.max(1) + WAITER_SLOTS)
            .map(|_| AtomicU64::new(0))
            .collect();
        HandleTable {
            memory: Memory::Heap(slots.into_boxed_slice()),
        }
    }

    /// A table in an anonymous shared mapping, which processes forked after
    /// this call share.
    pub fn shared(capacity: usize) -> std::io::Result<HandleTable> {
        let len = capacity.max(1) + WAITER_SLOTS;
        let bytes = len
            .checked_mul(std::mem::size_of::<AtomicU64>())
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        let mapping = AnonymousOptions::new(kfd::Sharing::Shared)
            .no_reserve()
            .map(bytes)?;
        Ok(HandleTable {
            memory: Memory::Shared(mapping),
        })
    }

    fn all_slots(&self) -> &[AtomicU64] {
        match &self.memory {
            // SAFETY: the mapping is page aligned, `len()` bytes long (a
            // multiple of 8, see `shared`) and zero-filled by the kernel, so
            // it holds `len() / 8` valid, empty `AtomicU64`s; it is only ever
            // accessed through them (here and by forked tasks), and it lives
            // as long as `self`.
            Memory::Shared(mapping) => unsafe {
                std::slice::from_raw_parts(
                    mapping.as_ptr().as_ptr().cast::<AtomicU64>(),
                    mapping.len() / std::mem::size_of::<AtomicU64>(),
                )
            },
            Memory::Heap(slots) => slots,
        }
    }

    /// The key slots.
    fn slots(&self) -> &[AtomicU64] {
        let all = self.all_slots();
        &all[..all.len() - WAITER_SLOTS]
    }

    /// The waiter slots.
    fn waiter_slots(&self) -> &[AtomicU64] {
        let all = self.all_slots();
        &all[all.len() - WAITER_SLOTS..]
    }

    /// Records that task `pid` waits for a key; `false` when every waiter
    /// slot holds another task.
    pub fn add_waiter(&self, pid: u32) -> bool {
        let mine = u64::from(pid) + 1;
        for slot in self.waiter_slots() {
            match slot.compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(held) if held == mine => return true,
                Err(_) => {}
            }
        }
        false
    }

    /// The tasks that waited for a key so far (a task stays listed: waking
    /// one that no longer waits only makes it look again).
    pub fn waiters(&self) -> Vec<u32> {
        self.waiter_slots()
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .take_while(|&v| v != 0)
            .filter_map(|v| u32::try_from(v - 1).ok())
            .collect()
    }

    /// Slots of the table.
    pub fn capacity(&self) -> usize {
        self.slots().len()
    }

    /// Keys published so far.
    pub fn len(&self) -> usize {
        self.slots()
            .iter()
            .take_while(|s| s.load(Ordering::Acquire) != 0)
            .count()
    }

    /// Whether nothing was published yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fd-store id published for `key`.
    pub fn lookup(&self, key: u32) -> Option<i32> {
        for slot in self.slots() {
            match unpack(slot.load(Ordering::Acquire)) {
                None => return None,
                Some((k, id)) if k == key => return Some(id),
                Some(_) => {}
            }
        }
        None
    }

    /// Publishes `key → id`: `Ok(true)` if recorded, `Ok(false)` if the key
    /// was already published (by this or another task), which keeps the
    /// first buffer.
    pub fn publish(&self, key: u32, id: i32) -> Result<bool, TableError> {
        if id < 0 {
            return Err(TableError::BadId(id));
        }
        let packed = pack(key, id);
        // Slots fill in order, so the first empty slot is where every
        // publisher of an absent key competes: one wins, the others see its
        // key on reloading that slot.
        for slot in self.slots() {
            loop {
                match unpack(slot.load(Ordering::Acquire)) {
                    Some((k, _)) if k == key => return Ok(false),
                    Some(_) => break,
                    None => {
                        if slot
                            .compare_exchange(0, packed, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            return Ok(true);
                        }
                    }
                }
            }
        }
        Err(TableError::Full {
            capacity: self.capacity(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_publisher_wins_and_lookup_finds_it() {
        for table in [HandleTable::private(4), HandleTable::shared(4).unwrap()] {
            assert_eq!(table.lookup(7), None);
            assert_eq!(table.publish(7, 3), Ok(true));
            assert_eq!(table.publish(7, 9), Ok(false), "the first buffer is kept");
            assert_eq!(table.publish(0, 0), Ok(true), "key 0 and id 0 are valid");
            assert_eq!(table.lookup(7), Some(3));
            assert_eq!(table.lookup(0), Some(0));
            assert_eq!(table.lookup(u32::MAX), None);
            assert_eq!(table.publish(u32::MAX, i32::MAX), Ok(true));
            assert_eq!(table.lookup(u32::MAX), Some(i32::MAX));
            assert_eq!(table.len(), 3);
            assert_eq!(table.publish(1, 1), Ok(true));
            assert_eq!(table.publish(2, 1), Err(TableError::Full { capacity: 4 }));
            assert_eq!(
                table.publish(1, 5),
                Ok(false),
                "a full table still finds keys"
            );
            assert_eq!(table.publish(5, -1), Err(TableError::BadId(-1)));
        }
    }

    #[test]
    fn waiters_are_recorded_once_and_survive_a_fork() {
        let table = HandleTable::shared(4).unwrap();
        assert!(table.waiters().is_empty());
        assert!(table.add_waiter(42));
        assert!(table.add_waiter(42), "a second registration is the same");
        assert_eq!(table.waiters(), vec![42]);
        // SAFETY: the child only touches the table's atomics and exits with
        // `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = table.add_waiter(7);
            // SAFETY: `_exit` ends the child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(
            table.waiters(),
            vec![42, 7],
            "the child's registration is seen"
        );
        // The waiter slots are not key slots: the key capacity is unchanged.
        assert_eq!(table.capacity(), 4);
        let private = HandleTable::private(1);
        for p in 0..WAITER_SLOTS as u32 {
            assert!(private.add_waiter(p));
        }
        assert!(!private.add_waiter(1000), "every waiter slot is taken");
        assert_eq!(private.waiters().len(), WAITER_SLOTS);
    }

    #[test]
    fn a_shared_table_is_shared_with_a_forked_child() {
        let table = HandleTable::shared(16).unwrap();
        table.publish(1, 10).unwrap();
        // SAFETY: the child only touches the table's atomics and exits with
        // `_exit`, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = table.lookup(1) == Some(10) && table.publish(2, 20) == Ok(true);
            // SAFETY: `_exit` ends the child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(table.lookup(2), Some(20), "the child's key is visible");
        let private = HandleTable::private(16);
        assert_eq!(private.lookup(2), None);
    }

    #[test]
    fn concurrent_publishers_of_one_key_record_it_once() {
        let table = std::sync::Arc::new(HandleTable::private(64));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let table = table.clone();
                std::thread::spawn(move || {
                    (0..32u32).filter(|k| table.publish(*k, t).unwrap()).count()
                })
            })
            .collect();
        let won: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(won, 32, "each key recorded by exactly one thread");
        assert_eq!(table.len(), 32);
    }
}
