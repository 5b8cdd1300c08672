//! Storage faults: the images directory runs out of space (`ENOSPC`) or
//! fails (`EIO`) while the dump writes, a commit (flush + rename) fails, and
//! at restore reads come back short or fail part-way.
//!
//! The dump goes through an `ImageStore` over the real images directory that
//! gives out a byte budget: the write that crosses it gets what fits, the
//! next one the errno — what a full file system does. A clean run measures
//! the bytes each file takes; then the budget ends at every file boundary,
//! inside every header, and at points inside every payload. Each failure
//! must fail the dump with an error (not `-ENOTSUP`) whose log line names the
//! image file and the errno, unpause the application, leak nothing, and
//! leave no set that `verify` calls complete (the plugin removes what it
//! committed when `exit` reports the failed dump).
//!
//! At restore, a store whose reads return at most 7 bytes still restores the
//! process exactly; one whose reads fail with `EIO` after N bytes fails
//! `RESTORE_EXT_FILE` with an error naming the file, leaking nothing.
//!
//! Every case runs under both host shapes (`HostShape::ALL`): CRIU after
//! v4.2 and CRIU v4.2 and older (no `DUMP_DEVICES_LATE`: the contents are
//! written inside `DUMP_EXT_FILE`, and the process unpaused there).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use amdgpu_checkpoint::parallel::{Copier, ParallelFacts};
use amdgpu_checkpoint::Error;
use amdgpu_image::{DirStore, ImageName, ImageStore, ImageWriter, PagesSink};
use criu_host_emulator::EmulatedHost;
use criu_plugin_amdgpu::abi::PANIC_ERRNO;
use criu_plugin_amdgpu::hooks::{CriuHost, TaskFd, NOT_MINE};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};
use std::os::fd::{BorrowedFd, OwnedFd};

mod common;
mod faults_common;

use common::{device_vmas, gpu_files, kfd_image, vmas_of};
use faults_common::{empty_dir, set_looks_complete, HostShape, MiniCriu, Snapshot};

/// What the store does wrong.
#[derive(Debug, Default)]
struct Plan {
    /// Bytes that may still be written (`u64::MAX`: no limit).
    budget: AtomicU64,
    /// The errno of writes past the budget.
    errno: i32,
    /// Commit number (0-based) that fails with `EIO`, `usize::MAX` for none.
    fail_commit: AtomicUsize,
    commits: AtomicUsize,
    /// Largest read size handed out (0: unlimited).
    read_chunk: usize,
    /// Bytes that may be read before reads fail with `EIO` (per file).
    read_fail_after: Option<u64>,
    /// Files created, with the bytes written into each, in order.
    written: Mutex<Vec<(String, u64)>>,
}

impl Plan {
    fn new(errno: i32) -> Plan {
        Plan {
            budget: AtomicU64::new(u64::MAX),
            errno,
            fail_commit: AtomicUsize::new(usize::MAX),
            ..Plan::default()
        }
    }
}

#[derive(Debug, Clone)]
struct FaultyHost {
    host: EmulatedHost,
    images: PathBuf,
    plan: Arc<Plan>,
}

#[derive(Debug)]
struct FaultyStore {
    dir: DirStore,
    plan: Arc<Plan>,
}

struct FaultyWriter {
    inner: <DirStore as ImageStore>::Writer,
    plan: Arc<Plan>,
    index: usize,
}

struct FaultyReader {
    inner: std::fs::File,
    plan: Arc<Plan>,
    read: u64,
}

impl CriuHost for FaultyHost {
    type Store = FaultyStore;

    fn image_store(&self, _dump: bool) -> Result<FaultyStore, Error> {
        Ok(FaultyStore {
            dir: DirStore::open_dir(&self.images).expect("open the images dir"),
            plan: self.plan.clone(),
        })
    }

    fn add_inventory_plugin(&self) -> io::Result<()> {
        self.host.add_inventory_plugin()
    }

    fn inventory_names_plugin(&self) -> bool {
        self.host.inventory_names_plugin()
    }

