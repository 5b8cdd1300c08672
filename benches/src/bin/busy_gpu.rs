//! The plugin on a busy GPU, against an idle one, in the same run.
//!
//! * `busy_plugin_sdma_*`: the rate the plugin's own transfers get while
//!   another process's SDMA queues copy on the same engines (a
//!   `copy_stream` keeping one queue per GPU busy for the whole dump),
//!   against the same dump with that process idle. The dump of a 2-GPU
//!   machine's 128 MiB of VRAM BOs (`--quick`: 64 MiB) through the plugin
//!   (emulated CRIU), the simulated engines throttled to 128 MiB/s each,
//!   so the rate is the engines' share, not this machine's CPU:
//!   `busy_vs_idle_plugin_sdma` is busy over idle.
//! * `drain_dump_*`: the dump of a process whose queues have a copy packet
//!   in flight (the kernel preempts at a packet boundary, so the dump waits
//!   for it) against the same process with its queues idle, engines at
//!   256 MiB/s, 3.99 MiB per packet: `drain_vs_idle_dump` is drain over
//!   idle, `drain_added_ms` the difference.
//!
//! Each figure is the median of the rounds (5, `--quick` 3), with the
//! lowest and highest as `*_range`; busy and idle
//! runs alternate, the first of a round alternating too. The CPU time of
//! the whole process (the plugin's threads and the simulator's engines
//! alike: they share it) is printed per kind as `*_cpu_s`, for what the
//! rates cost here; the rates themselves are bounded by the simulated
//! engines.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use benches::output::{line, work_dir};
use benches::transfer::{plugin_run, Fill, Machine, RunOptions};
use criu_host_emulator::{CriuEmulator, DeviceVma, EmulatorConfig, TaskFile};
use kfd_sim::workload::copy_stream::{CopyOp, CopyStream, CopyStreamConfig};
use kfd_sim::{Sim, SimConfig};

const MIB: u64 = 1 << 20;
/// Engine rate of the first figure, and of the second.
const PLUGIN_RATE: u64 = 128 * MIB;
const DRAIN_RATE: u64 = 256 * MIB;
/// One copy packet's worth (ROCr's largest linear copy).
const PACKET: u64 = 0x3f_ffe0;

fn cpu_seconds() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `u` is a writable rusage getrusage(2) fills.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) == 0 };
    if !ok {
        return 0.0;
    }
    // SAFETY: getrusage succeeded and filled the struct.
    let u = unsafe { u.assume_init() };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

