//! Incremental and deduplicated dumps, side by side with full ones and with
//! plain sequential I/O of the same bytes, in one run: one `name=value`
//! line per figure on stdout (progress and the plugin's log on stderr).
//!
//! `cargo run --release -p benches --bin incremental_dedup [-- --quick | --mib N]
//! [--dedup-only | --incremental-only]`: 2 GiB of dense BO contents by
//! default (`--quick`: 256 MiB); `--dedup-only` measures only the `dedup_*`
//! figures, `--incremental-only` all but them (for profiling). Files go to
//! `$BENCH_DIR` when set, else `target/bench-report` of the workspace; they
//! are removed afterwards.
//!
//! Figures (every dump ends with the `fsync` of its pages files inside the
//! timing; every restore starts with the pages files dropped from the page
//! cache; every restore is verified outside the timing):
//! - `hash_*_gibs`: the per-BO checksum of format version 1 (the
//!   hand-written 8-lane hash), XXH3-64 and XXH3-128 over one buffer in
//!   memory, and the chunk digests (XXH3-128 per chunk) at 1, 2 and 4 MiB;
//!   `hash_xxh3_128_sse2_*` is the same XXH3-128 from `xxhash-rust` built
//!   for baseline x86-64 (the plugin's until commit 4a17756; it now uses
//!   `twox-hash`, which picks AVX2 at run time). `hash_*_staging_gibs`: the
//!   same over one staging buffer (8 MiB) hashed again and again, so
//!   cache-resident: the best case of the plugin hashing what the copy
//!   engine just wrote (in a dump the bytes are mostly out of cache by
//!   then).
//! - `raw_write_gibs` / `raw_read_gibs` and `raw_cpu_s_per_gib_write` /
//!   `_read`: plain 8 MiB `write`s (then `fsync`) and `read`s of the same
//!   number of bytes into the same directory, with the CPU time of the
//!   thread doing them; best of as many rounds as the dumps get, the time
//!   and the CPU of one round.
//! - `incremental_*`: one process, 1 GPU, 64 MiB BOs. A full dump; a
//!   second dump of the unchanged process with the first as its parent
//!   (`unchanged_bytes_ratio`, `unchanged_time_ratio` against the full
//!   dump); a third after one chunk in ten changed (`changed10_bytes_ratio`);
//!   the restore from that three-deep chain against the restore of its
//!   flattened copy (`chain3_restore_vs_flat`: flattened time over chain
//!   time, 1.0 = as fast). `sdma_read_s`: the simulated copy engine alone
//!   reading the same BOs into the plugin's staging ring, no digest and no
//!   file, the floor under a dump that reads every byte;
//!   `unchanged_vs_sdma_read` is the unchanged dump over it (what the
//!   plugin adds), `unchanged_floor_ratio` it over the full dump (the
//!   lowest `unchanged_time_ratio` this simulator allows on this disk).
//! - `dedup_*`: eight processes, one per GPU, identical weights (15/16 of
//!   each process's bytes) and their own activations, dumped as one tree
//!   without and with `KFD_DEDUP` (`bytes_ratio`, `time_ratio`).
//!   `dedup_sdma_read_s`: the simulated copy engines alone reading every
//!   process's BOs into the plugin's staging rings (no digest, no file),
//!   the floor under a deduplicated dump, which still reads every byte;
//!   `dedup_floor_ratio` is it over the full dump (the lowest
//!   `dedup_time_ratio` this simulator allows on these CPUs) and
//!   `dedup_on_vs_sdma_read` the deduplicated dump over it.
//!   `dedup_paced_*`: the deduplicated dump again with every simulated SDMA
//!   ring paced at `dedup_paced_ring_mibs` MiB/s, so the copy engines bound
//!   the transfers: `serial_dump_s` through CRIU 4.2's hooks (each
//!   process's contents copied inside its `DUMP_EXT_FILE`, one process
//!   after another, as the C plugin does on any CRIU), `background_dump_s`
//!   through criu-dev's (copied in the background, finished at
//!   `DUMP_DEVICES_LATE`), and `background_speedup` the first over the
//!   second.
//! - `plugin_cpu_s_per_gib_dump` / `_restore`: the CPU time of the
//!   plugin's transfer threads
//!   (`amdgpu_checkpoint::transfer::transfer_cpu_time`, per-thread clocks;
//!   the simulated SDMA's ring threads are not among them) per GiB of the
//!   full dump and of the flattened restore, and `plugin_cpu_vs_raw_dump`
//!   / `_restore` against the raw write / read CPU per GiB;
//!   `plugin_cpu_vs_plain_read_restore` against plain reads of the same
//!   pages files taken after each restore under the same conditions.
//!
//! Every best-of figure takes its time and its CPU from one run (the
//! fastest), and compared runs take turns, their order reversed every other
//! round (a dump's first round keeps the order: a later dump may take an
//! earlier one as its parent).
//!
//! Every timed phase, raw and plugin, is primed first (untimed, see
//! `benches::memory`): this VM's balloon hands free memory back to the
//! host, and whichever thread touches it next pays the host's fault as its
//! own CPU time. `raw_cpu_s_per_gib_read_unprimed` shows how much.

#![forbid(unsafe_code)]

