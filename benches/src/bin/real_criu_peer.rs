//! The C plugin and this project's plugin side by side under real CRIU
//! (criu-dev), on the same simulated ROCm process: dense VRAM contents
//! (1 GiB on one GPU, 4 × 256 MiB on four), dumped and restored by each
//! plugin in turn, the order alternating every round, the same rounds for
//! both.
//!
//! ```text
//! cargo build --release -p criu-plugin-amdgpu -p kfd-sim-preload
//! .ci/build-c-plugin.sh
//! sudo target/release/real_criu_peer [ROUNDS] [MIB_PER_GPU_1] [MIB_PER_GPU_4]
//! ```
//!
//! Each round runs, per plugin: the application started on a fresh served
//! machine (its VRAM filled, then unmapped from the CPU as a compute job's
//! device memory is, so only the plugin moves it), `criu dump` (CRIU kills
//! it), `criu restore -d`, a check that the restored process runs and (the
//! first round) that every BO holds its bytes, and the kill. Times are
//! CRIU's own, from the last timestamp of its log (`-v4`): the whole dump
//! or restore as a user waits for it, CRIU's own work included (the same
//! for both plugins). CPU is sampled every 10 ms from `/proc` for every
//! thread of the CRIU processes of the run (a thread's last 10 ms before
//! it exits are lost): threads other than each process's main thread are
//! the plugin's (CRIU itself runs one thread per process); the main threads
//! are CRIU and the plugin's hooks together. The simulator's CPU (its copy
//! engines run in this process, serving the clients) is counted apart, over
//! this process's threads.

#[path = "../../../kfd-sim-preload/tests/real_criu_restore/driver.rs"]
mod driver;
use real_criu_harness as harness;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use driver::{AppMode, Served, Step};

const MIB: u64 = 1 << 20;