/// The median, and the lowest and highest value.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// One dump of a 2-GPU machine's BOs with a copy stream beside it, busy
/// or not: (seconds, bytes).
fn plugin_dump(dir: &Path, total: u64, busy: bool) -> Result<(f64, u64), String> {
    let machine = Machine::build(2, total, 32 * MIB, Fill::Dense).map_err(|e| e.to_string())?;
    machine.sim.set_sdma_bandwidth(Some(PLUGIN_RATE));
    let stream = CopyStream::launch(
        &machine.sim,
        &CopyStreamConfig {
            gpus: 2,
            buffer_bytes: PACKET,
        },
    )
    .map_err(|e| e.to_string())?;
    if busy {
        // Enough to outlast the dump: twice the dump's bytes per engine.
        let copies = (2 * total / PACKET / 2).max(8);
        for _ in 0..copies {
            for gpu in 0..2 {
                stream
                    .copy(CopyOp::HostToDevice { gpu, bytes: PACKET })
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    let bytes = machine.bytes();
    let run = plugin_run(
        machine,
        dir,
        RunOptions {
            options: Default::default(),
            restore: false,
            fsync: false,
        },
    )
    .map_err(|e| e.to_string())?;
    stream.exit().map_err(|e| e.to_string())?;
    Ok((run.checkpoint.as_secs_f64(), bytes))
}

/// One dump of a copy stream, with a copy in flight or idle: seconds.
fn stream_dump(dir: &Path, in_flight: bool) -> Result<f64, String> {
    let sim = Sim::synthetic(2, SimConfig::default()).map_err(|e| e.to_string())?;
    sim.set_sdma_bandwidth(Some(DRAIN_RATE));
    let stream = CopyStream::launch(
        &sim,
        &CopyStreamConfig {
            gpus: 2,
            buffer_bytes: PACKET,
        },
    )
    .map_err(|e| e.to_string())?;
    for gpu in 0..2 {
        for _ in 0..4 {
            stream
                .copy(CopyOp::HostToDevice { gpu, bytes: PACKET })
                .map_err(|e| e.to_string())?;
        }
    }
    if in_flight {
        // Into the first packet: the engines are mid-copy.
        std::thread::sleep(Duration::from_millis(4));
    } else {
        stream
            .wait_all(Duration::from_secs(60))
            .map_err(|e| e.to_string())?;
    }
    let images = tempfile::Builder::new()
        .prefix("images-")
        .tempdir_in(dir)
        .map_err(|e| e.to_string())?;
    let shm = tempfile::tempdir().map_err(|e| e.to_string())?;
    let emulator = CriuEmulator::new(sim.clone(), images.path(), EmulatorConfig::new(shm.path()));
    let mut files = vec![TaskFile {
        fd: stream.kfd_fd(),
        id: 1,
    }];
    for (i, fd) in stream.render_fds().into_iter().enumerate() {
        files.push(TaskFile {
            fd,
            id: 2 + i as u32,
        });
    }
    let start = Instant::now();
    emulator
        .dump(stream.pid(), &files, &DeviceVma::offered_at_dump(&sim))
        .map_err(|e| e.to_string())?;
    let took = start.elapsed().as_secs_f64();
    drop(files);
    stream.exit().map_err(|e| e.to_string())?;
    Ok(took)
}

fn run(quick: bool) -> Result<(), String> {
    let dir = work_dir().join("busy-gpu");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let rounds = if quick { 3 } else { 5 };
    let total = if quick { 64 * MIB } else { 128 * MIB };
    let (mut busy, mut idle) = (Vec::new(), Vec::new());
    let (mut busy_cpu, mut idle_cpu) = (0.0, 0.0);
    for round in 0..rounds {
        for i in 0..2 {
            let is_busy = (round + i) % 2 == 0;
            let cpu = cpu_seconds();
            let (secs, bytes) = plugin_dump(&dir, total, is_busy)?;
            let rate = bytes as f64 / secs / (1u64 << 30) as f64;
            if is_busy {
                busy.push(rate);
                busy_cpu += cpu_seconds() - cpu;
            } else {
                idle.push(rate);
                idle_cpu += cpu_seconds() - cpu;
            }
        }
    }
    let ((b, b_lo, b_hi), (i, i_lo, i_hi)) = (spread(busy), spread(idle));
    line("busy_plugin_sdma_gibs", format!("{b:.3}"));
    line(
        "busy_plugin_sdma_gibs_range",
        format!("{b_lo:.3}-{b_hi:.3}"),
    );
    line("idle_plugin_sdma_gibs", format!("{i:.3}"));
    line(
        "idle_plugin_sdma_gibs_range",
        format!("{i_lo:.3}-{i_hi:.3}"),
    );
    line("busy_vs_idle_plugin_sdma", format!("{:.3}", b / i));
    line("busy_plugin_cpu_s", format!("{busy_cpu:.2}"));
    line("idle_plugin_cpu_s", format!("{idle_cpu:.2}"));

    let (mut drain, mut still) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for i in 0..2 {
            let in_flight = (round + i) % 2 == 0;
            let secs = stream_dump(&dir, in_flight)?;
            if in_flight {
                drain.push(secs);
            } else {
                still.push(secs);
            }
        }
    }
    let ((d, d_lo, d_hi), (s, s_lo, s_hi)) = (spread(drain), spread(still));
    line("drain_dump_ms", format!("{:.1}", d * 1e3));
    line(
        "drain_dump_ms_range",
        format!("{:.1}-{:.1}", d_lo * 1e3, d_hi * 1e3),
    );
    line("idle_dump_ms", format!("{:.1}", s * 1e3));
    line(
        "idle_dump_ms_range",
        format!("{:.1}-{:.1}", s_lo * 1e3, s_hi * 1e3),
    );
    line("drain_added_ms", format!("{:.1}", (d - s) * 1e3));
    line("drain_vs_idle_dump", format!("{:.3}", d / s));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() -> ExitCode {
    let quick = std::env::args().any(|a| a == "--quick");
    match run(quick) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("busy_gpu: {e}");
            ExitCode::FAILURE
        }
    }
}
