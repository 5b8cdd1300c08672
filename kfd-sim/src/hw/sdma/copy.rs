//! Moving bytes through a VM snapshot: the copy loop every SDMA stream
//! shares (the kernel rings' jobs and the user-mode queues of
//! `crate::hw::queues`), piece by piece through a bounded bounce buffer, paced
//! by the engine's [`EngineClock`], with the engine's VM-fault and byte
//! accounting.
//!
//! This module never decodes packets and never touches memory a
//! [`VmView`] does not map.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::engine::lock;
use super::memory::{Access, Landing};
use super::pace::{EngineClock, THROTTLE_CHUNK};
use super::{SdmaStats, VmFault, VmView};

/// Largest piece an unthrottled copy moves at once (the bounce buffer size).
pub(crate) const BOUNCE_BYTES: u64 = 1 << 20;

/// State shared by a GPU's engines: the configured bandwidths and what
/// they did.
#[derive(Debug, Default)]
pub(crate) struct EngineShared {
    /// Bytes per second per engine; 0 = unlimited.
    pub(crate) bandwidth: AtomicU64,
    /// Bytes per second of all the GPU's engines together; 0 = unlimited.
    pub(crate) gpu_bandwidth: AtomicU64,
    /// The schedule of the GPU-wide limit: every engine's pieces queue in
    /// it, so together they move at most `gpu_bandwidth`.
    pub(crate) gpu_clock: EngineClock,
    pub(crate) stats: Mutex<SdmaStats>,
}

impl EngineShared {
    /// Whether a limit applies to this GPU's copies.
    fn throttled(&self) -> bool {
        self.bandwidth.load(Ordering::Relaxed) != 0
            || self.gpu_bandwidth.load(Ordering::Relaxed) != 0
    }

    /// Counts one VM fault.
    pub(crate) fn record_fault(&self, fault: VmFault) {
        let mut stats = lock(&self.stats);
        stats.faults.count += 1;
        stats.faults.first.get_or_insert(fault);
        stats.faults.last = Some(fault);
    }
}

/// One engine of a GPU as a copier sees it: the GPU's shared state and the
/// engine's schedule.
#[derive(Debug, Clone)]
pub(crate) struct EnginePort {
    pub(crate) shared: Arc<EngineShared>,
    pub(crate) clock: Arc<EngineClock>,
}

/// Per-copy bookkeeping: the first fault, and whether the previous piece
/// faulted (so a contiguous unmapped run counts once).
#[derive(Debug, Default)]
pub(crate) struct FaultTrack {
    pub(crate) first: Option<VmFault>,
    in_run: [bool; 2],
}

impl FaultTrack {
    fn hit(&mut self, shared: &EngineShared, side: usize, fault: VmFault) {
        if !self.in_run[side] {
            shared.record_fault(fault);
        }
        self.in_run[side] = true;
        self.first.get_or_insert(fault);
    }
}

/// A copier on one engine, with its bounce buffer.
#[derive(Debug)]
pub(crate) struct CopyUnit {
    port: EnginePort,
    bounce: Vec<u8>,
}

impl CopyUnit {
    /// A copier for `port`'s engine.
    pub(crate) fn new(port: EnginePort) -> Self {
        CopyUnit {
            port,
            bounce: Vec::new(),
        }
    }

    /// The engine's shared state.
    pub(crate) fn shared(&self) -> &EngineShared {
        &self.port.shared
    }

    /// Accounts `bytes` of engine time for work that is not a copy (a
    /// fill), at the engine's rate.
    pub(crate) fn pace(&self, bytes: u64) {
        let shared = &*self.port.shared;
        self.port.clock.account(bytes, &shared.bandwidth);
        shared.gpu_clock.account(bytes, &shared.gpu_bandwidth);
    }

