//! The benchmark report: every figure of the transfer path, the topology
//! mapping and the image decoder, measured in one process and printed as
//! one `name=value` line each (progress goes to stderr).
//!
//! `cargo run --release -p benches --bin report [-- --quick] [--only
//! PART,...]`; `--quick` moves 256 MiB of BOs instead of 2 GiB, `--only`
//! runs some parts (`sdma`, `checkpoint`, `restore-read`, `staging`,
//! `zero`, `pipelined`, `topology`, `image`). Files go to `$BENCH_DIR` when set,
//! else `target/bench-report` of the workspace (the same file system for
//! raw and plugin runs); everything written there is removed again.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use benches::output::{line, work_dir};
use benches::transfer::{
    c_strategy_dump, gibs, options_with_max_buffer, plugin_run, raw_io, raw_layout_write,
    raw_write_behind, restore_read, sdma_cold_write, sdma_rates, BenchError, BoPlan, Fill, Machine,
    PluginRun, RawFigures, RawLayout, Result, RunOptions,
};
use benches::{image, topology};

const MIB: u64 = 1 << 20;

fn progress(what: &str) {
    eprintln!("report: {what}");
}

fn options(max_buffer: Option<&str>, restore: bool, fsync: bool) -> RunOptions {
    RunOptions {
        options: options_with_max_buffer(max_buffer),
        restore,
        fsync,
    }
}

fn peak(run: &PluginRun) -> u64 {
    run.staging_peak.iter().max().copied().unwrap_or(0)
}

fn min_time(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// The parts of the report, in the order they run; `--only` names some.
const PARTS: [&str; 8] = [
    "sdma",
    "checkpoint",
    "restore-read",
    "staging",
    "zero",
    "pipelined",
    "topology",
    "image",
];

fn run(quick: bool, dir: &Path, parts: &[&str]) -> Result<()> {
    let total = if quick { 256 * MIB } else { 2048 * MIB };
    let bo_bytes = if quick { 32 * MIB } else { 64 * MIB };
    let reps = 2;
    let gib = (1u64 << 30) as f64;
    let wanted = |part: &str| parts.contains(&part);
    line("bytes", total);
    line("bo_bytes", bo_bytes);
    line("repetitions", reps);

    let mut sdma_cold_bps = None;
    if wanted("sdma") {
        progress("SDMA copy engine, unthrottled, no file I/O");
        let machine = Machine::build(1, total.min(512 * MIB), bo_bytes, Fill::Dense)?;
        let sdma = sdma_rates(&machine)?;
        drop(machine);
        line("sdma_read_gibs", format!("{:.3}", sdma.read_bps / gib));
        line("sdma_write_gibs", format!("{:.3}", sdma.write_bps / gib));
        let machine = Machine::build_unwritten(1, total.min(512 * MIB), bo_bytes)?;
        let cold = sdma_cold_write(&machine)?;
        drop(machine);
        line("sdma_write_cold_gibs", format!("{:.3}", cold / gib));
        sdma_cold_bps = Some(cold);
    }

    if wanted("checkpoint") {
        checkpoint_vs_raw(dir, total, bo_bytes, reps, sdma_cold_bps)?;
    }

    if wanted("restore-read") {
        progress("the file side of a restore alone (no SDMA) against a raw read");
        let (mut pages_read, mut plain_read) = (0f64, 0f64);
        for _ in 0..reps {
            let r = restore_read(dir, total, bo_bytes)?;
            pages_read = pages_read.max(r.pages_bps);
            plain_read = plain_read.max(r.raw_bps);
        }
        line("restore_read_gibs", format!("{:.3}", pages_read / gib));
        line("restore_read_raw_gibs", format!("{:.3}", plain_read / gib));
        line(
            "restore_read_vs_raw",
            format!("{:.3}", pages_read / plain_read),
        );
    }

    if wanted("staging") {
        progress("staging with KFD_MAX_BUFFER_SIZE=64M and unset (one 512 MiB BO)");
        for (name, value) in [("max64m", Some("64M")), ("unset_512mib_bo", None)] {
            let machine = Machine::build(1, 512 * MIB, 512 * MIB, Fill::Dense)?;
            let run = plugin_run(machine, dir, options(value, true, false))?;
            line(&format!("staging_peak_bytes_{name}"), peak(&run));
        }
    }

    if wanted("zero") {
        zero_elision(dir, total, bo_bytes, reps)?;
    }

    if wanted("pipelined") {
        pipelined_vs_serial(dir, total, bo_bytes, reps)?;
    }

    if wanted("topology") {
        progress("topology mapping");
        let cases = topology::map_cases(topology::fixtures_root().as_deref());
        let timings = topology::map_timings(&cases, if quick { 3 } else { 9 });
        for l in topology::report_lines(&timings) {
            println!("{l}");
        }
    }

    if wanted("image") {
        progress("image decoding and pages verification");
        let figures = image::measure(dir).map_err(|e| BenchError::Step {
            step: "image figures",
            reason: e.to_string(),
        })?;
        println!("{figures}");
    }
    Ok(())
}

/// The time `bytes` take at `bps` bytes per second.
fn time_at(bytes: u64, bps: f64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / bps)
}

