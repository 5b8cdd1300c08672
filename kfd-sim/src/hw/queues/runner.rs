//! One user-mode queue's engine: a thread that consumes the queue's ring
//! the way the hardware does, from the read pointer to the write pointer
//! the doorbell last announced, one packet at a time, writing the read
//! pointer back after each, and that stops at a packet boundary when the
//! kernel preempts the queue.
//!
//! The control side ([`QueueHw`]) is what the kernel half holds: it asks
//! the engine to run, to park (preemption: the engine finishes the packet
//! it is in, then hands back its registers for the MQD) or to stop
//! (destruction), and loads saved registers before a run. An engine that
//! never loaded registers from an MQD has none to hand back: the MQD
//! (fresh, or what a restore put there) stays the queue's state. The
//! engine never waits for the simulator's lock: it builds its VM snapshot
//! with `try_lock` and reports interrupts through the interrupt ring, so a
//! kernel path may hold the lock while it waits for a preemption.
//!
//! This module never decodes a packet (the `sdma`, `pm4` and `aql` modules
//! do) and never changes kernel state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hw::sdma::{CopyUnit, EnginePort, SdmaRules, VmFault, VmView};
use crate::kernel::{FileKey, Pid, Shared};

use super::doorbell::DoorbellMap;
use super::interrupt::Interrupt;
use super::ring::{Format, Geometry, Hang, Regs};
use super::{lock, QueueState, QueueStatus};

/// What a queue is, for its engine: fixed while the engine runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) pid: Pid,
    pub(crate) q_id: u32,
    /// GPU index.
    pub(crate) gpu: usize,
    /// The user gpu_id of the queue's device (what interrupts report).
    pub(crate) user_gpu_id: u32,
    pub(crate) geometry: Geometry,
    /// SDMA rules and the engine the queue sits on.
    pub(crate) sdma: Option<(SdmaRules, u32)>,
    /// `AMDGPU_FAMILY_*` of the GPU.
    pub(crate) family: u32,
    /// The render file whose VM is the process's compute VM on this GPU.
    pub(crate) drm_file: FileKey,
    /// The doorbell page and the slot's offset and width in it.
    pub(crate) doorbell_page: FileKey,
    pub(crate) doorbell_slot: u64,
    pub(crate) doorbell_width: usize,
}

/// What the kernel half asks of an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Run,
    Park,
    Stop,
}

/// Where the engine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// At a packet boundary, registers handed back.
    Parked,
    /// Running: nothing to do.
    Idle,
    /// Running: executing packets.
    Busy,
    /// Running: a packet waits on memory (a poll, a barrier, a header).
    Waiting,
    /// Stopped on an error.
    Hung,
    /// The thread ended.
    Stopped,
}

#[derive(Debug)]
struct Control {
    want: Want,
    phase: Phase,
    /// The registers as of the last packet boundary; `None` until the
    /// engine first loaded registers from an MQD.
    published: Option<Regs>,
    /// Registers to load at the next run.
    load: Option<Regs>,
}

impl Control {
    /// The queue's registers as the engine holds them: those it was told
    /// to load and has not taken up yet, else its own; `None` when it
    /// never held any (the MQD is the queue's state).
    fn registers(&self) -> Option<Regs> {
        self.load.clone().or_else(|| self.published.clone())
    }
}

/// The kernel half's handle on one queue's engine.
#[derive(Debug)]
pub(crate) struct QueueHw {
    pub(crate) cfg: Config,
    doorbell: DoorbellMap,
    /// The doorbell value the engine last acted on.
    seen: AtomicU64,
    /// The doorbell value the watcher last woke the engine for: a queue
    /// that does not take a rung value up (parked, hung) is woken once per
    /// value, not at every scan.
    noticed: AtomicU64,
    /// How often the engine was woken (a doorbell, or a request).
    wakes: AtomicU64,
    control: Mutex<Control>,
    cv: Condvar,
}

