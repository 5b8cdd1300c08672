//! What a workload holds and how it progresses: the descriptions
//! [`Workload::describe`] records and [`Workload::verify`] compares, the
//! content hashes behind [`Workload::fingerprint`], and [`Workload::step`],
//! the GPU making progress.

use super::*;
use crate::amdkfd::event::is_signal_type;
use crate::hw::bo::{Backing, Domain};
use crate::kernel::State;

/// One allocation as the application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoDescription {
    /// The handle (`user_gpu_id << 32 | idr_slot`).
    pub handle: u64,
    /// GPU VA.
    pub va: u64,
    /// Real size in bytes.
    pub size: u64,
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`.
    pub flags: u32,
    /// CPU address of a USERPTR allocation, else 0.
    pub user_addr: u64,
    /// User gpu_ids the allocation is GPU-mapped on, ascending.
    pub mapped_on: Vec<GpuId>,
    /// Hash of the contents (VRAM, GTT and USERPTR; 0 for apertures).
    pub content_hash: u64,
}

/// One queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDescription {
    /// Queue id.
    pub q_id: u32,
    /// User gpu_id of its device.
    pub gpu_id: GpuId,
    /// Kernel queue type (0 compute, 1 SDMA, 4 SDMA XGMI).
    pub queue_type: u32,
    /// Doorbell id.
    pub doorbell_id: u32,
    /// Packets dispatched so far (from the MQD).
    pub dispatched: u64,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDescription {
    /// Event id.
    pub id: u32,
    /// `KFD_IOC_EVENT_*` type.
    pub event_type: u32,
    /// Whether it is signaled.
    pub signaled: bool,
}

/// Everything a workload process holds, in a restore-invariant form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadDescription {
    /// The process described.
    pub pid: Pid,
    /// Allocations by handle.
    pub bos: Vec<BoDescription>,
    /// Queues by id.
    pub queues: Vec<QueueDescription>,
    /// Events by id.
    pub events: Vec<EventDescription>,
    /// SVM ranges as (start, size) in bytes.
    pub svm_ranges: Vec<(u64, u64)>,
}

impl WorkloadDescription {
    /// The differences between two descriptions (the pid is ignored).
    pub fn differences(&self, other: &WorkloadDescription) -> Vec<String> {
        let mut out = Vec::new();
        let a: BTreeMap<u64, &BoDescription> = self.bos.iter().map(|b| (b.handle, b)).collect();
        let b: BTreeMap<u64, &BoDescription> = other.bos.iter().map(|b| (b.handle, b)).collect();
        for (h, x) in &a {
            match b.get(h) {
                None => out.push(format!("bo {h:#x} missing")),
                Some(y) if x != y => out.push(format!("bo {h:#x}: expected {x:?}, found {y:?}")),
                _ => {}
            }
        }
        for h in b.keys().filter(|h| !a.contains_key(h)) {
            out.push(format!("unexpected bo {h:#x}"));
        }
        if self.queues != other.queues {
            out.push(format!(
                "queues: expected {:?}, found {:?}",
                self.queues, other.queues
            ));
        }
        if self.events != other.events {
            out.push(format!(
                "events: expected {:?}, found {:?}",
                self.events, other.events
            ));
        }
        if self.svm_ranges != other.svm_ranges {
            out.push(format!(
                "svm ranges: expected {:?}, found {:?}",
                self.svm_ranges, other.svm_ranges
            ));
        }
        out
    }
}

pub(super) const KIB: u64 = 1024;
pub(super) const MIB: u64 = 1024 * KIB;

pub(super) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A running 64-bit hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hasher(pub(crate) u64);

impl Hasher {
    pub(crate) fn new() -> Hasher {
        Hasher(0xCBF2_9CE4_8422_2325)
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0 = splitmix(self.0 ^ v);
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            self.u64(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.u64(u64::from_le_bytes(last));
        }
        self.u64(b.len() as u64);
    }
}

/// One allocation of a process, in handle order, with what step/fingerprint need.
pub(super) struct Alloc {
    pub(super) handle: u64,
    pub(super) va: u64,
    pub(super) size: u64,
    pub(super) flags: u32,
    pub(super) user_addr: u64,
    pub(super) mapped_on: Vec<GpuId>,
    pub(super) bo: crate::hw::bo::BoId,
}

pub(super) fn allocs(st: &State, pid: Pid) -> Result<Vec<Alloc>, WorkloadError> {
    let p = st.kfd(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
    let mut out = Vec::new();
    for pdd in &p.pdds {
        for (&slot, m) in &pdd.idr {
            // In user gpu_id order: the order of the process's devices
            // follows the machine's topology, which a restore on another
            // machine legitimately changes.
            let mut mapped_on: Vec<GpuId> =
                m.mapped.iter().map(|&i| p.pdds[i].user_gpu_id).collect();
            mapped_on.sort_unstable();
            out.push(Alloc {
                handle: crate::amdkfd::memory::make_handle(pdd.user_gpu_id, slot),
                va: m.va,
                size: m.size,
                flags: m.flags,
                user_addr: m.user_addr,
                mapped_on,
                bo: m.bo,
            });
        }
    }
    out.sort_by_key(|a| a.handle);
    Ok(out)
}

/// The allocations `step` mixes into: VRAM/GTT/USERPTR, except the event
/// signal page (the GPU writes event slots there, not data).
pub(super) fn data_allocs<'a>(st: &State, pid: Pid, list: &'a [Alloc]) -> Vec<&'a Alloc> {
    let page = match st.kfd(pid).and_then(|p| p.signal_page.as_ref()) {
        Some(crate::amdkfd::process::SignalPage::User { bo, .. }) => Some(*bo),
        _ => None,
    };
    list.iter()
        .filter(|a| Some(a.bo) != page)
        .filter(|a| {
            matches!(
                st.bos.get(a.bo).map(|b| b.domain),
                Some(Domain::Vram | Domain::Gtt | Domain::UserPtr)
            )
        })
        .collect()
}

/// The allocation holding the step counter: the first VRAM/GTT data BO.
pub(super) fn control_alloc<'a>(
    st: &State,
    pid: Pid,
    list: &'a [Alloc],
) -> Result<&'a Alloc, WorkloadError> {
    data_allocs(st, pid, list)
        .into_iter()
        .find(|a| {
            matches!(
                st.bos.get(a.bo).map(|b| b.domain),
                Some(Domain::Vram | Domain::Gtt)
            )
        })
        .ok_or(WorkloadError::NoMemory(pid))
}

/// Hash of a BO's logical contents.
pub(super) fn content_hash(st: &State, pid: Pid, a: &Alloc) -> Result<u64, WorkloadError> {
    let Some(bo) = st.bos.get(a.bo) else {
        return Ok(0);
    };
    let mut h = Hasher::new();
    let err = |errno| WorkloadError::Memory {
        pid,
        handle: a.handle,
        errno,
    };
    match &bo.backing {
        Backing::Memory(m) => {
            // Zero pages are skipped, so a page never written and a page
            // written with zeros (by a restore's copy) hash alike.
            const PAGE: usize = 4096;
            let zero = [0u8; PAGE];
            let mut buf = vec![0u8; (4 * MIB).min(bo.size) as usize];
            let mut off = 0;
            while off < bo.size {
                let n = (bo.size - off).min(buf.len() as u64) as usize;
                m.read_at(off, &mut buf[..n]).map_err(err)?;
                for (i, page) in buf[..n].chunks(PAGE).enumerate() {
                    if page != &zero[..page.len()] {
                        h.u64(off + (i * PAGE) as u64);
                        h.bytes(page);
                    }
                }
                off += n as u64;
            }
        }
        Backing::UserPtr { addr, .. } => match st.read_host(*addr, bo.size as usize) {
            Some(bytes) => h.bytes(&bytes),
            None => return Ok(0),
        },
        Backing::Aperture(_) => return Ok(0),
    }
    Ok(h.0)
}

pub(super) fn describe_locked(st: &State, pid: Pid) -> Result<WorkloadDescription, WorkloadError> {
    let p = st.kfd(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
    let mut bos = Vec::new();
    for a in allocs(st, pid)? {
        bos.push(BoDescription {
            handle: a.handle,
            va: a.va,
            size: a.size,
            flags: a.flags,
            user_addr: a.user_addr,
            mapped_on: a.mapped_on.clone(),
            content_hash: content_hash(st, pid, &a)?,
        });
    }
    let queues = p
        .queues
        .values()
        .map(|q| QueueDescription {
            q_id: q.q_id,
            gpu_id: p.pdds[q.pdd].user_gpu_id,
            queue_type: q.ktype,
            doorbell_id: q.doorbell_id,
            dispatched: q.dispatched(),
        })
        .collect();
    let events = p
        .events
        .values()
        .map(|e| EventDescription {
            id: e.id,
            event_type: e.etype,
            signaled: e.signaled,
        })
        .collect();
    Ok(WorkloadDescription {
        pid,
        bos,
        queues,
        events,
        svm_ranges: p.svm.iter().map(|r| (r.start, r.size)).collect(),
    })
}

impl Workload {
    /// One step of GPU progress: fails with [`WorkloadError::QueuesNotRunning`]
    /// while a queue is evicted; otherwise advances the step counter (kept in
    /// the first VRAM/GTT BO), mixes it into every VRAM/GTT/USERPTR BO,
    /// advances every queue and signals one signal event.
    pub fn step(&mut self) -> Result<(), WorkloadError> {
        let mut st = self.sim.lock();
        let pid = self.pid;
        let p = st.kfd(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
        if let Some(q) = p.queues.values().find(|q| !p.queues_running(q.pdd)) {
            return Err(WorkloadError::QueuesNotRunning { pid, q_id: q.q_id });
        }
        let list = allocs(&st, pid)?;
        let control = control_alloc(&st, pid, &list)?;
        let counter = {
            let raw = read8(&st, pid, control, 0)?;
            let c = raw.wrapping_add(1);
            write8(&st, pid, control, 0, c)?;
            c
        };
        for a in data_allocs(&st, pid, &list) {
            let pages = a.size / 4096;
            let page = splitmix(counter ^ a.handle) % pages.max(1);
            for off in [8, page * 4096 + 16] {
                if off + 8 > a.size {
                    continue;
                }
                let old = read8(&st, pid, a, off)?;
                write8(
                    &st,
                    pid,
                    a,
                    off,
                    splitmix(old ^ counter.rotate_left(13) ^ a.handle),
                )?;
            }
        }
        let p = st.kfd_mut(pid).ok_or(WorkloadError::NoKfdProcess(pid))?;
        for q in p.queues.values_mut() {
            q.advance();
        }
        let signal_ids: Vec<u32> = p
            .events
            .values()
            .filter(|e| is_signal_type(e.etype))
            .map(|e| e.id)
            .collect();
        if !signal_ids.is_empty() {
            let id = signal_ids[(counter % signal_ids.len() as u64) as usize];
            crate::amdkfd::event::signal(&mut st, pid, id).map_err(|errno| {
                WorkloadError::Ioctl {
                    pid,
                    op: "SET_EVENT",
                    errno,
                }
            })?;
        }
        Ok(())
    }

    /// The number of steps made so far (the counter in the control BO).
    pub fn steps(&self) -> Result<u64, WorkloadError> {
        let st = self.sim.lock();
        let list = allocs(&st, self.pid)?;
        read8(&st, self.pid, control_alloc(&st, self.pid, &list)?, 0)
    }

    /// What the process holds now.
    pub fn describe(&self) -> Result<WorkloadDescription, WorkloadError> {
        describe_locked(&self.sim.lock(), self.pid)
    }

    /// Checks that process `pid` holds what `expected` describes (same
    /// handles, addresses, sizes, flags, mappings and contents; same queues,
    /// events and SVM ranges).
    pub fn verify(
        sim: &Sim,
        pid: Pid,
        expected: &WorkloadDescription,
    ) -> Result<(), WorkloadError> {
        let found = describe_locked(&sim.lock(), pid)?;
        let differences = expected.differences(&found);
        if differences.is_empty() {
            Ok(())
        } else {
            Err(WorkloadError::Mismatch { pid, differences })
        }
    }

    /// A hash of everything the workload's progress is made of (see the
    /// module docs); equal for an interrupted-and-restored run and an
    /// uninterrupted one.
    pub fn fingerprint(&self) -> Result<u64, WorkloadError> {
        let st = self.sim.lock();
        let d = describe_locked(&st, self.pid)?;
        let p = st
            .kfd(self.pid)
            .ok_or(WorkloadError::NoKfdProcess(self.pid))?;
        let mut h = Hasher::new();
        for b in &d.bos {
            // A USERPTR BO sits wherever the application's CPU memory is,
            // which differs between two runs in one host: its address is
            // checked by `verify`, not fingerprinted.
            let va = if b.flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
                0
            } else {
                b.va
            };
            for v in [b.handle, va, b.size, u64::from(b.flags), b.content_hash] {
                h.u64(v);
            }
            for &g in &b.mapped_on {
                h.u64(u64::from(g));
            }
        }
        for q in p.queues.values() {
            for v in [
                u64::from(q.q_id),
                u64::from(q.ktype),
                u64::from(q.format),
                u64::from(q.doorbell_id),
                u64::from(q.sdma_id),
                q.ring_base,
                q.ring_size,
                q.dispatched(),
                u64::from(p.pdds[q.pdd].user_gpu_id),
            ] {
                h.u64(v);
            }
            h.bytes(&q.ctl_stack);
        }
        for e in p.events.values() {
            h.u64(u64::from(e.id));
            h.u64(u64::from(e.etype));
            h.u64(u64::from(e.signaled));
            h.u64(u64::from(e.auto_reset));
        }
        for r in &p.svm {
            // SVM ranges cover CPU memory too: their start is not fingerprinted.
            for v in [r.size, u64::from(r.flags), u64::from(r.granularity)] {
                h.u64(v);
            }
        }
        Ok(h.0)
    }
}

pub(super) fn find(st: &State, pid: Pid, handle: u64) -> Result<Alloc, WorkloadError> {
    allocs(st, pid)?
        .into_iter()
        .find(|a| a.handle == handle)
        .ok_or(WorkloadError::Memory {
            pid,
            handle,
            errno: Errno(libc::EINVAL),
        })
}

pub(super) fn read8(st: &State, pid: Pid, a: &Alloc, off: u64) -> Result<u64, WorkloadError> {
    let err = |errno| WorkloadError::Memory {
        pid,
        handle: a.handle,
        errno,
    };
    let mut b = [0u8; 8];
    match st.bos.get(a.bo).map(|b| &b.backing) {
        Some(Backing::Memory(m)) => m.read_at(off, &mut b).map_err(err)?,
        Some(Backing::UserPtr { addr, .. }) => {
            b.copy_from_slice(
                &st.read_host(addr + off, 8)
                    .ok_or(err(Errno(libc::EFAULT)))?,
            );
        }
        _ => return Err(err(Errno(libc::EINVAL))),
    }
    Ok(u64::from_le_bytes(b))
}

pub(super) fn write8(
    st: &State,
    pid: Pid,
    a: &Alloc,
    off: u64,
    v: u64,
) -> Result<(), WorkloadError> {
    let err = |errno| WorkloadError::Memory {
        pid,
        handle: a.handle,
        errno,
    };
    match st.bos.get(a.bo).map(|b| &b.backing) {
        Some(Backing::Memory(m)) => m.write_at(off, &v.to_le_bytes()).map_err(err),
        Some(Backing::UserPtr { addr, .. }) => {
            if st.write_host(addr + off, &v.to_le_bytes()) {
                Ok(())
            } else {
                Err(err(Errno(libc::EFAULT)))
            }
        }
        _ => Err(err(Errno(libc::EINVAL))),
    }
}
