//! AMD's own KFD test suite as the simulator's acceptance test: kfdtest
//! (ROCT-Thunk-Interface rocm-5.2.3 `tests/kfdtest`, built by
//! `kfdtest/build.sh` against the system's libhsakmt without the SP3
//! assembler blob) runs through the interposer on four built-in machines of
//! different shapes (one GPU, two XGMI hives, PCIe peers, MI300X
//! partitions), each test in a process of its own with a time limit.
//!
//! Every outcome is held against the lists in `kfd-sim-preload/kfdtest/`
//! (see the `lists` module): a test that passed before and does not now,
//! a test listed as unable to run that passes, or a test the lists do not
//! classify fails this test, with the outcome table of every machine
//! printed. Knobs for working on it: `KFDTEST_MACHINES` (comma list),
//! `KFDTEST_FILTER` (substring of test names; the completeness check is
//! then off), `KFDTEST_JOBS` (workers per pool), `KFDTEST_TIME_LIMIT` (seconds),
//! `KFDTEST_BIN` (a kfdtest binary instead of building one) and
//! `KFDTEST_REPORT` (a file to write every outcome to).

mod common;
mod kfdtest_suite;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kfdtest_suite::lists::{self, Expected};
use kfdtest_suite::run::{self, Run, Runner};

/// The machines the suite runs on: one GPU, an XGMI hive pair with PCIe
/// between the hives, two PCIe peers, and 64 MI300X partitions in one hive.
const MACHINES: [&str; 4] = ["single-gpu", "mi210-8gpu-2hive", "pcie-2gpu", "mi300x-64"];
/// A test still running after this long is a hang.
const DEFAULT_LIMIT: Duration = Duration::from_secs(40);
/// kfdtest's own limit on each wait for the GPU (its `--timeout`, 10 s by
/// default, sized for real GPUs shared with other work): a simulated GPU
/// answers within milliseconds when it answers at all, so a test that
/// waits in vain says so after 2 s instead of 10. The test limit stays
/// above the slowest passing test (`MMapLarge` on the 64-GPU machine, about
/// 25 s on a busy two-core machine).
const GPU_WAIT_MS: u32 = 2000;
/// Workers for tests listed as passing, skipping or reaching the missing
/// assembler (they use the CPU), and for the others (which mostly sleep
/// in kfdtest's waits for a GPU that does not answer).
const BUSY_WORKERS: usize = 3;
const WAITING_WORKERS: usize = 8;

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kfdtest")
}

/// The kfdtest binary: `KFDTEST_BIN`, or built (once, cached) by
/// `kfdtest/build.sh`; `None` (said why) when it cannot be built here.
fn kfdtest_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("KFDTEST_BIN") {
        return Some(PathBuf::from(bin));
    }
    let archive = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/vendor/rocm/ROCT-Thunk-Interface-rocm-5.2.3-kfdtest.tar.gz");
    if !archive.is_file() {
        common::skip(&format!(
            "no kfdtest source archive at {}",
            archive.display()
        ));
        return None;
    }
    let out = Command::new("bash")
        .arg(suite_dir().join("build.sh"))
        .output()
        .expect("running kfdtest/build.sh");
    if !out.status.success() {
        common::skip(&format!(
            "kfdtest/build.sh could not build kfdtest:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return None;
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Some(PathBuf::from(path))
}

/// Every test of the binary, `Case.Name`, in its order.
fn list_tests(kfdtest: &Path) -> Vec<String> {
    let out = Command::new(kfdtest)
        .arg("--gtest_list_tests")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("kfdtest --gtest_list_tests");
    let mut case = String::new();
    let mut tests = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.starts_with('[') {
            continue;
        }
        if let Some(name) = line.strip_prefix("  ") {
            tests.push(format!("{case}{}", name.trim()));
        } else if !line.trim().is_empty() {
            case = line.trim().to_owned();
        }
    }
    assert!(!tests.is_empty(), "kfdtest lists no tests");
    tests
}

fn env_number(var: &str) -> Option<u64> {
    let v = std::env::var(var).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{var}={v} is not a number")),
    )
}

