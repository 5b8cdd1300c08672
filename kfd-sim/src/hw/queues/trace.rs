//! A record of the packets user-mode queues executed, for tests and tools
//! that want to see what a runtime sends (ROCr's copies): off by default,
//! bounded, oldest entries dropped first.
//!
//! Observation only: this module never influences execution.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::engine::Config;
use super::lock;
use crate::kernel::Pid;

/// Most packets kept.
const CAPACITY: usize = 16384;
/// Dwords kept per packet.
const DWORDS: usize = 16;

/// One executed packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketRecord {
    /// The process.
    pub pid: Pid,
    /// The queue.
    pub queue_id: u32,
    /// `sdma`, `pm4` or `aql`.
    pub format: &'static str,
    /// The packet's name (`COPY`, `ATOMIC`, `RELEASE_MEM`, `BARRIER_AND`, ...).
    pub name: String,
    /// The read pointer at the packet (the format's units).
    pub at: u64,
    /// Its first dwords (at most 16).
    pub dwords: Vec<u32>,
}

/// The trace buffer.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    on: AtomicBool,
    records: Mutex<VecDeque<PacketRecord>>,
}

impl Trace {
    /// Turns recording on or off (off clears nothing).
    pub(crate) fn enable(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// Holds the trace buffer, which engine threads write (see
    /// [`crate::Sim::hold_for_fork`]).
    pub(crate) fn hold(&self) -> std::sync::MutexGuard<'_, VecDeque<PacketRecord>> {
        lock(&self.records)
    }

    /// Records a packet of the queue `cfg` describes.
    pub(crate) fn record(&self, cfg: &Config, name: &str, at: u64, dwords: &[u32]) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let mut records = lock(&self.records);
        if records.len() == CAPACITY {
            records.pop_front();
        }
        records.push_back(PacketRecord {
            pid: cfg.pid,
            queue_id: cfg.q_id,
            format: cfg.geometry.format.name(),
            name: name.to_owned(),
            at,
            dwords: dwords[..dwords.len().min(DWORDS)].to_vec(),
        });
    }

    /// Takes the records so far.
    pub(crate) fn take(&self) -> Vec<PacketRecord> {
        lock(&self.records).drain(..).collect()
    }
}