/// Idle engines sleep at most this long between looks at their doorbell
/// (the watcher wakes them sooner).
const IDLE_SLEEP: Duration = Duration::from_millis(200);
/// First and longest pause of a packet waiting on memory.
const POLL_MIN: Duration = Duration::from_micros(20);
const POLL_MAX: Duration = Duration::from_millis(2);

impl QueueHw {
    /// A parked engine for `cfg` ringing at `doorbell`.
    pub(crate) fn new(cfg: Config, doorbell: DoorbellMap) -> Arc<QueueHw> {
        let bell = doorbell.read();
        Arc::new(QueueHw {
            cfg,
            doorbell,
            seen: AtomicU64::new(bell),
            noticed: AtomicU64::new(bell),
            wakes: AtomicU64::new(0),
            control: Mutex::new(Control {
                want: Want::Park,
                phase: Phase::Parked,
                published: None,
                load: None,
            }),
            cv: Condvar::new(),
        })
    }

    /// Takes a doorbell value the engine has not acted on as the write
    /// pointer of `regs` (SDMA and PM4 rings, whose doorbell carries it;
    /// an AQL queue's write index is in memory, read at its load).
    fn latch_doorbell(&self, regs: &mut Regs) {
        let g = self.cfg.geometry;
        let bell = self.doorbell.read();
        if g.format == Format::Aql || bell == self.seen.load(Ordering::Acquire) {
            return;
        }
        if let Ok(wptr) = g.wptr_from(bell, regs.rptr) {
            self.seen.store(bell, Ordering::Release);
            regs.wptr = regs.wptr.max(wptr);
        }
    }

    /// Whether the doorbell holds a value the engine has not acted on.
    pub(crate) fn doorbell_moved(&self) -> bool {
        self.doorbell.read() != self.seen.load(Ordering::Acquire)
    }

    /// Whether the doorbell holds a value the engine has not acted on and
    /// the watcher has not yet woken it for; the value counts as noticed.
    pub(crate) fn rung_anew(&self) -> bool {
        let bell = self.doorbell.read();
        bell != self.seen.load(Ordering::Acquire)
            && self.noticed.swap(bell, Ordering::AcqRel) != bell
    }

    /// Wakes the engine (a doorbell moved, or a request is waiting).
    pub(crate) fn wake(&self) {
        let _c = lock(&self.control);
        self.wakes.fetch_add(1, Ordering::Relaxed);
        self.cv.notify_all();
    }

    /// Asks the engine to run from `regs` (when parked).
    pub(crate) fn run_from(&self, regs: Regs) {
        let mut c = lock(&self.control);
        if c.phase == Phase::Parked {
            c.load = Some(regs);
        }
        c.want = Want::Run;
        self.cv.notify_all();
    }

