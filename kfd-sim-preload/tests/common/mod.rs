//! Shared by the tests that run AMD's user space against kfd-sim: finding
//! the packages and the interposer, compiling the C probe, running a
//! program with the interposer preloaded, and reading its records.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kfd_sim::{Sim, SimConfig};

/// Says why a test cannot run; a failure under CI (`.ci/run` installs
/// every package these tests need).
pub fn skip(reason: &str) {
    test_env::skip(reason);
}

/// `libkfd_sim_preload.so`, built by cargo with the tests (the lib target
/// they depend on) next to the test binaries in `<target>/<profile>/deps`.
pub fn preload_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .expect("the test binary lives in <target>/<profile>/deps");
    let lib = dir.join("libkfd_sim_preload.so");
    assert!(
        lib.is_file(),
        "{} is missing: cargo builds it with the tests",
        lib.display()
    );
    lib
}

/// A scratch directory (the compiled probe, the private /dev/shm), removed
/// by the test.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("kfd-sim-preload-test")
            .tempdir()
            .expect("a scratch directory");
        std::fs::create_dir(dir.path().join("shm")).expect("the private shm directory");
        Scratch { dir }
    }

    /// The private stand-in for /dev/shm (`KFD_SIM_SHM_DIR`).
    pub fn shm(&self) -> PathBuf {
        self.dir.path().join("shm")
    }
}

/// The C probe (`amdgpu-criu/src/cmd/demo/hsakmt_probe.c`, which
/// `amdgpu-criu demo --workload hsakmt` runs too) compiled against
/// libhsakmt-dev,
/// or `None` (said why) when the packages or a compiler are missing.
pub fn hsakmt_probe(scratch: &Scratch) -> Option<PathBuf> {
    hsakmt_program(scratch, "../amdgpu-criu/src/cmd/demo/hsakmt_probe.c")
}

/// A C program (a path from this crate's directory) compiled against
/// libhsakmt-dev (and pthreads), or `None` (said why) when the packages or
/// a compiler are missing.
pub fn hsakmt_program(scratch: &Scratch, source: &str) -> Option<PathBuf> {
    c_program(
        scratch,
        source,
        "/usr/include/hsakmt.h",
        "libhsakmt-dev",
        "-lhsakmt",
    )
}

/// A C program (a path from this crate's directory) compiled with `cc`
/// against the library `lib` of Debian's `package` (whose `header` shows it
/// is installed), or `None` (said why) when the package or the compiler is
/// missing.
fn c_program(
    scratch: &Scratch,
    source: &str,
    header: &str,
    package: &str,
    lib: &str,
) -> Option<PathBuf> {
    if !Path::new(header).is_file() {
        skip(&format!("{package} is not installed ({header} is missing)"));
        return None;
    }
    if Command::new("cc").arg("--version").output().is_err() {
        skip(&format!("no C compiler (cc) to build {source}"));
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let stem = src.file_stem().expect("a source file name").to_owned();
    let out = scratch.dir.path().join(stem);
    let built = Command::new("cc")
        .args(["-Wall", "-Werror", "-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(lib)
        .output()
        .expect("running cc");
    assert!(
        built.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    Some(out)
}

/// Runs `program args` with the interposer preloaded on `machine`.
pub fn run_preloaded(scratch: &Scratch, machine: &OsStr, program: &Path, args: &[&str]) -> Output {
    run_preloaded_with(scratch, machine, program, args, &[])
}

/// [`run_preloaded`] with more environment variables.
pub fn run_preloaded_with(
    scratch: &Scratch,
    machine: &OsStr,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("LD_PRELOAD", preload_lib())
        .env("KFD_SIM_MACHINE", machine)
        .env("KFD_SIM_SHM_DIR", scratch.shm())
        .env_remove("KFD_SIM_PRELOAD_TRACE")
        .env_remove("KFD_SIM_PACKET_TRACE")
        .env_remove("KFD_SIM_SDMA_BANDWIDTH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

/// A C program (a path from this crate's directory) compiled against ROCr
/// (libhsa-runtime-dev), or `None` (said why) when it is missing.
pub fn rocr_program(scratch: &Scratch, source: &str) -> Option<PathBuf> {
    c_program(
        scratch,
        source,
        "/usr/include/hsa/hsa.h",
        "libhsa-runtime-dev",
        "-lhsa-runtime64",
    )
}

/// One `kind key=value ...` line.
pub type Record = BTreeMap<String, String>;

/// The records of `kind` in `text`.
pub fn records(text: &str, kind: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| l.strip_prefix(kind)?.strip_prefix(' '))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// A numeric field of a record.
pub fn num(r: &Record, key: &str) -> u64 {
    let v = r
        .get(key)
        .unwrap_or_else(|| panic!("record {r:?} has no {key}"));
    v.parse()
        .unwrap_or_else(|_| panic!("{key}={v} in {r:?} is not a number"))
}

/// The report the probe printed at `stage` (`kfd_sim_preload_report`).
pub fn report<'a>(out: &'a str, stage: &str) -> &'a str {
    let start = out
        .find(&format!("report stage={stage}\n"))
        .unwrap_or_else(|| panic!("no report at stage {stage} in:\n{out}"));
    let body = &out[start..];
    &body[..body.find("end-report").expect("an unterminated report")]
}

/// Every ioctl of a report that the simulator refused, as
/// `name: errors`.
pub fn refused_ioctls(report: &str) -> Vec<String> {
    records(report, "ioctl")
        .into_iter()
        .filter(|r| r.get("errors").is_some_and(|e| !e.is_empty()))
        .map(|r| format!("{}: {}", r["name"], r["errors"]))
        .collect()
}

/// `ok` count of ioctl `name` in a report (0 when never made).
pub fn ioctl_ok(report: &str, name: &str) -> u64 {
    records(report, "ioctl")
        .iter()
        .find(|r| r.get("name").map(String::as_str) == Some(name))
        .map_or(0, |r| num(r, "ok"))
}

/// `../shared/fixtures/topology` next to the workspace root; `None` when it
/// is absent, said through [`skip`] (the captured machines are left out of
/// the test, a failure under CI).
pub fn fixtures() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kfd-sim-preload sits in the workspace");
    let fixtures = root.join("../shared/fixtures/topology");
    if fixtures.is_dir() {
        return Some(fixtures);
    }
    skip(&format!(
        "{} is absent: the captured machines are not tested, only the built-in ones",
        fixtures.display()
    ));
    None
}

/// The machines the interposer can be asked for: every built-in topology,
/// then every capture, as (`KFD_SIM_MACHINE` value, the same machine built
/// here). A capture the simulator refuses comes with the reason instead.
pub fn machines() -> Vec<(String, Result<Sim, String>)> {
    let mut out: Vec<(String, Result<Sim, String>)> = amdgpu_topology::builtin_names()
        .iter()
        .map(|n| {
            (
                n.to_string(),
                Sim::builtin(n, SimConfig::default()).map_err(|e| e.to_string()),
            )
        })
        .collect();
    if let Some(dir) = fixtures() {
        let mut caps: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("the fixtures directory")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        caps.sort();
        for cap in caps {
            let sim = Sim::from_sysfs(&cap, SimConfig::default()).map_err(|e| e.to_string());
            out.push((cap.display().to_string(), sim));
        }
    }
    out
}