    fn find_unused_fd(&self, pid: u32) -> Option<i32> {
        self.host.find_unused_fd(pid)
    }

    fn current_pid(&self) -> Option<u32> {
        self.host.current_pid()
    }

    // Everything but the image store is the emulated host's: a method left
    // to the trait's default would answer as a host without it (the fd
    // store's ENOSYS), not as the host whose storage fails.
    fn plugin_options(&self) -> io::Result<Option<Vec<String>>> {
        self.host.plugin_options()
    }

    fn guardian_log_dir(&self) -> Option<PathBuf> {
        self.host.guardian_log_dir()
    }

    fn guardian_driver(&self) -> amdgpu_checkpoint::guardian::GuardianDriver {
        self.host.guardian_driver()
    }

    fn task_fd(&self, fd: BorrowedFd<'_>) -> Option<TaskFd> {
        self.host.task_fd(fd)
    }

    fn fdstore_add(&self, fd: BorrowedFd<'_>) -> io::Result<i32> {
        self.host.fdstore_add(fd)
    }

    fn fdstore_get(&self, id: i32) -> io::Result<OwnedFd> {
        self.host.fdstore_get(id)
    }

    fn parallel_facts(&self) -> ParallelFacts {
        self.host.parallel_facts()
    }

    fn copier(&self) -> Option<Copier> {
        self.host.copier()
    }
}

impl ImageStore for FaultyStore {
    type Writer = FaultyWriter;
    type Reader = FaultyReader;

    fn create(&self, name: &ImageName) -> Result<FaultyWriter, amdgpu_image::Error> {
        let inner = self.dir.create(name)?;
        let mut written = self
            .plan
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        written.push((name.to_string(), 0));
        Ok(FaultyWriter {
            inner,
            plan: self.plan.clone(),
            index: written.len() - 1,
        })
    }

    fn open(&self, name: &ImageName) -> Result<Option<FaultyReader>, amdgpu_image::Error> {
        Ok(self.dir.open(name)?.map(|inner| FaultyReader {
            inner,
            plan: self.plan.clone(),
            read: 0,
        }))
    }

    fn list(&self) -> Result<Vec<ImageName>, amdgpu_image::Error> {
        self.dir.list()
    }

    fn discard(&self, name: &ImageName) -> Result<bool, amdgpu_image::Error> {
        self.dir.discard(name)
    }
}

impl Write for FaultyWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let budget = self.plan.budget.load(Ordering::SeqCst);
        if budget == 0 {
            return Err(io::Error::from_raw_os_error(self.plan.errno));
        }
        let n = buf.len().min(usize::try_from(budget).unwrap_or(usize::MAX));
        let n = self.inner.write(&buf[..n])?;
        if budget != u64::MAX {
            self.plan.budget.fetch_sub(n as u64, Ordering::SeqCst);
        }
        self.plan
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)[self.index]
            .1 += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl PagesSink for FaultyWriter {
    fn can_skip(&self) -> bool {
        self.inner.can_skip()
    }
    fn skip(&mut self, len: u64) -> io::Result<()> {
        self.inner.skip(len)
    }
    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_final_len(len)
    }
}

impl ImageWriter for FaultyWriter {
    fn commit(self) -> io::Result<()> {
        let n = self.plan.commits.fetch_add(1, Ordering::SeqCst);
        if n == self.plan.fail_commit.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.commit()
    }
}

impl Read for FaultyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self
            .plan
            .read_fail_after
            .is_some_and(|limit| self.read >= limit)
        {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let mut len = buf.len();
        if self.plan.read_chunk > 0 {
            len = len.min(self.plan.read_chunk);
        }
        if let Some(limit) = self.plan.read_fail_after {
            len = len.min(usize::try_from(limit - self.read).unwrap_or(usize::MAX));
        }
        let n = self.inner.read(&mut buf[..len])?;
        self.read += n as u64;
        Ok(n)
    }
}