    /// Asks the engine to park or stop and waits up to `timeout` for it
    /// to reach a packet boundary. Returns the registers there (else the
    /// last published ones; `None`: the engine never held any, so the MQD
    /// stays as it is), and whether it got there in time.
    pub(crate) fn halt(&self, want: Want, timeout: Duration) -> (Option<Regs>, bool) {
        let deadline = Instant::now() + timeout;
        let mut c = lock(&self.control);
        c.want = want;
        self.cv.notify_all();
        loop {
            let done = match want {
                Want::Stop => c.phase == Phase::Stopped,
                _ => matches!(c.phase, Phase::Parked | Phase::Stopped),
            };
            if done {
                if let Some(load) = c.load.as_mut() {
                    // Told to run but not yet taken up: a doorbell rung in
                    // between is work the queue holds all the same.
                    self.latch_doorbell(load);
                }
                return (c.registers(), true);
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return (c.registers(), false);
            };
            c = self
                .cv
                .wait_timeout(c, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Takes back a park request (a preemption that missed its deadline):
    /// the engine runs on from its own registers, whether it is still in
    /// its packet or parked since (nobody took the registers it handed
    /// back there, so it keeps them).
    pub(crate) fn run_on(&self) {
        let mut c = lock(&self.control);
        if c.want == Want::Park {
            c.want = Want::Run;
            self.cv.notify_all();
        }
    }

    /// Whether the engine is parked (or gone) and was not asked to run: a
    /// queue told to run that its thread has not taken up yet is running
    /// as far as a preemption is concerned (else it would start after it).
    pub(crate) fn parked(&self) -> bool {
        let c = lock(&self.control);
        matches!(c.phase, Phase::Parked | Phase::Stopped) && c.want != Want::Run
    }

    /// What the queue is doing.
    pub(crate) fn status(&self) -> QueueStatus {
        let c = lock(&self.control);
        let none = Regs::default();
        let regs = c.load.as_ref().or(c.published.as_ref()).unwrap_or(&none);
        let state = match (&regs.hang, c.phase) {
            (Some(h), _) => QueueState::Hung(h.reason.clone()),
            (None, Phase::Parked | Phase::Stopped) => QueueState::Preempted,
            (None, Phase::Idle) => QueueState::Idle,
            (None, Phase::Busy) => QueueState::Busy,
            (None, Phase::Waiting) => QueueState::Waiting,
            (None, Phase::Hung) => QueueState::Hung(String::new()),
        };
        QueueStatus {
            state,
            read_pointer: regs.rptr,
            write_pointer: regs.wptr,
            packets: regs.packets,
            doorbell_pending: self.doorbell_moved(),
        }
    }

    fn publish(&self, regs: &Regs, phase: Phase) -> MutexGuard<'_, Control> {
        let mut c = lock(&self.control);
        c.published = Some(regs.clone());
        if !matches!(c.phase, Phase::Parked | Phase::Stopped) {
            c.phase = phase;
        }
        c
    }

    /// Sleeps up to `pause` unless a request or a doorbell is pending.
    fn pause(&self, c: MutexGuard<'_, Control>, pause: Duration) {
        if c.want == Want::Run && !self.doorbell_moved() {
            let _ = self.cv.wait_timeout(c, pause);
        }
    }

    /// Sleeps up to `pause` unless a request is pending: a hung engine
    /// executes nothing whatever its doorbell holds, so a rung doorbell
    /// does not keep it awake (it would loop at once, for as long as the
    /// queue stays hung).
    fn sleep_hung(&self, c: MutexGuard<'_, Control>, pause: Duration) {
        if c.want == Want::Run {
            let _ = self.cv.wait_timeout(c, pause);
        }
    }
}

/// What executing one packet came to.
#[derive(Debug)]
pub(crate) enum Step {
    /// A packet completed (the read pointer moved, or an IB advanced).
    Progress,
    /// The packet at the read pointer waits on memory.
    Wait,
    /// Nothing executable yet (a partly written packet, an INVALID header).
    Idle,
    /// An access outside the VM: the packet, named.
    Fault(VmFault, String),
    /// The packet cannot be executed.
    Hang(Hang),
}

/// What a packet executor works with.
pub(crate) struct Engine<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) view: &'a VmView,
    pub(crate) regs: &'a mut Regs,
    pub(crate) copier: Option<&'a mut CopyUnit>,
    pub(crate) shared: &'a Shared,
    /// Persistent shader registers a PM4 queue set (for a dispatch's report).
    pub(crate) sh: &'a mut [u32; 2],
    /// Interrupts the packet raised, delivered once its read pointer is
    /// reported (see [`Engine::interrupt`]).
    pub(crate) irqs: Vec<Interrupt>,
    /// What the engine fetched of its ring ([`Engine::ring_read`]).
    pub(crate) window: &'a mut RingWindow,
}

