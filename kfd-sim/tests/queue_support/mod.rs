//! Test support for user-mode queues: a simulated process with one queue
//! whose ring, read/write pointers and scratch buffers live in its own host
//! memory (a USERPTR BO mapped on the GPU, as libhsakmt's queue memory is),
//! a VRAM BO, and its doorbell mapped through `/dev/kfd`; packets are
//! written into the ring and the doorbell rung as a runtime does.
#![allow(dead_code)]

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::kfd::Driver;
use kfd_sim::{Pid, QueueState, QueueStatus, Sim};
use kfd_sys::*;

#[path = "../kfd_support/mod.rs"]
pub mod kfd_support;
pub use kfd_support::*;

/// Host memory layout of the process (offsets from `mem`).
pub const RING: u64 = 0;
pub const RING_BYTES: u64 = 64 * KIB;
pub const RPTR: u64 = 64 * KIB;
pub const WPTR: u64 = 64 * KIB + 8;
/// Signals, flags, fences: 4 KiB.
pub const MISC: u64 = 68 * KIB;
/// Scratch buffers for copies: the rest.
pub const SCRATCH: u64 = 128 * KIB;
pub const MEM_BYTES: u64 = 8 << 20;
/// The VRAM BO's GPU VA and size.
pub const VRAM_VA: u64 = 0x7F00_0000_0000;
pub const VRAM_BYTES: u64 = 8 << 20;
/// The event page (a GTT BO, as the thunk's dGPU event page).
pub const EVENTS_VA: u64 = 0x7F10_0000_0000;

/// How a queue's pointers count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sdma,
    Pm4,
    Aql,
}

impl Kind {
    pub fn queue_type(self) -> u32 {
        match self {
            Kind::Sdma => KFD_IOC_QUEUE_TYPE_SDMA,
            Kind::Pm4 => KFD_IOC_QUEUE_TYPE_COMPUTE,
            Kind::Aql => KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        }
    }
    /// Bytes per pointer unit.
    pub fn unit(self) -> u64 {
        match self {
            Kind::Sdma => 1,
            Kind::Pm4 => 4,
            Kind::Aql => 64,
        }
    }
}

/// A process with one queue.
pub struct QueueProc {
    pub sim: Sim,
    pub p: Proc,
    pub kind: Kind,
    pub gpu: u32,
    /// Host (= GPU) address of the memory.
    pub mem: u64,
    pub queue: kfd_ioctl_create_queue_args,
    /// Write pointer in the format's units (monotonic).
    pub wptr: u64,
    pub doorbell: NonNull<libc::c_void>,
    pub doorbell_len: usize,
    pub event: kfd_ioctl_create_event_args,
    pub vram_handle: u64,
}

// SAFETY: the doorbell mapping is plain shared memory, written with atomics.
unsafe impl Send for QueueProc {}

impl QueueProc {
    pub fn new(sim: &Sim, kind: Kind) -> QueueProc {
        let p = Proc::new(sim);
        let gpu = p.gpu_ids[0];
        let mem = sim
            .alloc_host_memory_for(p.pid, MEM_BYTES as usize)
            .unwrap();
        let user = p
            .alloc(
                gpu,
                mem,
                MEM_BYTES,
                KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                mem,
            )
            .unwrap();
        assert_eq!(p.map(user.handle, &[gpu], 0).0, Ok(0));
        let vram = p
            .alloc(
                gpu,
                VRAM_VA,
                VRAM_BYTES,
                KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                0,
            )
            .unwrap();
        assert_eq!(p.map(vram.handle, &[gpu], 0).0, Ok(0));
        let page = p
            .alloc(
                gpu,
                EVENTS_VA,
                32 * KIB,
                KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                0,
            )
            .unwrap();
        assert_eq!(p.map(page.handle, &[gpu], 0).0, Ok(0));
        let event = p.create_event(page.handle).unwrap();
        let (rptr, wptr) = match kind {
            // ROCr's amd_queue_t: read_dispatch_id, write_dispatch_id.
            Kind::Aql => (mem + RPTR, mem + WPTR),
            _ => (mem + RPTR, mem + WPTR),
        };
        let mut q = kfd_ioctl_create_queue_args {
            ring_base_address: mem + RING,
            write_pointer_address: wptr,
            read_pointer_address: rptr,
            ring_size: RING_BYTES as u32,
            gpu_id: gpu,
            queue_type: kind.queue_type(),
            queue_percentage: 100,
            queue_priority: 7,
            eop_buffer_address: if kind == Kind::Sdma {
                0
            } else {
                mem + MISC + 2048
            },
            eop_buffer_size: if kind == Kind::Sdma { 0 } else { 1024 },
            ..Default::default()
        };
        p.ioctl(AMDKFD_IOC_CREATE_QUEUE, &mut q).unwrap();
        let (doorbell, doorbell_len) = map_doorbell(&p, q.doorbell_offset, sim);
        QueueProc {
            sim: sim.clone(),
            p,
            kind,
            gpu,
            mem,
            queue: q,
            wptr: 0,
            doorbell,
            doorbell_len,
            event,
            vram_handle: vram.handle,
        }
    }

