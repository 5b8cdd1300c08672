//! What `kfd_sim_preload_report` writes: the simulated kernel's view of
//! this process and a tally of every routed ioctl by name and answer, as
//! `key=value` lines.
//!
//! ```text
//! state bos=5 queues=1 events=2 svm_ranges=0 paused=0 resumed=0 vm_acquired=1 eviction=0
//! accounting kfd_fds=1 render_fds=2 dmabuf_fds=0 live_bos=5 live_bo_bytes=.. pinned_userptr_pages=1 cpu_mappings=3 kfd_processes=1 queues=1 events=2
//! gpu node=1 gpu_id=19005 render_minor=128
//! acquired gpu_ids=19005
//! ioctl name=kfd_ALLOC_MEMORY_OF_GPU ok=7 errors=
//! engine queue=0 rptr=164 wptr=164 packets=7 state=idle
//! packet queue=0 format=sdma name=COPY at=24 dwords=00000001,003fffdf,...
//! ```
//!
//! `engine` lines are each queue's engine (named apart from the `queue`
//! lines a test program prints); `packet` lines (the packets the
//! process's queues ran since the last report) come with
//! `KFD_SIM_PACKET_TRACE`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use kfd_sim::{Pid, Sim};

/// One ioctl's answers: successes, and failures by errno.
type Answers = (u64, BTreeMap<i32, u64>);

/// Answers per ioctl name: successes and errno counts.
#[derive(Default)]
pub(crate) struct Tally {
    by_name: Mutex<BTreeMap<String, Answers>>,
    /// gpu_ids of successful ACQUIRE_VM calls, in call order: the ids the
    /// client read from the topology.
    acquired: Mutex<Vec<u32>>,
}

/// [`Tally`]'s locks held (see [`crate::fork`]).
pub(crate) type TallyHold<'a> = (
    std::sync::MutexGuard<'a, Vec<u32>>,
    std::sync::MutexGuard<'a, BTreeMap<String, Answers>>,
);

impl Tally {
    /// Holds both locks, in the order [`render`] takes them.
    pub(crate) fn hold(&self) -> TallyHold<'_> {
        (
            self.acquired.lock().unwrap_or_else(|e| e.into_inner()),
            self.by_name.lock().unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// Notes a VM acquired for `gpu_id`.
    pub(crate) fn acquired(&self, gpu_id: u32) {
        self.acquired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(gpu_id);
    }

    /// Counts one answer.
    pub(crate) fn record(&self, request: libc::c_ulong, ret: &std::io::Result<i32>) {
        let name = crate::trace::name(request).replace(' ', "_");
        let mut t = self.by_name.lock().unwrap_or_else(|e| e.into_inner());
        let entry = t.entry(name).or_default();
        match ret {
            Ok(_) => entry.0 += 1,
            Err(e) => *entry.1.entry(e.raw_os_error().unwrap_or(0)).or_default() += 1,
        }
    }
}

fn join<T: ToString>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The report for simulated process `pid` of `sim`, with the answers
/// `tally` counted; `served` when the machine is another process's
/// (`KFD_SIM_REMOTE`), whose kernel state is its owner's to report.
pub(crate) fn render(sim: &Sim, pid: Pid, served: bool, tally: &Tally) -> String {
    let mut out = String::new();
    if served {
        // The served machine's state is its owner's to report.
        out.push_str("state remote\n");
    } else {
        local_state(&mut out, sim, pid);
        packets(&mut out, sim, pid);
    }
    for g in sim.gpus() {
        let _ = writeln!(
            out,
            "gpu node={} gpu_id={} render_minor={}",
            g.node_id, g.gpu_id, g.render_minor
        );
    }
    let acquired = tally.acquired.lock().unwrap_or_else(|e| e.into_inner());
    let _ = writeln!(out, "acquired gpu_ids={}", join(acquired.iter()));
    drop(acquired);
    let t = tally.by_name.lock().unwrap_or_else(|e| e.into_inner());
    for (name, (ok, errors)) in t.iter() {
        let _ = writeln!(
            out,
            "ioctl name={name} ok={ok} errors={}",
            join(
                errors
                    .iter()
                    .map(|(e, n)| format!("{}:{n}", kfd::Errno(*e).name().unwrap_or("?")))
            )
        );
    }
    out
}

/// What the in-process simulator holds for this process.
fn local_state(out: &mut String, sim: &Sim, pid: Pid) {
    match sim.kfd_state(pid) {
        Some(s) => {
            let _ = writeln!(
                out,
                "state bos={} queues={} events={} svm_ranges={} paused={} resumed={} vm_acquired={} eviction={}",
                s.bos,
                s.queues,
                s.events,
                s.svm_ranges,
                u8::from(s.queues_paused),
                s.resumed,
                join(s.vm_acquired.iter().map(|&v| u8::from(v))),
                join(&s.eviction_levels),
            );
        }
        None => out.push_str("state none\n"),
    }
    let a = sim.accounting();
    let _ = writeln!(
        out,
        "accounting kfd_fds={} render_fds={} dmabuf_fds={} live_bos={} live_bo_bytes={} pinned_userptr_pages={} cpu_mappings={} kfd_processes={} queues={} events={}",
        a.kfd_fds,
        a.render_fds,
        a.dmabuf_fds,
        a.live_bos,
        a.live_bo_bytes,
        a.pinned_userptr_pages,
        a.cpu_mappings,
        a.kfd_processes,
        a.queues,
        a.events,
    );
}

/// The packets the process's queues executed since the last report (when
/// `KFD_SIM_PACKET_TRACE` is set), and each queue's engine state.
fn packets(out: &mut String, sim: &Sim, pid: Pid) {
    for (q, status) in sim.queue_statuses(pid) {
        let state = match &status.state {
            kfd_sim::QueueState::Hung(reason) => {
                format!("hung reason={}", reason.replace(' ', "_"))
            }
            other => format!("{other:?}").to_lowercase(),
        };
        let _ = writeln!(
            out,
            "engine queue={q} rptr={} wptr={} packets={} state={state}",
            status.read_pointer, status.write_pointer, status.packets
        );
    }
    for p in sim.packet_trace() {
        let _ = writeln!(
            out,
            "packet queue={} format={} name={} at={} dwords={}",
            p.queue_id,
            p.format,
            p.name.replace(' ', "_"),
            p.at,
            join(p.dwords.iter().map(|d| format!("{d:08x}")))
        );
    }
}
