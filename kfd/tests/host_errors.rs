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

/// `(st_dev, st_ino, st_rdev)` of the file open at fd number `raw`, or the
/// errno of `fstat` on it (`EBADF` once it is closed).
fn identity(raw: std::os::fd::RawFd) -> Result<(u64, u64, u64), i32> {
    // SAFETY: an all-zero `stat` is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes only into `st`, a live exclusive local; `raw` is
    // any number, a closed one is EBADF.
    if unsafe { libc::fstat(raw, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok((st.st_dev, st.st_ino, st.st_rdev))
}

#[test]
fn restore_on_dev_null_fails_without_touching_fds() {
    use std::os::fd::AsRawFd;
    let file = dev_null();
    let kfd = Kfd::from_fd(HostDriver, file.as_fd());
    let err = kfd.restore(&[], &[], &[], 0).unwrap_err();
    assert_eq!(err.errno(), libc::ENOTTY);
    // The fd we passed in is still open and usable.
    assert!(kfd.version().is_err());
    assert!(file.metadata().is_ok());

    // A device bucket whose render fd, and BO buckets whose dmabuf_fd
    // fields, hold the numbers of files this test has open (the device's
    // own among them), as a caller's copy of an image might: RESTORE never reached a kernel that installed fds,
    // so the failed call closes none of them, and each number still names
    // the same file afterwards (a closed one would be EBADF, a reused one
    // another file).
    let others = [tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap()];
    let raws: Vec<_> = std::iter::once(file.as_raw_fd())
        .chain(others.iter().map(AsRawFd::as_raw_fd))
        .collect();
    let before: Vec<_> = raws.iter().map(|&raw| identity(raw).unwrap()).collect();
    let buckets: Vec<kfd_sys::kfd_criu_bo_bucket> = raws
        .iter()
        .map(|&raw| kfd_sys::kfd_criu_bo_bucket {
            size: 4096,
            gpu_id: 1,
            dmabuf_fd: raw as u32,
            ..Default::default()
        })
        .collect();
    let devices = [kfd_sys::kfd_criu_device_bucket {
        user_gpu_id: 1,
        actual_gpu_id: 1,
        drm_fd: raws[1] as u32,
        ..Default::default()
    }];
    let err = kfd.restore(&devices, &buckets, &[], 0).unwrap_err();
    assert_eq!(err.errno(), libc::ENOTTY);
    let after: Vec<_> = raws.iter().map(|&raw| identity(raw)).collect();
    for ((raw, before), after) in raws.iter().zip(&before).zip(&after) {
        assert_eq!(
            after.as_ref(),
            Ok(before),
            "fd {raw} after the failed RESTORE"
        );
    }
    assert_eq!(identity(file.as_raw_fd()).unwrap().2, dev_null_rdev());
    assert!(
        kfd.version().is_err(),
        "the device fd still answers (ENOTTY)"
    );
}

/// The device number of /dev/null, as `stat` gives it.
fn dev_null_rdev() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/dev/null").unwrap().rdev()
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

#[test]
fn render_ioctls_on_dev_null_are_enotty() {
    use kfd::{CopyEngine, CopyEngineConfig, GemHandle, RenderNode};
    let file = dev_null();
    let render = RenderNode::from_fd(HostDriver, file.as_fd());
    let err = render.version().unwrap_err();
    assert_eq!(
        err.to_string(),
        "DRM_IOCTL_VERSION failed: Inappropriate ioctl for device (ENOTTY)"
    );
    assert_eq!(
        render.gem_close(GemHandle(1)).unwrap_err().op(),
        "DRM_IOCTL_GEM_CLOSE"
    );
    assert_eq!(render.device_info().unwrap_err().op(), "AMDGPU_INFO");
    assert_eq!(render.gem_list_handles().unwrap_err().errno(), libc::ENOTTY);
    assert_eq!(
        render.gem_mapping_info(GemHandle(1)).unwrap_err().op(),
        "AMDGPU_GEM_OP GET_MAPPING_INFO"
    );
    // An engine cannot be built on a file that is no amdgpu device.
    let err = CopyEngine::new(render, CopyEngineConfig::default()).unwrap_err();
    assert_eq!(err.errno(), libc::ENOTTY);
    assert_eq!(err.op(), "AMDGPU_INFO");
}

#[test]
fn dmabuf_import_of_a_non_dmabuf_is_reported() {
    use kfd::RenderNode;
    let file = dev_null();
    let render = RenderNode::from_fd(HostDriver, file.as_fd());
    let other = tempfile::tempfile().unwrap();
    let err = render.prime_fd_to_handle(other.as_fd()).unwrap_err();
    assert_eq!(err.op(), "DRM_IOCTL_PRIME_FD_TO_HANDLE");
    assert_eq!(err.errno(), libc::ENOTTY);
}