/// Runs every job, the `waiting` ones on `pools.1` worker threads and the
/// others on `pools.0`, except the tests of `never_run` (with why); the
/// results in job order.
fn run_all(
    runner: &Runner,
    jobs: &[(String, String)],
    waiting: &[bool],
    never_run: &BTreeMap<&str, String>,
    pools: (usize, usize),
) -> Vec<Run> {
    let results: Mutex<Vec<Option<Run>>> = Mutex::new(vec![None; jobs.len()]);
    let queues: [Vec<usize>; 2] = [
        (0..jobs.len()).filter(|&i| !waiting[i]).collect(),
        (0..jobs.len()).filter(|&i| waiting[i]).collect(),
    ];
    let next = [AtomicUsize::new(0), AtomicUsize::new(0)];
    std::thread::scope(|s| {
        let mut slot = 0;
        for (pool, workers) in [pools.0, pools.1].into_iter().enumerate() {
            for _ in 0..workers {
                let (next, results, queue) = (&next[pool], &results, &queues[pool]);
                let my_slot = slot;
                slot += 1;
                s.spawn(move || {
                    while let Some(&i) = queue.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let (machine, test) = &jobs[i];
                        let run = match never_run.get(test.as_str()) {
                            Some(why) => Run {
                                outcome: run::Outcome::NotRun(why.clone()),
                                log: String::new(),
                                elapsed: Duration::ZERO,
                            },
                            None => runner.run(machine, test, my_slot),
                        };
                        results.lock().unwrap()[i] = Some(run);
                    }
                });
            }
        }
    });
    results
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

/// The outcome counts of one machine, in the table's columns.
fn table_row(machine: &str, runs: &[(&String, &Run)]) -> String {
    let count = |kind: &str| {
        runs.iter()
            .filter(|(_, r)| r.outcome.kind() == kind)
            .count()
    };
    format!(
        "| {machine} | {} | {} | {} | {} | {} | {} | {} |",
        count("pass"),
        count("fail"),
        count("hang"),
        count("crash"),
        count("skip"),
        count("no-assembler"),
        count("not-run"),
    )
}

