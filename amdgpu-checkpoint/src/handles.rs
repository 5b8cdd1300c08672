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
//! It is a hash table with open addressing: a key's slot is found from its
//! hash in a few probes however many buffers the set shares (a restore
//! looks up and publishes every shared buffer once per file). Slots are
//! single 64-bit atomics written once with compare-and-swap and never
//! removed, so the table needs no lock (a lock held by a task that dies
//! would block the others) and a key is never published twice.
//!
//! After the slots come [`WAITER_SLOTS`] words of tasks waiting for a key
//! (their pids): under real CRIU a task whose file asked for a retry sleeps
//! until another task sends it a file, which a plugin publishing a buffer
//! never does, so the publisher wakes the waiters itself (the restore's
//! waiting and waking, `restore/wait.rs`).
//!
//! This module never talks to CRIU or to the kernel beyond the mapping
//! ([`kfd::AnonymousMapping`]). What the engine's restore does with the
//! table (looking buffers up, publishing them, waiting for them and waking
//! the tasks that wait) is its own; a host only makes the table and hands
//! it over ([`crate::restore::Sharing`]):
//!
//! ```
//! use amdgpu_checkpoint::handles::HandleTable;
//! // In CRIU's main process, before it forks the tasks.
//! let table = HandleTable::shared(1024)?;
//! assert_eq!((table.capacity(), table.len()), (1024, 0));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! ```compile_fail
//! // Publishing and looking up are the restore's own.
//! let table = amdgpu_checkpoint::handles::HandleTable::private(4);
//! let _ = table.publish(1, 1);
//! ```
//!
//! ```compile_fail
//! // So are waiting and waking.
//! let table = amdgpu_checkpoint::handles::HandleTable::private(4);
//! let _ = table.add_waiter(1000);
//! ```

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use kfd::{AnonymousMapping, AnonymousOptions};

/// Buffers a table whose image set cannot be listed (an image stream)
/// holds: 64 Ki, in 1 MiB of address space whose pages are touched only as
/// slots fill.
pub const UNSIZED_CAPACITY: usize = 1 << 16;

/// Tasks that can wait for buffers at once; more are not recorded (they
/// are woken by the next file another task sends them, as without it).
pub const WAITER_SLOTS: usize = 64;

