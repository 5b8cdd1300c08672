//! The SDMA execution engine: one worker thread per ring that runs jobs in
//! submission order, decodes their IBs, performs copies through the job's
//! [`VmView`] at the configured bandwidth, records VM faults and signals
//! [`Fence`]s.
//!
//! This module never validates ioctl arguments (the DRM module does so
//! before a job exists) and never touches memory a job's VM does not map.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::copy::{CopyUnit, EnginePort, EngineShared, FaultTrack};
use super::memory::{Access, Landing};
use super::pace::EngineClock;
use super::{decode_packet, Malformed, Packet, SdmaRules, VmView, IB_ADDRESS_ALIGNMENT};

/// Why a job failed; what `WAIT_CS` returns for its fence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum JobError {
    /// A packet the engine cannot execute (the job "hung").
    #[error("malformed sdma packet: {0}")]
    Malformed(#[from] Malformed),
    /// An access outside every mapping (or against the PTE permissions).
    #[error("gpu vm fault at {va:#x} ({access})")]
    VmFault {
        /// The first faulting VA of the job.
        va: u64,
        /// "read" or "write".
        access: &'static str,
    },
    /// An injected short DMA: the copy stopped early.
    #[error("injected short dma: the copy stopped after {moved:#x} bytes")]
    ShortDma {
        /// Bytes the faulted packet moved.
        moved: u64,
        /// The errno the fence reports.
        errno: i32,
    },
    /// The ring's worker thread is gone.
    #[error("sdma ring worker is gone")]
    RingLost,
}

impl JobError {
    /// The (positive) errno `WAIT_CS` returns for this failure.
    pub(crate) fn errno(&self) -> i32 {
        match self {
            JobError::Malformed(_) => libc::ETIME,
            JobError::VmFault { .. } | JobError::RingLost => libc::ECANCELED,
            JobError::ShortDma { errno, .. } => *errno,
        }
    }

    /// Whether the job hung the engine, which makes its context guilty.
    pub(crate) fn is_hang(&self) -> bool {
        matches!(self, JobError::Malformed(_))
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The completion of one job: pending until the ring signals it.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    state: Mutex<Option<Result<(), JobError>>>,
    signaled: Condvar,
}

/// How long `Fence::wait` may block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// Do not block (a timeout already in the past).
    Poll,
    /// Block until this instant.
    At(Instant),
    /// Block until signaled (`WAIT_CS` timeout with the top bit set).
    Infinite,
}

impl Deadline {
    /// The deadline of an absolute CLOCK_MONOTONIC timeout in ns as
    /// `WAIT_CS` takes it (`amdgpu_gem_timeout`).
    pub(crate) fn from_monotonic_ns(timeout_ns: u64) -> Self {
        if (timeout_ns as i64) < 0 {
            return Deadline::Infinite;
        }
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid, writable timespec; CLOCK_MONOTONIC always
        // exists on Linux.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        if rc != 0 {
            return Deadline::Poll;
        }
        let now_ns = (now.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec as u64);
        match timeout_ns.checked_sub(now_ns) {
            Some(left) if left > 0 => Deadline::At(Instant::now() + Duration::from_nanos(left)),
            _ => Deadline::Poll,
        }
    }
}

impl Fence {
    /// A new, unsignaled fence.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Fence::default())
    }

    /// Signal the fence with the job's outcome (first signal wins).
    pub(crate) fn signal(&self, outcome: Result<(), JobError>) {
        let mut state = lock(&self.state);
        if state.is_none() {
            *state = Some(outcome);
            self.signaled.notify_all();
        }
    }

    /// The outcome if signaled.
    pub(crate) fn outcome(&self) -> Option<Result<(), JobError>> {
        lock(&self.state).clone()
    }

    /// Wait until signaled or `deadline`; `None` when still busy.
    pub(crate) fn wait(&self, deadline: Deadline) -> Option<Result<(), JobError>> {
        let mut state = lock(&self.state);
        loop {
            if let Some(outcome) = state.as_ref() {
                return Some(outcome.clone());
            }
            state = match deadline {
                Deadline::Poll => return None,
                Deadline::Infinite => self
                    .signaled
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Deadline::At(at) => {
                    let left = at.checked_duration_since(Instant::now())?;
                    self.signaled
                        .wait_timeout(state, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}

/// One IB of a job: `bytes` bytes of packets at GPU VA `va`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ib {
    /// GPU VA of the first dword.
    pub(crate) va: u64,
    /// Size in bytes (the kernel uses `bytes / 4` dwords).
    pub(crate) bytes: u32,
}

/// An injected "short DMA": the job's first copy moves only half its bytes,
/// then the job stops and its fence reports `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShortDma {
    /// The errno the fence reports.
    pub(crate) errno: i32,
}

/// Called with a job's outcome before its fence signals.
pub(crate) type Completion = Box<dyn FnOnce(&Result<(), JobError>) + Send>;

/// One submission to a ring.
pub(crate) struct Job {
    /// The IBs, run in order.
    pub(crate) ibs: Vec<Ib>,
    /// The submitting file's VM at submission time.
    pub(crate) vm: Arc<VmView>,
    /// Signaled when the job is done.
    pub(crate) fence: Arc<Fence>,
    /// An injected short DMA, if any.
    pub(crate) short_dma: Option<ShortDma>,
    /// Fences that must signal before the job runs (CS dependencies).
    pub(crate) dependencies: Vec<Arc<Fence>>,
    /// Runs with the outcome before the fence signals (guilty context, GPU
    /// reset counter, user fence write).
    pub(crate) on_done: Option<Completion>,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("ibs", &self.ibs)
            .field("short_dma", &self.short_dma)
            .field("dependencies", &self.dependencies.len())
            .finish_non_exhaustive()
    }
}

/// A GPU VM fault caused by an SDMA access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmFault {
    /// The first VA of the faulting access.
    pub va: u64,
    /// Whether the access was a write (dropped).
    pub write: bool,
}