use std::fs::File;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use amdgpu_checkpoint::options::Options;
use amdgpu_checkpoint::sys::thread_cpu_time;
use amdgpu_checkpoint::transfer::transfer_cpu_time;
use amdgpu_image::chain::flatten;
use amdgpu_image::chunks::{ChunkHasher, CHUNK_SIZE};
use amdgpu_image::{ContentHasher, CriuKfd, DirStore, ImageName, ImageStore, ReadLimits};
use benches::memory::Primer;
use benches::output::{line, work_dir};
use benches::transfer::{
    drop_cache, gibs, pages_files, read_plain, write_plain, BenchError, Fill, Machine, Result,
    SdmaRig,
};
use criu_host_emulator::{CriuEmulator, DeviceVma, EmulatorConfig, TaskFile, TaskToDump};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Pid, Sim, SimConfig};

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;
const KFD_ID: u32 = 1;
/// Primed beyond the bytes a phase moves (staging memory, image files).
const PRIME_MARGIN: u64 = 256 * MIB;
/// How long the unprimed read waits after the drop: longer than the
/// balloon's two-second reporting delay (`benches::memory`).
const UNPRIMED_PAUSE: Duration = Duration::from_secs(6);
/// Rounds of the interleaved restores (best of).
const RESTORE_ROUNDS: usize = 3;
/// Rounds of the interleaved dumps compared with each other (best of):
/// this VM's memory (host faults on memory it reported free) moves one
/// run of a phase by 2x; every dump a ratio compares gets the same rounds,
/// taken in turn.
const DUMP_ROUNDS: usize = 3;
/// The copy engines' pace in the `dedup_paced_*` dumps, per SDMA ring (the
/// plugin copies on two per GPU): slow enough that the copy, not these
/// CPUs, bounds each process's transfer, as where the copy is DMA. It
/// shows what overlapping the processes' transfers buys in that regime,
/// not a real GPU's rate.
const PACED_RING_MIBS: u64 = 512;

fn fail(step: &'static str) -> impl FnOnce(String) -> BenchError {
    move |reason| BenchError::Step { step, reason }
}

fn step<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> BenchError {
    move |e| BenchError::Step {
        step: what,
        reason: e.to_string(),
    }
}

fn progress(what: &str) {
    eprintln!("incremental_dedup: {what}");
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.4}", a / b)
}

/// Hash rates over `len` bytes in memory (GiB/s), best of 3; `suffix`
/// names the buffer (`""` for the large one, out of cache; `_staging` for
/// one staging buffer's size, cache-resident: the plugin's best case).
fn hash_rates(len: usize, suffix: &str) {
    let mut buf = vec![0u8; len];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for w in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    let best = |f: &dyn Fn(&[u8]) -> u128| {
        let mut best = Duration::MAX;
        let mut sink = 0u128;
        for _ in 0..3 {
            let start = Instant::now();
            sink ^= f(&buf);
            best = best.min(start.elapsed());
        }
        std::hint::black_box(sink);
        gibs(len as u64, best)
    };
    let line =
        |name: &str, value: String| line(&name.replace("_gibs", &format!("{suffix}_gibs")), value);
    line(
        "hash_v1_handwritten_gibs",
        format!(
            "{:.2}",
            best(&|b| {
                let mut h = ContentHasher::new();
                h.update(b);
                u128::from(h.finish())
            })
        ),
    );
    line(
        "hash_xxh3_64_gibs",
        format!(
            "{:.2}",
            best(&|b| u128::from(twox_hash::XxHash3_64::oneshot(b)))
        ),
    );
    // What the plugin uses (twox-hash: AVX2 picked at run time), and the
    // same algorithm as xxhash-rust builds it for baseline x86-64 (SSE2),
    // which the plugin used until commit 4a17756.
    line(
        "hash_xxh3_128_gibs",
        format!("{:.2}", best(&twox_hash::XxHash3_128::oneshot)),
    );
    line(
        "hash_xxh3_128_sse2_gibs",
        format!("{:.2}", best(&|b| xxhash_rust::xxh3::xxh3_128(b))),
    );
    for mib in [1u64, 2, 4] {
        line(
            &format!("hash_chunk_digests_{mib}mib_gibs"),
            format!(
                "{:.2}",
                best(&|b| {
                    let mut h = ChunkHasher::new(mib * MIB);
                    h.update(b);
                    h.finish().iter().fold(0, |a, d| a ^ d)
                })
            ),
        );
    }
}

/// Plain sequential write (then `fsync`) and read of `bytes`: wall and
/// thread-CPU time of each, best of [`DUMP_ROUNDS`] rounds, as many as the
/// plugin's dumps get; the write's (and the read's) wall and CPU come from
/// one round, the one with the shortest wall time. The write's CPU is that
/// of the `write` calls (bytes into the page cache), as the plugin's figure
/// is that of its transfer threads (writeback runs in the kernel's flusher
/// and the write-behind thread in both cases); its wall time includes the
/// `fsync`.
fn raw_io(
    dir: &Path,
    bytes: u64,
    primer: &Primer,
) -> Result<((Duration, Duration), (Duration, Duration))> {
    let (mut write, mut read) = raw_io_once(dir, bytes, primer)?;
    for _ in 1..DUMP_ROUNDS {
        let (w, r) = raw_io_once(dir, bytes, primer)?;
        write = faster(write, w);
        read = faster(read, r);
    }
    Ok((write, read))
}

/// Of two (wall, CPU) runs of the same thing, the one with the shorter
/// wall time, whole.
fn faster(a: (Duration, Duration), b: (Duration, Duration)) -> (Duration, Duration) {
    if b.0 < a.0 {
        b
    } else {
        a
    }
}

