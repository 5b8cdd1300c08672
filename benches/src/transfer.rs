//! Transfer figures: checkpoint and restore of BO contents through the real
//! plugin (the CRIU emulator over `kfd-sim`) side by side with plain
//! sequential I/O of the same bytes in the same directory, the C plugin's
//! serial strategy, staging memory and zero-page elision, with raw writes
//! of a pages file's exact layout (data runs written, zero runs left as
//! holes) as the storage's ceiling for it. The BO layouts ([`Fill`]) are
//! defined once, in [`Fill::page_holds_data`].
//!
//! Every write phase ends with `fsync` of what it wrote (raw file, pages
//! files, serial image) and every read phase starts with the files' page
//! cache dropped (`posix_fadvise(DONTNEED)` after that `fsync`), so raw and
//! plugin runs see the storage the same way. Used by the report binary;
//! never prints and never touches anything outside the directory it is
//! given.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use amdgpu_image::{CriuKfd, DirStore, ImageName, ImageStore, ReadLimits};
use criu_host_emulator::{CriuEmulator, DeviceVma, EmulatorConfig, TaskFile};
use amdgpu_checkpoint::options::Options;
use kfd::{
    CopyEngine, CopyEngineConfig, ImportedBo, Kfd, MemHandle, RenderMinor, RenderNode,
    StagingBuffer, StagingSlot,
};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig, SimDriver};

/// CRIU's file id of the workload's `/dev/kfd` fd; render nodes follow.
const KFD_ID: u32 = 1;
/// Size of each plain read and write of the raw runs.
const RAW_IO: usize = 8 << 20;
/// KFD allocation flags of the benchmark's BOs (VRAM, writable).
const VRAM_FLAGS: u32 = kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM
    | kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
    | kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;

/// A benchmark step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A step of a measurement failed.
    #[error("{step}: {reason}")]
    Step {
        /// What the benchmark was doing.
        step: &'static str,
        /// Why it failed.
        reason: String,
    },
}

/// Result of the transfer benchmarks.
pub type Result<T> = std::result::Result<T, BenchError>;

fn step<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> BenchError {
    move |e| BenchError::Step {
        step,
        reason: e.to_string(),
    }
}

/// Size of the pages of the fill patterns.
pub const FILL_PAGE: u64 = 4096;

/// How the benchmark's BOs are filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Every page holds non-zero bytes.
    Dense,
    /// One page in ten holds non-zero bytes, the other nine are zero: the
    /// most fragmented 90 %-zero BO.
    MostlyZero,
    /// 90 % zero in long runs, as memory an allocator reserved but used a
    /// tenth of: in every 10 MiB of a BO the first 1 MiB holds data.
    ZeroRuns,
}

impl Fill {
    /// Whether the [`FILL_PAGE`]-sized page number `page` of a BO holds
    /// data (non-zero words); all other pages are zero. The one place the
    /// layouts are defined.
    pub fn page_holds_data(self, page: u64) -> bool {
        match self {
            Fill::Dense => true,
            Fill::MostlyZero => page % 10 == 0,
            Fill::ZeroRuns => (page / 256) % 10 == 0,
        }
    }

    /// The runs of data pages of a BO of `size` bytes as byte ranges
    /// `(offset, len)` in BO order, adjacent data pages merged.
    pub fn data_runs(self, size: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for page in 0..size.div_ceil(FILL_PAGE) {
            if !self.page_holds_data(page) {
                continue;
            }
            let start = page * FILL_PAGE;
            let len = (size - start).min(FILL_PAGE);
            match runs.last_mut() {
                Some((offset, run)) if *offset + *run == start => *run += len,
                _ => runs.push((start, len)),
            }
        }
        runs
    }
}

/// One BO of the benchmark before it is allocated: where it goes and what
/// it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoPlan {
    /// Index of its GPU among the machine's GPUs.
    pub gpu_index: usize,
    /// Its number among the BOs of its GPU.
    pub number: u64,
    /// Size in bytes.
    pub size: u64,
}

