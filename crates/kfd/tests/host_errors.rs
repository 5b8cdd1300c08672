//! Error paths against the real kernel ([`HostDriver`]) on files that are not
//! GPU devices: the errno comes back unchanged and the message names the
//! operation.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use kfd::{Error, GpuId, HostDriver, Kfd, ProcessInfo};

fn dev_null() -> File {
    File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .expect("/dev/null")
}

#[test]
fn kfd_ioctl_on_dev_null_is_enotty() {
    let file = dev_null();
    let kfd = Kfd::from_fd(HostDriver, file.as_fd());
    let err = kfd.version().unwrap_err();
    assert_eq!(err.errno(), libc::ENOTTY);
    assert_eq!(err.op(), "GET_VERSION");
    assert_eq!(
        err.to_string(),
        "GET_VERSION failed: Inappropriate ioctl for device (ENOTTY)"
    );

    let err = kfd.process_info().unwrap_err();
    assert_eq!(
        err.to_string(),
        "CRIU_OP PROCESS_INFO failed: Inappropriate ioctl for device (ENOTTY)"
    );
    let err = kfd.checkpoint(&ProcessInfo::default()).unwrap_err();
    assert!(
        err.to_string().starts_with("CRIU_OP CHECKPOINT failed"),
        "{err}"
    );
    assert_eq!(kfd.unpause().unwrap_err().errno(), libc::ENOTTY);
    assert_eq!(kfd.resume(1).unwrap_err().op(), "CRIU_OP RESUME");
    assert_eq!(
        kfd.available_memory(GpuId(1)).unwrap_err().op(),
        "AVAILABLE_MEMORY"
    );
}

#[test]
fn restore_on_dev_null_fails_without_touching_fds() {
    let file = dev_null();
    let kfd = Kfd::from_fd(HostDriver, file.as_fd());
    let err = kfd.restore(&[], &[], &[], 0).unwrap_err();
    assert_eq!(err.errno(), libc::ENOTTY);
    // The fd we passed in is still open and usable.
    assert!(kfd.version().is_err());
    assert!(file.metadata().is_ok());
}

#[test]
fn open_of_missing_device_names_the_path() {
    let err = Kfd::open_path(HostDriver, Path::new("/nonexistent/kfd")).unwrap_err();
    assert!(matches!(err, Error::Open { .. }));
    assert_eq!(err.errno(), libc::ENOENT);
    assert_eq!(
        err.to_string(),
        "open /nonexistent/kfd failed: No such file or directory (ENOENT)"
    );
}
