//! The simulated copy engine alone: BOs copied to and from staging memory
//! without file I/O, the simulator's own share of a dump or restore.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use kfd::{
    CopyEngine, CopyEngineConfig, ImportedBo, Kfd, MemHandle, RenderMinor, RenderNode,
    StagingBuffer, StagingSlot,
};
use kfd_sim::workload::Workload;
use kfd_sim::{Sim, SimDriver};

use super::error::{step, BenchError, Result};
use super::machine::Machine;

/// Unthrottled SDMA rates of the simulator, without file I/O.
#[derive(Debug, Clone, Copy)]
pub struct SdmaFigures {
    /// BO to host memory, bytes per second.
    pub read_bps: f64,
    /// Host memory to BO, bytes per second.
    pub write_bps: f64,
}

/// One GPU's copy engine with the GPU's BOs of a process imported (a
/// [`Machine`]'s, or any process's: [`SdmaRig::plugin_for`]) and
/// a ring of staging buffers (two of 32 MiB on one SDMA ring, or the
/// plugin's own ring, [`SdmaRig::plugin`]): copies without file I/O.
pub struct SdmaRig {
    engine: CopyEngine<SimDriver>,
    slots: Vec<StagingSlot>,
    slot_len: usize,
    imported: Vec<(ImportedBo, u64)>,
}

impl SdmaRig {
    /// Size of each staging buffer of [`SdmaRig::new`].
    pub const SLOT: usize = 32 << 20;

    /// The rig for the BOs of `machine` on `gpu` (a `GpuInfo::gpu_id`):
    /// two 32 MiB buffers, one SDMA ring.
    pub fn new(machine: &Machine, gpu: u32) -> Result<SdmaRig> {
        let bos = machine.bos_on(gpu);
        Self::with_ring((&machine.sim, &machine.app, gpu, &bos), 2, Self::SLOT, 1)
    }

    /// The rig with the plugin's staging ring and SDMA rings (the
    /// defaults of `amdgpu_checkpoint`): what a dump's copies alone take.
    pub fn plugin(machine: &Machine, gpu: u32) -> Result<SdmaRig> {
        Self::plugin_for(&machine.sim, &machine.app, gpu, &machine.bos_on(gpu))
    }

    /// [`SdmaRig::plugin`] for any process `app` of `sim`: the BOs `bos`
    /// (KFD handle, size), all on `gpu`.
    pub fn plugin_for(sim: &Sim, app: &Workload, gpu: u32, bos: &[(u64, u64)]) -> Result<SdmaRig> {
        Self::with_ring(
            (sim, app, gpu, bos),
            amdgpu_checkpoint::options::DEFAULT_STAGING_BUFFERS,
            amdgpu_checkpoint::options::DEFAULT_STAGING_BUFFER as usize,
            amdgpu_checkpoint::transfer::SDMA_RINGS,
        )
    }

    /// `buffers` staging buffers of `slot_len` bytes spread over `spread`
    /// SDMA rings, for the BOs `bos` (KFD handle, size) of `app` on `gpu`.
    fn with_ring(
        (sim, app, gpu, bos): (&Sim, &Workload, u32, &[(u64, u64)]),
        buffers: usize,
        slot_len: usize,
        spread: u32,
    ) -> Result<SdmaRig> {
        let driver = sim.driver(app.pid());
        let kfd_fd = app.kfd_fd().ok_or_else(|| BenchError::Step {
            step: "sdma rig",
            reason: "the process has no /dev/kfd fd".into(),
        })?;
        let kfd = Kfd::from_fd(driver.clone(), kfd_fd);
        let info = sim
            .gpus()
            .into_iter()
            .find(|g| g.gpu_id == gpu)
            .ok_or_else(|| BenchError::Step {
                step: "sdma rig",
                reason: format!("no GPU {gpu:#x}"),
            })?;
        let render = RenderNode::open(driver, RenderMinor(info.render_minor))
            .map_err(step("opening a render node"))?;
        let config = CopyEngineConfig {
            spread,
            ..CopyEngineConfig::default()
        };
        let mut engine =
            CopyEngine::new(render, config).map_err(step("setting up the copy engine"))?;
        let mut slots = Vec::new();
        for _ in 0..buffers {
            let mut buffer = StagingBuffer::new(slot_len).map_err(step("staging memory"))?;
            // Touch the pages once, as a reused staging buffer is.
            buffer.as_mut_slice().fill(1);
            slots.push(
                engine
                    .add_staging(buffer)
                    .map_err(step("registering staging"))?,
            );
        }
        let mut imported = Vec::new();
        for &(handle, size) in bos {
            let dmabuf = kfd
                .export_dmabuf(MemHandle(handle))
                .map_err(step("exporting a dma-buf"))?;
            let bo_import = engine
                .import_dmabuf(dmabuf.as_fd())
                .map_err(step("importing a dma-buf"))?;
            imported.push((bo_import, size));
        }
        Ok(SdmaRig {
            engine,
            slots,
            slot_len,
            imported,
        })
    }