impl Engine<'_> {
    /// Reads `len` bytes of the ring `units` pointer units from its start,
    /// through the fetched-ahead window when they lie in it.
    pub(crate) fn ring_read(&mut self, units: u64, len: usize) -> Result<Vec<u8>, VmFault> {
        let g = self.cfg.geometry;
        let unit = g.format.unit();
        if let Some(off) = units.checked_sub(self.window.start) {
            let off = off.saturating_mul(unit);
            if off.saturating_add(len as u64) <= self.window.bytes.len() as u64 {
                let off = off as usize;
                return Ok(self.window.bytes[off..off + len].to_vec());
            }
        }
        let committed = self
            .regs
            .wptr
            .saturating_sub(units)
            .saturating_mul(unit)
            .min(g.bytes)
            .min(READ_AHEAD);
        if (len as u64) > committed {
            // Past what the producer committed: read it as it is now, and
            // keep none of it.
            return g.read(self.view, units, len);
        }
        match g.read(self.view, units, committed as usize) {
            Ok(bytes) => {
                self.window.start = units;
                self.window.bytes = bytes;
                Ok(self.window.bytes[..len].to_vec())
            }
            // The fault may lie past the bytes asked for.
            Err(_) => g.read(self.view, units, len),
        }
    }

    /// Raises an interrupt of the queue's process once the packet is done
    /// and the queue's read pointer reported past it: the CP fetches ahead
    /// of what it executes, so when an end-of-pipe interrupt reaches the
    /// kernel the read pointer already covers its packet, and a runtime
    /// woken by the event sees the ring space the packet freed (kfdtest's
    /// `QueueLatency` places a ring's worth of packets after such a wait).
    pub(crate) fn interrupt(&mut self, irq: Interrupt) {
        self.irqs.push(irq);
    }

    /// Records an executed packet in the trace (when tracing).
    pub(crate) fn trace(&self, name: &str, at: u64, dwords: &[u32]) {
        self.shared.exec.trace.record(self.cfg, name, at, dwords);
    }

    /// A stop at the read pointer for `reason`.
    pub(crate) fn hang(&self, header: u32, reason: String) -> Step {
        Step::Hang(Hang {
            header,
            at: self.regs.rptr,
            reason,
        })
    }
}

/// Starts the engine thread of `hw`.
pub(crate) fn spawn(
    hw: &Arc<QueueHw>,
    shared: Weak<Shared>,
    port: Option<EnginePort>,
) -> std::io::Result<JoinHandle<()>> {
    let hw = Arc::clone(hw);
    std::thread::Builder::new()
        .name(format!("kfd-sim-q{}-{}", hw.cfg.pid.0, hw.cfg.q_id))
        .spawn(move || {
            let mut thread = Thread {
                hw: &hw,
                shared,
                regs: Regs::default(),
                loaded: false,
                copier: port.map(CopyUnit::new),
                view: None,
                sh: [0; 2],
                window: RingWindow::default(),
            };
            // A bug in an executor must not leave the kernel half waiting
            // for a preemption that never comes: the queue hangs instead.
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| thread.run()));
            let mut c = lock(&hw.control);
            // Only registers the engine loaded are the queue's: an engine
            // stopped before it ran leaves the MQD's (and a load it never
            // took up) as they are.
            if thread.loaded {
                let mut regs = thread.regs.clone();
                if ended.is_err() {
                    regs.hang = Some(Hang {
                        header: 0,
                        at: regs.rptr,
                        reason: "the simulated engine failed".to_owned(),
                    });
                }
                c.published = Some(regs);
                c.load = None;
            }
            c.phase = Phase::Stopped;
            hw.cv.notify_all();
        })
}

struct Thread<'a> {
    hw: &'a QueueHw,
    shared: Weak<Shared>,
    regs: Regs,
    /// Whether `regs` were loaded from an MQD (else they are nobody's).
    loaded: bool,
    copier: Option<CopyUnit>,
    view: Option<Arc<VmView>>,
    sh: [u32; 2],
    window: RingWindow,
}

/// Ring bytes the engine fetched ahead of its read pointer, as a CP or
/// SDMA engine fetches ahead: one read of the committed part of the ring
/// (up to the latched write pointer, which the producer wrote before
/// moving it) serves the packets in it, instead of a read of the header
/// and another of the packet each. Emptied whenever the queue's registers
/// are loaded or its view of the VM changes.
#[derive(Debug, Default)]
pub(crate) struct RingWindow {
    /// Pointer units of the first byte held.
    start: u64,
    bytes: Vec<u8>,
}

/// The most ring bytes fetched ahead at once.
const READ_AHEAD: u64 = 64 << 10;

