//! The simulated GPU's engines for user-mode queues: every SDMA, PM4 and
//! AQL queue a process creates gets an engine that consumes its ring the
//! way the hardware does.
//!
//! * The ring, the read pointer the engine reports and the write pointer
//!   it loads live where the process put them (`kfd_ioctl_create_queue_args`
//!   addresses in its GPU VM); the engine reaches them, and every address
//!   a packet names, through a snapshot of the process's compute VM, so a
//!   remote client's memory is read with `process_vm_readv` and BOs are the
//!   simulator's memfds in either case.
//! * Doorbells are noticed without the application's help: the engine
//!   watches its slot of the process's doorbell page ([`doorbell`]).
//! * The kernel's queue scheduling (`crate::amdkfd::scheduling`) calls
//!   [`sync`] with what it wants of each queue ([`QueueSpec`]): after every change
//!   of a process's queues or eviction levels (CREATE/DESTROY/UPDATE_QUEUE,
//!   the CRIU ops, the kernel's own evictions, exit) each queue runs when
//!   its device's eviction level is 0 and it is active, and is otherwise
//!   preempted: its engine finishes the packet it is in (the wait is
//!   bounded by `queue_preemption_timeout_ms`, 9 s by default; a queue
//!   that misses it fails CRIU's PROCESS_INFO with `ETIME` and runs on
//!   ([`preempt`]), and is reset as hung on the other paths) and
//!   its registers (read
//!   pointer, latched write pointer, the IB position, a hang) go into the
//!   MQD, which CRIU's checkpoint carries. A queue made to run again, on
//!   this machine or restored on another, loads its read pointer from the
//!   MQD and its write pointer from memory. Only an engine that loaded
//!   registers from the MQD writes any back: one stopped or replaced
//!   before it first ran (a restored queue whose memory RESUME swapped for
//!   CRIU's copies) leaves the MQD as the restore wrote it.
//! * Copies take time: SDMA queues share their engine's schedule and
//!   bandwidth with the kernel rings of the DRM half
//!   ([`Sim::set_sdma_bandwidth`]).
//! * Interrupts (SDMA TRAP, CP end-of-pipe, VM faults, hangs) wait in
//!   [`interrupt::InterruptRing`] until the event code takes them
//!   ([`interrupt::InterruptRing::take`]), fires events and wakes
//!   WAIT_EVENTS.
//! * An AQL kernel dispatch runs on the wavefront interpreter of
//!   `gfx9_isa` ([`shader`]: code, kernel arguments and data in the
//!   process's GPU VM, atomics atomic against the host, a slice of
//!   instructions per step so a preemption parks the queue inside a long
//!   dispatch). A PM4 dispatch (DISPATCH_DIRECT/INDIRECT) does not run
//!   yet, and neither does a kernel with a private segment (scratch).
//! * A packet an engine cannot execute stops the queue: the reason is
//!   logged on stderr, kept in [`crate::Sim::queue_status`], and the
//!   process's HW_EXCEPTION events fire as after a GPU hang.
//!
//! Layout: `ring` (pointer rules and the registers in the MQD), `runner`
//! (the engine thread and its control), `sdma`, `pm4`, `aql` (the packet
//! sets), `shader` (an AQL kernel dispatch), `doorbell`, `interrupt`,
//! `trace`.
//!
//! This module never decides an ioctl's answer, nor reads the kernel's
//! queue state: the ioctl handlers decide, and the scheduling code hands
//! down what the engines need ([`QueueSpec`], [`Mqds`]).

mod aql;
mod doorbell;
mod engine;
pub(crate) mod interrupt;
mod pm4;
pub(crate) mod ring;
mod runner;
mod sdma;
pub(crate) mod shader;
mod trace;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hw::sdma::EnginePort;
use crate::hw::sdma::VmView;
use crate::kernel::{FileKey, Pid, Shared, State};
use ::kfd::Errno;

use self::doorbell::{DoorbellMap, Watcher};
use self::engine::{QueueHw, Want};
use self::interrupt::{Interrupt, InterruptRing};
use self::ring::Regs;
use self::trace::Trace;