    /// Copies every BO into the staging buffers (`to_bo` false) or the
    /// staging buffers into every BO (`to_bo` true), the buffers used in
    /// turn, a buffer's copy waited for before it is used again (every
    /// buffer's copy in flight at once); returns the bytes moved.
    pub fn pass(&mut self, to_bo: bool) -> Result<u64> {
        let mut pending: Vec<Option<kfd::Fence>> = vec![None; self.slots.len()];
        let mut turn = 0;
        let mut bytes = 0;
        for (bo, size) in &self.imported {
            let mut offset = 0u64;
            while offset < *size {
                if let Some(prev) = pending[turn].take() {
                    self.engine
                        .wait(&prev, None)
                        .map_err(step("waiting for a copy"))?;
                }
                let len = (*size - offset).min(self.slot_len as u64) as usize;
                let fence = if to_bo {
                    self.engine.submit_write(bo, offset, self.slots[turn], len)
                } else {
                    self.engine.submit_read(bo, offset, self.slots[turn], len)
                }
                .map_err(step("submitting a copy"))?;
                pending[turn] = Some(fence);
                turn = (turn + 1) % self.slots.len();
                offset += len as u64;
                bytes += len as u64;
            }
        }
        for prev in pending.into_iter().flatten() {
            self.engine
                .wait(&prev, None)
                .map_err(step("waiting for a copy"))?;
        }
        Ok(bytes)
    }

    /// Releases the BOs and closes the engine.
    pub fn close(mut self) -> Result<()> {
        for (bo, _) in self.imported.drain(..) {
            self.engine.release_bo(bo).map_err(step("releasing a BO"))?;
        }
        self.engine.close().map_err(step("closing the copy engine"))
    }
}

/// Copies every BO of `machine` into two alternating 32 MiB staging buffers
/// and back ([`SdmaRig::pass`]), GPUs one after another; no file I/O. The
/// BOs' contents are overwritten.
pub fn sdma_rates(machine: &Machine) -> Result<SdmaFigures> {
    let (bytes, times) = timed_passes(machine, &[false, true])?;
    Ok(SdmaFigures {
        read_bps: bytes as f64 / times[0].as_secs_f64(),
        write_bps: bytes as f64 / times[1].as_secs_f64(),
    })
}

/// The simulated SDMA writing into BOs that were never written (a
/// restore's copies), GPUs one after another, one pass from two alternating
/// 32 MiB staging buffers; bytes per second. This is the simulator's share
/// of a restore per GPU: a floor under its time that a GPU's DMA engine
/// does not have.
pub fn sdma_cold_write(machine: &Machine) -> Result<f64> {
    let (bytes, times) = timed_passes(machine, &[true])?;
    Ok(bytes as f64 / times[0].as_secs_f64())
}

/// Runs [`SdmaRig::pass`] once per entry of `to_bo`, in order, on every
/// GPU of `machine` (one after another); returns the bytes of one pass
/// over all GPUs and the total time of each pass.
fn timed_passes(machine: &Machine, to_bo: &[bool]) -> Result<(u64, Vec<Duration>)> {
    let mut times = vec![Duration::ZERO; to_bo.len()];
    let mut bytes = 0u64;
    for gpu in machine.sim.gpus() {
        let mut rig = SdmaRig::new(machine, gpu.gpu_id)?;
        for (k, &to_bo) in to_bo.iter().enumerate() {
            let start = Instant::now();
            let moved = rig.pass(to_bo)?;
            times[k] += start.elapsed();
            if k == 0 {
                bytes += moved;
            }
        }
        rig.close()?;
    }
    Ok((bytes, times))
}
