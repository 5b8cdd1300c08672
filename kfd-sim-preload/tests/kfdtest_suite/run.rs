//! Running one kfdtest test in a process of its own, under the interposer,
//! with a time limit, and naming how it ended.
//!
//! A test's process and everything it forks form one process group, killed
//! whole when the time limit passes (a hang is then an outcome with a
//! message, never a stuck CI job) and after the test ends (kfdtest's
//! children that spin until signalled, as `KFDMemoryTest.MemoryRegister`'s
//! does, never outlive it).

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the no-SP3 build of kfdtest prints before it ends with
/// [`NO_ASSEMBLER_STATUS`] (see `kfdtest/no-sp3.patch`).
pub const NO_ASSEMBLER_MARK: &str = "kfdtest: no SP3 assembler: cannot assemble shader";
/// The exit status of a test that reached the missing assembler.
pub const NO_ASSEMBLER_STATUS: i32 = 77;

/// How one test ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// gtest passed it and kfdtest did not say it skipped.
    Pass,
    /// gtest passed it after kfdtest said `Skipping test: <why>`.
    Skip(String),
    /// It reached the shader assembler the build lacks.
    NoAssembler,
    /// gtest failed it (or it exited otherwise): the first failure lines.
    Fail(String),
    /// Still running at the time limit: killed.
    Hang(Duration),
    /// Ended by a signal.
    Crash(i32),
    /// Not started: running it would act on the host (the reason).
    NotRun(String),
}

impl Outcome {
    /// The outcome's column in the tables.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Skip(_) => "skip",
            Outcome::NoAssembler => "no-assembler",
            Outcome::Fail(_) => "fail",
            Outcome::Hang(_) => "hang",
            Outcome::Crash(_) => "crash",
            Outcome::NotRun(_) => "not-run",
        }
    }

    /// One line saying how it ended.
    pub fn describe(&self) -> String {
        match self {
            Outcome::Pass => "passed".into(),
            Outcome::Skip(why) => format!("skipped: {why}"),
            Outcome::NoAssembler => "reached the missing SP3 assembler".into(),
            Outcome::Fail(why) => format!("failed: {why}"),
            Outcome::Hang(limit) => format!(
                "hang: still running after {} s, killed",
                limit.as_secs_f64()
            ),
            Outcome::Crash(sig) => format!("crashed: signal {sig} ({})", signal_name(*sig)),
            Outcome::NotRun(why) => format!("not run: {why}"),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        _ => "other",
    }
}

/// One test run's result: how it ended, its output and how long it took.
#[derive(Debug, Clone)]
pub struct Run {
    pub outcome: Outcome,
    pub log: String,
    pub elapsed: Duration,
}

/// Everything a run needs besides the test's name.
#[derive(Debug, Clone)]
pub struct Runner {
    pub kfdtest: PathBuf,
    pub preload: PathBuf,
    /// Where each run gets its scratch directory (shm stand-in, log).
    pub scratch: PathBuf,
    pub limit: Duration,
    /// Arguments given to every run besides the filter.
    pub args: Vec<String>,
}

/// Environment a test asks for in its own words (`Skipping test: ...`
/// otherwise): `KFDMemoryTest.PtraceAccessInvisibleVram` runs only with
/// `HSA_DEBUG` set, which makes the thunk map invisible VRAM for a
/// debugger's access.
fn extra_env(test: &str) -> &'static [(&'static str, &'static str)] {
    match test {
        "KFDMemoryTest.PtraceAccessInvisibleVram" => &[("HSA_DEBUG", "1")],
        _ => &[],
    }
}

impl Runner {
    /// Runs `test` on `machine` (a `KFD_SIM_MACHINE` value); `slot` names
    /// the scratch directory (unique among concurrent runs).
    pub fn run(&self, machine: &str, test: &str, slot: usize) -> Run {
        let dir = self.scratch.join(format!("run-{slot}"));
        let _ = std::fs::remove_dir_all(&dir);
        let shm = dir.join("shm");
        std::fs::create_dir_all(&shm).expect("a run's scratch directory");
        let log_path = dir.join("log");
        let log = std::fs::File::create(&log_path).expect("a run's log file");
        let start = Instant::now();
        let mut cmd = Command::new(&self.kfdtest);
        cmd.arg(format!("--gtest_filter={test}"))
            .args(&self.args)
            .env("LD_PRELOAD", &self.preload)
            .env("KFD_SIM_MACHINE", machine)
            .env("KFD_SIM_SHM_DIR", &shm)
            .env_remove("KFD_SIM_PRELOAD_TRACE")
            .env_remove("KFD_SIM_REMOTE")
            .env_remove("HSAKMT_DEBUG_LEVEL")
            .envs(extra_env(test).iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a second handle of the log"))
            .stderr(log)
            .process_group(0);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.kfdtest.display()));
        let pgid = child.id() as libc::pid_t;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if start.elapsed() >= self.limit => break None,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("waiting for {test}: {e}"),
            }
        };
        // The whole group: the test's forked children too.
        // SAFETY: kill(2) with a negative pid signals the process group
        // this run created (`process_group(0)` made the child its leader).
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if status.is_none() {
            let _ = child.wait();
        }
        let elapsed = start.elapsed();
        let log =
            String::from_utf8_lossy(&std::fs::read(&log_path).unwrap_or_default()).into_owned();
        let _ = std::fs::remove_dir_all(&dir);
        let outcome = match status {
            None => Outcome::Hang(self.limit),
            Some(s) => classify(s.code(), s.signal(), &log),
        };
        Run {
            outcome,
            log,
            elapsed,
        }
    }
}

