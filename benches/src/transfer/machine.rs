//! The simulated machine: `kfd-sim` GPUs and one process holding the
//! benchmark's VRAM BOs, filled as a [`Fill`] says or left unwritten.

use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

use super::error::{step, BenchError, Result};
use super::fill::{BoPlan, Fill};
use super::RAW_IO;

/// KFD allocation flags of the benchmark's BOs (VRAM, writable).
const VRAM_FLAGS: u32 = kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM
    | kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
    | kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;

/// One BO of the benchmark.
#[derive(Debug, Clone, Copy)]
pub struct BenchBo {
    /// The GPU it lives on.
    pub gpu: u32,
    /// Its KFD handle in the workload.
    pub handle: u64,
    /// Size in bytes.
    pub size: u64,
}

/// A simulated machine with one process holding the benchmark's BOs.
pub struct Machine {
    /// The simulator.
    pub sim: Sim,
    /// The process (also holds the small BOs of [`Profile::Basic`]).
    pub app: Workload,
    /// The benchmark's BOs.
    pub bos: Vec<BenchBo>,
}

impl Machine {
    /// The benchmark's BOs on `gpu`, as (KFD handle, size).
    pub fn bos_on(&self, gpu: u32) -> Vec<(u64, u64)> {
        self.bos
            .iter()
            .filter(|b| b.gpu == gpu)
            .map(|b| (b.handle, b.size))
            .collect()
    }

    /// `gpus` simulated GPUs with `total` bytes of VRAM BOs of `bo_bytes`
    /// each, spread evenly over the GPUs and filled as `fill` says.
    pub fn build(gpus: usize, total: u64, bo_bytes: u64, fill: Fill) -> Result<Machine> {
        Self::allocate(gpus, total, bo_bytes, Some(fill))
    }

    /// The same machine with BOs that were never written: the state of a
    /// restored BO before its contents arrive (the simulator allocates a
    /// BO's memory on first write, as a restore's copies find it).
    pub fn build_unwritten(gpus: usize, total: u64, bo_bytes: u64) -> Result<Machine> {
        Self::allocate(gpus, total, bo_bytes, None)
    }

    fn allocate(gpus: usize, total: u64, bo_bytes: u64, fill: Option<Fill>) -> Result<Machine> {
        let sim = Sim::synthetic(gpus, SimConfig::default()).map_err(step("simulated machine"))?;
        let mut app =
            Workload::launch(&sim, &Profile::Basic).map_err(step("launching a process"))?;
        let infos = sim.gpus();
        let mut bos = Vec::new();
        let mut chunk = vec![0u8; RAW_IO];
        for plan in BoPlan::spread(gpus, total, bo_bytes) {
            let gpu = infos.get(plan.gpu_index).ok_or_else(|| BenchError::Step {
                step: "simulated machine",
                reason: format!("no GPU number {}", plan.gpu_index),
            })?;
            let handle = app
                .alloc(gpu.gpu_id, plan.size, VRAM_FLAGS, &[gpu.gpu_id])
                .map_err(step("allocating a BO"))?;
            if let Some(fill) = fill {
                let mut offset = 0u64;
                while offset < plan.size {
                    let len = (plan.size - offset).min(RAW_IO as u64) as usize;
                    plan.contents(&mut chunk[..len], offset, fill);
                    app.write_bo(handle, offset, &chunk[..len])
                        .map_err(step("filling a BO"))?;
                    offset += len as u64;
                }
            }
            bos.push(BenchBo {
                gpu: gpu.gpu_id,
                handle,
                size: plan.size,
            });
        }
        Ok(Machine { sim, app, bos })
    }

    /// Bytes of the benchmark's BOs.
    pub fn bytes(&self) -> u64 {
        self.bos.iter().map(|b| b.size).sum()
    }
}