impl BoPlan {
    /// The BOs of `total` bytes of BOs of `bo_bytes` each, spread evenly
    /// over `gpus` GPUs, in allocation order (GPU by GPU).
    pub fn spread(gpus: usize, total: u64, bo_bytes: u64) -> Vec<BoPlan> {
        let per_gpu = total / gpus.max(1) as u64;
        let mut out = Vec::new();
        for gpu_index in 0..gpus {
            let mut left = per_gpu;
            let mut number = 0u64;
            while left > 0 {
                let size = left.min(bo_bytes.max(1));
                out.push(BoPlan {
                    gpu_index,
                    number,
                    size,
                });
                left -= size;
                number += 1;
            }
        }
        out
    }

    /// Fills `buf` with the BO's bytes at `offset` (8-byte aligned) as
    /// `fill` lays them out: non-repeating non-zero words in data pages,
    /// zeros elsewhere.
    pub fn contents(&self, buf: &mut [u8], offset: u64, fill: Fill) {
        fill_chunk(
            buf,
            (self.gpu_index as u64) << 48 | self.number << 32,
            offset,
            fill,
        );
    }
}

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

/// Fills `buf` (the bytes at `offset` of a BO) with non-repeating non-zero
/// words where [`Fill::page_holds_data`] says, zeros elsewhere.
fn fill_chunk(buf: &mut [u8], seed: u64, offset: u64, fill: Fill) {
    for (i, word) in buf.chunks_exact_mut(8).enumerate() {
        let at = offset + 8 * i as u64;
        let value = if fill.page_holds_data(at / FILL_PAGE) {
            (seed ^ at).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
        } else {
            0
        };
        word.copy_from_slice(&value.to_le_bytes());
    }
}

/// Plain sequential I/O of one file.
#[derive(Debug, Clone, Copy)]
pub struct RawFigures {
    /// Write (8 MiB `write`s, then `fsync`) bytes per second.
    pub write_bps: f64,
    /// Read (8 MiB `read`s, page cache dropped first) bytes per second.
    pub read_bps: f64,
}

/// Writes `bytes` non-zero bytes to `dir/raw-io.bin` in 8 MiB writes and
/// `fsync`s (when `fsync`; otherwise the write time is the page cache's),
/// drops the file from the page cache and reads it back; removes it.
pub fn raw_io(dir: &Path, bytes: u64, fsync: bool) -> Result<RawFigures> {
    let path = dir.join("raw-io.bin");
    let mut buf = vec![0u8; RAW_IO];
    fill_chunk(&mut buf, 0x5EED, 0, Fill::Dense);
    let start = Instant::now();
    let mut file = File::create(&path).map_err(step("creating the raw file"))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(RAW_IO as u64) as usize;
        file.write_all(&buf[..n])
            .map_err(step("writing the raw file"))?;
        left -= n as u64;
    }
    if fsync {
        file.sync_all().map_err(step("fsync of the raw file"))?;
    }
    let write = start.elapsed();
    drop(file);
    drop_cache(&path)?;
    let start = Instant::now();
    let mut file = File::open(&path).map_err(step("opening the raw file"))?;
    let mut read = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(step("reading the raw file"))?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    let read_time = start.elapsed();
    let _ = fs::remove_file(&path);
    if read != bytes {
        return Err(BenchError::Step {
            step: "reading the raw file",
            reason: format!("read {read} bytes of {bytes}"),
        });
    }
    Ok(RawFigures {
        write_bps: bytes as f64 / write.as_secs_f64(),
        read_bps: bytes as f64 / read_time.as_secs_f64(),
    })
}

/// The bytes of a pages file of the benchmark's BOs, prepared in memory so
/// that a raw write of them ([`raw_layout_write`]) times only the storage:
/// the 8-byte length header, then the data runs of every BO at payload
/// offset `8 + BO offset` (BOs concatenated in order, as a pages file holds
/// them); the zero runs are left out, so they become holes exactly where a
/// pages file has them (every file block that holds no data byte).
#[derive(Debug, Clone)]
pub struct RawLayout {
    /// Logical file length: header plus every BO's bytes.
    len: u64,
    /// `(file offset, bytes)` of the header and the data runs, each at most
    /// 8 MiB, in file order.
    pieces: Vec<(u64, Vec<u8>)>,
}