#[test]
fn kfdtest_on_simulated_machines() {
    let Some(kfdtest) = kfdtest_binary() else {
        return;
    };
    let started = Instant::now();
    let filter = std::env::var("KFDTEST_FILTER").ok();
    let machines: Vec<String> = match std::env::var("KFDTEST_MACHINES") {
        Ok(list) => list.split(',').map(|m| m.trim().to_owned()).collect(),
        Err(_) => MACHINES.iter().map(|m| m.to_string()).collect(),
    };
    let all_tests = list_tests(&kfdtest);
    let tests: Vec<String> = all_tests
        .iter()
        .filter(|t| filter.as_deref().is_none_or(|f| t.contains(f)))
        .cloned()
        .collect();

    let cr_path = suite_dir().join("cannot-run.txt");
    let cannot_run = lists::parse_cannot_run(
        &std::fs::read_to_string(&cr_path).expect("kfdtest/cannot-run.txt"),
        &cr_path,
    );
    let mut expected = BTreeMap::new();
    let mut problems = Vec::new();
    for m in &machines {
        let path = suite_dir().join("expected").join(format!("{m}.txt"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (every machine run needs its list)", path.display())
        });
        let list = lists::parse_expected(&text, &path);
        for t in list.keys() {
            if !all_tests.contains(t) {
                problems.push(format!("{m}: {t} is listed but kfdtest has no such test"));
            }
        }
        expected.insert(m.clone(), list);
    }
    for t in cannot_run.keys() {
        if !all_tests.contains(t) {
            problems.push(format!("cannot-run.txt: kfdtest has no test {t}"));
        }
    }

    let jobs: Vec<(String, String)> = machines
        .iter()
        .flat_map(|m| tests.iter().map(move |t| (m.clone(), t.clone())))
        .collect();
    // Tests expected to fail, and those that cannot run for another reason
    // than the assembler, spend their time waiting for the GPU.
    let waiting: Vec<bool> = jobs
        .iter()
        .map(|(m, t)| match expected[m].get(t) {
            Some(Expected::Fail(_)) => true,
            Some(Expected::CannotRun) => !matches!(
                cannot_run.get(t),
                Some((lists::CannotRun::AssemblesShader, _))
            ),
            _ => false,
        })
        .collect();

    let scratch = tempfile::Builder::new()
        .prefix("kfdtest-runs")
        .tempdir()
        .expect("a scratch directory");
    let runner = Runner {
        kfdtest,
        preload: common::preload_lib(),
        scratch: scratch.path().to_path_buf(),
        limit: env_number("KFDTEST_TIME_LIMIT").map_or(DEFAULT_LIMIT, Duration::from_secs),
        args: vec![format!("--timeout={GPU_WAIT_MS}")],
    };
    let pools = match env_number("KFDTEST_JOBS") {
        Some(n) => (n.max(1) as usize, n.max(1) as usize),
        None => (BUSY_WORKERS, WAITING_WORKERS),
    };
    // Tests that would act on the host itself, or never end by design,
    // are classified, never run.
    let never_run: BTreeMap<&str, String> = cannot_run
        .iter()
        .filter(|(_, (kind, _))| matches!(kind, lists::CannotRun::Host | lists::CannotRun::Endless))
        .map(|(t, (_, why))| (t.as_str(), why.clone()))
        .collect();
    let temp_before = run::kfdtest_temp_files();
    let runs = run_all(&runner, &jobs, &waiting, &never_run, pools);
    run::remove_stale_run_dirs();
    for left in run::kfdtest_temp_files().difference(&temp_before) {
        let _ = std::fs::remove_file(left);
    }

    let mut report = String::new();
    let mut table = vec![
        "| machine | pass | fail | hang | crash | skip | no-assembler | not-run |".to_owned(),
        "|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    for m in &machines {
        let mine: Vec<(&String, &Run)> = jobs
            .iter()
            .zip(&runs)
            .filter(|((jm, _), _)| jm == m)
            .map(|((_, t), r)| (t, r))
            .collect();
        table.push(table_row(m, &mine));
        for (t, r) in mine {
            report.push_str(&format!(
                "{m} {t} {} {:.1}s {}\n",
                r.outcome.kind(),
                r.elapsed.as_secs_f64(),
                r.outcome.describe()
            ));
            let verdict = match expected[m].get(t) {
                None if filter.is_none() => Some("not classified in the machine's list".to_owned()),
                None => None,
                Some(e) => lists::judge(e, cannot_run.get(t.as_str()), &r.outcome),
            };
            if let Some(why) = verdict {
                let expected = expected[m]
                    .get(t)
                    .map_or("nothing".into(), |e| format!("{e:?}"));
                let tail: Vec<&str> = r.log.lines().rev().take(12).collect();
                problems.push(format!(
                    "{m}: {t}: {why}; expected {expected}, {}\n    last lines:\n      {}",
                    r.outcome.describe(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n      ")
                ));
            }
        }
    }
    if let Ok(path) = std::env::var("KFDTEST_REPORT") {
        std::fs::write(&path, &report).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    println!(
        "kfdtest: {} tests on {} machines in {:.0} s ({} + {} at a time, limit {} s each, {}); \
         outcomes: pass | fail | hang | crash | skip | no-assembler | not-run",
        tests.len(),
        machines.len(),
        started.elapsed().as_secs_f64(),
        pools.0,
        pools.1,
        runner.limit.as_secs(),
        runner.args.join(" ")
    );
    println!("{}", table.join("\n"));
    if !problems.is_empty() {
        panic!(
            "{} kfdtest result(s) differ from kfd-sim-preload/kfdtest/:\n{}",
            problems.len(),
            problems.join("\n")
        );
    }
}

/// `kfdtest/build.sh`, run by this test, installs nothing (`.ci/run`
/// does): with a package missing it names it and how to install it, and
/// exits with status 2, which this test reports as its reason to skip.
/// Here `dpkg` answers that cmake is not installed and an `apt-get` on
/// `PATH` records any call.
#[test]
fn build_sh_installs_nothing_and_names_what_is_missing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a scratch directory");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let called = dir.path().join("apt-get-called");
    let script = |name: &str, body: String| {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    script(
        "dpkg",
        "for a; do [ \"$a\" = cmake ] && exit 1; done; exit 0".to_owned(),
    );
    script(
        "apt-get",
        format!("echo \"$@\" >> '{}'; exit 0", called.display()),
    );
    let archive = dir.path().join("archive.tar.gz");
    std::fs::write(&archive, b"").unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg(suite_dir().join("build.sh"))
        .env("PATH", path)
        .env("KFDTEST_ARCHIVE", &archive)
        .env("KFDTEST_CACHE", dir.path().join("cache"))
        .output()
        .expect("running kfdtest/build.sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not installed: cmake") && stderr.contains("apt-get install"),
        "{stderr}"
    );
    assert!(!called.exists(), "build.sh ran apt-get: {stderr}");
    assert!(!dir.path().join("cache").exists(), "nothing was built");
}