fn raw_io_once(
    dir: &Path,
    bytes: u64,
    primer: &Primer,
) -> Result<((Duration, Duration), (Duration, Duration))> {
    let path = dir.join("raw-io.bin");
    let mut buf = vec![0u8; 8 << 20];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8) | 1;
    }
    primer.prime(bytes + PRIME_MARGIN)?;
    let (wall, cpu) = (Instant::now(), thread_cpu_time());
    let mut file = File::create(&path).map_err(step("creating the raw file"))?;
    write_plain(&mut file, &buf, bytes)?;
    let write_cpu = thread_cpu_time().saturating_sub(cpu);
    file.sync_all().map_err(step("fsync of the raw file"))?;
    let write = (wall.elapsed(), write_cpu);
    drop(file);
    drop_cache(&path)?;
    primer.prime(bytes + PRIME_MARGIN)?;
    let (wall, cpu) = (Instant::now(), thread_cpu_time());
    let mut file = File::open(&path).map_err(step("opening the raw file"))?;
    let read = read_plain(&mut file, &mut buf)?;
    let read_time = (wall.elapsed(), thread_cpu_time().saturating_sub(cpu));
    let _ = std::fs::remove_file(&path);
    if read != bytes {
        return Err(fail("reading the raw file")(format!(
            "{read} of {bytes} bytes"
        )));
    }
    Ok((write, read_time))
}

/// Thread CPU of plain 8 MiB `read`s of every pages file of `dir`, dropped
/// from the page cache and primed for `bytes` first, as a restore is.
fn plain_read_cpu(dir: &Path, bytes: u64, primer: &Primer) -> Result<Duration> {
    let files = pages_files(dir)?;
    for path in &files {
        drop_cache(path)?;
    }
    primer.prime(2 * bytes + PRIME_MARGIN)?;
    let mut buf = vec![0u8; 8 << 20];
    let cpu = thread_cpu_time();
    for path in &files {
        let mut file = File::open(path).map_err(step("opening a pages file"))?;
        read_plain(&mut file, &mut buf)?;
    }
    Ok(thread_cpu_time().saturating_sub(cpu))
}

/// CPU seconds of a plain 8 MiB `read` of `bytes`, the file dropped from
/// the page cache [`UNPRIMED_PAUSE`] before, without priming: what any
/// phase pays here when the memory it allocates has been free a while
/// (`benches::memory`). Shown once, beside the primed figures.
fn unprimed_read(dir: &Path, bytes: u64) -> Result<f64> {
    let path = dir.join("raw-unprimed.bin");
    let mut buf = vec![1u8; 8 << 20];
    let mut file = File::create(&path).map_err(step("creating the raw file"))?;
    write_plain(&mut file, &buf, bytes)?;
    drop(file);
    drop_cache(&path)?;
    std::thread::sleep(UNPRIMED_PAUSE);
    let cpu = thread_cpu_time();
    let mut file = File::open(&path).map_err(step("opening the raw file"))?;
    read_plain(&mut file, &mut buf)?;
    let used = thread_cpu_time().saturating_sub(cpu);
    let _ = std::fs::remove_file(&path);
    Ok(used.as_secs_f64())
}

/// The plugin's pages reader alone against a plain `read` of the same
/// file, page cache dropped before each, alternating, best of three: CPU
/// per GiB of the reader (every chunk digest and the BO checksum verified)
/// and of the plain reads. Separates the reader's own cost from what a
/// whole restore adds (the emulated CRIU, the simulated SDMA's staging
/// memory, the page-cache reclaim the run's other files cause).
fn reader_cpu(dir: &Path, bytes: u64, primer: &Primer) -> Result<(f64, f64)> {
    use amdgpu_image::chunks::ChecksumAlgo;
    use amdgpu_image::{PagesBo, PagesLayout};
    let store = DirStore::open_dir(dir).map_err(step("opening the work directory"))?;
    let name = ImageName::Pages { id: 99, gpu_id: 1 };
    let algo = ChecksumAlgo::V2 {
        chunk_size: CHUNK_SIZE,
    };
    let layout = |checksum| {
        PagesLayout::new(vec![PagesBo {
            entry: 0,
            size: bytes,
            checksum,
        }])
        .and_then(|l| l.with_chunks(algo, Vec::new()))
        .ok_or_else(|| fail("sizing a pages file")("too large".into()))
    };
    let mut buf = vec![0u8; 32 << 20];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for w in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
    let mut writer = store
        .create_pages(&name, layout(None)?)
        .map_err(step("creating a pages file"))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        writer
            .write(&buf[..n])
            .map_err(step("writing a pages file"))?;
        left -= n as u64;
    }
    let (file, written) = writer.finish().map_err(step("finishing a pages file"))?;
    amdgpu_image::ImageWriter::commit(file).map_err(step("committing a pages file"))?;
    let checksum = written.checksums.first().map(|(_, c)| *c);
    let path = dir.join(name.to_string());
    let gib = bytes as f64 / GIB;
    let (mut reader, mut plain) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        drop_cache(&path)?;
        primer.prime(bytes + PRIME_MARGIN)?;
        let cpu = thread_cpu_time();
        let mut r = store
            .open_pages(&name, layout(checksum)?)
            .map_err(step("opening a pages file"))?
            .ok_or_else(|| fail("opening a pages file")("missing".into()))?;
        while r
            .read_chunk(&mut buf)
            .map_err(step("reading a pages file"))?
            .is_some()
        {}
        reader = reader.min(thread_cpu_time().saturating_sub(cpu).as_secs_f64() / gib);
        drop_cache(&path)?;
        primer.prime(bytes + PRIME_MARGIN)?;
        let cpu = thread_cpu_time();
        let mut f = File::open(&path).map_err(step("opening a pages file"))?;
        while std::io::Read::read(&mut f, &mut buf).map_err(step("reading a pages file"))? > 0 {}
        plain = plain.min(thread_cpu_time().saturating_sub(cpu).as_secs_f64() / gib);
    }
    let _ = std::fs::remove_file(&path);
    Ok((reader, plain))
}