    pub fn pid(&self) -> Pid {
        self.p.pid
    }

    /// Writes `bytes` at offset `off` of the process's host memory.
    pub fn poke(&self, off: u64, bytes: &[u8]) {
        assert!(self.sim.write_host_memory(self.mem + off, bytes));
    }

    /// Reads `len` bytes at offset `off` of the host memory.
    pub fn peek(&self, off: u64, len: usize) -> Vec<u8> {
        self.sim.read_host_memory(self.mem + off, len).unwrap()
    }

    pub fn peek_u64(&self, off: u64) -> u64 {
        u64::from_le_bytes(self.peek(off, 8).try_into().unwrap())
    }

    /// Appends `dwords` to the ring (wrapping) without submitting them.
    pub fn place(&mut self, dwords: &[u32]) {
        let bytes: Vec<u8> = dwords.iter().flat_map(|d| d.to_le_bytes()).collect();
        let mut off = (self.wptr * self.kind.unit()) % RING_BYTES;
        let mut done = 0usize;
        while done < bytes.len() {
            let n = ((RING_BYTES - off) as usize).min(bytes.len() - done);
            self.poke(RING + off, &bytes[done..done + n]);
            done += n;
            off = 0;
        }
        assert_eq!(bytes.len() as u64 % self.kind.unit(), 0);
        self.wptr += bytes.len() as u64 / self.kind.unit();
    }

    /// Stores the write pointer and rings the doorbell, as the thunk's
    /// tests and ROCr do (64-bit on SOC15).
    pub fn submit(&mut self) {
        self.poke(WPTR, &self.wptr.to_le_bytes());
        let slot = (self.queue.doorbell_offset & (self.doorbell_len as u64 - 1)) as usize;
        let value = match self.kind {
            // The doorbell carries the last packet's index.
            Kind::Aql => self.wptr - 1,
            _ => self.wptr,
        };
        // SAFETY: the slot lies inside the doorbell mapping and is 8-byte
        // aligned; the store is atomic, as the runtime's.
        unsafe { AtomicU64::from_ptr((self.doorbell.as_ptr() as usize + slot) as *mut u64) }
            .store(value, Ordering::Release);
    }

    pub fn push(&mut self, dwords: &[u32]) {
        self.place(dwords);
        self.submit();
    }

    /// The read pointer the engine reported (raw).
    pub fn rptr(&self) -> u64 {
        self.peek_u64(RPTR)
    }

    pub fn status(&self) -> QueueStatus {
        self.sim
            .queue_status(self.pid(), self.queue.queue_id)
            .unwrap()
    }

    /// Waits (bounded) until the queue is in `state`, and returns its
    /// status then: an engine reaches a wait some time after the doorbell,
    /// later on a loaded machine, so a test polls instead of sleeping a
    /// fixed time.
    pub fn reach(&self, state: QueueState) -> QueueStatus {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status();
            if s.state == state {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the queue did not reach {state:?} in 30 s: {s}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits until the queue settled (bounded).
    pub fn settle(&self) -> QueueStatus {
        self.sim
            .wait_queues_settled(self.pid(), Duration::from_secs(30))
            .unwrap_or_else(|busy| panic!("queues did not settle: {busy:?}"));
        self.status()
    }

    /// WAIT_EVENTS on `ids` (any), `timeout` ms: the wait result.
    pub fn wait_events(&self, ids: &[u32], all: bool, timeout: u32) -> Result<u32, i32> {
        let mut data = vec![[0u8; 48]; ids.len()];
        for (d, id) in data.iter_mut().zip(ids) {
            d[40..44].copy_from_slice(&id.to_ne_bytes());
        }
        let mut w = kfd_ioctl_wait_events_args {
            events_ptr: data.as_mut_ptr() as u64,
            num_events: ids.len() as u32,
            wait_for_all: u32::from(all),
            timeout,
            wait_result: 0,
        };
        self.p
            .ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut w)
            .map(|_| w.wait_result)
    }

    /// A 4 KiB GTT BO of the process mapped on its GPU at `va` and in the
    /// CPU through the VM-owning render fd, as libhsakmt maps the system
    /// memory ROCr keeps signals in; the CPU mapping (unmap it with
    /// `self.p.drv`).
    pub fn gtt_page(&self, va: u64) -> NonNull<libc::c_void> {
        let bo = self
            .p
            .alloc(
                self.gpu,
                va,
                4096,
                KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                0,
            )
            .unwrap();
        assert_eq!(self.p.map(bo.handle, &[self.gpu], 0).0, Ok(0));
        // SAFETY: no MAP_FIXED; unmapped by the caller.
        unsafe {
            self.p.drv.mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.p.renders[0].as_fd(),
                bo.mmap_offset,
            )
        }
        .unwrap()
    }

    /// The signal page slot of the queue's event.
    pub fn event_slot(&self) -> u64 {
        EVENTS_VA + u64::from(self.event.event_id) * 8
    }
}

impl Drop for QueueProc {
    fn drop(&mut self) {
        // SAFETY: the doorbell mapping made in `new`, unmapped once.
        let _ = unsafe { self.p.drv.munmap(self.doorbell, self.doorbell_len) };
    }
}

