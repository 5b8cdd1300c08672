//! A simulated process that keeps the GPUs' copy engines busy the way a
//! ROCr application does with `hsa_amd_memory_async_copy`: one SDMA queue
//! per GPU whose ring, read and write pointers and completion signals live
//! in the process's own memory (carried by a checkpoint as CRIU carries a
//! process's pages), VRAM buffers on every GPU mapped on all of them, and
//! one signal event per queue.
//!
//! Each copy is submitted with the packets ROCr 5.2's `BlitSdmaV4` sends
//! (recorded by kfd-sim-preload's ROCr test): optional polls of a
//! dependency signal's two dwords, an HDP flush, linear copies of at most
//! 0x3fffe0 bytes, the completion signal's decrement (ATOMIC ADD64 of -1),
//! a FENCE of the queue event's id into its signal page slot and a TRAP
//! with that id; then the write pointer goes to memory and the doorbell is
//! rung. Waiting is ROCr's `InterruptSignal::WaitRelaxed`: look at the
//! signal's value, sleep in WAIT_EVENTS on its event, look again.
//!
//! A [`Gate`] is a dependency signal held at 1: the copies after it wait in
//! the ring until [`CopyStream::open`] stores 0, so a test can have work
//! queued behind a point at the moment it checkpoints. Everything the
//! stream needs to go on lives in its memory (a header at its start), so a
//! restored process continues with [`CopyStream::attach`].
//!
//! The process's CPU stores (ring contents, its write pointer, a doorbell)
//! are made straight into the memory the simulator gives it, as a real
//! process's stores into its mappings. This module never performs CRIU
//! ops.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use amdgpu_topology::GpuId;
use kfd_sys::*;

use super::{kioctl, open_device, open_render, Hasher, WorkloadError};
use crate::{Pid, Sim, SimDriver};
use ::kfd::Errno;

/// The first word of the stream's memory.
const MAGIC: u64 = u64::from_le_bytes(*b"KFDSIMCS");
/// Header: magic, GPU count, buffer size, next signal; then per GPU (at
/// 64 + 32·i): user gpu_id, queue id, doorbell id, event id.
const HEADER: u64 = 0;
const RINGS: u64 = 4096;
/// Ring bytes per queue (ROCr's `BlitSdmaBase::kQueueSize` is 1 MiB).
const RING_BYTES: u64 = 256 << 10;
/// Ring, then a page with the read (0) and write (8) pointers.
const RING_STRIDE: u64 = RING_BYTES + 4096;
const MAX_GPUS: usize = 16;
/// Completion and gate signals (`amd_signal_t`, 64 bytes each).
const SIGNALS_AT: u64 = RINGS + RING_STRIDE * MAX_GPUS as u64;
const MAX_SIGNALS: u64 = 1024;
const HOST_AT: u64 = SIGNALS_AT + MAX_SIGNALS * 64;
/// ROCr's `SDMA_PKT_COPY_LINEAR::kMaxSize_`.
const MAX_COPY: u64 = 0x3f_ffe0;
/// The VRAM buffers: one BO per GPU at a VA of its own.
const VRAM_BASE: u64 = 0x7E00_0000_0000;
const VRAM_STRIDE: u64 = 1 << 36;
/// The event page (a GTT BO, as the thunk's on a dGPU).
const EVENT_PAGE_VA: u64 = 0x7DF0_0000_0000;
/// The stream's mark of a gate in a signal's `reserved1` dword.
const GATE_FLAG: u64 = 28;

/// What a stream is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStreamConfig {
    /// How many of the machine's GPUs it uses (from the first).
    pub gpus: usize,
    /// Bytes of each buffer: per GPU a host source and destination, and a
    /// VRAM BO of twice this (halves A and B).
    pub buffer_bytes: u64,
}

impl Default for CopyStreamConfig {
    fn default() -> Self {
        CopyStreamConfig {
            gpus: 2,
            buffer_bytes: 8 << 20,
        }
    }
}

/// One copy (sizes at most the buffer size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOp {
    /// Host source of GPU `gpu` to half A of its VRAM, on its queue.
    HostToDevice {
        /// GPU index in the stream.
        gpu: usize,
        /// Bytes.
        bytes: u64,
    },
    /// Half A of GPU `gpu`'s VRAM to its host destination, on its queue.
    DeviceToHost {
        /// GPU index in the stream.
        gpu: usize,
        /// Bytes.
        bytes: u64,
    },
    /// Half A of `from`'s VRAM to half B of `to`'s, on `from`'s queue.
    DeviceToDevice {
        /// Source GPU index.
        from: usize,
        /// Destination GPU index.
        to: usize,
        /// Bytes.
        bytes: u64,
    },
}