impl RawLayout {
    /// The layout of `bos` (one file, in the given order) filled as `fill`
    /// says, with the bytes [`Machine::build`] puts into them.
    pub fn new(bos: &[BoPlan], fill: Fill) -> RawLayout {
        let header = amdgpu_image::HEADER_LEN as u64;
        let payload: u64 = bos.iter().map(|b| b.size).sum();
        let mut pieces = vec![(0, payload.to_le_bytes().to_vec())];
        let mut base = header;
        for bo in bos {
            for (start, len) in fill.data_runs(bo.size) {
                let mut offset = start;
                while offset < start + len {
                    let n = (start + len - offset).min(RAW_IO as u64);
                    let mut bytes = vec![0u8; n as usize];
                    bo.contents(&mut bytes, offset, fill);
                    pieces.push((base + offset, bytes));
                    offset += n;
                }
            }
            base += bo.size;
        }
        RawLayout {
            len: header + payload,
            pieces,
        }
    }

    /// Logical length of the file.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// Bytes written (header and data runs).
    pub fn written_bytes(&self) -> u64 {
        self.pieces.iter().map(|(_, b)| b.len() as u64).sum()
    }

    /// Creates `path` and writes the layout into it: one `pwrite` per piece,
    /// `ftruncate` to the full length, `fsync`; returns the time of all of
    /// that, file creation included.
    fn write_file(&self, path: &Path) -> Result<Duration> {
        let start = Instant::now();
        let file = File::create(path).map_err(step("creating the raw layout file"))?;
        for (offset, bytes) in &self.pieces {
            file.write_all_at(bytes, *offset)
                .map_err(step("writing the raw layout file"))?;
        }
        file.set_len(self.len)
            .map_err(step("truncating the raw layout file"))?;
        file.sync_all()
            .map_err(step("fsync of the raw layout file"))?;
        Ok(start.elapsed())
    }
}

/// What a raw write of a [`RawLayout`] measured.
#[derive(Debug, Clone, Copy)]
pub struct RawLayoutRun {
    /// `pwrite`s, `ftruncate` and `fsync`.
    pub time: Duration,
    /// Logical size of the file.
    pub logical: u64,
    /// Its allocated bytes (`st_blocks × 512`).
    pub allocated: u64,
}

/// Writes `layout` to `dir/raw-layout.bin` without the plugin (plain
/// `pwrite`s of the data runs, holes left for the zero runs, `ftruncate`,
/// `fsync`, all timed): the storage's ceiling for a pages file of those
/// BOs. Measures the file's disk usage and removes it.
pub fn raw_layout_write(layout: &RawLayout, dir: &Path) -> Result<RawLayoutRun> {
    let path = dir.join("raw-layout.bin");
    let run = layout.write_file(&path).and_then(|time| {
        let (logical, allocated) = disk_usage(std::slice::from_ref(&path))?;
        Ok(RawLayoutRun {
            time,
            logical,
            allocated,
        })
    });
    let _ = fs::remove_file(&path);
    run
}

/// Drops the (clean) pages of the file at `path` from the page cache.
pub fn drop_cache(path: &Path) -> Result<()> {
    let file = File::open(path).map_err(step("opening a file to drop its cache"))?;
    file.sync_all()
        .map_err(step("fsync before dropping the cache"))?;
    // SAFETY: advice on an open fd; no memory is passed.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(BenchError::Step {
            step: "posix_fadvise(DONTNEED)",
            reason: std::io::Error::from_raw_os_error(rc).to_string(),
        });
    }
    Ok(())
}

