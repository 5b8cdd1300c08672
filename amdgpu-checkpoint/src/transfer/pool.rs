//! The staging buffers and GPU turns the transfers of one dump share.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use kfd::StagingBuffer;

/// SDMA rings one GPU's transfer spreads its copies over (when the GPU has
/// them): consecutive staging slots copy on different engines at once, the
/// way to feed a PCIe link one engine cannot fill (the C plugin copies on
/// one). With the default ring of four slots, two copies run on each.
pub const SDMA_RINGS: u32 = 2;

/// What the transfers of one dump share: staging buffers, one turn per GPU
/// and a stop flag.
///
/// Staging buffers are kept from one GPU's transfer for the next within
/// one dumper process: a later task's copy engine registers memory that
/// is already faulted in instead of mapping, faulting and zeroing new
/// pages (a 32 MiB ring per GPU per task by default; on a GPU the userptr
/// registration pins, and so faults in, every page of it). Only buffers of
/// the exact length asked for are reused, so the staging memory stays what
/// [`Staging`](crate::options::Staging) allows; the pool never holds more buffers than were in use
/// at once, and frees them when dropped (with the dump). A reused buffer
/// still holds the bytes of an earlier copy: a copy engine only hands out
/// the bytes its last copy into a slot wrote.
///
/// The transfers of several tasks may run at once (the dumper finishes
/// them in the background, see [`crate::dump`]); each GPU's copy engine
/// serves one of them at a time ([`StagingPool::turn`]), so the staging
/// memory per GPU stays what [`Staging`](crate::options::Staging) (`KFD_MAX_BUFFER_SIZE`) allows
/// however many tasks use the GPU. A dump that failed elsewhere
/// [stops](StagingPool::stop) its transfers between two staging buffers.
#[derive(Debug, Default)]
pub struct StagingPool {
    free: Mutex<Vec<StagingBuffer>>,
    /// Render minors of the GPUs whose copy engine a transfer holds.
    busy: Mutex<std::collections::BTreeSet<u32>>,
    freed: std::sync::Condvar,
    stopped: std::sync::atomic::AtomicBool,
}

/// One transfer's turn on a GPU ([`StagingPool::turn`]), given back when
/// dropped.
#[derive(Debug)]
pub struct GpuTurn<'p> {
    pool: &'p StagingPool,
    minor: u32,
}

impl Drop for GpuTurn<'_> {
    fn drop(&mut self) {
        // A poisoned set (a panicking holder) still frees the GPU.
        let mut busy = self.pool.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.remove(&self.minor);
        drop(busy);
        self.pool.freed.notify_all();
    }
}

impl StagingPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A kept buffer of `len` bytes rounded up to whole pages, if any.
    pub(super) fn take(&self, len: usize) -> Option<StagingBuffer> {
        let page = kfd::staging::page_size();
        let want = len.checked_next_multiple_of(page)?;
        let mut free = self.free.lock().ok()?;
        let at = free.iter().position(|b| b.len() == want)?;
        Some(free.swap_remove(at))
    }

    /// Keeps `buffer` for a later transfer.
    pub(super) fn give(&self, buffer: StagingBuffer) {
        if let Ok(mut free) = self.free.lock() {
            free.push(buffer);
        }
    }

    /// Bytes of staging memory the pool holds.
    pub fn held_bytes(&self) -> usize {
        self.free
            .lock()
            .map_or(0, |f| f.iter().map(StagingBuffer::len).sum())
    }

    /// Waits until no other transfer holds the copy engine of the GPU with
    /// render minor `minor`, then holds it until the turn is dropped. A
    /// transfer holds one GPU at a time, so turns cannot deadlock.
    pub fn turn(&self, minor: u32) -> GpuTurn<'_> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while busy.contains(&minor) {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        busy.insert(minor);
        GpuTurn { pool: self, minor }
    }

    /// Stops every transfer using the pool before its next staging buffer
    /// (the dump failed elsewhere; nothing it writes would be kept).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn staging_pool_hands_back_only_buffers_of_the_length_asked_for() {
        let page = kfd::staging::page_size();
        let pool = StagingPool::new();
        assert!(pool.take(4 * page).is_none(), "an empty pool has nothing");
        pool.give(StagingBuffer::new(4 * page).unwrap());
        pool.give(StagingBuffer::new(2 * page).unwrap());
        assert_eq!(pool.held_bytes(), 6 * page);
        assert!(pool.take(3 * page).is_none(), "no buffer of 3 pages");
        // A length inside the last page rounds up to it, as a new buffer would.
        let kept = pool.take(4 * page - 100).expect("the 4-page buffer");
        assert_eq!(kept.len(), 4 * page);
        assert_eq!(pool.held_bytes(), 2 * page);
        assert_eq!(pool.take(2 * page).map(|b| b.len()), Some(2 * page));
        assert_eq!(pool.held_bytes(), 0);
        assert!(pool.take(4 * page).is_none(), "taken buffers are gone");
    }

    #[test]
    fn a_gpu_serves_one_transfer_at_a_time_and_other_gpus_meanwhile() {
        use std::sync::mpsc;
        use std::time::Duration;
        let pool = Arc::new(StagingPool::new());
        let held = pool.turn(128);
        // Another GPU's turn is free while 128 is held (same thread: a
        // wrong implementation blocks here and the test times out).
        drop(pool.turn(129));
        let (tx, rx) = mpsc::channel();
        let other = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                let _turn = pool.turn(128);
                tx.send(()).unwrap();
            })
        };
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "a second transfer got GPU 128 while the first held it"
        );
        drop(held);
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the waiting transfer gets GPU 128 once it is given back");
        other.join().unwrap();
        assert!(!pool.stopped());
        pool.stop();
        assert!(pool.stopped());
    }
}