impl Thread<'_> {
    fn run(&mut self) {
        let mut idle = POLL_MIN;
        let mut poll = POLL_MIN;
        let mut retried_fault = false;
        loop {
            let load = match self.control() {
                None => return,
                Some(load) => load,
            };
            if self.regs.hang.is_some() {
                let c = self.hw.publish(&self.regs, Phase::Hung);
                self.hw.sleep_hung(c, IDLE_SLEEP);
                continue;
            }
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            if self.view.is_none() || load {
                self.window = RingWindow::default();
                match snapshot(&shared, &self.hw.cfg) {
                    Some(v) => self.view = Some(v),
                    None => {
                        drop(shared);
                        let c = lock(&self.hw.control);
                        self.hw.pause(c, POLL_MIN);
                        continue;
                    }
                }
            }
            let Some(view) = self.view.clone() else {
                continue;
            };
            let g = self.hw.cfg.geometry;
            if load {
                // The hardware's queue load: read pointer from the MQD, write
                // pointer from its memory (or empty when unreadable). The
                // doorbell is sampled first: a producer that stores the write
                // pointer and rings between the two reads leaves the doorbell
                // moved past what was sampled, so the ring is taken up below
                // instead of lost.
                self.hw
                    .seen
                    .store(self.hw.doorbell.read(), Ordering::Release);
                self.regs.wptr = g
                    .read_wptr_memory(&view)
                    .ok()
                    .and_then(|raw| g.wptr_from(raw, self.regs.rptr).ok())
                    .unwrap_or(self.regs.rptr);
                let _ = g.report_rptr(&view, self.regs.rptr);
            }
            if let Err(reason) = self.ring_doorbell(&shared, &view) {
                self.regs.hang = Some(Hang {
                    header: 0,
                    at: self.regs.rptr,
                    reason,
                });
                self.report_hang(&shared);
                continue;
            }
            if self.regs.rptr == self.regs.wptr && self.regs.ib.is_none() {
                // The machine may go with this reference: its engines stop
                // (this one too, through its control lock), so let go of it
                // before taking the lock.
                drop(shared);
                let c = self.hw.publish(&self.regs, Phase::Idle);
                self.hw.pause(c, idle);
                idle = (idle * 2).min(IDLE_SLEEP);
                continue;
            }
            idle = POLL_MIN;
            // Observers see the latched write pointer before the packet runs.
            drop(self.hw.publish(&self.regs, Phase::Busy));
            let (step, irqs) = {
                let mut engine = Engine {
                    cfg: &self.hw.cfg,
                    view: &view,
                    regs: &mut self.regs,
                    copier: self.copier.as_mut(),
                    shared: &shared,
                    sh: &mut self.sh,
                    irqs: Vec::new(),
                    window: &mut self.window,
                };
                let step = match g.format {
                    Format::Sdma => super::sdma::step(&mut engine),
                    Format::Pm4 => super::pm4::step(&mut engine),
                    Format::Aql => super::aql::step(&mut engine),
                };
                (step, engine.irqs)
            };
            if let Step::Progress = step {
                self.regs.packets += 1;
                let _ = g.report_rptr(&view, self.regs.rptr);
            }
            for irq in irqs {
                shared.exec.raise(self.hw.cfg.pid, irq);
            }
            match step {
                Step::Progress => {
                    retried_fault = false;
                    poll = POLL_MIN;
                }
                Step::Wait | Step::Idle => {
                    drop(shared);
                    let c = self.hw.publish(&self.regs, Phase::Waiting);
                    self.hw.pause(c, poll);
                    poll = (poll * 2).min(POLL_MAX);
                }
                Step::Fault(..) if !retried_fault => {
                    // The snapshot may predate a mapping: fault only on a
                    // fresh one.
                    retried_fault = true;
                    self.view = None;
                    self.window = RingWindow::default();
                }
                Step::Fault(fault, packet) => {
                    let access = if fault.write { "write" } else { "read" };
                    self.regs.hang = Some(Hang {
                        header: 0,
                        at: self.regs.rptr,
                        reason: format!("gpu vm fault at {:#x} ({access}) in {packet}", fault.va),
                    });
                    shared.exec.raise(
                        self.hw.cfg.pid,
                        Interrupt::VmFault {
                            gpu_id: self.hw.cfg.user_gpu_id,
                            fault,
                        },
                    );
                    self.report_hang(&shared);
                }
                Step::Hang(hang) => {
                    self.regs.hang = Some(hang);
                    self.report_hang(&shared);
                }
            }
        }
    }

    /// Applies the kernel half's requests. `None`: the engine must end;
    /// `Some(true)`: registers were (re)loaded and the engine must load
    /// its write pointer.
    fn control(&mut self) -> Option<bool> {
        let mut c = lock(&self.hw.control);
        let mut loaded = false;
        loop {
            match c.want {
                Want::Stop => return None,
                Want::Park => {
                    if c.phase != Phase::Parked {
                        // A doorbell rung before the preemption is work the
                        // queue holds: its write pointer goes into the MQD.
                        self.latch_doorbell();
                        c.published = Some(self.regs.clone());
                        c.load = None;
                        c.phase = Phase::Parked;
                        self.hw.cv.notify_all();
                    }
                    c = self
                        .hw
                        .cv
                        .wait_timeout(c, IDLE_SLEEP)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
                Want::Run => {
                    if c.phase == Phase::Parked {
                        if let Some(regs) = c.load.take() {
                            self.regs = regs;
                            self.loaded = true;
                        }
                        c.published = Some(self.regs.clone());
                        c.phase = Phase::Busy;
                        loaded = true;
                    }
                    return Some(loaded);
                }
            }
        }
    }

    /// Takes a doorbell value the engine has not acted on as its write
    /// pointer (SDMA and PM4 rings, whose doorbell carries it).
    fn latch_doorbell(&mut self) {
        self.hw.latch_doorbell(&mut self.regs);
    }

    /// Latches a new write pointer if the doorbell moved.
    fn ring_doorbell(&mut self, shared: &Shared, view: &VmView) -> Result<(), String> {
        let bell = self.hw.doorbell.read();
        if bell == self.hw.seen.swap(bell, Ordering::AcqRel) {
            return Ok(());
        }
        let g = self.hw.cfg.geometry;
        let raw = match g.format {
            // ROCr stores the AQL write index before ringing the packet's
            // index: the write pointer is the memory one.
            Format::Aql => match g.read_wptr_memory(view) {
                Ok(raw) => raw,
                Err(_) => return Ok(()),
            },
            _ => bell,
        };
        if raw < self.regs.rptr && (g.soc15 || g.format == Format::Aql) {
            // A stale or repeated value: nothing new.
            return Ok(());
        }
        let wptr = g.wptr_from(raw, self.regs.rptr)?;
        self.regs.wptr = self.regs.wptr.max(wptr);
        // New work may use memory mapped since the last snapshot.
        if let Some(v) = snapshot(shared, &self.hw.cfg) {
            self.view = Some(v);
            self.window = RingWindow::default();
        }
        Ok(())
    }

    fn report_hang(&self, shared: &Shared) {
        let cfg = &self.hw.cfg;
        if let Some(h) = &self.regs.hang {
            eprintln!(
                "kfd-sim: gpu {:#x}: {} queue {} of process {} stopped at read pointer {:#x}: {}",
                cfg.user_gpu_id,
                cfg.geometry.format.name(),
                cfg.q_id,
                cfg.pid,
                h.at,
                h.reason
            );
        }
        shared.exec.raise(
            cfg.pid,
            Interrupt::Hang {
                gpu_id: cfg.user_gpu_id,
            },
        );
        drop(self.hw.publish(&self.regs, Phase::Hung));
    }
}