/// Why a key could not be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The table holds as many keys as it was made for.
    #[error("the shared buffer handle table is full ({capacity} buffers)")]
    Full {
        /// Keys the table was made for.
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
    /// Word 0 counts the keys published; the slots follow.
    memory: Memory,
    /// Keys it accepts (the slots are at least twice as many).
    capacity: usize,
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

/// Keys a table can hold at most: keys are `u32`.
const MAX_KEYS: u64 = 1 << 32;

/// Keys a table for `capacity` accepts: 1 to [`MAX_KEYS`].
fn clamped(capacity: usize) -> usize {
    usize::try_from(MAX_KEYS)
        .map_or(capacity, |max| capacity.min(max))
        .max(1)
}

/// Slots of a table for `capacity` keys: a power of two at least twice as
/// many (probe sequences stay short at half load); `None` on overflow.
fn slot_count(capacity: usize) -> Option<usize> {
    capacity.checked_mul(2)?.checked_next_power_of_two()
}

impl HandleTable {
    /// A table in this process's heap (tasks that are threads, or a host
    /// without `RESTORE_INIT`, whose tasks cannot share memory anyway).
    pub fn private(capacity: usize) -> HandleTable {
        let capacity = clamped(capacity);
        let words = slot_count(capacity).map_or(usize::MAX, |n| n.saturating_add(1 + WAITER_SLOTS));
        let words: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(0)).collect();
        HandleTable {
            memory: Memory::Heap(words.into_boxed_slice()),
            capacity,
        }
    }

    /// A table in an anonymous shared mapping, which processes forked after
    /// this call share.
    pub fn shared(capacity: usize) -> std::io::Result<HandleTable> {
        let capacity = clamped(capacity);
        let bytes = slot_count(capacity)
            .and_then(|n| n.checked_add(1 + WAITER_SLOTS))
            .and_then(|words| words.checked_mul(std::mem::size_of::<AtomicU64>()))
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        let mapping = AnonymousOptions::new(kfd::Sharing::Shared)
            .no_reserve()
            .map(bytes)?;
        Ok(HandleTable {
            memory: Memory::Shared(mapping),
            capacity,
        })
    }

    /// The count word and the slots.
    fn words(&self) -> &[AtomicU64] {
        match &self.memory {
            // SAFETY: the mapping is page aligned, `len()` bytes long (a
            // multiple of 8, see `shared`) and zero-filled by the kernel, so
            // it holds `len() / 8` valid `AtomicU64`s, all 0 (no key, an
            // empty slot); it is only ever accessed through them (here and
            // by forked tasks), and it lives as long as `self`.
            Memory::Shared(mapping) => unsafe {
                std::slice::from_raw_parts(
                    mapping.as_ptr().as_ptr().cast::<AtomicU64>(),
                    mapping.len() / std::mem::size_of::<AtomicU64>(),
                )
            },
            Memory::Heap(words) => words,
        }
    }

    fn slots(&self) -> &[AtomicU64] {
        let words = self.words();
        &words[1..words.len() - WAITER_SLOTS]
    }

    fn waiter_slots(&self) -> &[AtomicU64] {
        let words = self.words();
        &words[words.len() - WAITER_SLOTS..]
    }

    /// Records that task `pid` waits for a key; `false` when every waiter
    /// slot holds another task.
    pub(crate) fn add_waiter(&self, pid: u32) -> bool {
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
    pub(crate) fn waiters(&self) -> Vec<u32> {
        self.waiter_slots()
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .take_while(|&v| v != 0)
            .filter_map(|v| u32::try_from(v - 1).ok())
            .collect()
    }

    fn published(&self) -> &AtomicU64 {
        &self.words()[0]
    }

    /// The slot where the probe sequence of `key` starts (Fibonacci hashing
    /// onto the power-of-two slot count: sequential keys spread out).
    fn home(&self, key: u32) -> usize {
        let bits = self.slots().len().trailing_zeros();
        let hash = u64::from(key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (hash >> (64 - bits)) as usize
    }

    /// The probe sequence of `key`: every slot once, from its home on.
    fn probe(&self, key: u32) -> impl Iterator<Item = &AtomicU64> {
        let slots = self.slots();
        let home = self.home(key);
        slots[home..].iter().chain(&slots[..home])
    }

    /// Keys the table accepts.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keys published so far.
    pub fn len(&self) -> usize {
        self.published().load(Ordering::Acquire) as usize
    }

    /// Whether nothing was published yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fd-store id published for `key`.
    pub(crate) fn lookup(&self, key: u32) -> Option<i32> {
        for slot in self.probe(key) {
            match unpack(slot.load(Ordering::Acquire)) {
                // Keys are never removed: one would sit before this slot.
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
    pub(crate) fn publish(&self, key: u32, id: i32) -> Result<bool, TableError> {
        if id < 0 {
            return Err(TableError::BadId(id));
        }
        let packed = pack(key, id);
        let full = TableError::Full {
            capacity: self.capacity,
        };
        // A key goes into the first empty slot of its probe sequence, so
        // every publisher of an absent key competes for that slot: one
        // wins, the others see its key on reloading it.
        for slot in self.probe(key) {
            loop {
                match unpack(slot.load(Ordering::Acquire)) {
                    Some((k, _)) if k == key => return Ok(false),
                    Some(_) => break,
                    None => {
                        // Publishers racing at the last free place may
                        // pass this check together: the slots (twice the
                        // capacity) leave them room.
                        if self.len() >= self.capacity {
                            return Err(full);
                        }
                        if slot
                            .compare_exchange(0, packed, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            self.published().fetch_add(1, Ordering::AcqRel);
                            return Ok(true);
                        }
                    }
                }
            }
        }
        Err(full)
    }
}

#[cfg(test)]
impl HandleTable {
    /// Slots a lookup of `key` reads.
    fn probes_for(&self, key: u32) -> usize {
        let mut probes = 0;
        for slot in self.probe(key) {
            probes += 1;
            match unpack(slot.load(Ordering::Acquire)) {
                None => break,
                Some((k, _)) if k == key => break,
                Some(_) => {}
            }
        }
        probes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_table_finds_each_key_in_a_few_probes() {
        // A restore of many shared buffers looks each one up (and publishes
        // it) once per file: a scan of the table each time makes the whole
        // restore quadratic in the number of buffers.
        const KEYS: u32 = 50_000;
        let table = HandleTable::shared(KEYS as usize).unwrap();
        for key in 1..=KEYS {
            assert_eq!(table.publish(key, key as i32), Ok(true));
        }
        assert_eq!(table.len(), KEYS as usize);
        let worst = (1..=KEYS)
            .map(|key| (table.probes_for(key), key))
            .max()
            .unwrap();
        assert!(
            worst.0 <= 64,
            "the lookup of key {} reads {} slots",
            worst.1,
            worst.0
        );
        assert!(table.probes_for(KEYS + 1) <= 64, "an absent key");
        assert_eq!(table.lookup(KEYS), Some(KEYS as i32));
        assert_eq!(table.lookup(KEYS + 1), None);
    }

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