/// CPU ticks of one thread as last seen: (process, thread) -> ticks.
type Ticks = BTreeMap<(u32, u32), u64>;

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory arguments.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of `/proc/.../stat` text.
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime); field 3 is f[0].
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Samples, until stopped, the threads of every `criu` process whose
/// command line names `scratch` (this run's), keeping each thread's largest
/// count.
fn sample_criu(scratch: PathBuf, stop: Arc<AtomicBool>, seen: Arc<Mutex<Ticks>>) {
    let needle = scratch.to_string_lossy().into_owned();
    while !stop.load(Ordering::Relaxed) {
        for proc_ in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = proc_
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let comm = fs::read_to_string(proc_.path().join("comm")).unwrap_or_default();
            if comm.trim() != "criu" {
                continue;
            }
            let cmdline = fs::read(proc_.path().join("cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmdline).contains(&needle) {
                continue;
            }
            for task in fs::read_dir(proc_.path().join("task"))
                .into_iter()
                .flatten()
                .flatten()
            {
                let Some(tid) = task
                    .file_name()
                    .to_str()
                    .and_then(|t| t.parse::<u32>().ok())
                else {
                    continue;
                };
                let stat = fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                if let Some(t) = stat_ticks(&stat) {
                    let mut seen = seen.lock().unwrap();
                    let e = seen.entry((pid, tid)).or_insert(0);
                    *e = (*e).max(t);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// CPU seconds (user + system) `getrusage(who)` reports: with
/// `RUSAGE_SELF` every thread this process has had, exited ones included;
/// with `RUSAGE_THREAD` the calling thread.
fn rusage_seconds(who: libc::c_int) -> f64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid rusage for getrusage to fill.
    if unsafe { libc::getrusage(who, &mut r) } != 0 {
        return f64::NAN;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// One CRIU run measured.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    /// CRIU's own duration (its log's last timestamp), seconds.
    seconds: f64,
    /// CPU seconds of the plugin's threads (not a process's main thread).
    plugin_cpu: f64,
    /// CPU seconds of the CRIU processes' main threads.
    main_cpu: f64,
    /// CPU seconds of the simulator (this process's threads).
    sim_cpu: f64,
}

/// The last `(SS.ffffff)` timestamp of a CRIU log.
fn log_seconds(log: &str) -> Option<f64> {
    log.lines().rev().find_map(|l| {
        let t = l.strip_prefix('(')?.split_once(')')?.0;
        t.trim().parse().ok()
    })
}

/// Runs `f` (one CRIU step of the run in `scratch`) with the samplers on.
fn measured(scratch: &Path, log: &Path, f: impl FnOnce()) -> Measured {
    // The simulator's CPU is this process's (its served machine's threads,
    // those that ended during the step included), less this thread's and
    // the sampler's.
    let process_before = rusage_seconds(libc::RUSAGE_SELF);
    let caller_before = rusage_seconds(libc::RUSAGE_THREAD);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Ticks::new()));
    let sampler = {
        let (scratch, stop, seen) = (scratch.to_path_buf(), stop.clone(), seen.clone());
        std::thread::spawn(move || {
            sample_criu(scratch, stop, seen);
            rusage_seconds(libc::RUSAGE_THREAD)
        })
    };
    f();
    stop.store(true, Ordering::Relaxed);
    let sampler_cpu = sampler.join().expect("the sampler");
    let caller_cpu = rusage_seconds(libc::RUSAGE_THREAD) - caller_before;
    let process_cpu = rusage_seconds(libc::RUSAGE_SELF) - process_before;
    let hz = ticks_per_second();
    let seen = seen.lock().unwrap();
    let main: u64 = seen
        .iter()
        .filter(|((p, t), _)| p == t)
        .map(|(_, v)| v)
        .sum();
    let plugin: u64 = seen
        .iter()
        .filter(|((p, t), _)| p != t)
        .map(|(_, v)| v)
        .sum();
    Measured {
        seconds: log_seconds(&fs::read_to_string(log).unwrap_or_default()).unwrap_or(f64::NAN),
        plugin_cpu: plugin as f64 / hz,
        main_cpu: main as f64 / hz,
        sim_cpu: (process_cpu - caller_cpu - sampler_cpu).max(0.0),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    CPlugin,
    Ours,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::CPlugin => "c_plugin",
            Peer::Ours => "ours",
        }
    }
}

/// One dump and restore by `peer`; checks the restored process.
fn round(
    setup: &driver::Setup,
    criu: &Path,
    peer: Peer,
    machine: &str,
    gpus: u32,
    mib: u64,
    verify: bool,
) -> (Measured, Measured) {
    let served = Served::builtin(machine);
    let plugins = match peer {
        Peer::CPlugin => setup.c_plugins.as_ref().expect("the C plugin").path(),
        Peer::Ours => setup.plugins.path(),
    };
    let step = Step {
        setup,
        plugins,
        criu,
        served: &served,
        gpus,
        mib,
        env: "",
        parent: false,
        netns: false,
        mode: AppMode::GpuOnly,
        args: &[],
    };
    // The application starts (and fills its BOs) in the same step as the
    // dump, before CRIU runs: CRIU's time is from its log, and the samplers
    // see no CRIU process meanwhile.
    let scratch = driver::scratch();
    let path = scratch.path().to_path_buf();
    let mut dumped_app = None;
    let dumped = measured(&path, &path.join("dump.log"), || {
        dumped_app = Some(driver::dump_in(scratch, &step));
    });
    let mut app = dumped_app.expect("the dumped application");
    assert!(
        driver::wait_for(Duration::from_secs(30), || app.all_gone()),
        "{}: CRIU left the dumped application running",
        peer.name()
    );
    served.assert_empty("after the dump");
    if peer == Peer::CPlugin {
        driver::list_c_plugin_in_inventory(&app);
    }
    let mut result = Ok(0);
    let restored = measured(&path, &path.join("restore.log"), || {
        result = driver::restore(&mut app, "restore", &step);
    });
    if let Err(e) = result {
        panic!("{} restore: {e}", peer.name());
    }
    if verify {
        driver::check_restored(&served, &app, peer.name());
    } else {
        app.procs[0].assert_beats_on(peer.name());
    }
    driver::finish(&served, &mut app, peer.name());
    (dumped, restored)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let mib_1: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let mib_4: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(256);
    let exe = std::env::current_exe().expect("this program's path");
    let target = exe.parent().expect("target/<profile>");
    if std::env::var_os("AMDGPU_PLUGIN_SO").is_none() {
        std::env::set_var("AMDGPU_PLUGIN_SO", target.join("libcriu_plugin_amdgpu.so"));
    }
    let preload = target.join("libkfd_sim_preload.so");
    let setup = match driver::setup(&[harness::HEAD], true, preload) {
        Ok(setup) => setup,
        Err(why) => {
            eprintln!("real_criu_peer cannot run: {why}");
            std::process::exit(2);
        }
    };
    let (_, criu) = setup.criu[0].clone();
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    println!(
        "real_criu_peer: criu-dev under the interposer, {rounds} rounds each, commit {}",
        commit.trim()
    );
    for (machine, gpus, mib) in [("single-gpu", 1, mib_1), ("mi210-8gpu-2hive", 4, mib_4)] {
        let gib = (gpus as u64 * (mib + 1) * MIB) as f64 / (1u64 << 30) as f64;
        let mut runs: BTreeMap<&str, Vec<(Measured, Measured)>> = BTreeMap::new();
        for r in 0..rounds {
            let order = if r % 2 == 0 {
                [Peer::CPlugin, Peer::Ours]
            } else {
                [Peer::Ours, Peer::CPlugin]
            };
            for peer in order {
                let m = round(&setup, &criu, peer, machine, gpus, mib, r == 0);
                println!(
                    "  {gpus} GPU round {r} {:>8}: dump {:.3} s (plugin threads {:.3} CPU-s, CRIU main {:.3}, simulator {:.3}); restore {:.3} s (plugin threads {:.3}, CRIU main {:.3}, simulator {:.3})",
                    peer.name(),
                    m.0.seconds, m.0.plugin_cpu, m.0.main_cpu, m.0.sim_cpu,
                    m.1.seconds, m.1.plugin_cpu, m.1.main_cpu, m.1.sim_cpu
                );
                runs.entry(peer.name()).or_default().push(m);
            }
        }
        let med = |peer: &str, f: &dyn Fn(&(Measured, Measured)) -> f64| {
            median(runs[peer].iter().map(f).collect())
        };
        let c_dump = med("c_plugin", &|m| m.0.seconds);
        let o_dump = med("ours", &|m| m.0.seconds);
        let c_rest = med("c_plugin", &|m| m.1.seconds);
        let o_rest = med("ours", &|m| m.1.seconds);
        println!("{gpus} GPU(s), {gib:.3} GiB of BO contents (medians of {rounds}):");
        println!("  c_plugin_dump_s {c_dump:.3}  ours_dump_s {o_dump:.3}  dump rate ratio (ours/C) {:.2}", c_dump / o_dump);
        println!("  c_plugin_restore_s {c_rest:.3}  ours_restore_s {o_rest:.3}  restore rate ratio (ours/C) {:.2}", c_rest / o_rest);
        for peer in ["c_plugin", "ours"] {
            let cpu = |f: &dyn Fn(&(Measured, Measured)) -> f64| med(peer, f) / gib;
            println!(
                "  {peer:>8} CPU-s/GiB: dump plugin threads {:.3}, CRIU main threads {:.3}, simulator {:.3}; restore plugin threads {:.3}, CRIU main threads {:.3}, simulator {:.3}",
                cpu(&|m| m.0.plugin_cpu),
                cpu(&|m| m.0.main_cpu),
                cpu(&|m| m.0.sim_cpu),
                cpu(&|m| m.1.plugin_cpu),
                cpu(&|m| m.1.main_cpu),
                cpu(&|m| m.1.sim_cpu)
            );
        }
    }
}