/// The storage's write of `bytes` to `dir` both ways, plainly (8 MiB
/// `write`s, `fsync`) and written behind through the directory store (the
/// plugin's writer, then `fsync`), in the order `plain_first` says: the
/// plain write's figures (its read back included) and the written-behind
/// write's time.
fn raw_both_ways(dir: &Path, bytes: u64, plain_first: bool) -> Result<(RawFigures, Duration)> {
    if plain_first {
        let plain = raw_io(dir, bytes, true)?;
        Ok((plain, raw_write_behind(dir, bytes)?))
    } else {
        let behind = raw_write_behind(dir, bytes)?;
        Ok((raw_io(dir, bytes, true)?, behind))
    }
}

/// Checkpoint and restore through the plugin (1 and 4 GPUs, DMA
/// unthrottled) against the storage's best raw write (the faster of the
/// plain and the written-behind write) and its raw read; `reps` rounds,
/// raw and plugin runs in turn, their order alternating round by round;
/// best of the rounds on each side.
fn checkpoint_vs_raw(
    dir: &Path,
    total: u64,
    bo_bytes: u64,
    reps: usize,
    sdma_cold_bps: Option<f64>,
) -> Result<()> {
    let (mut raw_plain, mut raw_behind, mut raw_read) = (None, None, None);
    let mut checkpoint: [Option<Duration>; 2] = [None, None];
    let mut restore: [Option<Duration>; 2] = [None, None];
    let mut staging_unset = 0;
    for rep in 0..reps {
        let raw_first = rep % 2 == 0;
        for raw_turn in [raw_first, !raw_first] {
            if raw_turn {
                progress(&format!(
                    "raw sequential write (plain and written behind) and read ({}/{reps})",
                    rep + 1
                ));
                let (plain, behind) = raw_both_ways(dir, total, raw_first)?;
                raw_plain = min_time(raw_plain, time_at(total, plain.write_bps));
                raw_behind = min_time(raw_behind, behind);
                raw_read = min_time(raw_read, time_at(total, plain.read_bps));
                continue;
            }
            for (i, gpus) in [1usize, 4].into_iter().enumerate() {
                progress(&format!(
                    "checkpoint and restore, {gpus} GPU(s), DMA unthrottled ({}/{reps})",
                    rep + 1
                ));
                let machine = Machine::build(gpus, total, bo_bytes, Fill::Dense)?;
                let run = plugin_run(machine, dir, options(None, true, true))?;
                checkpoint[i] = min_time(checkpoint[i], run.checkpoint);
                if let Some(t) = run.restore {
                    restore[i] = min_time(restore[i], t);
                }
                if gpus == 1 {
                    staging_unset = staging_unset.max(peak(&run));
                }
            }
        }
    }
    let raw_plain = raw_plain.unwrap_or(Duration::MAX);
    let raw_behind = raw_behind.unwrap_or(Duration::MAX);
    let raw_write = raw_plain.min(raw_behind);
    let raw_read = raw_read.unwrap_or(Duration::MAX);
    line("raw_write_gibs", format!("{:.3}", gibs(total, raw_write)));
    line(
        "raw_write_plain_gibs",
        format!("{:.3}", gibs(total, raw_plain)),
    );
    line(
        "raw_write_behind_gibs",
        format!("{:.3}", gibs(total, raw_behind)),
    );
    line("raw_read_gibs", format!("{:.3}", gibs(total, raw_read)));
    for (i, gpus) in [1usize, 4].into_iter().enumerate() {
        let (Some(cp), Some(rs)) = (checkpoint[i], restore[i]) else {
            continue;
        };
        line(
            &format!("checkpoint_gibs_{gpus}gpu"),
            format!("{:.3}", gibs(total, cp)),
        );
        line(
            &format!("restore_gibs_{gpus}gpu"),
            format!("{:.3}", gibs(total, rs)),
        );
        line(
            &format!("checkpoint_vs_raw_{gpus}gpu"),
            format!("{:.3}", raw_write.as_secs_f64() / cp.as_secs_f64()),
        );
        line(
            &format!("restore_vs_raw_{gpus}gpu"),
            format!("{:.3}", raw_read.as_secs_f64() / rs.as_secs_f64()),
        );
    }
    // The most a 1-GPU restore can reach here: its simulated SDMA alone
    // (one thread, writing into fresh BOs) against the raw read.
    if let Some(cold) = sdma_cold_bps {
        line(
            "restore_vs_raw_sdma_bound_1gpu",
            format!("{:.3}", raw_read.as_secs_f64() / (total as f64 / cold)),
        );
    }
    line("staging_peak_bytes_unset", staging_unset);
    Ok(())
}