/// A submitted copy's completion signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    signal: u64,
    gpu: usize,
}

/// A point in a queue the copies after it wait behind (see the module
/// docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    signal: u64,
}

/// Why a stream operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CopyStreamError {
    /// A workload-level failure (an ioctl, the simulator).
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The configuration does not fit the machine or the stream's memory.
    #[error("copy stream: {0}")]
    Config(String),
    /// The process's memory is not a stream's (no header at the address).
    #[error("process {pid}: no copy stream at {addr:#x}")]
    NotAStream {
        /// The process.
        pid: Pid,
        /// The address looked at.
        addr: u64,
    },
    /// A copy did not complete in time.
    #[error("process {pid}: copy signal {signal:#x} still {value} after {waited:?}")]
    Timeout {
        /// The process.
        pid: Pid,
        /// The signal.
        signal: u64,
        /// Its value then.
        value: i64,
        /// How long was waited.
        waited: Duration,
    },
}

/// The per-GPU part of the stream.
#[derive(Debug, Clone, Copy)]
struct Lane {
    gpu_id: GpuId,
    queue: u32,
    doorbell: u32,
    event: u32,
}

/// A simulated process streaming copies (see the module docs).
#[derive(Debug)]
pub struct CopyStream {
    sim: Sim,
    pid: Pid,
    driver: SimDriver,
    kfd: OwnedFd,
    renders: Vec<OwnedFd>,
    mem: u64,
    buffer: u64,
    lanes: Vec<Lane>,
}

fn lo(v: u64) -> u32 {
    v as u32
}
fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