/// What one dump took.
struct Dumped {
    time: Duration,
    /// Bytes the pages files hold (length headers: the stored chunks).
    stored: u64,
    /// CPU of the plugin's transfer threads.
    cpu: Duration,
}

impl Dumped {
    /// The best of two runs of the same dump: the one with the shorter
    /// time, its CPU with it (the bytes stored are the same).
    fn best(self, other: Dumped) -> Dumped {
        if other.time < self.time {
            other
        } else {
            self
        }
    }
}

/// Runs `dumps` (each: a dump into the directory it is given) in turn for
/// [`DUMP_ROUNDS`] rounds, the first round into `dirs` (kept), the others
/// into scratch copies beside them (removed); the best of each. The first
/// round runs them in order (a later dump may take an earlier one of that
/// round as its parent), later rounds alternate: reversed, in order, ...
fn interleaved(
    dirs: &[&Path],
    mut dumps: impl FnMut(usize, &Path) -> Result<Dumped>,
) -> Result<Vec<Dumped>> {
    let mut best: Vec<Option<Dumped>> = dirs.iter().map(|_| None).collect();
    for round in 0..DUMP_ROUNDS {
        let mut order: Vec<usize> = (0..dirs.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let dir = &dirs[i];
            let scratch;
            let into = if round == 0 {
                *dir
            } else {
                let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("dump");
                scratch = dir.with_file_name(format!("{name}-round{round}"));
                &scratch
            };
            let run = dumps(i, into)?;
            if round > 0 {
                let _ = std::fs::remove_dir_all(into);
            }
            best[i] = Some(match best[i].take() {
                Some(b) => b.best(run),
                None => run,
            });
        }
    }
    Ok(best.into_iter().flatten().collect())
}

fn stored_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for path in pages_files(dir)? {
        let mut header = [0u8; 8];
        std::io::Read::read_exact(
            &mut File::open(&path).map_err(step("opening a pages file"))?,
            &mut header,
        )
        .map_err(step("reading a length header"))?;
        total += u64::from_le_bytes(header);
    }
    Ok(total)
}

fn emulator(sim: &Sim, dir: &Path, shm: &Path, dedup: bool) -> CriuEmulator {
    emulator_with(sim, dir, shm, dedup, true)
}

/// An emulated CRIU with its first `max_hooks` hooks (`None`: criu-dev's,
/// all of them).
fn emulator_hooks(
    sim: &Sim,
    dir: &Path,
    shm: &Path,
    dedup: bool,
    max_hooks: Option<u32>,
) -> CriuEmulator {
    let mut config = EmulatorConfig::new(shm);
    if let Some(max) = max_hooks {
        config.max_hooks = max;
    }
    config.options = Options::default().with_dedup(dedup);
    CriuEmulator::new(sim.clone(), dir, config)
}

/// An emulated CRIU; without `parallel` it is one before v4.2 (no
/// `POST_FORKING`), so contents are restored in the task.
fn emulator_with(sim: &Sim, dir: &Path, shm: &Path, dedup: bool, parallel: bool) -> CriuEmulator {
    let before_v4_2 = criu_plugin_amdgpu::abi::hook::POST_FORKING as u32;
    emulator_hooks(sim, dir, shm, dedup, (!parallel).then_some(before_v4_2))
}

/// Dumps the tree `apps` into `dir` (made here, linked to `parent`)
/// through the emulated CRIU `emulator` makes for `dir`.
fn dump(
    sim: &Sim,
    apps: &[&Workload],
    dir: &Path,
    parent: Option<&str>,
    emulator: impl FnOnce(&Path) -> CriuEmulator,
    (primer, moved): (&Primer, u64),
) -> Result<Dumped> {
    std::fs::create_dir(dir).map_err(step("creating an images directory"))?;
    if let Some(p) = parent {
        std::os::unix::fs::symlink(p, dir.join("parent")).map_err(step("linking the parent"))?;
    }
    let vmas = DeviceVma::offered_at_dump(sim);
    let files: Vec<Vec<TaskFile<'_>>> = apps
        .iter()
        .enumerate()
        .map(|(i, app)| {
            let first = KFD_ID + 20 * i as u32;
            let mut files = vec![TaskFile {
                fd: app.kfd_fd().expect("a launched workload has its /dev/kfd"),
                id: first,
            }];
            for (k, fd) in app.render_fds().into_iter().enumerate() {
                files.push(TaskFile {
                    fd,
                    id: first + 1 + k as u32,
                });
            }
            files
        })
        .collect();
    let tasks: Vec<TaskToDump<'_>> = apps
        .iter()
        .zip(&files)
        .map(|(app, files)| TaskToDump {
            pid: app.pid(),
            files: files.clone(),
            vmas: vmas.clone(),
        })
        .collect();
    let emulator = emulator(dir);
    primer.prime(moved + PRIME_MARGIN)?;
    let cpu = transfer_cpu_time();
    let start = Instant::now();
    emulator
        .dump_tree(&tasks)
        .map_err(step("dump through the plugin"))?;
    let cpu = transfer_cpu_time().saturating_sub(cpu);
    for path in pages_files(dir)? {
        File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(step("fsync of a pages file"))?;
    }
    let time = start.elapsed();
    Ok(Dumped {
        time,
        stored: stored_bytes(dir)?,
        cpu,
    })
}

