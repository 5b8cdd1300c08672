//! Doorbells: how an engine notices that its queue has new work without
//! the application telling the simulator. A doorbell is a slot of the
//! process's doorbell page, a memfd of the simulator that the application
//! (in this host process or a remote client) maps and stores its write
//! pointer into, as it stores into the GPU's doorbell BAR. The engine maps
//! the same page read-only ([`DoorbellMap`]) and reads the slot with an
//! atomic load; one watcher thread per simulator ([`Watcher`]) looks at
//! every queue's slot and wakes the queue's engine when the value moved,
//! once per new value (a parked or hung engine does not take it up), fast
//! while queues are busy and more slowly once everything is idle.
//!
//! Slot placement follows the thunk (`hsaKmtCreateQueue`): on SOC15 the
//! slot is the queue's doorbell id times 8 bytes, a 64-bit doorbell;
//! before that the queue id times 4, a 32-bit one.
//!
//! This module never writes a doorbell and never executes a packet.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hw::bo::Memfd;
use ::kfd::Errno;

use super::engine::QueueHw;
use super::lock;

/// A read-only shared mapping of a doorbell page, unmapped on drop.
#[derive(Debug)]
pub(crate) struct DoorbellMap {
    addr: usize,
    len: usize,
    /// Byte offset of the queue's slot.
    slot: usize,
    /// 8 (SOC15) or 4.
    width: usize,
}

// SAFETY: the mapping is plain shared memory; the struct only reads it
// with atomic loads, which any thread may do.
unsafe impl Send for DoorbellMap {}
// SAFETY: as above; no interior state besides the mapping.
unsafe impl Sync for DoorbellMap {}

impl DoorbellMap {
    /// Maps `page` and points at the `width`-byte slot at `slot`.
    pub(crate) fn new(page: &Memfd, slot: u64, width: usize) -> Result<DoorbellMap, Errno> {
        let len = usize::try_from(page.size()).map_err(|_| Errno(libc::EINVAL))?;
        let slot = usize::try_from(slot).map_err(|_| Errno(libc::EINVAL))?;
        if !(width == 4 || width == 8) || slot % width != 0 || slot + width > len {
            return Err(Errno(libc::EINVAL));
        }
        // SAFETY: a new shared read-only mapping of our own memfd at an
        // address the kernel picks; no existing memory is affected.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                page.file().as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        Ok(DoorbellMap {
            addr: addr as usize,
            len,
            slot,
            width,
        })
    }

    /// The slot's current value.
    pub(crate) fn read(&self) -> u64 {
        let at = self.addr + self.slot;
        if self.width == 8 {
            // SAFETY: `at` lies inside the live mapping (checked in `new`)
            // and is 8-byte aligned (page-aligned base, aligned slot); an
            // atomic load is the right access to memory another process
            // stores to.
            unsafe { AtomicU64::from_ptr(at as *mut u64) }.load(Ordering::Acquire)
        } else {
            // SAFETY: as above, for a 4-byte aligned 32-bit slot.
            u64::from(unsafe { AtomicU32::from_ptr(at as *mut u32) }.load(Ordering::Acquire))
        }
    }
}

impl Drop for DoorbellMap {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` and is unmapped once; only
        // this struct reads through it.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// The watcher thread: wakes engines whose doorbell moved.
#[derive(Debug, Default)]
pub(crate) struct Watcher {
    queues: Mutex<Vec<Weak<QueueHw>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    stop: Arc<AtomicBool>,
}

impl Watcher {
    /// Scan interval while any doorbell moved recently.
    const BUSY: Duration = Duration::from_micros(500);
    /// Scan interval once every queue has been quiet for [`Self::QUIET`].
    const IDLE: Duration = Duration::from_millis(20);
    const QUIET: Duration = Duration::from_millis(200);

    /// Starts watching `hw` (and the thread, on first use).
    pub(crate) fn watch(self: &Arc<Self>, hw: &Arc<QueueHw>) {
        {
            let mut queues = lock(&self.queues);
            queues.retain(|q| q.strong_count() > 0);
            queues.push(Arc::downgrade(hw));
        }
        let mut thread = lock(&self.thread);
        if thread.is_none() {
            let me = Arc::downgrade(self);
            let stop = Arc::clone(&self.stop);
            *thread = std::thread::Builder::new()
                .name("kfd-sim-doorbells".into())
                .spawn(move || Self::run(&me, &stop))
                .ok();
        }
    }

    /// Holds the list of watched queues, which the watcher thread takes
    /// (see [`crate::Sim::hold_for_fork`]).
    pub(crate) fn hold(&self) -> std::sync::MutexGuard<'_, Vec<Weak<QueueHw>>> {
        lock(&self.queues)
    }

    /// In the child of a host `fork(2)`: the watcher thread and the queues
    /// it watched (whose engine threads) were the parent's, so both are
    /// forgotten, and the child's first queue starts a watcher of its own.
    pub(crate) fn forget_after_fork(&self) {
        if let Ok(mut queues) = self.queues.try_lock() {
            queues.clear();
        }
        if let Ok(mut thread) = self.thread.try_lock() {
            if let Some(parents) = thread.take() {
                std::mem::forget(parents);
            }
        }
    }

    fn run(me: &Weak<Watcher>, stop: &AtomicBool) {
        let mut last_moved = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let Some(watcher) = me.upgrade() else { return };
            let queues: Vec<Arc<QueueHw>> = lock(&watcher.queues)
                .iter()
                .filter_map(Weak::upgrade)
                .collect();
            drop(watcher);
            for q in &queues {
                // Once per value: a parked or hung queue leaves a rung
                // doorbell unread, and waking it at every scan would keep
                // this thread scanning fast and the engine awake.
                if q.rung_anew() {
                    last_moved = Instant::now();
                    q.wake();
                }
            }
            drop(queues);
            let pause = if last_moved.elapsed() < Self::QUIET {
                Self::BUSY
            } else {
                Self::IDLE
            };
            std::thread::sleep(pause);
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = lock(&self.thread).take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}