pub(crate) use self::engine::Config;
pub use self::trace::PacketRecord;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How long a preemption may take (`amdgpu.queue_preemption_timeout_ms`'s
/// default; see [`crate::Sim::set_queue_preemption_timeout`]).
pub(crate) const PREEMPTION_TIMEOUT: Duration = Duration::from_millis(9000);

/// What a queue's engine is doing (see [`crate::Sim::queue_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueState {
    /// Running, the ring consumed up to the write pointer.
    Idle,
    /// Running packets.
    Busy,
    /// Its current packet waits on memory (a poll, a barrier, a packet
    /// header not written yet).
    Waiting,
    /// Preempted (evicted: paused by CRIU, restored and not resumed, or
    /// inactive).
    Preempted,
    /// Stopped on an error, as a hung engine; the reason names the packet.
    Hung(String),
}

/// A queue's engine state (see [`crate::Sim::queue_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStatus {
    /// What it is doing.
    pub state: QueueState,
    /// Its read pointer (SDMA: bytes, PM4: dwords, AQL: packets; monotonic).
    pub read_pointer: u64,
    /// The write pointer it last latched.
    pub write_pointer: u64,
    /// Packets it executed.
    pub packets: u64,
    /// The doorbell holds a value the engine has not acted on yet.
    pub doorbell_pending: bool,
}

impl QueueStatus {
    /// Whether the queue has consumed everything it was given (or cannot
    /// go on): nothing more will happen until new work comes.
    pub fn settled(&self) -> bool {
        match self.state {
            QueueState::Hung(_) => true,
            QueueState::Idle => self.read_pointer == self.write_pointer && !self.doorbell_pending,
            _ => false,
        }
    }
}

impl std::fmt::Display for QueueStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} at {:#x} of {:#x} ({} packets)",
            self.state, self.read_pointer, self.write_pointer, self.packets
        )
    }
}

struct Engine {
    hw: Arc<QueueHw>,
    thread: Option<JoinHandle<()>>,
}

/// How the engines get a snapshot of a compute VM: `(shared, st, gpu,
/// file)` gives the VM of render file `file` on GPU `gpu`, `None` when the
/// file is gone. The VM's mappings (GEM_VA, KFD allocations) are the
/// handlers' state; the layer that builds the machine passes the builder
/// (`crate::drm::engine_vm_view`).
pub(crate) type VmViewOf = fn(&Shared, &State, usize, FileKey) -> Option<VmView>;

/// The engines of one simulated machine (held by its shared state).
pub(crate) struct QueueEngines {
    me: Weak<Shared>,
    /// Builds the VM snapshots the engines read memory through.
    pub(crate) vm_view_of: VmViewOf,
    engines: Mutex<BTreeMap<(Pid, u32), Engine>>,
    watcher: Arc<Watcher>,
    pub(crate) interrupts: InterruptRing,
    /// WAIT_EVENTS sleepers wait here (with the simulator's lock).
    pub(crate) events: Condvar,
    pub(crate) trace: Trace,
    /// How long a preemption may take, in milliseconds.
    preemption_timeout_ms: AtomicU64,
}

impl std::fmt::Debug for QueueEngines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueEngines")
            .field("engines", &lock(&self.engines).len())
            .finish_non_exhaustive()
    }
}

impl QueueEngines {
    /// The engines of the machine whose shared state `me` will be, reading
    /// memory through the VM snapshots `vm_view_of` builds.
    pub(crate) fn new(me: Weak<Shared>, vm_view_of: VmViewOf) -> Self {
        QueueEngines {
            me,
            vm_view_of,
            engines: Mutex::new(BTreeMap::new()),
            watcher: Arc::default(),
            interrupts: InterruptRing::default(),
            events: Condvar::new(),
            trace: Trace::default(),
            preemption_timeout_ms: AtomicU64::new(PREEMPTION_TIMEOUT.as_millis() as u64),
        }
    }

    /// How long a preemption may take.
    pub(crate) fn preemption_timeout(&self) -> Duration {
        Duration::from_millis(self.preemption_timeout_ms.load(Ordering::Relaxed))
    }

    /// Sets how long a preemption may take (at least 1 ms, as the module
    /// parameter's minimum).
    pub(crate) fn set_preemption_timeout(&self, timeout: Duration) {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.preemption_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Holds the locks the engine and watcher threads take, and the engine
    /// table, until `held` is dropped (see [`crate::Sim::hold_for_fork`]).
    pub(crate) fn hold_for_fork<'a>(&'a self, held: &mut Vec<Box<dyn crate::hw::Held + 'a>>) {
        held.push(Box::new(lock(&self.engines)));
        held.push(Box::new(self.watcher.hold()));
        held.push(Box::new(self.interrupts.hold()));
        held.push(Box::new(self.trace.hold()));
    }

