//! The C plugin's dump strategy on the same copy engine, for comparison:
//! one staging buffer per GPU as large as its largest BO, copy and write
//! strictly one after the other.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use kfd::{CopyEngine, CopyEngineConfig, Kfd, MemHandle, RenderMinor, RenderNode, StagingBuffer};

use super::error::{step, BenchError, Result};
use super::machine::{BenchBo, Machine};

/// What the C plugin's strategy measured.
#[derive(Debug, Clone, Copy)]
pub struct SerialRun {
    /// Time to write every BO into one file, `fsync` included.
    pub time: Duration,
    /// The most staging memory pinned at once.
    pub staging_peak: u64,
}

/// The C plugin's dump strategy (spec/upstream-plugin.md §6.2, §6.4) on the
/// same copy engine: per GPU one staging buffer as large as the largest BO;
/// per chunk submit the SDMA copy, wait for it, then write the chunk, so
/// copy and I/O never overlap. Writes `dir/serial-<gpu>.img` (8-byte size
/// header, then the BOs in order), `fsync`s when `fsync`, removes the files.
pub fn c_strategy_dump(machine: &Machine, dir: &Path, fsync: bool) -> Result<SerialRun> {
    let driver = machine.sim.driver(machine.app.pid());
    let kfd_fd = machine.app.kfd_fd().ok_or_else(|| BenchError::Step {
        step: "serial dump",
        reason: "the process has no /dev/kfd fd".into(),
    })?;
    let kfd = Kfd::from_fd(driver.clone(), kfd_fd);
    let start = Instant::now();
    for gpu in machine.sim.gpus() {
        let bos: Vec<&BenchBo> = machine.bos.iter().filter(|b| b.gpu == gpu.gpu_id).collect();
        let Some(largest) = bos.iter().map(|b| b.size).max() else {
            continue;
        };
        let render = RenderNode::open(driver.clone(), RenderMinor(gpu.render_minor))
            .map_err(step("opening a render node"))?;
        let mut engine = CopyEngine::new(render, CopyEngineConfig::default())
            .map_err(step("setting up the copy engine"))?;
        let staging = StagingBuffer::new(largest as usize).map_err(step("staging memory"))?;
        let slot = engine
            .add_staging(staging)
            .map_err(step("registering staging"))?;
        let chunk = engine.staging_len(slot).map_err(step("staging length"))? as u64;
        let path = dir.join(format!("serial-{:04x}.img", gpu.gpu_id));
        let mut file = File::create(&path).map_err(step("creating the serial image"))?;
        let total: u64 = bos.iter().map(|b| b.size).sum();
        file.write_all(&total.to_le_bytes())
            .map_err(step("writing the serial image"))?;
        for bo in bos {
            let dmabuf = kfd
                .export_dmabuf(MemHandle(bo.handle))
                .map_err(step("exporting a dma-buf"))?;
            let imported = engine
                .import_dmabuf(dmabuf.as_fd())
                .map_err(step("importing a dma-buf"))?;
            let mut offset = 0u64;
            while offset < bo.size {
                let len = (bo.size - offset).min(chunk) as usize;
                let fence = engine
                    .submit_read(&imported, offset, slot, len)
                    .map_err(step("submitting a copy"))?;
                if !engine
                    .wait(&fence, None)
                    .map_err(step("waiting for a copy"))?
                {
                    return Err(BenchError::Step {
                        step: "waiting for a copy",
                        reason: "the copy did not complete".into(),
                    });
                }
                let data = engine.staging(slot).map_err(step("reading staging"))?;
                file.write_all(&data[..len])
                    .map_err(step("writing the serial image"))?;
                offset += len as u64;
            }
            engine
                .release_bo(imported)
                .map_err(step("releasing a BO"))?;
        }
        if fsync {
            file.sync_all().map_err(step("fsync of the serial image"))?;
        }
        engine.close().map_err(step("closing the copy engine"))?;
    }
    let time = start.elapsed();
    for gpu in machine.sim.gpus() {
        let _ = fs::remove_file(dir.join(format!("serial-{:04x}.img", gpu.gpu_id)));
    }
    let staging_peak = machine
        .sim
        .gpus()
        .iter()
        .map(|g| machine.sim.gem_userptr_peak_bytes(g.gpu_id).unwrap_or(0))
        .max()
        .unwrap_or(0);
    Ok(SerialRun { time, staging_peak })
}
