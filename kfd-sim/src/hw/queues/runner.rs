//! One user-mode queue's engine: a thread that consumes the queue's ring
//! the way the hardware does, from the read pointer to the write pointer
//! the doorbell last announced, one packet at a time, writing the read
//! pointer back after each, and that stops at a packet boundary when the
//! kernel preempts the queue.
//!
//! The control side ([`QueueHw`], in `super::engine`) is what the kernel half holds: it asks
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

use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError, Weak};
use std::thread::JoinHandle;

use crate::hw::sdma::{CopyUnit, EnginePort, VmView};
use crate::kernel::Shared;

use super::engine::{
    Config, Engine, Phase, QueueHw, RingWindow, Step, Want, IDLE_SLEEP, POLL_MAX, POLL_MIN,
};
use super::interrupt::Interrupt;
use super::lock;
use super::ring::{Format, Hang, Regs};

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
                shader: None,
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
    /// The kernel dispatch the queue is inside of (kept across parks).
    shader: Option<super::shader::InFlight>,
}

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
                    shader: &mut self.shader,
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
                // Back to the top: a park or stop request is taken up
                // between two slices of a dispatch.
                Step::Yield => {
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
    use std::time::{Duration, Instant};

    use super::super::doorbell::DoorbellMap;
    use super::super::ring::Geometry;
    use super::*;
    use crate::hw::bo::Memfd;
    use crate::kernel::Pid;

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
            gfx_target_version: 0,
            target: None,
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