    /// In the child of a host `fork(2)`: the doorbell watcher was the
    /// parent's thread (see [`Watcher::forget_after_fork`]).
    pub(crate) fn after_host_fork(&self) {
        self.watcher.forget_after_fork();
    }

    /// The state of the engine of queue `q_id` of `pid`, if it has one.
    pub(crate) fn status(&self, pid: Pid, q_id: u32) -> Option<QueueStatus> {
        lock(&self.engines).get(&(pid, q_id)).map(|e| e.hw.status())
    }

    /// The engine state of every queue of `pid`, by queue id.
    pub(crate) fn statuses(&self, pid: Pid) -> Vec<(u32, QueueStatus)> {
        lock(&self.engines)
            .range((pid, 0)..=(pid, u32::MAX))
            .map(|((_, q), e)| (*q, e.hw.status()))
            .collect()
    }

    /// An engine raised an interrupt of process `pid`.
    pub(crate) fn raise(&self, pid: Pid, irq: Interrupt) {
        self.interrupts.push(pid, irq);
        self.events.notify_all();
    }
}

impl Drop for QueueEngines {
    fn drop(&mut self) {
        let engines = std::mem::take(&mut *lock(&self.engines));
        for (_, e) in engines {
            e.hw.halt(Want::Stop, Duration::ZERO);
            if let Some(t) = e.thread {
                // The last reference to the machine may be dropped by an
                // engine thread itself.
                if t.thread().id() != std::thread::current().id() {
                    let _ = t.join();
                }
            }
        }
    }
}

/// What the kernel wants of one queue's engine, as its scheduling code
/// computes it from the process's state (`crate::amdkfd::scheduling`).
pub(crate) struct QueueSpec {
    /// The engine's configuration.
    pub(crate) cfg: Config,
    /// The doorbell page the engine watches.
    pub(crate) page: Arc<crate::hw::bo::Memfd>,
    /// The SDMA engine's port, for an SDMA queue.
    pub(crate) port: Option<EnginePort>,
    /// Whether the queue may run.
    pub(crate) runnable: bool,
}

/// The MQDs of one process's queues, where an engine's registers are saved
/// at a preemption and loaded from when it runs again. The kernel state
/// holds them; the engines reach them only through this.
pub(crate) trait Mqds {
    /// Saves `regs` into the MQD of queue `q_id` if it still exists.
    fn save(&mut self, q_id: u32, regs: &Regs);
    /// The registers in the MQD of queue `q_id` (the defaults when there
    /// is none).
    fn load(&self, q_id: u32) -> Regs;
}

/// Brings the engines of `pid`'s queues in line with `wanted` (see the
/// module docs): spawns engines for new queues, stops those of destroyed
/// ones, preempts queues that may not run (saving their registers in their
/// MQDs) and loads and runs those that may. The caller holds the
/// simulator's lock; engines never wait for it.
pub(crate) fn sync(
    exec: &QueueEngines,
    pid: Pid,
    wanted: &BTreeMap<u32, QueueSpec>,
    mqds: &mut dyn Mqds,
) {
    let mut engines = lock(&exec.engines);
    // Engines of queues that are gone or changed shape stop first (their
    // registers saved if the queue is still there and the engine loaded
    // any: one parked since its creation, e.g. a restored queue's before
    // RESUME, leaves the MQD the restore wrote for the next engine).
    let stale: Vec<(Pid, u32)> = engines
        .range((pid, 0)..=(pid, u32::MAX))
        .filter(|((_, q), e)| wanted.get(q).is_none_or(|spec| spec.cfg != e.hw.cfg))
        .map(|(k, _)| *k)
        .collect();
    for key in &stale {
        if let Some(e) = engines.get(key) {
            e.hw.halt(Want::Park, Duration::ZERO);
        }
    }
    let timeout = exec.preemption_timeout();
    for key in stale {
        let Some(mut e) = engines.remove(&key) else {
            continue;
        };
        if let (Some(regs), _) = e.hw.halt(Want::Stop, timeout) {
            mqds.save(key.1, &regs);
        }
        if let Some(t) = e.thread.take() {
            let _ = t.join();
        }
    }
    // New engines start parked.
    for (&q_id, spec) in wanted {
        if engines.contains_key(&(pid, q_id)) {
            continue;
        }
        let (cfg, page) = (&spec.cfg, &spec.page);
        // A doorbell write is an event, not a value: the slot starts at a
        // value no producer writes first (ROCr's first AQL doorbell is
        // packet index 0), so the engine sees the first write change it.
        let _ = page.write_at(cfg.doorbell_slot, &vec![0xFF; cfg.doorbell_width]);
        let Ok(map) = DoorbellMap::new(page, cfg.doorbell_slot, cfg.doorbell_width) else {
            continue;
        };
        let hw = QueueHw::new(cfg.clone(), map);
        let thread = runner::spawn(&hw, exec.me.clone(), spec.port.clone()).ok();
        if thread.is_none() {
            continue;
        }
        exec.watcher.watch(&hw);
        engines.insert((pid, q_id), Engine { hw, thread });
    }
    // Preempt what may not run; a queue that misses the deadline is reset
    // as hung (with its last registers).
    let park: Vec<u32> = wanted
        .iter()
        .filter(|(q, spec)| {
            !spec.runnable && engines.get(&(pid, **q)).is_some_and(|e| !e.hw.parked())
        })
        .map(|(q, _)| *q)
        .collect();
    for (q, regs) in park_all(&engines, mqds, pid, &park, timeout) {
        let Some(mut regs) = regs else {
            continue;
        };
        if regs.hang.is_none() {
            regs.hang = Some(ring::Hang {
                header: 0,
                at: regs.rptr,
                reason: format!(
                    "preemption did not finish within {} ms",
                    timeout.as_millis()
                ),
            });
        }
        mqds.save(q, &regs);
    }
    // Run what may run, from the registers in its MQD.
    for (q_id, spec) in wanted {
        let Some(e) = engines.get(&(pid, *q_id)) else {
            continue;
        };
        if spec.runnable && e.hw.parked() {
            e.hw.run_from(mqds.load(*q_id));
        }
    }
}