/// The queue's compute VM as it is now, if the simulator's lock is free
/// (never waits for it) and the VM still exists.
fn snapshot(shared: &Shared, cfg: &Config) -> Option<Arc<VmView>> {
    let st = match shared.state.try_lock() {
        Ok(st) => st,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    (shared.exec.vm_view_of)(shared, &st, cfg.gpu, cfg.drm_file).map(Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::bo::Memfd;

    /// A parked SDMA engine on a doorbell page of its own (no machine: its
    /// thread, once told to run, finds none and ends).
    fn engine() -> (Arc<QueueHw>, Memfd) {
        let page = Memfd::new("kfd-sim-test-doorbells", 4096).unwrap();
        let cfg = Config {
            pid: Pid(1),
            q_id: 1,
            gpu: 0,
            user_gpu_id: 1,
            geometry: Geometry {
                format: Format::Sdma,
                base: 0x1000,
                bytes: 4096,
                rptr_addr: 0x2000,
                wptr_addr: 0x2008,
                soc15: true,
            },
            sdma: None,
            family: 0,
            drm_file: page.key(),
            doorbell_page: page.key(),
            doorbell_slot: 0,
            doorbell_width: 8,
        };
        let map = DoorbellMap::new(&page, 0, 8).unwrap();
        (QueueHw::new(cfg, map), page)
    }

    fn restored() -> Regs {
        Regs {
            rptr: 0x40,
            wptr: 0x80,
            packets: 3,
            ..Regs::default()
        }
    }

    #[test]
    fn an_engine_that_never_ran_has_no_registers_to_save() {
        let (hw, _page) = engine();
        let thread = spawn(&hw, Weak::new(), None).unwrap();
        assert_eq!(hw.halt(Want::Park, Duration::ZERO), (None, true));
        assert_eq!(hw.halt(Want::Stop, Duration::from_secs(10)), (None, true));
        thread.join().unwrap();
    }

    #[test]
    fn an_engine_stopped_before_it_took_up_its_load_hands_the_load_back() {
        let (hw, _page) = engine();
        hw.run_from(restored());
        // Stopped before its thread ever looked at the request.
        let (regs, _) = hw.halt(Want::Stop, Duration::ZERO);
        assert_eq!(regs, Some(restored()));
        let thread = spawn(&hw, Weak::new(), None).unwrap();
        assert_eq!(
            hw.halt(Want::Stop, Duration::from_secs(10)),
            (Some(restored()), true)
        );
        thread.join().unwrap();
    }

    /// Stores `value` into the engine's 64-bit doorbell slot, as the
    /// application does.
    fn ring(page: &Memfd, value: u64) {
        use std::os::unix::fs::FileExt;
        page.file().write_all_at(&value.to_le_bytes(), 0).unwrap();
    }

    /// Waits (bounded) until the engine was woken `n` times, then lets the
    /// watcher scan many more times and returns the count.
    fn wakes_after(hw: &QueueHw, n: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        while hw.wakes.load(Ordering::Relaxed) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The watcher scans every 500 us while a doorbell moved recently.
        std::thread::sleep(Duration::from_millis(100));
        hw.wakes.load(Ordering::Relaxed)
    }

    #[test]
    fn a_doorbell_rung_on_a_parked_queue_wakes_its_engine_once_per_value() {
        let (hw, page) = engine();
        let watcher = Arc::new(super::super::doorbell::Watcher::default());
        watcher.watch(&hw);
        assert!(!hw.rung_anew(), "nothing was rung");
        // Parked: nothing takes the value up, so the doorbell stays moved.
        ring(&page, 0x100);
        assert_eq!(wakes_after(&hw, 1), 1, "one value, one wake");
        assert!(hw.doorbell_moved(), "the parked engine took the value up");
        ring(&page, 0x180);
        assert_eq!(wakes_after(&hw, 2), 2, "a second value, a second wake");
        drop(watcher);
    }

    #[test]
    fn an_engine_that_loaded_hands_its_registers_back() {
        let (hw, _page) = engine();
        let thread = spawn(&hw, Weak::new(), None).unwrap();
        hw.run_from(restored());
        // The thread takes the load up, finds no machine and ends.
        thread.join().unwrap();
        assert_eq!(
            hw.halt(Want::Stop, Duration::from_secs(10)),
            (Some(restored()), true)
        );
    }
}