/// How a test ended, from its exit status and output.
pub fn classify(code: Option<i32>, signal: Option<i32>, log: &str) -> Outcome {
    if let Some(sig) = signal {
        return Outcome::Crash(sig);
    }
    // Reaching the assembler after a failed assertion is a failure: the
    // test broke before it needed the shader.
    if code == Some(NO_ASSEMBLER_STATUS) && log.contains(NO_ASSEMBLER_MARK) {
        let at = log.find(NO_ASSEMBLER_MARK).unwrap_or(0);
        if !log[..at].contains(": Failure") {
            return Outcome::NoAssembler;
        }
    }
    // A failed assertion anywhere fails the test, in a forked child too:
    // kfdtest's children report through their exit status, which some
    // tests end with 0 after a failed EXPECT (ReadOnlyRangeTest's child).
    let passed = log.contains("[  PASSED  ] 1 test.")
        && !log.contains("[  FAILED  ]")
        && !log.contains(": Failure");
    if code == Some(0) && passed {
        return match skip_reason(log) {
            Some(why) => Outcome::Skip(why),
            None => Outcome::Pass,
        };
    }
    Outcome::Fail(failure_summary(code, log))
}

/// kfdtest's own reason when it skipped the test (`Skipping test: ...`).
fn skip_reason(log: &str) -> Option<String> {
    log.lines().find_map(|l| {
        let at = l.find("Skipping test")?;
        let why = l[at + "Skipping test".len()..]
            .trim_start_matches(':')
            .trim();
        Some(why.to_owned())
    })
}

/// The first gtest failure of a log, in one line.
fn failure_summary(code: Option<i32>, log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let Some(at) = lines.iter().position(|l| l.contains(": Failure")) else {
        return format!(
            "exit status {}, no gtest failure in the output",
            code.map_or("none".into(), |c| c.to_string())
        );
    };
    let place = lines[at]
        .rsplit('/')
        .next()
        .unwrap_or(lines[at])
        .trim_end_matches(": Failure");
    let detail: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|l| !l.contains(": Failure") && !l.starts_with('['))
        .take(4)
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    format!("{place}: {}", detail.join(" / "))
}

/// Removes what killed runs could leave: the simulator's run directories
/// of processes that are gone (`kfd_sim::scratch`).
pub fn remove_stale_run_dirs() {
    for base in [Path::new("/dev/shm").to_path_buf(), std::env::temp_dir()] {
        kfd_sim::scratch::remove_stale(&base);
    }
}

/// The files kfdtest makes itself: `MigrateFileBackedRangeTest` maps a
/// `mkostemp("/tmp/kfdtest-XXXXXX")` file and removes it only when it gets
/// to its end.
pub fn kfdtest_temp_files() -> std::collections::BTreeSet<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return Default::default();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.strip_prefix("kfdtest-")
                    .is_some_and(|x| x.len() == 6 && x.bytes().all(|b| b.is_ascii_alphanumeric()))
            })
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_read_from_status_and_output() {
        let passed = "[ RUN      ] A.B\n[       OK ] A.B (1 ms)\n[  PASSED  ] 1 test.\n";
        assert_eq!(classify(Some(0), None, passed), Outcome::Pass);
        let skipped = format!("[          ] Skipping test: Test requires APU.\n{passed}");
        assert_eq!(
            classify(Some(0), None, &skipped),
            Outcome::Skip("Test requires APU.".into())
        );
        let failed =
            "src/KFDMemoryTest.cpp:942: Failure\nValue of: x\n  Actual: 1\n[  FAILED  ] A.B\n";
        assert_eq!(
            classify(Some(1), None, failed),
            Outcome::Fail("KFDMemoryTest.cpp:942: Value of: x / Actual: 1".into())
        );
        let sp3 = format!("{NO_ASSEMBLER_MARK} \"main\"\n");
        assert_eq!(classify(Some(77), None, &sp3), Outcome::NoAssembler);
        assert!(matches!(classify(Some(77), None, "x"), Outcome::Fail(_)));
        let late = format!("a.cpp:1: Failure\nValue of: y\n{sp3}");
        assert!(matches!(classify(Some(77), None, &late), Outcome::Fail(_)));
        assert_eq!(classify(None, Some(11), ""), Outcome::Crash(11));
    }
}