/// The VM faults one GPU's SDMA engines raised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmFaultLog {
    /// Number of faulting accesses (each contiguous unmapped run counts once).
    pub count: u64,
    /// The first fault.
    pub first: Option<VmFault>,
    /// The most recent fault.
    pub last: Option<VmFault>,
}

/// What a GPU's SDMA engines did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SdmaStats {
    /// Jobs completed (successfully or not).
    pub jobs: u64,
    /// Jobs whose fence reported an error.
    pub failed_jobs: u64,
    /// Bytes written by LINEAR COPY packets.
    pub bytes_copied: u64,
    /// VM faults.
    pub faults: VmFaultLog,
}

/// Executes jobs for one ring (runs on the ring's worker thread).
struct Executor {
    rules: SdmaRules,
    unit: CopyUnit,
}

impl Executor {
    fn run(&mut self, job: &Job) -> Result<(), JobError> {
        let mut faults = FaultTrack::default();
        let mut short = job.short_dma;
        for ib in &job.ibs {
            if ib.va % IB_ADDRESS_ALIGNMENT != 0 {
                return Err(Malformed::MisalignedIb { va: ib.va }.into());
            }
            let dwords = self.fetch_ib(&job.vm, *ib)?;
            let mut at = 0;
            while at < dwords.len() {
                let (packet, used) = decode_packet(&dwords, at, self.rules)?;
                if let Packet::LinearCopy { src, dst, bytes } = packet {
                    if let Some(inject) = short.take() {
                        let moved = bytes / 2;
                        self.unit.copy(&job.vm, src, dst, moved, &mut faults);
                        return Err(JobError::ShortDma {
                            moved,
                            errno: inject.errno,
                        });
                    }
                    self.unit.copy(&job.vm, src, dst, bytes, &mut faults);
                }
                at += used;
            }
        }
        match faults.first {
            Some(fault) => Err(JobError::VmFault {
                va: fault.va,
                access: if fault.write { "write" } else { "read" },
            }),
            None => Ok(()),
        }
    }

    /// Read an IB through the VM; a fetch fault fails the job.
    fn fetch_ib(&self, vm: &VmView, ib: Ib) -> Result<Vec<u32>, JobError> {
        let len = u64::from(ib.bytes / 4) * 4;
        let mut bytes = vec![0u8; len as usize];
        let mut done = 0u64;
        while done < len {
            let va = ib.va.wrapping_add(done);
            let (landing, piece) = vm.resolve(va, len - done, Access::Read);
            let buf = &mut bytes[done as usize..(done + piece) as usize];
            let fetched = match landing {
                Landing::Memory(memory, offset) => memory.read_at(offset, buf).is_ok(),
                Landing::Prt => true,
                Landing::Fault => false,
            };
            if !fetched {
                self.unit
                    .shared()
                    .record_fault(VmFault { va, write: false });
                return Err(JobError::VmFault { va, access: "read" });
            }
            done += piece;
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|d| u32::from_le_bytes([d[0], d[1], d[2], d[3]]))
            .collect())
    }
}

/// A ring's worker: started on first submission.
#[derive(Debug)]
struct RingWorker {
    tx: mpsc::Sender<Job>,
    thread: JoinHandle<()>,
}

/// The SDMA engines of one GPU: one worker per ring.
#[derive(Debug)]
pub(crate) struct SdmaEngine {
    name: String,
    rules: SdmaRules,
    rings: Vec<Mutex<Option<RingWorker>>>,
    /// One schedule per engine (ring), shared with the user-mode queues
    /// KFD places on that engine.
    clocks: Vec<Arc<EngineClock>>,
    shared: Arc<EngineShared>,
}

impl SdmaEngine {
    /// The engines of GPU `name` (used for thread names) with `rings` rings.
    pub(crate) fn new(name: impl Into<String>, rings: u32, rules: SdmaRules) -> Self {
        SdmaEngine {
            name: name.into(),
            rules,
            rings: (0..rings).map(|_| Mutex::new(None)).collect(),
            clocks: (0..rings.max(1)).map(|_| Arc::default()).collect(),
            shared: Arc::new(EngineShared::default()),
        }
    }

