//! What tests and tools see of the queue engines (`crate::hw::queues`): a
//! queue's state, waiting for a process's queues to settle, the packet
//! trace, reading GPU memory through a process's VM, and the kernel's own
//! queue evictions.
//!
//! Observation and the kernel's eviction path only: this module never
//! executes a packet.

use std::time::{Duration, Instant};

use amdgpu_topology::GpuId;

use super::Sim;
use crate::amdkfd::scheduling::sync_process;
use crate::hw::queues::{PacketRecord, QueueStatus};
use crate::kernel::{Pid, SimError};

impl Sim {
    /// What the engine of queue `q_id` of process `pid` is doing (`None`:
    /// no such queue, or one that cannot run at all: no VM on its GPU).
    pub fn queue_status(&self, pid: Pid, q_id: u32) -> Option<QueueStatus> {
        self.shared.exec.status(pid, q_id)
    }

    /// The engine state of every queue of `pid`, by queue id.
    pub fn queue_statuses(&self, pid: Pid) -> Vec<(u32, QueueStatus)> {
        self.shared.exec.statuses(pid)
    }

    /// Waits until every queue of `pid` has settled (consumed its ring up to
    /// the write pointer it latched, or stopped on an error) or `timeout`
    /// passed; the queues that did not settle, with their state, otherwise.
    /// A preempted queue with work left never settles.
    pub fn wait_queues_settled(
        &self,
        pid: Pid,
        timeout: Duration,
    ) -> Result<(), Vec<(u32, QueueStatus)>> {
        let deadline = Instant::now() + timeout;
        loop {
            let busy: Vec<(u32, QueueStatus)> = self
                .queue_statuses(pid)
                .into_iter()
                .filter(|(_, s)| !s.settled())
                .collect();
            if busy.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(busy);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sets how long the kernel waits for a queue to reach a packet
    /// boundary when it preempts it (`amdgpu.queue_preemption_timeout_ms`,
    /// 9000 ms by default, at least 1 ms). An eviction for CRIU's
    /// PROCESS_INFO whose queue misses it fails with `ETIME`; other
    /// preemptions reset such a queue as hung.
    pub fn set_queue_preemption_timeout(&self, timeout: Duration) {
        self.shared.exec.set_preemption_timeout(timeout);
    }

    /// Starts (`true`) or stops recording the packets user-mode queues
    /// execute ([`Sim::packet_trace`]); off by default.
    pub fn trace_packets(&self, on: bool) {
        self.shared.exec.trace.enable(on);
    }

    /// The packets recorded so far (oldest first, at most the last 16384),
    /// emptying the record.
    pub fn packet_trace(&self) -> Vec<PacketRecord> {
        self.shared.exec.trace.take()
    }

    /// Reads `len` bytes at GPU VA `va` of process `pid`'s VM on the GPU
    /// the process calls `gpu_id` (its user gpu_id), as the GPU sees them;
    /// `None` when the process, the GPU or its VM is unknown or the range is
    /// not (wholly) mapped.
    pub fn read_gpu_memory(&self, pid: Pid, gpu_id: GpuId, va: u64, len: usize) -> Option<Vec<u8>> {
        let st = self.lock();
        let p = st.kfd(pid)?;
        let pdd = p.pdd_by_user_id(gpu_id)?;
        let key = p.pdds[pdd].drm_file?;
        let render = st.render(key)?;
        let view = crate::drm::vm_view(
            &st,
            &self.shared.gpus[p.pdds[pdd].gpu].drm,
            &render.drm,
            key,
            crate::drm::UserptrAccess::Checked,
        );
        drop(st);
        let mut out = vec![0u8; len];
        view.read(va, &mut out).ok()?;
        Some(out)
    }

    /// Evicts every queue of process `pid` one level, as the kernel does on
    /// its own when it must move the process's memory (a TTM eviction, a
    /// userptr invalidation: `kfd_process_evict_queues`): the queues stop
    /// at a packet boundary and stay preempted until
    /// [`Sim::restore_queues`] takes the level back.
    pub fn evict_queues(&self, pid: Pid) -> Result<(), SimError> {
        let mut st = self.lock();
        let p = st.kfd_mut(pid).ok_or(SimError::NoSuchProcess(pid))?;
        for pdd in &mut p.pdds {
            pdd.eviction += 1;
        }
        sync_process(&self.shared, &mut st, pid);
        Ok(())
    }

    /// Takes back one level of [`Sim::evict_queues`] on every device of
    /// `pid` (`kfd_process_restore_queues`); queues run again where no
    /// other level remains.
    pub fn restore_queues(&self, pid: Pid) -> Result<(), SimError> {
        let mut st = self.lock();
        let p = st.kfd_mut(pid).ok_or(SimError::NoSuchProcess(pid))?;
        for pdd in &mut p.pdds {
            pdd.eviction = pdd.eviction.saturating_sub(1);
        }
        sync_process(&self.shared, &mut st, pid);
        Ok(())
    }
}
