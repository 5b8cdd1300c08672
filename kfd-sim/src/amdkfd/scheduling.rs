//! The kernel's queue scheduling (`kfd_device_queue_manager.c`): which of
//! a process's queues may run, read from its state (queues, eviction
//! levels, the doorbell page), and the engines of `crate::hw::queues` told
//! so. The ioctl handlers call [`sync_process`] after every change of a
//! process's queues or eviction levels, and [`preempt_device`] for an
//! eviction that must know whether the preemption finished.
//!
//! The engines get what they need as data (a [`QueueSpec`] per queue) and
//! reach the MQDs only through [`Mqds`]; interrupts they raised are taken
//! from them here and delivered to the events ([`super::event`]).

use std::collections::BTreeMap;

use super::queue::{is_sdma, KFD_QUEUE_FORMAT_PM4};
use crate::hw::queues::ring::{Format, Geometry, Regs};
use crate::hw::queues::{Config, Mqds, QueueSpec};
use crate::kernel::{Pid, Shared, State};
use ::kfd::Errno;

/// The MQDs of process `pid`'s queues in the kernel state.
struct ProcessMqds<'a> {
    st: &'a mut State,
    pid: Pid,
}

impl Mqds for ProcessMqds<'_> {
    fn save(&mut self, q_id: u32, regs: &Regs) {
        if let Some(q) = self
            .st
            .kfd_mut(self.pid)
            .and_then(|p| p.queues.get_mut(&q_id))
        {
            regs.to_mqd(&mut q.mqd);
        }
    }

    fn load(&self, q_id: u32) -> Regs {
        self.st
            .kfd(self.pid)
            .and_then(|p| p.queues.get(&q_id))
            .map(|q| Regs::from_mqd(&q.mqd))
            .unwrap_or_default()
    }
}

/// The engine configuration of queue `q_id` of `pid` as the kernel state
/// says now, and whether it may run; `None` when it cannot have an engine
/// (no VM).
fn desired(sim: &Shared, st: &mut State, pid: Pid, q_id: u32) -> Option<QueueSpec> {
    let p = st.kfd_mut(pid)?;
    let q = p.queues.get(&q_id)?.clone();
    let pdd = q.pdd;
    let drm_file = p.pdds.get(pdd)?.drm_file?;
    let page = super::doorbell_page(sim, p, pdd).ok()?;
    let p = st.kfd(pid)?;
    let gpu_idx = p.pdds[pdd].gpu;
    let gpu = &sim.gpus[gpu_idx];
    let soc15 = gpu.is_soc15();
    let format = if is_sdma(q.ktype) {
        Format::Sdma
    } else if q.format == KFD_QUEUE_FORMAT_PM4 {
        Format::Pm4
    } else {
        Format::Aql
    };
    let (slot, width) = if soc15 {
        (u64::from(q.doorbell_id) * 8, 8)
    } else {
        (u64::from(q.q_id) * 4, 4)
    };
    let sdma = (format == Format::Sdma).then(|| {
        (
            gpu.drm.generation.sdma_rules(),
            q.sdma_id % gpu.sdma_engines.max(1),
        )
    });
    let cfg = Config {
        pid,
        q_id,
        gpu: gpu_idx,
        user_gpu_id: p.pdds[pdd].user_gpu_id,
        geometry: Geometry {
            format,
            base: q.ring_base,
            bytes: q.ring_size,
            rptr_addr: q.read_ptr,
            wptr_addr: q.write_ptr,
            soc15,
        },
        sdma,
        family: gpu.info.family,
        gfx_target_version: gpu.info.gfx_target_version,
        target: crate::hw::queues::shader::target_of(gpu.info.gfx_target_version),
        drm_file,
        doorbell_page: page.key(),
        doorbell_slot: slot,
        doorbell_width: width,
    };
    let runnable = p.queues_running(pdd) && q.is_active() && q.ring_size.is_power_of_two();
    let port = cfg.sdma.map(|(_, engine)| gpu.drm.sdma.port(engine));
    Some(QueueSpec {
        cfg,
        page,
        port,
        runnable,
    })
}

/// Brings the engines of `pid`'s queues in line with the kernel state
/// (see `crate::hw::queues`): spawns engines for new queues, stops those
/// of destroyed ones, preempts queues that may not run (saving their
/// registers in their MQDs) and loads and runs those that may. Then
/// delivers the process's pending interrupts. The caller holds the
/// simulator's lock (`st`); engines never wait for it.
pub(crate) fn sync_process(sim: &Shared, st: &mut State, pid: Pid) {
    let exec = &sim.exec;
    let q_ids: Vec<u32> = st
        .kfd(pid)
        .map(|p| p.queues.keys().copied().collect())
        .unwrap_or_default();
    let mut wanted = BTreeMap::new();
    for &q_id in &q_ids {
        if let Some(d) = desired(sim, st, pid, q_id) {
            wanted.insert(q_id, d);
        }
    }
    crate::hw::queues::sync(exec, pid, &wanted, &mut ProcessMqds { st, pid });
    if st.kfd(pid).is_some() {
        super::event::drain_interrupts(sim, st, pid);
    } else {
        exec.interrupts.forget(pid);
    }
    exec.events.notify_all();
}

/// The preemption step of an eviction of device `pdd` of `pid`
/// (`evict_process_queues_cpsch`, whose runlist update waits for the
/// unmap in `unmap_queues_cpsch`): the caller raised the device's eviction
/// level; its queues that may no longer run are preempted, their
/// registers saved into their MQDs. A queue that does not reach a packet
/// boundary within the preemption timeout fails the eviction with
/// `ETIME` (`amdkfd_fence_wait_timeout`) and is told to run on from where
/// it is: its MQD keeps what it held, and the caller's error path takes
/// the eviction level back. The real kernel also marks the scheduler hung
/// and schedules a GPU reset; the simulator does not model the reset.
pub(crate) fn preempt_device(
    sim: &Shared,
    st: &mut State,
    pid: Pid,
    pdd: usize,
) -> Result<(), Errno> {
    let q_ids: Vec<u32> = st
        .kfd(pid)
        .map(|p| {
            p.queues
                .iter()
                .filter(|(_, q)| q.pdd == pdd)
                .map(|(id, _)| *id)
                .collect()
        })
        .unwrap_or_default();
    let wanted: Vec<(u32, Option<Config>)> = q_ids
        .into_iter()
        .map(|q_id| {
            let runs = desired(sim, st, pid, q_id).and_then(|s| s.runnable.then_some(s.cfg));
            (q_id, runs)
        })
        .collect();
    crate::hw::queues::preempt(&sim.exec, pid, wanted, &mut ProcessMqds { st, pid })
}
