//! One user-mode queue's engine as the kernel half and the packet sets see
//! it: its configuration ([`Config`]), the control side the kernel half
//! holds ([`QueueHw`]: run, park at a packet boundary handing back the
//! registers for the MQD, stop), and what a packet executor works with
//! ([`Engine`], [`Step`]). The thread that consumes the ring is
//! `super::runner`; the packet sets are `super::sdma`, `super::pm4` and
//! `super::aql`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::hw::sdma::{CopyUnit, SdmaRules, VmFault, VmView};
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
    /// `gfx_target_version` of the GPU, and the instruction set its
    /// shaders run when the interpreter has it.
    pub(crate) gfx_target_version: u32,
    pub(crate) target: Option<gfx9_isa::Target>,
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
pub(super) enum Phase {
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
pub(super) struct Control {
    pub(super) want: Want,
    pub(super) phase: Phase,
    /// The registers as of the last packet boundary; `None` until the
    /// engine first loaded registers from an MQD.
    pub(super) published: Option<Regs>,
    /// Registers to load at the next run.
    pub(super) load: Option<Regs>,
}

impl Control {
    /// The queue's registers as the engine holds them: those it was told
    /// to load and has not taken up yet, else its own; `None` when it
    /// never held any (the MQD is the queue's state).
    pub(super) fn registers(&self) -> Option<Regs> {
        self.load.clone().or_else(|| self.published.clone())
    }
}

/// The kernel half's handle on one queue's engine.
#[derive(Debug)]
pub(crate) struct QueueHw {
    pub(crate) cfg: Config,
    pub(super) doorbell: DoorbellMap,
    /// The doorbell value the engine last acted on.
    pub(super) seen: AtomicU64,
    /// The doorbell value the watcher last woke the engine for: a queue
    /// that does not take a rung value up (parked, hung) is woken once per
    /// value, not at every scan.
    pub(super) noticed: AtomicU64,
    /// How often the engine was woken (a doorbell, or a request).
    pub(super) wakes: AtomicU64,
    pub(super) control: Mutex<Control>,
    pub(super) cv: Condvar,
}

/// Idle engines sleep at most this long between looks at their doorbell
/// (the watcher wakes them sooner).
pub(super) const IDLE_SLEEP: Duration = Duration::from_millis(200);
/// First and longest pause of a packet waiting on memory.
pub(super) const POLL_MIN: Duration = Duration::from_micros(20);
pub(super) const POLL_MAX: Duration = Duration::from_millis(2);

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
    pub(super) fn latch_doorbell(&self, regs: &mut Regs) {
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

    pub(super) fn publish(&self, regs: &Regs, phase: Phase) -> MutexGuard<'_, Control> {
        let mut c = lock(&self.control);
        c.published = Some(regs.clone());
        if !matches!(c.phase, Phase::Parked | Phase::Stopped) {
            c.phase = phase;
        }
        c
    }

    /// Sleeps up to `pause` unless a request or a doorbell is pending.
    pub(super) fn pause(&self, c: MutexGuard<'_, Control>, pause: Duration) {
        if c.want == Want::Run && !self.doorbell_moved() {
            let _ = self.cv.wait_timeout(c, pause);
        }
    }

    /// Sleeps up to `pause` unless a request is pending: a hung engine
    /// executes nothing whatever its doorbell holds, so a rung doorbell
    /// does not keep it awake (it would loop at once, for as long as the
    /// queue stays hung).
    pub(super) fn sleep_hung(&self, c: MutexGuard<'_, Control>, pause: Duration) {
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
    /// The packet ran for a while and goes on at the next step (a kernel
    /// dispatch between two slices of its waves' instructions).
    Yield,
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
    /// The kernel dispatch the queue is inside of.
    pub(crate) shader: &'a mut Option<super::shader::InFlight>,
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

/// Ring bytes the engine fetched ahead of its read pointer, as a CP or
/// SDMA engine fetches ahead: one read of the committed part of the ring
/// (up to the latched write pointer, which the producer wrote before
/// moving it) serves the packets in it, instead of a read of the header
/// and another of the packet each. Emptied whenever the queue's registers
/// are loaded or its view of the VM changes.
#[derive(Debug, Default)]
pub(crate) struct RingWindow {
    /// Pointer units of the first byte held.
    pub(super) start: u64,
    pub(super) bytes: Vec<u8>,
}

/// The most ring bytes fetched ahead at once.
pub(super) const READ_AHEAD: u64 = 64 << 10;
