//! The C plugin and this project's plugin side by side under real CRIU
//! (criu-dev), on the same simulated ROCm process: dense VRAM contents
//! (1 GiB on one GPU, 4 × 256 MiB on four), dumped and restored by each
//! plugin in turn, the order alternating every round, the same rounds for
//! both.
//!
//! ```text
//! cargo build --release -p benches -p criu-plugin-amdgpu -p kfd-sim-preload
//! .ci/build-c-plugin.sh
//! sudo CRIU_BUILDS=$HOME/.cache/criu-builds target/release/real_criu_peer [ROUNDS] [MIB_PER_GPU_1] [MIB_PER_GPU_4]
//! ```
//!
//! Each round runs, per plugin: the application started on a fresh served
//! machine (its VRAM filled, then unmapped from the CPU as a compute job's
//! device memory is, so only the plugin moves it), `criu dump` (CRIU kills
//! it), `criu restore -d`, and checks of the restored process: its
//! heartbeat goes on, its queues were resumed, and every byte of every BO
//! it filled is what it wrote (in every round; the first round also runs
//! the tests' whole check, queue work held at the dump among it). A
//! restore that fails or leaves wrong bytes is a result of that plugin and
//! round (`..._restore=wrong_bytes`, `..._wrong_bos=N`, the BOs and the
//! plugin's errors on stderr), not the end of the run; its time counts in
//! no median. Times are CRIU's own, from the last timestamp of its log
//! (`-v4`): the whole dump or restore as a user waits for it, CRIU's own
//! work included (the same for both plugins). CPU is sampled every 10 ms
//! from `/proc` for every thread of the CRIU processes of the run (a
//! thread's last 10 ms before it exits are lost): threads other than each
//! process's main thread are the plugin's (CRIU itself runs one thread per
//! process); the main threads are CRIU and the plugin's hooks together.
//! The simulator's CPU (its copy engines run in this process, serving the
//! clients) is counted apart, over this process's threads. Figures are
//! `name=value` lines on stdout; progress goes to stderr.

#[path = "../../../kfd-sim-preload/tests/real_criu_restore/driver.rs"]
mod driver;
use real_criu_harness as harness;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use benches::output::line;
use driver::{AppMode, Served, Step};
use kfd_sim::Pid;

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

/// What a restore left, checked after every restore of every round.
#[derive(Debug, Clone, Default)]
struct Restored {
    /// CRIU's restore failed (its exit status and log's end).
    failed: Option<String>,
    /// The restored process's heartbeat went on.
    beats: bool,
    /// Its KFD process was resumed and its queues run.
    queues_run: bool,
    /// The BOs that do not hold what the application wrote (every byte of
    /// every BO compared).
    wrong: Vec<driver::BoMismatch>,
}

impl Restored {
    fn correct(&self) -> bool {
        self.failed.is_none() && self.beats && self.queues_run && self.wrong.is_empty()
    }

    fn verdict(&self) -> &'static str {
        if self.failed.is_some() {
            "restore_failed"
        } else if !self.wrong.is_empty() {
            "wrong_bytes"
        } else if !self.queues_run {
            "queues_stopped"
        } else if !self.beats {
            "process_stopped"
        } else {
            "ok"
        }
    }
}

/// One round of one plugin.
#[derive(Debug, Clone)]
struct Round {
    dump: Measured,
    restore: Measured,
    restored: Restored,
}

/// The plugin's own complaints in a CRIU log: its lines that report an
/// error.
fn plugin_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("amdgpu_plugin") && (l.contains("Error") || l.contains("rror (")))
        .collect()
}