    /// Move `bytes` bytes from GPU VA `src` to GPU VA `dst` piece by piece
    /// through a bounded bounce buffer; pieces whose source or destination is
    /// not mapped are dropped and recorded as faults.
    pub(crate) fn copy(
        &mut self,
        vm: &VmView,
        src: u64,
        dst: u64,
        bytes: u64,
        faults: &mut FaultTrack,
    ) {
        let mut done = 0u64;
        let mut copied = 0u64;
        faults.in_run = [false; 2];
        while done < bytes {
            let left = bytes - done;
            let chunk = if self.port.shared.throttled() {
                THROTTLE_CHUNK
            } else {
                BOUNCE_BYTES
            };
            let limit = left.min(chunk);
            let s_va = src.wrapping_add(done);
            let d_va = dst.wrapping_add(done);
            let (from, s_len) = vm.resolve(s_va, limit, Access::Read);
            let (to, d_len) = vm.resolve(d_va, limit, Access::Write);
            let n = s_len.min(d_len);
            let (read_ok, write_ok) = self.move_piece(from, to, n as usize);
            let shared = &*self.port.shared;
            if read_ok {
                faults.in_run[0] = false;
            } else {
                let fault = VmFault {
                    va: s_va,
                    write: false,
                };
                faults.hit(shared, 0, fault);
            }
            if write_ok {
                faults.in_run[1] = false;
                if read_ok && matches!(to, Landing::Memory(..)) {
                    copied += n;
                }
            } else {
                let fault = VmFault {
                    va: d_va,
                    write: true,
                };
                faults.hit(shared, 1, fault);
            }
            done += n;
            self.pace(n);
        }
        if copied > 0 {
            lock(&self.port.shared.stats).bytes_copied += copied;
        }
    }

    /// Move one piece of `len` bytes between two landings; returns whether
    /// the read and the write succeeded (a failed read drops the write, which
    /// is then not a write fault). Host memory on either side is copied to
    /// or from directly: one copy, no bounce buffer.
    fn move_piece(&mut self, from: Landing<'_>, to: Landing<'_>, len: usize) -> (bool, bool) {
        match (from, to) {
            (Landing::Fault, Landing::Fault) => (false, false),
            (Landing::Fault, _) => (false, true),
            (_, Landing::Fault) => (true, false),
            (_, Landing::Prt) => (true, true),
            (Landing::Prt, Landing::Memory(dst, d_off)) => {
                let ok = match dst.host_address() {
                    Some(base) => {
                        // SAFETY: `resolve` keeps `d_off..d_off+len` inside the
                        // destination's size, and a host-address memory is
                        // valid for writes over its whole size.
                        unsafe {
                            std::ptr::write_bytes((base + d_off as usize) as *mut u8, 0, len)
                        };
                        true
                    }
                    None => {
                        let buf = self.bounce(len);
                        buf.fill(0);
                        dst.write_at(d_off, buf).is_ok()
                    }
                };
                (true, ok)
            }
            (Landing::Memory(src, s_off), Landing::Memory(dst, d_off)) => {
                if let Some(base) = dst.host_address() {
                    // SAFETY: `resolve` keeps `d_off..d_off+len` inside the
                    // destination, whose host memory is valid for writes
                    // over its whole size (`UserMemory::new`'s contract).
                    let ok =
                        unsafe { src.read_to_host(s_off, (base + d_off as usize) as *mut u8, len) };
                    (ok.is_ok(), true)
                } else if let Some(base) = src.host_address() {
                    // SAFETY: as above, for reads of the source.
                    let ok = unsafe {
                        dst.write_from_host(d_off, (base + s_off as usize) as *const u8, len)
                    };
                    (true, ok.is_ok())
                } else {
                    let buf = self.bounce(len);
                    if src.read_at(s_off, buf).is_err() {
                        return (false, true);
                    }
                    (true, dst.write_at(d_off, buf).is_ok())
                }
            }
        }
    }

    /// The bounce buffer, at least `len` bytes long.
    fn bounce(&mut self, len: usize) -> &mut [u8] {
        if self.bounce.len() < len {
            self.bounce.resize(len, 0);
        }
        &mut self.bounce[..len]
    }
}