/// The copy strategies compared by [`pipelined_vs_serial`].
#[derive(Debug, Clone, Copy)]
enum Strategy {
    /// The C plugin's: one ring, copy then write, per chunk.
    Serial,
    /// The plugin's, its GPU's rings limited together to the rate.
    Pipelined,
    /// The plugin's, each of its rings limited to the rate.
    PipelinedPerRing,
}

/// The plugin's pipelined dump against the C plugin's serial strategy with
/// the simulated DMA at the storage's best write rate, with `fsync` and of
/// the page cache (`_cached`). The DMA limit is the GPU's, whatever number
/// of rings a strategy copies on (the serial one uses one, the plugin two),
/// so `pipelined_vs_serial` is what overlapping copy and I/O buys; the
/// plugin again with each ring limited to that rate shows what its second
/// ring adds apart (`pipelined_ring_gain`). `reps` rounds, a fresh machine
/// for every run, the order of the three alternating round by round.
fn pipelined_vs_serial(dir: &Path, total: u64, bo_bytes: u64, reps: usize) -> Result<()> {
    let gib = (1u64 << 30) as f64;
    for (suffix, fsync) in [("", true), ("_cached", false)] {
        progress(&format!(
            "pipelined against the C plugin's serial strategy, DMA at the raw write rate{}",
            if fsync {
                ""
            } else {
                " of the page cache (no fsync)"
            }
        ));
        // The storage's best: the faster way (with fsync, the plain or the
        // written-behind write) in the best round.
        let mut best_write = Duration::MAX;
        for rep in 0..reps {
            let write = if fsync {
                let (plain, behind) = raw_both_ways(dir, total, rep % 2 == 0)?;
                time_at(total, plain.write_bps).min(behind)
            } else {
                time_at(total, raw_io(dir, total, false)?.write_bps)
            };
            best_write = best_write.min(write);
        }
        let rate = total as f64 / best_write.as_secs_f64();
        if !fsync {
            line("raw_write_cached_gibs", format!("{:.3}", rate / gib));
        }
        line(
            &format!("pipelined_dma_gibs{suffix}"),
            format!("{:.3}", rate / gib),
        );
        let mut best: [Option<Duration>; 3] = [None; 3];
        let mut c_peak = 0;
        let order = [
            Strategy::Serial,
            Strategy::Pipelined,
            Strategy::PipelinedPerRing,
        ];
        for rep in 0..reps {
            let mut round = order;
            if rep % 2 == 1 {
                round.reverse();
            }
            for strategy in round {
                let machine = Machine::build(1, total, bo_bytes, Fill::Dense)?;
                let (slot, time) = match strategy {
                    Strategy::Serial => {
                        machine.sim.set_sdma_gpu_bandwidth(Some(rate as u64));
                        let run = c_strategy_dump(&machine, dir, fsync)?;
                        c_peak = c_peak.max(run.staging_peak);
                        (0, run.time)
                    }
                    Strategy::Pipelined => {
                        machine.sim.set_sdma_gpu_bandwidth(Some(rate as u64));
                        (
                            1,
                            plugin_run(machine, dir, options(None, false, fsync))?.checkpoint,
                        )
                    }
                    Strategy::PipelinedPerRing => {
                        machine.sim.set_sdma_bandwidth(Some(rate as u64));
                        (
                            2,
                            plugin_run(machine, dir, options(None, false, fsync))?.checkpoint,
                        )
                    }
                };
                best[slot] = min_time(best[slot], time);
            }
        }
        if let [Some(serial), Some(pipelined), Some(per_ring)] = best {
            line(
                &format!("serial_checkpoint_gibs{suffix}"),
                format!("{:.3}", gibs(total, serial)),
            );
            line(
                &format!("pipelined_checkpoint_gibs{suffix}"),
                format!("{:.3}", gibs(total, pipelined)),
            );
            line(
                &format!("pipelined_vs_serial{suffix}"),
                format!("{:.3}", serial.as_secs_f64() / pipelined.as_secs_f64()),
            );
            line(
                &format!("pipelined_per_ring_checkpoint_gibs{suffix}"),
                format!("{:.3}", gibs(total, per_ring)),
            );
            line(
                &format!("pipelined_ring_gain{suffix}"),
                format!("{:.3}", pipelined.as_secs_f64() / per_ring.as_secs_f64()),
            );
        }
        if fsync {
            line("staging_peak_bytes_c_strategy", c_peak);
        }
    }
    Ok(())
}

