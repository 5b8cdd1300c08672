//! The interrupt handler ring between the engines and the event code: an
//! engine that raises an interrupt (an SDMA TRAP, a CP end-of-pipe, a VM
//! fault, a hang) pushes an entry here without taking the simulator's
//! lock; whoever next looks at the process's events under the lock (a
//! WAIT_EVENTS, SET/RESET/DESTROY_EVENT, a preemption) drains the
//! process's entries first, as the kernel's interrupt work runs ahead of
//! anything that could observe its effect. The decoding mirrors
//! `event_interrupt_wq_v9` (`kfd_int_process_v9.c`): an SDMA TRAP carries
//! 28 valid bits of context id, a CP end-of-pipe 32.
//!
//! This module never decides what an interrupt does to an event: the
//! event code (`amdkfd::event`) applies the kernel's rules.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::hw::sdma::VmFault;
use crate::kernel::Pid;

use super::lock;

/// What an engine reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// A signal: `kfd_signal_event_interrupt(pasid, partial_id, bits)`.
    Signal {
        /// The context id the packet carried.
        partial_id: u32,
        /// How many of its low bits are valid.
        valid_bits: u32,
    },
    /// A GPU VM fault of one of the process's queues.
    VmFault {
        /// The user gpu_id of the GPU.
        gpu_id: u32,
        /// The fault.
        fault: VmFault,
    },
    /// One of the process's queues hung.
    Hang {
        /// The user gpu_id of the GPU.
        gpu_id: u32,
    },
}

/// The pending interrupts of every process, oldest first.
#[derive(Debug, Default)]
pub(crate) struct InterruptRing {
    pending: Mutex<VecDeque<(Pid, Interrupt)>>,
}

impl InterruptRing {
    /// Queues an interrupt of process `pid`.
    pub(crate) fn push(&self, pid: Pid, irq: Interrupt) {
        lock(&self.pending).push_back((pid, irq));
    }

    /// Takes every pending interrupt of `pid`, oldest first, for the event
    /// code to deliver (`crate::amdkfd::event::drain_interrupts`).
    pub(crate) fn take(&self, pid: Pid) -> Vec<Interrupt> {
        let mut pending = lock(&self.pending);
        let (mine, rest): (VecDeque<_>, VecDeque<_>) =
            pending.drain(..).partition(|(p, _)| *p == pid);
        *pending = rest;
        mine.into_iter().map(|(_, irq)| irq).collect()
    }

    /// Holds the pending interrupts, which engine threads push (see
    /// [`crate::Sim::hold_for_fork`]).
    pub(crate) fn hold(&self) -> std::sync::MutexGuard<'_, VecDeque<(Pid, Interrupt)>> {
        lock(&self.pending)
    }

    /// Drops the pending interrupts of `pid` (its process is gone).
    pub(crate) fn forget(&self, pid: Pid) {
        lock(&self.pending).retain(|(p, _)| *p != pid);
    }
}
