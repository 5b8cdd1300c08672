//! Shared set-up for the tests of the `kfd` crate's API against the
//! simulator (`kfd_api_*.rs`): a simulated machine and a "GPU process" that
//! opened /dev/kfd and one render node per GPU and acquired their VMs, as
//! ROCr does at start-up.

#![allow(dead_code)]

use std::os::fd::AsFd;

use kfd::{AllocFlags, AllocRequest, Allocation, GpuId, Kfd, RenderMinor, RenderNode};
use kfd_sim::{Pid, Sim, SimConfig, SimDriver};

/// A simulator with `gpus` synthetic GPUs.
pub fn sim(gpus: usize) -> Sim {
    Sim::synthetic(gpus, SimConfig::default()).expect("synthetic simulator")
}

/// A process that uses every GPU.
pub struct GpuProcess {
    pub pid: Pid,
    pub driver: SimDriver,
    pub kfd: Kfd<SimDriver>,
    pub gpus: Vec<GpuId>,
    pub renders: Vec<RenderNode<SimDriver>>,
}

impl GpuProcess {
    /// Spawns a process, opens /dev/kfd and the render nodes, acquires VMs.
    pub fn start(sim: &Sim) -> GpuProcess {
        let pid = sim.spawn_process().expect("spawn");
        let driver = sim.driver(pid);
        let kfd = Kfd::open(driver.clone()).expect("open /dev/kfd");
        let mut gpus = Vec::new();
        let mut renders = Vec::new();
        for gpu in sim.gpus() {
            let render = RenderNode::open(driver.clone(), RenderMinor(gpu.render_minor))
                .expect("open render node");
            let id = GpuId(gpu.gpu_id);
            kfd.acquire_vm(id, render.as_fd()).expect("acquire vm");
            gpus.push(id);
            renders.push(render);
        }
        GpuProcess {
            pid,
            driver,
            kfd,
            gpus,
            renders,
        }
    }

    /// Allocates and maps a BO on GPU `index`.
    pub fn alloc(&self, index: usize, va: u64, size: u64, flags: AllocFlags) -> Allocation {
        let gpu = self.gpus[index];
        let alloc = self
            .kfd
            .alloc_memory(&AllocRequest {
                gpu_id: gpu,
                va_addr: va,
                size,
                flags,
            })
            .expect("alloc");
        self.kfd.map_memory(alloc.handle, &[gpu]).expect("map");
        alloc
    }

    /// Fills a BO through a CPU mapping of its render node with `pattern`.
    pub fn fill(
        &self,
        index: usize,
        alloc: &Allocation,
        size: usize,
        pattern: impl Fn(usize) -> u8,
    ) {
        let mut map = self.renders[index]
            .mmap(alloc.mmap_offset, size, libc::PROT_READ | libc::PROT_WRITE)
            .expect("mmap BO");
        let bytes: Vec<u8> = (0..size).map(pattern).collect();
        map.write(0, &bytes).expect("write BO");
    }

    /// Reads a BO through a CPU mapping of its render node.
    pub fn read(&self, index: usize, alloc: &Allocation, size: usize) -> Vec<u8> {
        let map = self.renders[index]
            .mmap(alloc.mmap_offset, size, libc::PROT_READ)
            .expect("mmap BO");
        let mut out = vec![0u8; size];
        map.read(0, &mut out).expect("read BO");
        out
    }
}

/// VRAM, GPU read-write.
pub fn vram() -> AllocFlags {
    AllocFlags::VRAM | AllocFlags::WRITABLE | AllocFlags::EXECUTABLE
}

/// GTT, GPU read-write.
pub fn gtt() -> AllocFlags {
    AllocFlags::GTT | AllocFlags::WRITABLE | AllocFlags::EXECUTABLE
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8) -> impl Fn(usize) -> u8 {
    move |i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8
}