/// The pages files (`amdgpu-pages-*`, `amdgpu-drm-pages-*`) of `images`.
pub fn pages_files(images: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(images).map_err(step("listing the images directory"))? {
        let entry = entry.map_err(step("listing the images directory"))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("amdgpu-pages-") || name.starts_with("amdgpu-drm-pages-") {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Logical size and allocated bytes (`st_blocks × 512`) of files.
pub fn disk_usage(files: &[PathBuf]) -> Result<(u64, u64)> {
    let mut logical = 0;
    let mut allocated = 0;
    for f in files {
        let meta = fs::metadata(f).map_err(step("stat of a pages file"))?;
        logical += meta.len();
        allocated += meta.blocks() * 512;
    }
    Ok((logical, allocated))
}

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
#[derive(Debug, Clone, Copy)]
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

/// The plugin options for a `KFD_MAX_BUFFER_SIZE` value (`None`: unset),
/// parsed as the plugin parses its environment.
pub fn options_with_max_buffer(value: Option<&str>) -> Options {
    let (options, _invalid) = Options::from_lookup(|name| {
        (name == "KFD_MAX_BUFFER_SIZE")
            .then(|| value.map(str::to_owned))
            .flatten()
    });
    options
}

/// Bytes per second as GiB/s.
pub fn gibs(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / (1u64 << 30) as f64
}

/// Unthrottled SDMA rates of the simulator, without file I/O.
#[derive(Debug, Clone, Copy)]
pub struct SdmaFigures {
    /// BO to host memory, bytes per second.
    pub read_bps: f64,
    /// Host memory to BO, bytes per second.
    pub write_bps: f64,
}

/// One GPU's copy engine with the GPU's BOs of a [`Machine`] imported and
/// two 32 MiB staging buffers: copies without file I/O.
pub struct SdmaRig {
    engine: CopyEngine<SimDriver>,
    slots: Vec<StagingSlot>,
    imported: Vec<(ImportedBo, u64)>,
}

impl SdmaRig {
    /// Size of each staging buffer.
    pub const SLOT: usize = 32 << 20;

    /// The rig for the BOs of `machine` on `gpu` (a `GpuInfo::gpu_id`).
    pub fn new(machine: &Machine, gpu: u32) -> Result<SdmaRig> {
        let driver = machine.sim.driver(machine.app.pid());
        let kfd_fd = machine.app.kfd_fd().ok_or_else(|| BenchError::Step {
            step: "sdma rig",
            reason: "the process has no /dev/kfd fd".into(),
        })?;
        let kfd = Kfd::from_fd(driver.clone(), kfd_fd);
        let info = machine
            .sim
            .gpus()
            .into_iter()
            .find(|g| g.gpu_id == gpu)
            .ok_or_else(|| BenchError::Step {
                step: "sdma rig",
                reason: format!("no GPU {gpu:#x}"),
            })?;
        let render = RenderNode::open(driver, RenderMinor(info.render_minor))
            .map_err(step("opening a render node"))?;
        let mut engine = CopyEngine::new(render, CopyEngineConfig::default())
            .map_err(step("setting up the copy engine"))?;
        let mut slots = Vec::new();
        for _ in 0..2 {
            let mut buffer = StagingBuffer::new(Self::SLOT).map_err(step("staging memory"))?;
            // Touch the pages once, as a reused staging buffer is.
            buffer.as_mut_slice().fill(1);
            slots.push(
                engine
                    .add_staging(buffer)
                    .map_err(step("registering staging"))?,
            );
        }
        let mut imported = Vec::new();
        for bo in machine.bos.iter().filter(|b| b.gpu == gpu) {
            let dmabuf = kfd
                .export_dmabuf(MemHandle(bo.handle))
                .map_err(step("exporting a dma-buf"))?;
            let bo_import = engine
                .import_dmabuf(dmabuf.as_fd())
                .map_err(step("importing a dma-buf"))?;
            imported.push((bo_import, bo.size));
        }
        Ok(SdmaRig {
            engine,
            slots,
            imported,
        })
    }

    /// Copies every BO into the staging buffers (`to_bo` false) or the
    /// staging buffers into every BO (`to_bo` true), one copy in flight while
    /// the previous one is waited for; returns the bytes moved.
    pub fn pass(&mut self, to_bo: bool) -> Result<u64> {
        let mut pending = None;
        let mut turn = 0;
        let mut bytes = 0;
        for (bo, size) in &self.imported {
            let mut offset = 0u64;
            while offset < *size {
                let len = (*size - offset).min(Self::SLOT as u64) as usize;
                let fence = if to_bo {
                    self.engine.submit_write(bo, offset, self.slots[turn], len)
                } else {
                    self.engine.submit_read(bo, offset, self.slots[turn], len)
                }
                .map_err(step("submitting a copy"))?;
                if let Some(prev) = pending.replace(fence) {
                    self.engine
                        .wait(&prev, None)
                        .map_err(step("waiting for a copy"))?;
                }
                turn ^= 1;
                offset += len as u64;
                bytes += len as u64;
            }
        }
        if let Some(prev) = pending {
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

/// The file side of a restore alone, against a raw read of the same file.
#[derive(Debug, Clone, Copy)]
pub struct RestoreReadFigures {
    /// Cold read of a pages file as restore reads it, bytes per second.
    pub pages_bps: f64,
    /// Cold plain read (8 MiB `read`s) of the same file, bytes per second.
    pub raw_bps: f64,
}

/// Writes a pages file of `bytes` dense bytes (BOs of `bo_bytes`, with
/// checksums) through a [`DirStore`] under `dir`, as a dump does, then reads
/// it cold the way the plugin's restore does (`ImageStore::open_pages`,
/// `read_chunk` into two alternating 32 MiB buffers, every checksum
/// verified) and cold with plain 8 MiB `read`s; removes it. No SDMA: this
/// is the restore's CPU and I/O cost outside the simulated copy engine.
pub fn restore_read(dir: &Path, bytes: u64, bo_bytes: u64) -> Result<RestoreReadFigures> {
    use amdgpu_image::{ImageWriter, PagesBo, PagesLayout};
    let images = tempfile::Builder::new()
        .prefix("restore-read-")
        .tempdir_in(dir)
        .map_err(step("creating an images directory"))?;
    let store = DirStore::open_dir(images.path()).map_err(step("opening the images"))?;
    let name = ImageName::Pages {
        id: KFD_ID,
        gpu_id: 1,
    };
    let sizes: Vec<u64> = (0..bytes.div_ceil(bo_bytes))
        .map(|n| (bytes - n * bo_bytes).min(bo_bytes))
        .collect();
    let sized = PagesLayout::from_sizes(sizes.iter().copied()).ok_or_else(|| BenchError::Step {
        step: "pages layout",
        reason: "sizes overflow".into(),
    })?;
    let mut writer = store
        .create_pages(&name, sized)
        .map_err(step("creating a pages file"))?;
    let mut chunk = vec![0u8; RAW_IO];
    for (n, &size) in sizes.iter().enumerate() {
        let mut offset = 0u64;
        while offset < size {
            let len = (size - offset).min(RAW_IO as u64) as usize;
            fill_chunk(
                &mut chunk[..len],
                (n as u64) << 32 | offset,
                offset,
                Fill::Dense,
            );
            writer
                .write(&chunk[..len])
                .map_err(step("writing a pages file"))?;
            offset += len as u64;
        }
    }
    let (sink, written) = writer.finish().map_err(step("finishing a pages file"))?;
    sink.commit().map_err(step("committing a pages file"))?;
    // The reader's layout carries the checksums the writer recorded.
    let layout = PagesLayout::new(
        sizes
            .iter()
            .zip(&written.checksums)
            .map(|(&size, &(entry, sum))| PagesBo {
                entry,
                size,
                checksum: Some(sum),
            })
            .collect(),
    )
    .ok_or_else(|| BenchError::Step {
        step: "pages layout",
        reason: "sizes overflow".into(),
    })?;
    let path = images.path().join(name.to_string());

    // Touched before the timing, like the raw read's buffer.
    let mut ring = [vec![1u8; 32 << 20], vec![1u8; 32 << 20]];
    drop_cache(&path)?;
    let start = Instant::now();
    let mut reader = store
        .open_pages(&name, layout)
        .map_err(step("opening the pages file"))?
        .ok_or_else(|| BenchError::Step {
            step: "opening the pages file",
            reason: "missing".into(),
        })?;
    let mut turn = 0;
    while reader
        .read_chunk(&mut ring[turn])
        .map_err(step("reading the pages file"))?
        .is_some()
    {
        turn ^= 1;
    }
    reader.finish().map_err(step("reading the pages file"))?;
    let pages = start.elapsed();

    drop_cache(&path)?;
    let start = Instant::now();
    let mut file = File::open(&path).map_err(step("opening the pages file"))?;
    while file
        .read(&mut chunk)
        .map_err(step("reading the pages file"))?
        > 0
    {}
    let raw = start.elapsed();
    Ok(RestoreReadFigures {
        pages_bps: bytes as f64 / pages.as_secs_f64(),
        raw_bps: bytes as f64 / raw.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: u64 = 4096;

    /// `(start, end)` of the data extents of `file` (`SEEK_DATA`/`SEEK_HOLE`).
    fn data_extents(file: &File) -> Vec<(u64, u64)> {
        let len = file.metadata().unwrap().len() as libc::off_t;
        let fd = file.as_raw_fd();
        let mut out = Vec::new();
        let mut pos: libc::off_t = 0;
        while pos < len {
            // SAFETY: lseek on an open fd; no memory is passed.
            let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
            if data < 0 {
                let err = std::io::Error::last_os_error();
                assert_eq!(err.raw_os_error(), Some(libc::ENXIO), "SEEK_DATA: {err}");
                break;
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
            assert!(
                hole > data,
                "SEEK_HOLE: {}",
                std::io::Error::last_os_error()
            );
            out.push((data as u64, hole as u64));
            pos = hole;
        }
        out
    }

    /// Whether the file system of `dir` reports holes through `SEEK_DATA`.
    fn reports_holes(dir: &Path) -> bool {
        let path = dir.join("probe");
        let file = File::create(&path).unwrap();
        file.write_all_at(&[1], (1 << 20) - 1).unwrap();
        file.sync_all().unwrap();
        let holes = data_extents(&file)
            .first()
            .is_some_and(|&(start, _)| start > 0);
        fs::remove_file(&path).unwrap();
        holes
    }

    #[test]
    fn layouts_put_data_pages_where_they_say() {
        // Spot checks of the rule itself, written out by hand.
        for (page, data) in [
            (0, true),
            (255, true),
            (256, false),
            (2559, false),
            (2560, true),
        ] {
            assert_eq!(Fill::ZeroRuns.page_holds_data(page), data, "page {page}");
        }
        for (page, data) in [(0, true), (1, false), (9, false), (10, true), (11, false)] {
            assert_eq!(Fill::MostlyZero.page_holds_data(page), data, "page {page}");
        }
        assert_eq!(
            Fill::ZeroRuns.data_runs((12 << 20) + 3 * BLOCK),
            vec![(0, 1 << 20), (10 << 20, 1 << 20)]
        );
        assert_eq!(
            Fill::MostlyZero.data_runs(21 * BLOCK + 100),
            vec![(0, BLOCK), (10 * BLOCK, BLOCK), (20 * BLOCK, BLOCK)]
        );
        assert_eq!(
            Fill::Dense.data_runs(3 * BLOCK + 8),
            vec![(0, 3 * BLOCK + 8)]
        );
        // Contents depend on the position only, not on how they are chunked.
        let bo = BoPlan::spread(1, 2 * BLOCK, 2 * BLOCK)[0];
        let mut whole = vec![0u8; 2 * BLOCK as usize];
        bo.contents(&mut whole, 0, Fill::Dense);
        let mut tail = vec![0u8; BLOCK as usize + 64];
        bo.contents(&mut tail, BLOCK - 64, Fill::Dense);
        assert_eq!(&whole[BLOCK as usize - 64..], &tail[..]);
        assert!(whole.chunks_exact(8).all(|w| w != [0; 8]));
    }

    #[test]
    fn raw_layout_file_has_the_bytes_and_holes_of_a_pages_file() {
        let dir = tempfile::tempdir().unwrap();
        if !reports_holes(dir.path()) {
            eprintln!("skipped: the file system of the temp dir reports no holes (SEEK_DATA)");
            return;
        }
        // Three BOs, the last one short, so BOs start inside zero and data
        // runs and the 8-byte header shifts every run off the block grid.
        let bo_bytes = (12 << 20) + 3 * BLOCK;
        let bos = BoPlan::spread(1, 2 * bo_bytes + 5 * BLOCK, bo_bytes);
        assert_eq!(bos.len(), 3);
        for fill in [Fill::ZeroRuns, Fill::MostlyZero, Fill::Dense] {
            let layout = RawLayout::new(&bos, fill);
            let payload: u64 = bos.iter().map(|b| b.size).sum();
            assert_eq!(layout.file_len(), 8 + payload);
            // What a pages file of these BOs holds, built BO by BO.
            let mut expected = payload.to_le_bytes().to_vec();
            for bo in &bos {
                let mut bytes = vec![0u8; bo.size as usize];
                bo.contents(&mut bytes, 0, fill);
                expected.extend_from_slice(&bytes);
            }
            let path = dir.path().join("raw");
            layout.write_file(&path).unwrap();
            assert_eq!(fs::read(&path).unwrap(), expected, "{fill:?}: bytes");

            let file = File::open(&path).unwrap();
            let extents = data_extents(&file);
            let blocks = expected.len().div_ceil(BLOCK as usize);
            let mut data_blocks = 0u64;
            for b in 0..blocks {
                let at = b as u64 * BLOCK;
                let end = (b + 1) * BLOCK as usize;
                let has_data = expected[b * BLOCK as usize..end.min(expected.len())]
                    .iter()
                    .any(|&x| x != 0);
                let allocated = extents.iter().any(|&(s, e)| s < at + BLOCK && e > at);
                assert_eq!(allocated, has_data, "{fill:?}: file block {b}");
                data_blocks += u64::from(has_data);
            }
            if fill != Fill::Dense {
                // A run of n data pages touches at most n + 1 file blocks.
                let bound: u64 = bos
                    .iter()
                    .flat_map(|b| fill.data_runs(b.size))
                    .map(|(_, len)| len.div_ceil(BLOCK) + 1)
                    .sum();
                assert!(data_blocks <= bound, "{fill:?}: {data_blocks} > {bound}");
                assert!(data_blocks < blocks as u64 / 4, "{fill:?}: {data_blocks}");
                let (_, disk) = disk_usage(std::slice::from_ref(&path)).unwrap();
                // ext4 counts its extent tree blocks too (340 extents each).
                let meta = 16 + extents.len() as u64 / 100;
                assert!(
                    disk <= (data_blocks + meta) * BLOCK,
                    "{fill:?}: {disk} bytes on disk for {data_blocks} data blocks"
                );
            }
            fs::remove_file(&path).unwrap();
        }

        // The public entry point measures and cleans up.
        let layout = RawLayout::new(&bos, Fill::ZeroRuns);
        let run = raw_layout_write(&layout, dir.path()).unwrap();
        assert_eq!(run.logical, layout.file_len());
        assert!(run.allocated < run.logical / 5);
        assert!(layout.written_bytes() < layout.file_len() / 5);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn restore_read_reads_back_what_the_store_wrote() {
        // The read verifies every BO's checksum and the file's end, so a
        // reader that delivered other bytes than were written fails here.
        let dir = tempfile::tempdir().unwrap();
        let figures = restore_read(dir.path(), (16 << 20) + 4096, 4 << 20).unwrap();
        assert!(figures.pages_bps > 0.0 && figures.raw_bps > 0.0);
        // Nothing is left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