    /// Number of rings.
    pub(crate) fn ring_count(&self) -> u32 {
        self.rings.len() as u32
    }

    /// Engine `engine` (modulo the engine count) as a copier sees it.
    pub(crate) fn port(&self, engine: u32) -> EnginePort {
        let clocks = self.clocks.len().max(1);
        EnginePort {
            shared: Arc::clone(&self.shared),
            clock: Arc::clone(&self.clocks[engine as usize % clocks]),
        }
    }

    /// Per-ring bandwidth in bytes/s (`None` = unlimited, the default).
    pub(crate) fn set_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.shared
            .bandwidth
            .store(bytes_per_second.unwrap_or(0), Ordering::Relaxed);
    }

    /// Bandwidth in bytes/s of all rings together (`None` = unlimited, the
    /// default); a per-ring limit applies as well.
    pub(crate) fn set_gpu_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.shared.gpu_clock.reset();
        self.shared
            .gpu_bandwidth
            .store(bytes_per_second.unwrap_or(0), Ordering::Relaxed);
    }

    /// What the engines did so far.
    pub(crate) fn stats(&self) -> SdmaStats {
        lock(&self.shared.stats).clone()
    }

    /// Queue `job` on `ring`. An out-of-range ring or a dead worker signals
    /// the job's fence with an error instead (the DRM layer checks the ring
    /// before building a job).
    pub(crate) fn submit(&self, ring: u32, job: Job) {
        let Some(slot) = self.rings.get(ring as usize) else {
            job.fence.signal(Err(JobError::RingLost));
            return;
        };
        let mut slot = lock(slot);
        if slot.is_none() {
            match self.spawn(ring) {
                Ok(worker) => *slot = Some(worker),
                Err(_) => {
                    job.fence.signal(Err(JobError::RingLost));
                    return;
                }
            }
        }
        let Some(worker) = slot.as_ref() else {
            job.fence.signal(Err(JobError::RingLost));
            return;
        };
        if let Err(mpsc::SendError(job)) = worker.tx.send(job) {
            job.fence.signal(Err(JobError::RingLost));
        }
    }

    /// This process is the child of a `fork(2)`: the ring workers were the
    /// parent's threads and do not exist here. Their handles are forgotten
    /// (joining a thread that is not there would never return, and the
    /// channel has no reader), so the next submission starts a worker of
    /// this process. A ring whose slot a parent thread held at the fork
    /// stays locked; nothing can release it in the child.
    pub(crate) fn forget_workers_after_fork(&self) {
        for slot in &self.rings {
            if let Ok(mut slot) = slot.try_lock() {
                if let Some(worker) = slot.take() {
                    std::mem::forget(worker);
                }
            }
        }
    }

    /// Holds the locks the engine's threads take (the engines' and the
    /// GPU's schedules, the statistics) until `held` is dropped (see
    /// [`crate::Sim::hold_for_fork`]).
    pub(crate) fn hold_for_fork<'a>(&'a self, held: &mut Vec<Box<dyn crate::hw::Held + 'a>>) {
        for clock in &self.clocks {
            held.push(Box::new(clock.hold()));
        }
        held.push(Box::new(self.shared.gpu_clock.hold()));
        held.push(Box::new(lock(&self.shared.stats)));
    }

    fn spawn(&self, ring: u32) -> std::io::Result<RingWorker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let port = self.port(ring);
        let shared = Arc::clone(&self.shared);
        let rules = self.rules;
        let thread = std::thread::Builder::new()
            .name(format!("sdma-{}-ring{ring}", self.name))
            .spawn(move || {
                let mut exec = Executor {
                    rules,
                    unit: CopyUnit::new(port),
                };
                while let Ok(mut job) = rx.recv() {
                    for dependency in &job.dependencies {
                        dependency.wait(Deadline::Infinite);
                    }
                    // A bug in the executor must not leave the fence pending
                    // forever (WAIT_CS would hang): it fails the job instead.
                    let outcome =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| exec.run(&job)))
                            .unwrap_or(Err(JobError::RingLost));
                    if let Some(on_done) = job.on_done.take() {
                        on_done(&outcome);
                    }
                    {
                        let mut stats = lock(&shared.stats);
                        stats.jobs += 1;
                        if outcome.is_err() {
                            stats.failed_jobs += 1;
                        }
                    }
                    job.fence.signal(outcome);
                }
            })?;
        Ok(RingWorker { tx, thread })
    }
}

impl Drop for SdmaEngine {
    fn drop(&mut self) {
        // Finish queued jobs quickly, then let the workers see the channel close.
        self.set_bandwidth(None);
        self.set_gpu_bandwidth(None);
        for slot in &self.rings {
            if let Some(worker) = lock(slot).take() {
                drop(worker.tx);
                // A worker that panicked already signaled nothing more; its
                // fences were dropped with the channel.
                let _ = worker.thread.join();
            }
        }
    }
}