/// Restores process `pid` from `dir` (the pages files of `dirs` dropped
/// from the page cache first); verifies it; ends it. Time and plugin CPU.
fn restore(
    sim: &Sim,
    pid: Pid,
    (dir, parallel): (&Path, bool),
    dirs: &[&Path],
    shm: &Path,
    expected: &kfd_sim::workload::WorkloadDescription,
    primer: &Primer,
) -> Result<(Duration, Duration)> {
    for d in dirs {
        for path in pages_files(d)? {
            drop_cache(&path)?;
        }
    }
    let image: CriuKfd = DirStore::open_dir(dir)
        .map_err(step("opening the images"))?
        .read_message(&ImageName::Kfd { id: KFD_ID }, ReadLimits::default())
        .map_err(step("reading the KFD image"))?
        .ok_or_else(|| fail("reading the KFD image")("missing".into()))?;
    let ids: Vec<u32> = (0..=image.num_of_gpus).map(|i| KFD_ID + i).collect();
    let vmas = DeviceVma::of_kfd_image(&image);
    let emulator = emulator_with(sim, dir, shm, false, parallel);
    // Page cache for the pages files and the simulator's memory for the BOs.
    let bytes: u64 = expected.bos.iter().map(|b| b.size).sum();
    primer.prime(2 * bytes + PRIME_MARGIN)?;
    let cpu = transfer_cpu_time();
    let start = Instant::now();
    let task = emulator
        .restore(pid, &ids, &vmas)
        .map_err(step("restore through the plugin"))?;
    let time = start.elapsed();
    let cpu = transfer_cpu_time().saturating_sub(cpu);
    if task.resume_answer != 0 {
        return Err(fail("restore through the plugin")(format!(
            "RESUME_DEVICES_LATE answered {}",
            task.resume_answer
        )));
    }
    Workload::verify(sim, pid, expected).map_err(step("verifying the restore"))?;
    drop(task);
    sim.exit_process(pid)
        .map_err(step("ending the restored process"))?;
    Ok((time, cpu))
}

/// The simulated SDMA alone reading every BO of `machine` into the
/// plugin's staging ring (its buffers and SDMA rings), no digest and no
/// file: the floor under any dump that reads every byte, which on a GPU is
/// DMA and here a `memcpy` on this machine's CPUs. Primed like the dumps;
/// best of [`DUMP_ROUNDS`]; the rigs are set up outside the timing.
fn sdma_read_floor(machine: &Machine, (primer, moved): (&Primer, u64)) -> Result<Duration> {
    sdma_floor(
        || {
            let gpus = machine.sim.gpus();
            gpus.iter()
                .map(|gpu| SdmaRig::plugin(machine, gpu.gpu_id))
                .collect()
        },
        (primer, moved),
    )
}

/// [`sdma_read_floor`] for every process of a tree: each process's BOs
/// with contents, per GPU, read by rigs of the plugin's shape, one rig
/// after another (each rig's two rings already keep both CPUs busy).
fn sdma_read_floor_of(
    sim: &Sim,
    apps: &[&Workload],
    (primer, moved): (&Primer, u64),
) -> Result<Duration> {
    let mut plan = Vec::new();
    for app in apps {
        let description = app.describe().map_err(step("describing a process"))?;
        let mut by_gpu: std::collections::BTreeMap<u32, Vec<(u64, u64)>> = Default::default();
        for bo in description
            .bos
            .iter()
            .filter(|b| kfd::AllocFlags::from_bits_retain(b.flags).has_content())
        {
            by_gpu
                .entry(kfd::MemHandle(bo.handle).gpu_id().0)
                .or_default()
                .push((bo.handle, bo.size));
        }
        plan.push((*app, by_gpu));
    }
    sdma_floor(
        || {
            let mut rigs = Vec::new();
            for (app, by_gpu) in &plan {
                for (&gpu, bos) in by_gpu {
                    rigs.push(SdmaRig::plugin_for(sim, app, gpu, bos)?);
                }
            }
            Ok(rigs)
        },
        (primer, moved),
    )
}

/// Best of [`DUMP_ROUNDS`] passes of fresh rigs from `rigs`, each
/// reading all of its BOs; primed for `moved` bytes before each.
fn sdma_floor(
    rigs: impl Fn() -> Result<Vec<SdmaRig>>,
    (primer, moved): (&Primer, u64),
) -> Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..DUMP_ROUNDS {
        let mut rigs = rigs()?;
        primer.prime(moved + PRIME_MARGIN)?;
        let start = Instant::now();
        for rig in &mut rigs {
            rig.pass(false)?;
        }
        best = best.min(start.elapsed());
        for rig in rigs {
            rig.close()?;
        }
    }
    Ok(best)
}

