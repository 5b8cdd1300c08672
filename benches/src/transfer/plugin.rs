//! Checkpoint and restore through the real plugin: the CRIU emulator over
//! the simulated machine, timed, with the restored BOs verified outside
//! the timing; and the plugin options the report varies.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use amdgpu_checkpoint::options::{parse_buffer_size, Options};
use amdgpu_image::{CriuKfd, DirStore, ImageName, ImageStore, ReadLimits};
use criu_host_emulator::{CriuEmulator, DeviceVma, EmulatorConfig, TaskFile};
use kfd_sim::workload::Workload;

use super::disk::{disk_usage, drop_cache, pages_files};
use super::error::{step, BenchError, Result};
use super::machine::Machine;
use super::KFD_ID;

/// What one checkpoint and restore through the plugin measured.
#[derive(Debug, Clone)]
pub struct PluginRun {
    /// BO bytes of the benchmark.
    pub bytes: u64,
    /// The dump, including the `fsync` of the pages files.
    pub checkpoint: Duration,
    /// The restore (page cache of the images dropped first), if run.
    pub restore: Option<Duration>,
    /// Logical size and allocated bytes of the pages files.
    pub pages: (u64, u64),
    /// Per GPU, the most staging memory pinned at once (dump and restore).
    pub staging_peak: Vec<u64>,
}

/// How [`plugin_run`] runs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The plugin's options.
    pub options: Options,
    /// Restore after the checkpoint.
    pub restore: bool,
    /// `fsync` the pages files as part of the checkpoint.
    pub fsync: bool,
}

/// Checkpoints `machine`'s process through the plugin into a fresh
/// directory under `dir` with `run.options`, `fsync`s the pages files
/// (when `run.fsync`), and,
/// when `restore` is set, kills the process, drops the images from the page
/// cache and restores it, verifying every BO's contents afterwards (outside
/// the timing). Consumes the machine's process.
pub fn plugin_run(machine: Machine, dir: &Path, run: RunOptions) -> Result<PluginRun> {
    let RunOptions {
        options,
        restore,
        fsync,
    } = run;
    let Machine { sim, app, bos } = machine;
    let bytes: u64 = bos.iter().map(|b| b.size).sum();
    let images = tempfile::Builder::new()
        .prefix("images-")
        .tempdir_in(dir)
        .map_err(step("creating an images directory"))?;
    let shm = tempfile::tempdir().map_err(step("creating a shm directory"))?;
    let mut config = EmulatorConfig::new(shm.path());
    config.options = options;
    let emulator = CriuEmulator::new(sim.clone(), images.path(), config);

    let expected = if restore {
        Some(app.describe().map_err(step("describing the process"))?)
    } else {
        None
    };
    let mut files = vec![TaskFile {
        fd: app.kfd_fd().ok_or_else(|| BenchError::Step {
            step: "dump",
            reason: "the process has no /dev/kfd fd".into(),
        })?,
        id: KFD_ID,
    }];
    for (i, fd) in app.render_fds().into_iter().enumerate() {
        files.push(TaskFile {
            fd,
            id: KFD_ID + 1 + i as u32,
        });
    }
    let ids: Vec<u32> = files.iter().map(|f| f.id).collect();
    let dump_vmas = DeviceVma::offered_at_dump(&sim);

    let start = Instant::now();
    emulator
        .dump(app.pid(), &files, &dump_vmas)
        .map_err(step("checkpoint through the plugin"))?;
    let pages = pages_files(images.path())?;
    if fsync {
        for path in &pages {
            File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(step("fsync of a pages file"))?;
        }
    }
    let checkpoint = start.elapsed();
    let usage = disk_usage(&pages)?;
    drop(files);

    let mut restore_time = None;
    if let Some(expected) = expected {
        let image: CriuKfd = DirStore::open_dir(images.path())
            .map_err(step("opening the images"))?
            .read_message(&ImageName::Kfd { id: KFD_ID }, ReadLimits::default())
            .map_err(step("reading the KFD image"))?
            .ok_or_else(|| BenchError::Step {
                step: "reading the KFD image",
                reason: "amdgpu-kfd-1.img is missing".into(),
            })?;
        let pid = app.pid();
        app.exit().map_err(step("killing the process"))?;
        for path in &pages {
            drop_cache(path)?;
        }
        let vmas = DeviceVma::of_kfd_image(&image);
        let start = Instant::now();
        let task = emulator
            .restore(pid, &ids, &vmas)
            .map_err(step("restore through the plugin"))?;
        restore_time = Some(start.elapsed());
        if task.resume_answer != 0 {
            return Err(BenchError::Step {
                step: "restore through the plugin",
                reason: format!("RESUME_DEVICES_LATE answered {}", task.resume_answer),
            });
        }
        Workload::verify(&sim, pid, &expected).map_err(step("verifying the restore"))?;
        drop(task);
        sim.exit_process(pid)
            .map_err(step("ending the restored process"))?;
    } else {
        app.exit().map_err(step("ending the process"))?;
    }
    let staging_peak = sim
        .gpus()
        .iter()
        .map(|g| sim.gem_userptr_peak_bytes(g.gpu_id).unwrap_or(0))
        .collect();
    Ok(PluginRun {
        bytes,
        checkpoint,
        restore: restore_time,
        pages: usage,
        staging_peak,
    })
}

/// The plugin options for a `KFD_MAX_BUFFER_SIZE` value (`None`: unset),
/// parsed as the plugin parses its environment.
pub fn options_with_max_buffer(value: Option<&str>) -> Options {
    // As the plugin takes the variable: a bad value keeps the default.
    let limit = value.and_then(|v| parse_buffer_size(v).ok()).unwrap_or(0);
    Options::default().with_max_buffer_size(limit)
}