struct DumpRun {
    failure: Option<(&'static str, i32)>,
    lines: Vec<(Level, String)>,
    running: bool,
    leak: Option<String>,
    complete: bool,
    written: Vec<(String, u64)>,
}

fn dump_with(images: &Path, shm: &Path, shape: HostShape, plan: Plan) -> DumpRun {
    empty_dir(images);
    let sim = Sim::synthetic(1, SimConfig::default()).expect("simulated machine");
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
    app.step().expect("app step");
    let before = Snapshot::take(&sim).accounting;
    let criu = MiniCriu::of_shape(&sim, shm, shape);
    let plan = Arc::new(plan);
    let host = FaultyHost {
        host: EmulatedHost::new(images, None),
        images: images.to_path_buf(),
        plan: plan.clone(),
    };
    let (files, _) = gpu_files(&app);
    let capture = Capture::start();
    let result = criu.dump(
        |pid| sim.driver(pid),
        host,
        app.pid(),
        &files,
        &device_vmas(&sim),
    );
    let lines = capture.lines();
    drop(capture);
    drop(files);
    let state = sim
        .kfd_state(app.pid())
        .expect("the app keeps its KFD state");
    let after = Snapshot::take(&sim).accounting;
    let written = plan
        .written
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    DumpRun {
        failure: result.err().map(|f| (f.hook, f.errno)),
        lines,
        running: state.queues_running() && !state.queues_paused,
        leak: (before != after).then(|| format!("{before:?} -> {after:?}")),
        complete: set_looks_complete(images),
        written,
    }
}

/// What is wrong with a dump that had to fail.
fn dump_problems(case: &str, run: &DumpRun, errno_words: &[&str]) -> Vec<String> {
    let mut bad = Vec::new();
    match run.failure {
        None => bad.push(format!("{case}: the dump succeeded")),
        Some((hook, e)) if e >= 0 || e == NOT_MINE || e == PANIC_ERRNO => {
            bad.push(format!("{case}: {hook} answered {e}"))
        }
        Some(_) => {}
    }
    let clear = run.lines.iter().any(|(l, t)| {
        *l == Level::Error && t.contains("amdgpu-") && errno_words.iter().any(|w| t.contains(w))
    });
    if !clear {
        bad.push(format!(
            "{case}: no error line names the image file and {errno_words:?}: {:?}",
            run.lines
        ));
    }
    if !run.running {
        bad.push(format!("{case}: the application was left paused"));
    }
    if let Some(leak) = &run.leak {
        bad.push(format!("{case}: leak: {leak}"));
    }
    if run.complete {
        bad.push(format!("{case}: a set verify calls complete remains"));
    }
    bad
}

#[test]
fn enospc_eio_and_failed_commits_fail_the_dump_cleanly() {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    for shape in HostShape::ALL {
        bad.extend(storage_faults_fail_the_dump(
            images.path(),
            shm.path(),
            shape,
        ));
    }
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Every storage fault of the dump under `shape`: what went wrong.
fn storage_faults_fail_the_dump(images: &Path, shm: &Path, shape: HostShape) -> Vec<String> {
    let clean = dump_with(images, shm, shape, Plan::new(libc::ENOSPC));
    assert_eq!(clean.failure, None, "{:?}", clean.lines);
    assert!(clean.complete);
    let files = clean.written.clone();
    assert!(
        files.iter().any(|(n, _)| n.starts_with("amdgpu-kfd-")),
        "no KFD image was written: {files:?}"
    );

    // Budget end points: file boundaries, inside each header, points in
    // each payload.
    let mut points = Vec::new();
    let mut offset = 0u64;
    for (i, (_, len)) in files.iter().enumerate() {
        for p in [0, 1, 7, 8, 9, len / 2, len.saturating_sub(1)] {
            if p < *len {
                points.push((offset + p, i));
            }
        }
        offset += len;
    }
    points.dedup();
    let mut bad = Vec::new();
    let mut cases = 0;
    for (errno, words) in [
        (libc::ENOSPC, &["ENOSPC", "No space left"][..]),
        (libc::EIO, &["EIO", "Input/output error"][..]),
    ] {
        for &(budget, file) in &points {
            let plan = Plan::new(errno);
            plan.budget.store(budget, Ordering::SeqCst);
            let run = dump_with(images, shm, shape, plan);
            let case = format!(
                "{shape}: errno {errno} after {budget} bytes (in {})",
                files[file].0
            );
            bad.extend(dump_problems(&case, &run, words));
            cases += 1;
        }
    }
    for (i, (name, _)) in files.iter().enumerate() {
        let plan = Plan::new(libc::EIO);
        plan.fail_commit.store(i, Ordering::SeqCst);
        let run = dump_with(images, shm, shape, plan);
        let case = format!("{shape}: commit of {name} fails");
        bad.extend(dump_problems(&case, &run, &["EIO", "Input/output error"]));
        cases += 1;
    }
    println!("{shape}: {cases} failing dumps over {files:?}");
    bad
}

#[test]
fn short_reads_restore_exactly_and_failed_reads_fail_cleanly() {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    // `None`: reads of at most 7 bytes, which must restore exactly.
    let fail_points = [None, Some(0), Some(5), Some(8), Some(100), Some(20_000)];
    for (shape, fail_after) in HostShape::ALL
        .into_iter()
        .flat_map(|shape| fail_points.map(|f| (shape, f)))
    {
        empty_dir(images.path());
        let sim = Sim::synthetic(1, SimConfig::default()).expect("simulated machine");
        let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
        app.step().expect("app step");
        let expected = app.describe().expect("describe app");
        let criu = MiniCriu::of_shape(&sim, shm.path(), shape);
        let (files, ids) = gpu_files(&app);
        let quiet = Capture::start();
        criu.dump(
            |pid| sim.driver(pid),
            EmulatedHost::new(images.path(), None),
            app.pid(),
            &files,
            &device_vmas(&sim),
        )
        .expect("clean dump");
        drop(quiet);
        drop(files);
        let pid = app.pid();
        app.exit().expect("the app exits");
        let vmas = vmas_of(&kfd_image(images.path()));
        let before = Snapshot::take(&sim).accounting;
        let plan = Plan {
            read_chunk: 7,
            read_fail_after: fail_after,
            ..Plan::new(libc::EIO)
        };
        let host = FaultyHost {
            host: EmulatedHost::new(images.path(), Some(200)),
            images: images.path().to_path_buf(),
            plan: Arc::new(plan),
        };
        let capture = Capture::start();
        let result = criu.restore(|p| sim.driver(p), host, pid, &ids, &vmas);
        let lines = capture.lines();
        drop(capture);
        let case = format!("{shape}: reads failing after {fail_after:?} bytes");
        match (fail_after, result) {
            (None, Ok(task)) => {
                if let Err(e) = Workload::verify(&sim, pid, &expected) {
                    bad.push(format!("{case}: restored state differs: {e}"));
                }
                drop(task);
                sim.exit_process(pid).unwrap();
            }
            (None, Err(f)) => bad.push(format!("{case}: short reads failed the restore: {f:?}")),
            (Some(_), Ok(task)) => {
                bad.push(format!("{case}: the restore succeeded"));
                drop(task);
                sim.exit_process(pid).unwrap();
            }
            (Some(_), Err(f)) => {
                if f.errno >= 0 || f.errno == NOT_MINE || f.errno == PANIC_ERRNO {
                    bad.push(format!("{case}: {} answered {}", f.hook, f.errno));
                }
                let clear = lines.iter().any(|(l, t)| {
                    *l == Level::Error
                        && t.contains("amdgpu-")
                        && (t.contains("EIO") || t.contains("Input/output error"))
                });
                if !clear {
                    bad.push(format!(
                        "{case}: no error line names the file and EIO: {lines:?}"
                    ));
                }
            }
        }
        let after = Snapshot::take(&sim).accounting;
        if before != after {
            bad.push(format!("{case}: leak: {before:?} -> {after:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