impl CopyStream {
    /// Spawns a process and sets it up as `config` says.
    pub fn launch(sim: &Sim, config: &CopyStreamConfig) -> Result<CopyStream, CopyStreamError> {
        let gpus: Vec<GpuId> = sim.gpus().iter().map(|g| g.gpu_id).collect();
        if config.gpus == 0 || config.gpus > gpus.len().min(MAX_GPUS) {
            return Err(CopyStreamError::Config(format!(
                "{} gpus asked of a machine with {}",
                config.gpus,
                gpus.len()
            )));
        }
        let gpus = &gpus[..config.gpus];
        if sim
            .gpus()
            .iter()
            .take(config.gpus)
            .any(|g| g.family < AMDGPU_FAMILY_AI)
        {
            return Err(CopyStreamError::Config(
                "the stream drives GFX9 (SOC15) and later SDMA queues: 64-bit doorbells".into(),
            ));
        }
        let buffer = config.buffer_bytes.div_ceil(4096) * 4096;
        let pid = sim.spawn_process().map_err(WorkloadError::from)?;
        let driver = sim.driver(pid);
        let kfd = open_device(&driver, pid, "/dev/kfd".as_ref())?;
        let mut renders = Vec::new();
        for &gpu in gpus {
            let render = open_render(sim, &driver, pid, gpu)?;
            let mut a = kfd_ioctl_acquire_vm_args {
                drm_fd: render.as_raw_fd() as u32,
                gpu_id: gpu,
            };
            kioctl(
                &driver,
                kfd_fd(&kfd),
                AMDKFD_IOC_ACQUIRE_VM,
                &mut a,
                "ACQUIRE_VM",
            )?;
            renders.push(render);
        }
        let total = HOST_AT + 2 * buffer * gpus.len() as u64;
        let mem = sim
            .alloc_host_memory_for(pid, total as usize)
            .map_err(WorkloadError::from)?;
        let mut s = CopyStream {
            sim: sim.clone(),
            pid,
            driver,
            kfd,
            renders,
            mem,
            buffer,
            lanes: Vec::new(),
        };
        let user = s.alloc(gpus[0], mem, total, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, mem)?;
        s.map(user, gpus)?;
        for (i, &gpu) in gpus.iter().enumerate() {
            let vram = s.alloc(
                gpu,
                VRAM_BASE + i as u64 * VRAM_STRIDE,
                2 * buffer,
                KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
                0,
            )?;
            s.map(vram, gpus)?;
        }
        let page = s.alloc(
            gpus[0],
            EVENT_PAGE_VA,
            u64::from(KFD_SIGNAL_EVENT_LIMIT) * 8,
            KFD_IOC_ALLOC_MEM_FLAGS_GTT,
            0,
        )?;
        s.map(page, gpus)?;
        for (i, &gpu) in gpus.iter().enumerate() {
            let mut e = kfd_ioctl_create_event_args {
                event_page_offset: if i == 0 { page } else { 0 },
                event_type: KFD_IOC_EVENT_SIGNAL,
                auto_reset: 1,
                ..Default::default()
            };
            s.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut e, "CREATE_EVENT")?;
            let ring = mem + RINGS + i as u64 * RING_STRIDE;
            let mut q = kfd_ioctl_create_queue_args {
                ring_base_address: ring,
                read_pointer_address: ring + RING_BYTES,
                write_pointer_address: ring + RING_BYTES + 8,
                ring_size: RING_BYTES as u32,
                gpu_id: gpu,
                queue_type: KFD_IOC_QUEUE_TYPE_SDMA,
                queue_percentage: 100,
                queue_priority: 15,
                ..Default::default()
            };
            s.ioctl(AMDKFD_IOC_CREATE_QUEUE, &mut q, "CREATE_QUEUE")?;
            s.lanes.push(Lane {
                gpu_id: gpu,
                queue: q.queue_id,
                doorbell: lo(q.doorbell_offset & 0x1FFF) / 8,
                event: e.event_id,
            });
        }
        // The sources: bytes that differ per GPU and per position.
        for i in 0..gpus.len() {
            let src: Vec<u8> = (0..buffer)
                .map(|b| {
                    (b.wrapping_mul(131) ^ (b >> 12).wrapping_mul(7) ^ (i as u64 * 0x5D)) as u8
                })
                .collect();
            s.store(s.host_src(i), &src)?;
        }
        s.write_header(1)?;
        Ok(s)
    }

    /// A handle on the stream of process `pid` whose memory starts at
    /// `mem` ([`CopyStream::memory`]), for example a restored one: it opens
    /// `/dev/kfd` again in that process (the same KFD process) and reads
    /// where the stream stands from the stream's memory.
    pub fn attach(sim: &Sim, pid: Pid, mem: u64) -> Result<CopyStream, CopyStreamError> {
        let driver = sim.driver(pid);
        let kfd = open_device(&driver, pid, "/dev/kfd".as_ref())?;
        let head = sim
            .read_host_memory(mem + HEADER, 64 + 32 * MAX_GPUS)
            .ok_or(CopyStreamError::NotAStream { pid, addr: mem })?;
        let word = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or([0; 8]));
        let dword = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap_or([0; 4]));
        if word(0) != MAGIC || dword(8) as usize > MAX_GPUS {
            return Err(CopyStreamError::NotAStream { pid, addr: mem });
        }
        let lanes = (0..dword(8) as usize)
            .map(|i| {
                let at = 64 + 32 * i;
                Lane {
                    gpu_id: dword(at),
                    queue: dword(at + 4),
                    doorbell: dword(at + 8),
                    event: dword(at + 12),
                }
            })
            .collect();
        Ok(CopyStream {
            sim: sim.clone(),
            pid,
            driver,
            kfd,
            renders: Vec::new(),
            mem,
            buffer: word(16),
            lanes,
        })
    }

    /// The process.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Where the stream's memory starts (for [`CopyStream::attach`]).
    pub fn memory(&self) -> u64 {
        self.mem
    }

    /// The stream's `/dev/kfd` fd.
    pub fn kfd_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        kfd_fd(&self.kfd)
    }

    /// The stream's render-node fds, in GPU order (empty when attached).
    pub fn render_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.renders.iter().map(std::os::fd::AsFd::as_fd).collect()
    }

    /// The queue ids, per GPU of the stream.
    pub fn queues(&self) -> Vec<u32> {
        self.lanes.iter().map(|l| l.queue).collect()
    }

    fn ioctl<T>(&self, request: u32, arg: &mut T, op: &'static str) -> Result<(), WorkloadError>
    where
        T: zerocopy::IntoBytes + zerocopy::FromBytes + zerocopy::Immutable + zerocopy::KnownLayout,
    {
        kioctl(&self.driver, kfd_fd(&self.kfd), request, arg, op)
    }

    fn alloc(
        &self,
        gpu: GpuId,
        va: u64,
        size: u64,
        kind: u32,
        offset: u64,
    ) -> Result<u64, WorkloadError> {
        let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            handle: 0,
            mmap_offset: offset,
            gpu_id: gpu,
            flags: kind | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE,
        };
        self.ioctl(
            AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
            &mut a,
            "ALLOC_MEMORY_OF_GPU",
        )?;
        Ok(a.handle)
    }

    fn map(&self, handle: u64, gpus: &[GpuId]) -> Result<(), WorkloadError> {
        let ids = gpus.to_vec();
        let mut m = kfd_ioctl_map_memory_to_gpu_args {
            handle,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: ids.len() as u32,
            n_success: 0,
        };
        self.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut m, "MAP_MEMORY_TO_GPU")
    }

    fn store(&self, addr: u64, bytes: &[u8]) -> Result<(), WorkloadError> {
        if self.sim.write_host_memory(addr, bytes) {
            Ok(())
        } else {
            Err(WorkloadError::Memory {
                pid: self.pid,
                handle: addr,
                errno: Errno(libc::EFAULT),
            })
        }
    }

    fn load(&self, addr: u64, len: usize) -> Result<Vec<u8>, WorkloadError> {
        self.sim
            .read_host_memory(addr, len)
            .ok_or(WorkloadError::Memory {
                pid: self.pid,
                handle: addr,
                errno: Errno(libc::EFAULT),
            })
    }

    fn load_u64(&self, addr: u64) -> Result<u64, WorkloadError> {
        let b = self.load(addr, 8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    fn write_header(&self, next_signal: u64) -> Result<(), WorkloadError> {
        let mut h = vec![0u8; 64 + 32 * self.lanes.len()];
        h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&(self.lanes.len() as u32).to_le_bytes());
        h[16..24].copy_from_slice(&self.buffer.to_le_bytes());
        h[24..32].copy_from_slice(&next_signal.to_le_bytes());
        for (i, l) in self.lanes.iter().enumerate() {
            let at = 64 + 32 * i;
            for (j, v) in [l.gpu_id, l.queue, l.doorbell, l.event].iter().enumerate() {
                h[at + 4 * j..at + 4 * j + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        self.store(self.mem + HEADER, &h)
    }

    fn host_src(&self, gpu: usize) -> u64 {
        self.mem + HOST_AT + 2 * self.buffer * gpu as u64
    }
    fn host_dst(&self, gpu: usize) -> u64 {
        self.host_src(gpu) + self.buffer
    }
    fn vram(&self, gpu: usize, half: u64) -> u64 {
        VRAM_BASE + gpu as u64 * VRAM_STRIDE + half * self.buffer
    }

    /// A fresh signal with value `value` whose mailbox is `lane`'s event
    /// slot (an interrupt signal, as ROCr's).
    fn signal(&self, lane: usize, value: i64) -> Result<u64, CopyStreamError> {
        let next = self.load_u64(self.mem + HEADER + 24)?;
        if next >= MAX_SIGNALS {
            return Err(CopyStreamError::Config(format!(
                "more than {MAX_SIGNALS} signals"
            )));
        }
        self.write_header(next + 1)?;
        let at = self.mem + SIGNALS_AT + next * 64;
        let event = self.lanes[lane].event;
        let mut s = [0u8; 64];
        s[0..8].copy_from_slice(&1i64.to_le_bytes());
        s[8..16].copy_from_slice(&value.to_le_bytes());
        s[16..24].copy_from_slice(&(EVENT_PAGE_VA + u64::from(event) * 8).to_le_bytes());
        s[24..28].copy_from_slice(&event.to_le_bytes());
        self.store(at, &s)?;
        Ok(at)
    }

    /// Appends `dwords` to lane `lane`'s ring, stores the write pointer and
    /// rings the doorbell.
    fn submit(&self, lane: usize, dwords: &[u32]) -> Result<(), CopyStreamError> {
        let ring = self.mem + RINGS + lane as u64 * RING_STRIDE;
        let wptr_at = ring + RING_BYTES + 8;
        let wptr = self.load_u64(wptr_at)?;
        let rptr = self.load_u64(ring + RING_BYTES)?;
        let bytes: Vec<u8> = dwords.iter().flat_map(|d| d.to_le_bytes()).collect();
        if wptr + bytes.len() as u64 - rptr >= RING_BYTES {
            return Err(CopyStreamError::Config("the ring is full".into()));
        }
        let mut off = wptr % RING_BYTES;
        let mut done = 0usize;
        while done < bytes.len() {
            let n = ((RING_BYTES - off) as usize).min(bytes.len() - done);
            self.store(ring + off, &bytes[done..done + n])?;
            done += n;
            off = 0;
        }
        let new = wptr + bytes.len() as u64;
        self.store(wptr_at, &new.to_le_bytes())?;
        self.ring_doorbell(lane, new)
    }

    fn ring_doorbell(&self, lane: usize, value: u64) -> Result<(), CopyStreamError> {
        let st = self.sim.lock();
        let page = st
            .kfd(self.pid)
            .and_then(|p| {
                let pdd = p.pdd_by_user_id(self.lanes[lane].gpu_id)?;
                p.pdds[pdd].doorbell_page.clone()
            })
            .ok_or(WorkloadError::NoKfdProcess(self.pid))?;
        drop(st);
        page.write_at(
            u64::from(self.lanes[lane].doorbell) * 8,
            &value.to_le_bytes(),
        )
        .map_err(|errno| WorkloadError::Memory {
            pid: self.pid,
            handle: u64::from(self.lanes[lane].doorbell),
            errno,
        })?;
        Ok(())
    }

    /// Queues a gate on `gpu`'s queue: its later copies wait until
    /// [`CopyStream::open`].
    pub fn gate(&self, gpu: usize) -> Result<Gate, CopyStreamError> {
        let signal = self.signal(gpu, 1)?;
        self.store(signal + GATE_FLAG, &1u32.to_le_bytes())?;
        self.submit(gpu, &dependency_polls(signal))?;
        Ok(Gate { signal })
    }

    /// Opens `gate` (stores 0 in its signal, as `hsa_signal_store`).
    pub fn open(&self, gate: Gate) -> Result<(), CopyStreamError> {
        self.store(gate.signal + 8, &0i64.to_le_bytes())?;
        Ok(())
    }

    /// Opens every gate of the stream (a restored stream finds them in
    /// its memory).
    pub fn open_all(&self) -> Result<(), CopyStreamError> {
        for g in self.gates()? {
            self.open(Gate { signal: g })?;
        }
        Ok(())
    }

    /// Every signal the stream made: (address, whether it is a gate).
    fn signals(&self) -> Result<Vec<(u64, bool)>, CopyStreamError> {
        let next = self.load_u64(self.mem + HEADER + 24)?;
        (1..next)
            .map(|i| {
                let at = self.mem + SIGNALS_AT + i * 64;
                let flag = self.load(at + GATE_FLAG, 4)?;
                Ok((at, flag == [1, 0, 0, 0]))
            })
            .collect()
    }

    fn gates(&self) -> Result<Vec<u64>, CopyStreamError> {
        Ok(self
            .signals()?
            .into_iter()
            .filter(|(_, g)| *g)
            .map(|(a, _)| a)
            .collect())
    }

    /// Submits `op` as ROCr would: the packets of the module docs, on the
    /// queue of the GPU that copies.
    pub fn copy(&self, op: CopyOp) -> Result<Ticket, CopyStreamError> {
        let (lane, src, dst, bytes) = match op {
            CopyOp::HostToDevice { gpu, bytes } => {
                (gpu, self.host_src(gpu), self.vram(gpu, 0), bytes)
            }
            CopyOp::DeviceToHost { gpu, bytes } => {
                (gpu, self.vram(gpu, 0), self.host_dst(gpu), bytes)
            }
            CopyOp::DeviceToDevice { from, to, bytes } => {
                (from, self.vram(from, 0), self.vram(to, 1), bytes)
            }
        };
        if lane >= self.lanes.len() || bytes == 0 || bytes > self.buffer {
            return Err(CopyStreamError::Config(format!(
                "copy {op:?} does not fit the stream"
            )));
        }
        if let CopyOp::DeviceToDevice { to, .. } = op {
            if to >= self.lanes.len() {
                return Err(CopyStreamError::Config(format!(
                    "copy {op:?} does not fit the stream"
                )));
            }
        }
        let signal = self.signal(lane, 1)?;
        let event = self.lanes[lane].event;
        let mut p: Vec<u32> = HDP_FLUSH.to_vec();
        let mut done = 0u64;
        while done < bytes {
            let n = (bytes - done).min(MAX_COPY);
            let (s, d) = (src + done, dst + done);
            p.extend([1, (n - 1) as u32, 0, lo(s), hi(s), lo(d), hi(d)]);
            done += n;
        }
        let value = signal + 8;
        p.extend([
            10 | (47 << 25),
            lo(value),
            hi(value),
            u32::MAX,
            u32::MAX,
            0,
            0,
            0,
        ]);
        let slot = EVENT_PAGE_VA + u64::from(event) * 8;
        p.extend([5, lo(slot), hi(slot), event]);
        p.extend([6, event]);
        self.submit(lane, &p)?;
        Ok(Ticket { signal, gpu: lane })
    }

    /// A signal's value.
    fn value(&self, signal: u64) -> Result<i64, CopyStreamError> {
        Ok(self.load_u64(signal + 8)? as i64)
    }

    /// Waits (ROCr's way) until `ticket`'s signal reaches 0, at most
    /// `timeout`.
    pub fn wait(&self, ticket: Ticket, timeout: Duration) -> Result<(), CopyStreamError> {
        let start = Instant::now();
        loop {
            let value = self.value(ticket.signal)?;
            if value < 1 {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(CopyStreamError::Timeout {
                    pid: self.pid,
                    signal: ticket.signal,
                    value,
                    waited,
                });
            }
            let ms = (timeout - waited).as_millis().clamp(1, 100) as u32;
            let mut data = [[0u8; 48]; 1];
            data[0][40..44].copy_from_slice(&self.lanes[ticket.gpu].event.to_ne_bytes());
            let mut w = kfd_ioctl_wait_events_args {
                events_ptr: data.as_mut_ptr() as u64,
                num_events: 1,
                wait_for_all: 0,
                timeout: ms,
                wait_result: 0,
            };
            self.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w, "WAIT_EVENTS")?;
        }
    }

    /// Waits until every completion signal the stream handed out reached
    /// 0, at most `timeout` in all.
    pub fn wait_all(&self, timeout: Duration) -> Result<(), CopyStreamError> {
        let deadline = Instant::now() + timeout;
        for (signal, gate) in self.signals()? {
            if gate {
                continue;
            }
            let mailbox = self.load_u64(signal + 16)?;
            let gpu = self
                .lanes
                .iter()
                .position(|l| EVENT_PAGE_VA + u64::from(l.event) * 8 == mailbox)
                .unwrap_or(0);
            let left = deadline.saturating_duration_since(Instant::now());
            self.wait(Ticket { signal, gpu }, left)?;
        }
        Ok(())
    }

    /// A hash of what the copies produced: every buffer (host and VRAM, as
    /// the GPU reads them) and every signal value. Two streams that ran the
    /// same copies end with the same fingerprint, wherever their memory is.
    pub fn fingerprint(&self) -> Result<u64, CopyStreamError> {
        let mut h = Hasher::new();
        for (i, lane) in self.lanes.iter().enumerate() {
            h.bytes(&self.load(self.host_dst(i), self.buffer as usize)?);
            for half in 0..2 {
                let va = self.vram(i, half);
                let bytes = self
                    .sim
                    .read_gpu_memory(self.pid, lane.gpu_id, va, self.buffer as usize)
                    .ok_or(WorkloadError::Memory {
                        pid: self.pid,
                        handle: va,
                        errno: Errno(libc::EFAULT),
                    })?;
                h.bytes(&bytes);
            }
        }
        let next = self.load_u64(self.mem + HEADER + 24)?;
        h.u64(next);
        for i in 1..next {
            h.u64(self.value(self.mem + SIGNALS_AT + i * 64)? as u64);
        }
        Ok(h.0)
    }

    /// Ends the process.
    pub fn exit(self) -> Result<(), CopyStreamError> {
        let (sim, pid) = (self.sim.clone(), self.pid);
        drop(self);
        sim.exit_process(pid).map_err(WorkloadError::from)?;
        Ok(())
    }
}

fn kfd_fd(fd: &OwnedFd) -> std::os::fd::BorrowedFd<'_> {
    std::os::fd::AsFd::as_fd(fd)
}

/// ROCr's `hdp_flush_cmd` (sdma_registers.h).
const HDP_FLUSH: [u32; 6] = [0x8, 0x0, 0x8000_0000, 0x0, 0x0, 0x0];
/// POLL_REGMEM header ROCr's `BuildPollCommand` makes: memory, equal.
const POLL_MEM_EQ: u32 = 8 | (3 << 28) | (1 << 31);

/// ROCr's dependency wait on `signal`: its high dword, then its low dword,
/// polled until 0.
fn dependency_polls(signal: u64) -> Vec<u32> {
    let value = signal + 8;
    let mut p = Vec::with_capacity(12);
    for addr in [value + 4, value] {
        p.extend([
            POLL_MEM_EQ,
            lo(addr),
            hi(addr),
            0,
            u32::MAX,
            4 | (0xFFF << 16),
        ]);
    }
    p
}