/// Runs `engine` (which makes the GPU update `word` and waits until it is
/// done) while a CPU thread adds `1 << 32` to `word` with atomic
/// instructions, from before the engine starts until after it ends; the
/// number of CPU adds.
pub fn with_cpu_adds(word: &AtomicU64, engine: impl FnOnce()) -> u64 {
    use std::sync::atomic::AtomicBool;
    let started = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let cpu = scope.spawn(|| {
            let mut adds = 0u64;
            while !done.load(Ordering::Acquire) {
                word.fetch_add(1 << 32, Ordering::SeqCst);
                adds += 1;
                started.store(true, Ordering::Release);
            }
            adds
        });
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        engine();
        done.store(true, Ordering::Release);
        cpu.join().unwrap()
    })
}

/// Maps the doorbell slice `offset` names (its low bits are the slot).
pub fn map_doorbell(p: &Proc, offset: u64, sim: &Sim) -> (NonNull<libc::c_void>, usize) {
    let len = if sim.gpus()[0].family >= AMDGPU_FAMILY_AI {
        8192
    } else {
        4096
    };
    let base = offset & !(len as u64 - 1);
    // SAFETY: no MAP_FIXED; unmapped by the owner.
    let m = unsafe {
        p.drv.mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            p.kfd.as_fd(),
            base,
        )
    }
    .unwrap();
    (m, len)
}

pub fn lo(v: u64) -> u32 {
    v as u32
}
pub fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

/// SDMA packets as ROCr 5.2's `BlitSdmaV4` builds them (AI: COUNT is
/// bytes - 1).
pub mod sdma_pkt {
    use super::{hi, lo};
    pub fn copy(src: u64, dst: u64, bytes: u32) -> [u32; 7] {
        [1, bytes - 1, 0, lo(src), hi(src), lo(dst), hi(dst)]
    }
    pub fn fill(dst: u64, value: u32, dwords: u32) -> [u32; 5] {
        [11 | (2 << 30), lo(dst), hi(dst), value, (dwords - 1) * 4]
    }
    pub fn fence(dst: u64, data: u32) -> [u32; 4] {
        [5, lo(dst), hi(dst), data]
    }
    pub fn trap(ctx: u32) -> [u32; 2] {
        [6, ctx]
    }
    pub fn poll_eq(addr: u64, value: u32) -> [u32; 6] {
        [
            8 | (3 << 28) | (1 << 31),
            lo(addr),
            hi(addr),
            value,
            0xFFFF_FFFF,
            4 | (0xFFF << 16),
        ]
    }
    pub fn atomic_add64(addr: u64, v: u64) -> [u32; 8] {
        [10 | (47 << 25), lo(addr), hi(addr), lo(v), hi(v), 0, 0, 0]
    }
    pub fn timestamp(addr: u64) -> [u32; 3] {
        [13 | (2 << 8), lo(addr), hi(addr)]
    }
    /// ROCr's `hdp_flush_cmd`.
    pub const HDP_FLUSH: [u32; 6] = [0x8, 0x0, 0x8000_0000, 0x0, 0x0, 0x0];
}

/// PM4 packets as kfdtest builds them for GFX9.
pub mod pm4_pkt {
    use super::{hi, lo};
    pub fn header(op: u32, dwords: u32) -> u32 {
        (3 << 30) | ((dwords - 2) << 16) | (op << 8) | 2
    }
    pub fn nop(dwords: u32) -> Vec<u32> {
        let mut v = vec![0; dwords as usize];
        v[0] = header(0x10, dwords);
        v
    }
    pub fn write_data(dst: u64, data: &[u32]) -> Vec<u32> {
        let mut v = vec![
            header(0x37, 4 + data.len() as u32),
            (5 << 8) | (1 << 20),
            lo(dst),
            hi(dst),
        ];
        v.extend_from_slice(data);
        v
    }
    /// RELEASE_MEM AI: 32-bit data, interrupt with `ctx` (kfdtest's
    /// PM4ReleaseMemoryPacket with an event).
    pub fn release_mem(dst: u64, data: u32, ctx: u32) -> Vec<u32> {
        vec![
            header(0x49, 8),
            0x14 | (5 << 8),
            (2 << 24) | (1 << 29),
            lo(dst),
            hi(dst),
            data,
            0,
            ctx,
        ]
    }
    pub fn wait_mem_eq(addr: u64, value: u32) -> Vec<u32> {
        vec![
            header(0x3C, 7),
            3 | (1 << 4),
            lo(addr),
            hi(addr),
            value,
            0xFFFF_FFFF,
            4,
        ]
    }
    pub fn indirect(ib: u64, dwords: u32) -> Vec<u32> {
        vec![
            header(0x3F, 4),
            lo(ib) & !3,
            hi(ib) & 0xFFFF,
            dwords | (1 << 23),
        ]
    }
    pub fn dispatch_direct(x: u32, y: u32, z: u32) -> Vec<u32> {
        vec![header(0x15, 5), x, y, z, 1]
    }
}
