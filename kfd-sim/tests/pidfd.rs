//! Pidfds as the kernel has them: a pidfd names the process it was opened
//! for, not its pid number. Once that process has exited, `pidfd_getfd`
//! answers `ESRCH` through it even when another process now holds the same
//! pid (pid reuse), and never hands out that other process's files.

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use kfd::Driver;
use kfd_sim::{ProcessConfig, Sim, SimConfig};

#[test]
fn a_pidfd_of_an_exited_process_never_reaches_a_process_reusing_its_pid() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let target = sim.spawn_process().unwrap();
    let caller = sim.spawn_process().unwrap();
    let driver = sim.driver(caller);
    let kfd = sim
        .driver(target)
        .open(Path::new("/dev/kfd"), libc::O_RDWR | libc::O_CLOEXEC)
        .unwrap();
    let pidfd = driver.pidfd_open(target.0).unwrap();
    assert!(driver.pidfd_getfd(pidfd.as_fd(), kfd.as_raw_fd()).is_ok());
    drop(kfd);

    sim.exit_process(target).unwrap();
    let err = driver.pidfd_getfd(pidfd.as_fd(), 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ESRCH), "{err}");

    // Another process gets the same pid and opens a file.
    let stranger = sim
        .spawn_process_with(ProcessConfig {
            pid: Some(target),
            ..ProcessConfig::default()
        })
        .unwrap();
    assert_eq!(stranger, target);
    let theirs = sim
        .driver(stranger)
        .open(Path::new("/dev/kfd"), libc::O_RDWR | libc::O_CLOEXEC)
        .unwrap();
    let err = driver
        .pidfd_getfd(pidfd.as_fd(), theirs.as_raw_fd())
        .expect_err("the old pidfd reaches the new process's files");
    assert_eq!(err.raw_os_error(), Some(libc::ESRCH), "{err}");
    // A pidfd opened now names the new process.
    let fresh = driver.pidfd_open(stranger.0).unwrap();
    assert!(driver
        .pidfd_getfd(fresh.as_fd(), theirs.as_raw_fd())
        .is_ok());
}