/// Best times of one kind of zero elision run.
#[derive(Default)]
struct Best {
    /// The checkpoint, or for a raw run its write (the faster way).
    checkpoint: Option<Duration>,
    /// A raw run's plain and written-behind writes.
    raw_ways: (Option<Duration>, Option<Duration>),
    restore: Option<Duration>,
    /// Logical and allocated bytes of the files written.
    usage: (u64, u64),
}

impl Best {
    /// Keeps the faster checkpoint and restore of `run`, and its disk usage.
    fn record(&mut self, run: &PluginRun) {
        self.checkpoint = min_time(self.checkpoint, run.checkpoint);
        if let Some(t) = run.restore {
            self.restore = min_time(self.restore, t);
        }
        self.usage = run.pages;
    }
}

fn ratio(a: Option<Duration>, b: Option<Duration>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a.as_secs_f64() / b.as_secs_f64()),
        _ => "nan".into(),
    }
}

/// BOs with 90 % zero pages against dense BOs, through the plugin and as a
/// raw write of the same bytes in the same layout (the storage's ceiling:
/// the faster of the plain and the written-behind write), interleaved,
/// raw and plugin first in turn, best of `reps` each. Two layouts:
/// `ZeroRuns` (the figures without suffix) and `MostlyZero`
/// (`_scattered`).
fn zero_elision(dir: &Path, total: u64, bo_bytes: u64, reps: usize) -> Result<()> {
    progress("zero elision: BOs with 90% zero pages against dense BOs, and raw writes of them");
    let fills = [Fill::Dense, Fill::ZeroRuns, Fill::MostlyZero];
    // Index into `fills`; plugin runs with 1 GPU for every fill, with 4
    // GPUs for the dense and the realistic sparse layout.
    let mut raw: [Best; 3] = Default::default();
    let mut one: [Best; 3] = Default::default();
    let mut four: [Best; 2] = Default::default();
    let plan = BoPlan::spread(1, total, bo_bytes);
    for rep in 0..reps {
        progress(&format!("zero elision, 1 GPU and raw ({}/{reps})", rep + 1));
        let raw_first = rep % 2 == 0;
        for (i, &fill) in fills.iter().enumerate() {
            for raw_turn in [raw_first, !raw_first] {
                if raw_turn {
                    let layout = RawLayout::new(&plan, fill);
                    let run = raw_layout_write(&layout, dir, raw_first)?;
                    drop(layout);
                    raw[i].checkpoint = min_time(raw[i].checkpoint, run.time);
                    raw[i].raw_ways.0 = min_time(raw[i].raw_ways.0, run.plain);
                    raw[i].raw_ways.1 = min_time(raw[i].raw_ways.1, run.behind);
                    raw[i].usage = (run.logical, run.allocated);
                } else {
                    let machine = Machine::build(1, total, bo_bytes, fill)?;
                    one[i].record(&plugin_run(machine, dir, options(None, true, true))?);
                }
            }
        }
        progress(&format!("zero elision, 4 GPUs ({}/{reps})", rep + 1));
        for (i, &fill) in fills[..2].iter().enumerate() {
            let machine = Machine::build(4, total, bo_bytes, fill)?;
            four[i].record(&plugin_run(machine, dir, options(None, true, true))?);
        }
    }
    for (i, suffix) in [(1, ""), (2, "_scattered")] {
        line(
            &format!("zero_elision_speedup{suffix}"),
            ratio(one[0].checkpoint, one[i].checkpoint),
        );
        line(
            &format!("zero_elision_restore_speedup{suffix}"),
            ratio(one[0].restore, one[i].restore),
        );
        line(
            &format!("zero_elision_raw_ceiling{suffix}"),
            ratio(raw[0].checkpoint, raw[i].checkpoint),
        );
        line(
            &format!("zero_checkpoint_vs_raw{suffix}"),
            ratio(raw[i].checkpoint, one[i].checkpoint),
        );
        if i == 1 {
            line("zero_image_logical_bytes", one[i].usage.0);
        }
        line(&format!("zero_image_disk_bytes{suffix}"), one[i].usage.1);
        line(&format!("zero_raw_disk_bytes{suffix}"), raw[i].usage.1);
    }
    line(
        "zero_elision_speedup_4gpu",
        ratio(four[0].checkpoint, four[1].checkpoint),
    );
    line(
        "zero_elision_restore_speedup_4gpu",
        ratio(four[0].restore, four[1].restore),
    );
    line("zero_image_disk_bytes_4gpu", four[1].usage.1);
    // The times behind the ratios.
    let ms =
        |t: Option<Duration>| t.map_or("nan".into(), |t| format!("{:.0}", t.as_secs_f64() * 1e3));
    for (i, suffix) in ["_dense", "", "_scattered"].into_iter().enumerate() {
        line(&format!("zero_raw_write_ms{suffix}"), ms(raw[i].checkpoint));
        line(
            &format!("zero_raw_write_plain_ms{suffix}"),
            ms(raw[i].raw_ways.0),
        );
        line(
            &format!("zero_raw_write_behind_ms{suffix}"),
            ms(raw[i].raw_ways.1),
        );
        line(
            &format!("zero_checkpoint_ms{suffix}"),
            ms(one[i].checkpoint),
        );
        line(&format!("zero_restore_ms{suffix}"), ms(one[i].restore));
    }
    for (i, suffix) in ["_4gpu_dense", "_4gpu"].into_iter().enumerate() {
        line(
            &format!("zero_checkpoint_ms{suffix}"),
            ms(four[i].checkpoint),
        );
        line(&format!("zero_restore_ms{suffix}"), ms(four[i].restore));
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut quick = false;
    let mut parts: Vec<&str> = PARTS.to_vec();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--only" => {
                let Some(list) = args.next() else {
                    eprintln!("report: --only needs parts: {}", PARTS.join(","));
                    return ExitCode::from(2);
                };
                parts = Vec::new();
                for name in list.split(',') {
                    match PARTS.iter().find(|p| **p == name) {
                        Some(part) => parts.push(part),
                        None => {
                            eprintln!("report: no part {name:?} (parts: {})", PARTS.join(","));
                            return ExitCode::from(2);
                        }
                    }
                }
            }
            other => {
                eprintln!("report: unknown argument {other:?} (--quick, --only PART,...)");
                return ExitCode::from(2);
            }
        }
    }
    let dir = work_dir();
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("report: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    match run(quick, &dir, &parts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("report: {e}");
            ExitCode::FAILURE
        }
    }
}