/// Changes one word in every tenth chunk of every BO of `machine`.
fn change_tenth(machine: &Machine) -> Result<u64> {
    let mut changed = 0;
    for bo in &machine.bos {
        let mut off = 0;
        let mut k = 0u64;
        while off < bo.size {
            if k % 10 == 3 {
                machine
                    .app
                    .write_bo(bo.handle, off + 64, &(k ^ 0xdead_beef).to_le_bytes())
                    .map_err(step("changing a chunk"))?;
                changed += 1;
            }
            off += CHUNK_SIZE;
            k += 1;
        }
    }
    Ok(changed)
}

fn copy_foreign_files(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).map_err(step("listing images"))? {
        let entry = entry.map_err(step("listing images"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("amdgpu-") && name != "parent" {
            std::fs::copy(entry.path(), to.join(&name)).map_err(step("copying an image"))?;
        }
    }
    Ok(())
}

fn incremental(root: &Path, total: u64, raw_cpu: (f64, f64), primer: &Primer) -> Result<()> {
    let shm = tempfile::tempdir().map_err(step("creating a shm directory"))?;
    progress("building the incremental machine");
    let machine = Machine::build(1, total, 64 * MIB, Fill::Dense)?;
    let d1 = root.join("1");
    let d2 = root.join("2");
    let d3 = root.join("3");
    let flat = root.join("flat");
    let moved = machine.bytes();
    // The full and the unchanged dump in turn (the unchanged one's parent
    // is the first round's full dump: every round compares the same two).
    progress("full dump and second dump, nothing changed, in turn");
    // Every round's directory sits beside `1`: `../1` is its parent.
    let both = interleaved(&[&d1, &d2], |i, dir| {
        let parent = (i == 1).then_some("../1");
        dump(
            &machine.sim,
            &[&machine.app],
            dir,
            parent,
            |d| emulator(&machine.sim, d, shm.path(), false),
            (primer, moved),
        )
    })?;
    let (full, same) = (&both[0], &both[1]);
    progress("the simulated copy engine alone, the plugin's staging ring");
    let floor = sdma_read_floor(&machine, (primer, moved))?;
    let changed = change_tenth(&machine)?;
    progress(&format!("third dump, {changed} chunks changed"));
    let tenth = interleaved(&[&d3], |_, dir| {
        dump(
            &machine.sim,
            &[&machine.app],
            dir,
            Some("../2"),
            |d| emulator(&machine.sim, d, shm.path(), false),
            (primer, moved),
        )
    })?
    .remove(0);
    let bytes = machine.bytes() as f64;
    line("incremental_bytes", machine.bytes());
    line(
        "incremental_full_dump_s",
        format!("{:.3}", full.time.as_secs_f64()),
    );
    line(
        "incremental_full_gibs",
        format!("{:.2}", bytes / GIB / full.time.as_secs_f64()),
    );
    line(
        "incremental_unchanged_dump_s",
        format!("{:.3}", same.time.as_secs_f64()),
    );
    line(
        "incremental_unchanged_bytes_ratio",
        ratio(same.stored as f64, full.stored as f64),
    );
    line(
        "incremental_unchanged_time_ratio",
        ratio(same.time.as_secs_f64(), full.time.as_secs_f64()),
    );
    line(
        "incremental_sdma_read_s",
        format!("{:.3}", floor.as_secs_f64()),
    );
    line(
        "incremental_unchanged_vs_sdma_read",
        ratio(same.time.as_secs_f64(), floor.as_secs_f64()),
    );
    line(
        "incremental_unchanged_floor_ratio",
        ratio(floor.as_secs_f64(), full.time.as_secs_f64()),
    );
    line(
        "incremental_changed10_dump_s",
        format!("{:.3}", tenth.time.as_secs_f64()),
    );
    line(
        "incremental_changed10_bytes_ratio",
        ratio(tenth.stored as f64, full.stored as f64),
    );
    line(
        "incremental_changed10_time_ratio",
        ratio(tenth.time.as_secs_f64(), full.time.as_secs_f64()),
    );
    let dump_cpu = full.cpu.as_secs_f64() / (bytes / GIB);
    line("plugin_cpu_s_per_gib_dump", format!("{dump_cpu:.3}"));
    line("plugin_cpu_vs_raw_dump", ratio(dump_cpu, raw_cpu.0));

    progress("flattening the chain");
    std::fs::create_dir(&flat).map_err(step("creating the flat directory"))?;
    flatten(
        &DirStore::open_dir(&d3).map_err(step("opening the chain"))?,
        &DirStore::open_dir(&flat).map_err(step("opening the flat directory"))?,
        ReadLimits::default(),
    )
    .map_err(step("flattening"))?;
    copy_foreign_files(&d3, &flat)?;

    let Machine { sim, app, .. } = machine;
    let expected = app.describe().map_err(step("describing the process"))?;
    let pid = app.pid();
    app.exit().map_err(step("ending the process"))?;
    // Interleaved, best of RESTORE_ROUNDS each: none gets a warmer
    // machine. A chained set is restored in the task (the parallel worker
    // reads one pages file per GPU); the flattened one both in the task
    // (like for like) and by the parallel worker (what CRIU v4.2 does with
    // it). After each in-task restore of the flattened set, a plain read of
    // its pages files, primed alike: the read CPU its restore is set
    // against, taken under the same conditions.
    // Each kind's best round is the one with the shortest restore; its CPU
    // and the plain read taken after it come from that round too. The
    // three kinds run in turn, their order reversed every other round.
    let mut chain_time = Duration::MAX;
    let mut flat_best: Option<(Duration, Duration, Duration)> = None;
    let mut parallel_time = Duration::MAX;
    #[derive(Clone, Copy)]
    enum Kind {
        Chain,
        Flat,
        Parallel,
    }
    for round in 0..RESTORE_ROUNDS {
        let mut order = [Kind::Chain, Kind::Flat, Kind::Parallel];
        if round % 2 == 1 {
            order.reverse();
        }
        for kind in order {
            match kind {
                Kind::Chain => {
                    progress(&format!(
                        "restore from the three-deep chain ({})",
                        round + 1
                    ));
                    let (t, _) = restore(
                        &sim,
                        pid,
                        (&d3, true),
                        &[&d1, &d2, &d3],
                        shm.path(),
                        &expected,
                        primer,
                    )?;
                    chain_time = chain_time.min(t);
                }
                Kind::Flat => {
                    progress(&format!("restore from the flattened set ({})", round + 1));
                    let (t, cpu) = restore(
                        &sim,
                        pid,
                        (&flat, false),
                        &[&flat],
                        shm.path(),
                        &expected,
                        primer,
                    )?;
                    let plain = plain_read_cpu(&flat, bytes as u64, primer)?;
                    if flat_best.is_none_or(|(best, _, _)| t < best) {
                        flat_best = Some((t, cpu, plain));
                    }
                }
                Kind::Parallel => {
                    progress(&format!(
                        "parallel restore from the flattened set ({})",
                        round + 1
                    ));
                    let (t, _) = restore(
                        &sim,
                        pid,
                        (&flat, true),
                        &[&flat],
                        shm.path(),
                        &expected,
                        primer,
                    )?;
                    parallel_time = parallel_time.min(t);
                }
            }
        }
    }
    let (flat_time, flat_cpu, plain_cpu) =
        flat_best.unwrap_or((Duration::MAX, Duration::MAX, Duration::MAX));
    line(
        "incremental_chain3_restore_s",
        format!("{:.3}", chain_time.as_secs_f64()),
    );
    line(
        "incremental_flat_restore_s",
        format!("{:.3}", flat_time.as_secs_f64()),
    );
    line(
        "incremental_flat_parallel_restore_s",
        format!("{:.3}", parallel_time.as_secs_f64()),
    );
    line(
        "incremental_chain3_restore_vs_flat",
        ratio(flat_time.as_secs_f64(), chain_time.as_secs_f64()),
    );
    let restore_cpu = flat_cpu.as_secs_f64() / (bytes / GIB);
    let plain_cpu = plain_cpu.as_secs_f64() / (bytes / GIB);
    line("plugin_cpu_s_per_gib_restore", format!("{restore_cpu:.3}"));
    line(
        "plain_read_cpu_s_per_gib_restore_files",
        format!("{plain_cpu:.3}"),
    );
    line(
        "plugin_cpu_vs_plain_read_restore",
        ratio(restore_cpu, plain_cpu),
    );
    line("plugin_cpu_vs_raw_restore", ratio(restore_cpu, raw_cpu.1));
    for d in [&d1, &d2, &d3, &flat] {
        let _ = std::fs::remove_dir_all(d);
    }
    Ok(())
}

fn dedup(root: &Path, total: u64, primer: &Primer) -> Result<()> {
    const GPUS: usize = 8;
    let shm = tempfile::tempdir().map_err(step("creating a shm directory"))?;
    let per = (total / GPUS as u64).max(2 * CHUNK_SIZE);
    let activations = (per / 16).next_multiple_of(4096);
    let weights = per - activations;
    progress("building the data-parallel machine");
    let sim = Sim::synthetic(GPUS, SimConfig::default()).map_err(step("simulated machine"))?;
    let apps = Workload::launch_data_parallel(
        &sim,
        &Profile::DataParallel {
            weights_bytes: weights,
            activations_bytes: activations,
        },
    )
    .map_err(step("launching the data-parallel job"))?;
    let refs: Vec<&Workload> = apps.iter().collect();
    let off = root.join("dp-off");
    let on = root.join("dp-on");
    progress("data-parallel dumps without and with KFD_DEDUP, in turn");
    let moved = per * GPUS as u64;
    let both = interleaved(&[&off, &on], |i, dir| {
        let make = |d: &Path| emulator(&sim, d, shm.path(), i == 1);
        let run = dump(&sim, &refs, dir, None, make, (primer, moved));
        let _ = std::fs::remove_dir_all(dir);
        run
    })?;
    let (plain, deduped) = (&both[0], &both[1]);
    line("dedup_gpus", GPUS);
    line("dedup_bytes", plain.stored);
    line(
        "dedup_off_dump_s",
        format!("{:.3}", plain.time.as_secs_f64()),
    );
    line(
        "dedup_on_dump_s",
        format!("{:.3}", deduped.time.as_secs_f64()),
    );
    line(
        "dedup_bytes_ratio",
        ratio(deduped.stored as f64, plain.stored as f64),
    );
    line(
        "dedup_time_ratio",
        ratio(deduped.time.as_secs_f64(), plain.time.as_secs_f64()),
    );
    // What the simulator's copies alone take: every byte is still read
    // from every GPU (a chunk is known to be a duplicate only once read),
    // here by a `memcpy` on the same two CPUs.
    progress("the simulated SDMA alone reading every process's BOs");
    let floor = sdma_read_floor_of(&sim, &refs, (primer, moved))?;
    line("dedup_sdma_read_s", format!("{:.3}", floor.as_secs_f64()));
    line(
        "dedup_floor_ratio",
        ratio(floor.as_secs_f64(), plain.time.as_secs_f64()),
    );
    line(
        "dedup_on_vs_sdma_read",
        ratio(deduped.time.as_secs_f64(), floor.as_secs_f64()),
    );
    // The same deduplicated dump where the copy engines, not these two
    // CPUs, bound each process's transfer, as on a GPU (where the copy is
    // DMA): CRIU 4.2 (no DUMP_DEVICES_LATE), where each process's contents
    // are copied inside its DUMP_EXT_FILE, one process after another (the
    // C plugin's order on any CRIU), against criu-dev, where they copy in
    // the background while CRIU dumps the next process.
    progress(&format!(
        "deduplicated dumps with the copy engines paced at {PACED_RING_MIBS} MiB/s per ring: \
         one process after another, then in the background, in turn"
    ));
    sim.set_sdma_bandwidth(Some(PACED_RING_MIBS * MIB));
    let serial = root.join("dp-serial");
    let background = root.join("dp-background");
    let paced = interleaved(&[&serial, &background], |i, dir| {
        let make = |d: &Path| {
            let late = criu_plugin_amdgpu::abi::hook::DUMP_DEVICES_LATE as u32;
            emulator_hooks(&sim, d, shm.path(), true, (i == 0).then_some(late))
        };
        let run = dump(&sim, &refs, dir, None, make, (primer, moved));
        let _ = std::fs::remove_dir_all(dir);
        run
    });
    sim.set_sdma_bandwidth(None);
    let paced = paced?;
    line("dedup_paced_ring_mibs", PACED_RING_MIBS);
    line(
        "dedup_paced_serial_dump_s",
        format!("{:.3}", paced[0].time.as_secs_f64()),
    );
    line(
        "dedup_paced_background_dump_s",
        format!("{:.3}", paced[1].time.as_secs_f64()),
    );
    line(
        "dedup_paced_background_speedup",
        ratio(paced[0].time.as_secs_f64(), paced[1].time.as_secs_f64()),
    );
    for app in apps {
        app.exit().map_err(step("ending a process"))?;
    }
    Ok(())
}

/// Which parts [`run`] measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    All,
    Incremental,
    Dedup,
}