/// Asks the engines of `queues` of `pid` to park, all at once, then waits
/// for each until `timeout` after the start, saving the registers of
/// those that reached a packet boundary into their MQDs. Returns the
/// queues that missed the deadline, with their last published registers
/// (`None`: the engine never held any).
fn park_all(
    engines: &BTreeMap<(Pid, u32), Engine>,
    mqds: &mut dyn Mqds,
    pid: Pid,
    queues: &[u32],
    timeout: Duration,
) -> Vec<(u32, Option<Regs>)> {
    for q in queues {
        if let Some(e) = engines.get(&(pid, *q)) {
            e.hw.halt(Want::Park, Duration::ZERO);
        }
    }
    let deadline = Instant::now() + timeout;
    let mut late = Vec::new();
    for q in queues {
        let Some(e) = engines.get(&(pid, *q)) else {
            continue;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match e.hw.halt(Want::Park, left) {
            // An engine without registers of its own was parked already.
            (None, true) => {}
            (Some(regs), true) => mqds.save(*q, &regs),
            (regs, false) => late.push((*q, regs)),
        }
    }
    late
}

/// Preempts the queues of `pid` among `queues` whose engine runs and may
/// not run on as it is (`None`: the queue may not run; `Some(cfg)`: it may
/// run with `cfg`), saving their registers into their MQDs. A queue that
/// does not reach a packet boundary within the preemption timeout is told
/// to run on from where it is (its MQD keeps what it held) and the call
/// fails with `ETIME` (see `crate::amdkfd::scheduling::preempt_device`).
pub(crate) fn preempt(
    exec: &QueueEngines,
    pid: Pid,
    queues: Vec<(u32, Option<Config>)>,
    mqds: &mut dyn Mqds,
) -> Result<(), Errno> {
    let engines = lock(&exec.engines);
    let park: Vec<u32> = queues
        .into_iter()
        .filter(|(q_id, runs)| {
            engines
                .get(&(pid, *q_id))
                .is_some_and(|e| runs.as_ref().is_none_or(|cfg| *cfg != e.hw.cfg) && !e.hw.parked())
        })
        .map(|(q_id, _)| q_id)
        .collect();
    let timeout = exec.preemption_timeout();
    let late = park_all(&engines, mqds, pid, &park, timeout);
    for (q_id, _) in &late {
        let e = &engines[&(pid, *q_id)];
        e.hw.run_on();
        eprintln!(
            "kfd-sim: gpu {:#x}: {} queue {} of process {} did not reach a packet boundary \
             within {} ms: unsuccessful queues preemption, eviction failed (ETIME)",
            e.hw.cfg.user_gpu_id,
            e.hw.cfg.geometry.format.name(),
            q_id,
            pid,
            timeout.as_millis()
        );
    }
    if late.is_empty() {
        Ok(())
    } else {
        Err(Errno(libc::ETIME))
    }
}