/// One dump and restore by `peer`; checks the restored process, every byte
/// of every BO among it.
fn round(
    setup: &driver::Setup,
    criu: &Path,
    peer: Peer,
    machine: &str,
    gpus: u32,
    mib: u64,
    deep_check: bool,
) -> Round {
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
    let dump = measured(&path, &path.join("dump.log"), || {
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
    let mut restore = measured(&path, &path.join("restore.log"), || {
        result = driver::restore(&mut app, "restore", &step);
    });
    let mut restored = Restored::default();
    match result {
        Err(e) => {
            restore.seconds = f64::NAN;
            restored.failed = Some(e);
        }
        Ok(_) => {
            let p = &app.procs[0];
            let before = p.heartbeat().len();
            restored.beats =
                driver::wait_for(Duration::from_secs(10), || p.heartbeat().len() > before + 2);
            restored.queues_run = served
                .sim
                .kfd_state(Pid(p.pid))
                .is_some_and(|s| !s.queues_paused && s.queues_running() && s.resumed == 1);
            restored.wrong = driver::bo_mismatches(&served, p).unwrap_or_else(|e| {
                vec![driver::BoMismatch {
                    kind: "every".into(),
                    node: 0,
                    va: 0,
                    size: 0,
                    found: driver::Found::Unreadable(e),
                }]
            });
        }
    }
    if !restored.correct() {
        eprintln!("  {} restore: {}", peer.name(), restored.verdict());
        if let Some(e) = &restored.failed {
            eprintln!("    {}", e.lines().next().unwrap_or_default());
        }
        for w in &restored.wrong {
            eprintln!("    {w}");
        }
        for l in plugin_errors(&app.read("restore.log")) {
            eprintln!("    restore.log: {l}");
        }
    } else if deep_check {
        // The whole check of the tests (the process's own view of its
        // BOs, its queues' held and new work): a failure here is a fault
        // of a restore that moved every byte, and stops the run.
        driver::check_restored(&served, &app, peer.name());
    }
    if restored.failed.is_none() {
        driver::finish(&served, &mut app, peer.name());
    }
    Round {
        dump,
        restore,
        restored,
    }
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

/// The median of the finite values, NaN when there are none.
fn median_of(v: impl Iterator<Item = f64>) -> f64 {
    median(v.filter(|x| x.is_finite()).collect())
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
    eprintln!(
        "real_criu_peer: criu-dev under the interposer, {rounds} rounds each, commit {}",
        commit.trim()
    );
    line("commit", commit.trim());
    line("rounds", rounds);
    for (machine, gpus, mib) in [("single-gpu", 1, mib_1), ("mi210-8gpu-2hive", 4, mib_4)] {
        let gib = (gpus as u64 * (mib + 1) * MIB) as f64 / (1u64 << 30) as f64;
        let n = format!("{gpus}gpu");
        line(&format!("gib_{n}"), format!("{gib:.3}"));
        let mut runs: BTreeMap<&str, Vec<Round>> = BTreeMap::new();
        for r in 0..rounds {
            let order = if r % 2 == 0 {
                [Peer::CPlugin, Peer::Ours]
            } else {
                [Peer::Ours, Peer::CPlugin]
            };
            for peer in order {
                let m = round(&setup, &criu, peer, machine, gpus, mib, r == 0);
                eprintln!(
                    "  {gpus} GPU round {r} {:>8}: dump {:.3} s (plugin threads {:.3} CPU-s, CRIU main {:.3}, simulator {:.3}); restore {:.3} s (plugin threads {:.3}, CRIU main {:.3}, simulator {:.3}): {}",
                    peer.name(),
                    m.dump.seconds, m.dump.plugin_cpu, m.dump.main_cpu, m.dump.sim_cpu,
                    m.restore.seconds, m.restore.plugin_cpu, m.restore.main_cpu, m.restore.sim_cpu,
                    m.restored.verdict()
                );
                let at = format!("{}_{n}_round{r}", peer.name());
                line(&format!("{at}_dump_s"), format!("{:.3}", m.dump.seconds));
                line(
                    &format!("{at}_restore_s"),
                    format!("{:.3}", m.restore.seconds),
                );
                line(&format!("{at}_restore"), m.restored.verdict());
                line(&format!("{at}_wrong_bos"), m.restored.wrong.len());
                runs.entry(peer.name()).or_default().push(m);
            }
        }
        // Dumps count in every round; restores only where they restored
        // every byte (a restore that stopped early is no time to compare).
        let dump_med = |peer: &str, f: &dyn Fn(&Measured) -> f64| {
            median_of(runs[peer].iter().map(|m| f(&m.dump)))
        };
        let restore_med = |peer: &str, f: &dyn Fn(&Measured) -> f64| {
            median_of(
                runs[peer]
                    .iter()
                    .filter(|m| m.restored.correct())
                    .map(|m| f(&m.restore)),
            )
        };
        for peer in ["c_plugin", "ours"] {
            let correct = runs[peer].iter().filter(|m| m.restored.correct()).count();
            line(&format!("{peer}_restores_correct_{n}"), correct);
            line(
                &format!("{peer}_dump_s_{n}"),
                format!("{:.3}", dump_med(peer, &|m| m.seconds)),
            );
            line(
                &format!("{peer}_restore_s_{n}"),
                format!("{:.3}", restore_med(peer, &|m| m.seconds)),
            );
            for (what, f) in [
                (
                    "plugin",
                    &(|m: &Measured| m.plugin_cpu) as &dyn Fn(&Measured) -> f64,
                ),
                ("criu_main", &|m: &Measured| m.main_cpu),
                ("sim", &|m: &Measured| m.sim_cpu),
            ] {
                line(
                    &format!("{peer}_dump_{what}_cpu_per_gib_{n}"),
                    format!("{:.3}", dump_med(peer, f) / gib),
                );
                line(
                    &format!("{peer}_restore_{what}_cpu_per_gib_{n}"),
                    format!("{:.3}", restore_med(peer, f) / gib),
                );
            }
        }
        let ratio = |c: f64, o: f64| format!("{:.2}", c / o);
        line(
            &format!("dump_rate_ratio_{n}"),
            ratio(
                dump_med("c_plugin", &|m| m.seconds),
                dump_med("ours", &|m| m.seconds),
            ),
        );
        line(
            &format!("restore_rate_ratio_{n}"),
            ratio(
                restore_med("c_plugin", &|m| m.seconds),
                restore_med("ours", &|m| m.seconds),
            ),
        );
    }
}