fn run(total: u64, only: Only) -> Result<()> {
    let base = work_dir();
    std::fs::create_dir_all(&base).map_err(step("creating the work directory"))?;
    let root = tempfile::Builder::new()
        .prefix("incremental-")
        .tempdir_in(&base)
        .map_err(step("creating the run directory"))?;
    line("bytes", total);
    progress("writing the ballast that primes free memory before every timed phase");
    let primer = Primer::new(root.path(), 2 * total + PRIME_MARGIN)?;
    if only == Only::Dedup {
        return dedup(root.path(), total, &primer);
    }
    progress("hash rates in memory");
    hash_rates((total.min(256 * MIB)) as usize, "");
    hash_rates(
        amdgpu_checkpoint::options::DEFAULT_STAGING_BUFFER as usize,
        "_staging",
    );
    progress("raw sequential write and read");
    let ((w, wcpu), (r, rcpu)) = raw_io(root.path(), total, &primer)?;
    let gib = total as f64 / GIB;
    line("raw_write_gibs", format!("{:.2}", gibs(total, w)));
    line("raw_read_gibs", format!("{:.2}", gibs(total, r)));
    let raw_cpu = (wcpu.as_secs_f64() / gib, rcpu.as_secs_f64() / gib);
    line("raw_cpu_s_per_gib_write", format!("{:.3}", raw_cpu.0));
    line("raw_cpu_s_per_gib_read", format!("{:.3}", raw_cpu.1));
    progress("the pages reader against plain reads of one file");
    let (reader, plain) = reader_cpu(root.path(), total.min(512 * MIB), &primer)?;
    line("pages_reader_cpu_s_per_gib", format!("{reader:.3}"));
    line("plain_read_cpu_s_per_gib_same_file", format!("{plain:.3}"));
    line("pages_reader_cpu_vs_plain_read", ratio(reader, plain));
    progress("a plain read without priming, after a pause");
    let cold = unprimed_read(root.path(), total)?;
    line(
        "raw_cpu_s_per_gib_read_unprimed",
        format!("{:.3}", cold / gib),
    );
    incremental(root.path(), total, raw_cpu, &primer)?;
    if only == Only::All {
        dedup(root.path(), total, &primer)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut total = 2048 * MIB;
    let mut only = Only::All;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => total = 256 * MIB,
            "--dedup-only" => only = Only::Dedup,
            "--incremental-only" => only = Only::Incremental,
            "--mib" => match args.next().and_then(|v| v.parse::<u64>().ok()) {
                Some(n) if n >= 64 => total = n * MIB,
                _ => {
                    eprintln!("incremental_dedup: --mib needs a number of MiB, at least 64");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!(
                    "incremental_dedup: unknown argument {other:?} (--quick, --mib N, --dedup-only, --incremental-only)"
                );
                return ExitCode::from(2);
            }
        }
    }
    match run(total, only) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("incremental_dedup: {e}");
            ExitCode::FAILURE
        }
    }
}
