//! The parallel restore worker leaves its process free to join a mount
//! namespace: CRIU's main process, with the worker running (from
//! `POST_FORKING` to `RESUME_DEVICES_LATE`), joins the restored tasks' mount
//! namespace to clean up link-remap files (`setns(CLONE_NEWNS)`), which the
//! kernel refuses (`EINVAL`) while another thread shares the process's
//! filesystem context: every container restore (Podman, Docker) took that
//! path and failed before the worker got one of its own.
//!
//! `harness = false`: the kernel's rule is about every thread of the
//! process, so the test runs alone on the main thread (`test_env::harness`),
//! with no libtest threads beside it. Needs root (`setns` into a mount
//! namespace needs `CAP_SYS_ADMIN`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use amdgpu_checkpoint::options::Options;
use amdgpu_checkpoint::parallel::{Copier, ParallelFacts, ParallelRestore};
use amdgpu_image::DirStore;

fn main() {
    test_env::harness::run(&[(
        "the_worker_leaves_the_process_free_to_join_a_mount_namespace",
        worker_leaves_setns_possible,
    )]);
}

/// `setns(CLONE_NEWNS)` into the mount namespace `ns`: `Ok` or the errno.
fn join(ns: &File) -> Result<(), i32> {
    // SAFETY: setns(2) takes an fd this function borrows for the call and a
    // flag; it reads no memory of this process. Joining the mount namespace
    // the process is already in changes its root and cwd to that
    // namespace's root, which this test binary does not rely on.
    let ret = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

/// The names of this process's threads.
fn threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect()
}

fn worker_leaves_setns_possible() {
    // SAFETY: geteuid(2) reads no memory and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        test_env::skip("joining a mount namespace needs root (CAP_SYS_ADMIN)");
        return;
    }
    let ns = File::open("/proc/self/ns/mnt").expect("/proc/self/ns/mnt");
    let cwd = std::env::current_dir().expect("the working directory");
    assert_eq!(join(&ns), Ok(()), "a single-threaded process joins");

    // The kernel's rule, so this test can fail: an ordinary thread (which
    // shares the filesystem context) makes the join fail.
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let plain = std::thread::spawn(move || wait.recv());
    assert_eq!(
        join(&ns),
        Err(libc::EINVAL),
        "the kernel refuses the join beside a thread sharing the filesystem context"
    );
    release.send(()).unwrap();
    plain.join().unwrap().unwrap();

    let images = tempfile::tempdir().expect("an images directory");
    let facts = ParallelFacts {
        calls_post_forking: true,
        single_process: Some(true),
        streaming: false,
        run_id: None,
        turned_off: false,
    };
    let mut parallel = ParallelRestore::plan(&facts).expect("parallel restore planned");
    let copier = Copier {
        driver: Arc::new(kfd::HostDriver),
        images: DirStore::open_dir(images.path()).expect("the images directory"),
    };
    parallel
        .start(copier, Options::default())
        .expect("the worker starts");
    assert!(parallel.running());
    assert!(
        threads().iter().any(|t| t == "amdgpu-parallel"),
        "the worker thread runs: {:?}",
        threads()
    );
    assert_eq!(
        join(&ns),
        Ok(()),
        "CRIU's main process joins a mount namespace while the worker runs"
    );
    std::env::set_current_dir(&cwd).expect("back to the working directory");
    let report = parallel
        .finish()
        .expect("the worker was running")
        .expect("the worker quits");
    assert!(report.commands.is_empty(), "{report:?}");
    println!("setns(CLONE_NEWNS) succeeds with the parallel restore worker running");
}
