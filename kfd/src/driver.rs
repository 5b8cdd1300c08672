//! The one boundary between this stack and the kernel.
//!
//! Every byte the stack sends to amdkfd/amdgpu goes through [`Driver`]:
//! [`HostDriver`] performs the real system calls, and a simulated kernel
//! (the `kfd-sim` crate) implements the same trait at the ABI level, receiving
//! the same request codes and `#[repr(C)]` argument structs with real user
//! pointers. Code above this module cannot tell the two apart.
//!
//! This module never interprets ioctl arguments; typed wrappers live in the
//! modules above it.

use std::ffi::{c_int, c_void, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

use crate::process::{FrozenCgroup, ProcessStatus};

/// The device number of a character device: `(major, minor)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceNumber {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// What an open file descriptor refers to, as far as this stack cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdKind {
    /// A character device (`/dev/kfd`, `/dev/dri/renderD*`, or another one).
    CharDevice(DeviceNumber),
    /// A dma-buf (anon inode whose link target starts with `/dmabuf:`).
    DmaBuf,
    /// Anything else (regular file, socket, pipe, other anon inode).
    Other,
}

/// The system-call boundary: open a device path, ioctl on a typed argument,
/// mmap/munmap a device file, and identify file descriptors.
///
/// Implementations must behave like the Linux kernel: the same errno values,
/// the same copy-in/copy-out of argument structs (including user pointers
/// inside them), the same file-descriptor semantics (`dup`, passing over unix
/// sockets and `close` work on the returned fds).
///
/// `&D`, `Box<D>` and `Arc<D>` are drivers whenever `D` is (`D` may be
/// unsized), so an `Arc<dyn Driver>` can be cloned into worker threads and
/// handed to [`Kfd`](crate::Kfd) or [`RenderNode`](crate::RenderNode)
/// without a wrapper type.
pub trait Driver: Send + Sync {
    /// `open(2)` of `path` with `flags` (`O_RDWR | O_CLOEXEC`, ...).
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd>;

    /// `ioctl(2)` with request code `request` and argument pointer `arg`.
    /// Returns the non-negative result of the call.
    ///
    /// # Safety
    /// `arg` must be valid for reads and writes of `_IOC_SIZE(request)` bytes,
    /// and every user pointer inside the argument must be valid for the use
    /// the kernel makes of it (the size of the array it describes), for the
    /// duration of the call; host memory handed to the device (userptr) must
    /// stay valid until the device is done with it.
    unsafe fn ioctl(&self, fd: BorrowedFd<'_>, request: u64, arg: *mut c_void)
        -> io::Result<c_int>;

    /// `mmap(2)` of `len` bytes of `fd` at `offset` with `prot`/`flags`
    /// (`MAP_SHARED` for device files). `addr` is a placement hint or, with
    /// `MAP_FIXED`, the required address.
    ///
    /// # Safety
    /// With `MAP_FIXED`, `addr..addr+len` must not hold memory the caller
    /// still uses; the returned memory is only valid until `munmap`.
    unsafe fn mmap(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<NonNull<c_void>>;

    /// `munmap(2)`.
    ///
    /// # Safety
    /// `addr..addr+len` must be a mapping made by [`Driver::mmap`] that no
    /// live reference points into.
    unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()>;

    /// What `fd` refers to (`fstat` plus, for anon inodes, the link target).
    fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind>;

    /// The device number of the character device at `path` (`stat(2)`);
    /// `ENOENT` when it does not exist, `ENOTBLK`-like errors are reported as
    /// `io::ErrorKind::InvalidInput` when `path` is not a character device.
    fn device_number(&self, path: &Path) -> io::Result<DeviceNumber>;

    /// At most `limit` bytes from the start of the sysfs file `path`, read
    /// by the calling process. The kernel answers a read of a KFD topology
    /// node whose GPU the caller's device cgroup hides with `EPERM`, so a
    /// process in a container sees only its own GPUs; this is the one read
    /// whose answer depends on the caller. The default reads the real file.
    fn read_sysfs(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        read_file_prefix(path, limit)
    }

    /// The names in directory `path` as the calling process sees it (a
    /// container's `/dev/dri` holds only its own nodes), unsorted, without
    /// `.` and `..`. The default lists the real directory.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        std::fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.file_name()))
            .collect()
    }

    /// `readlink(2)` of `path` as the calling process sees it (used on
    /// `/sys/class/drm/renderD*/device`). The default reads the real link.
    fn read_link(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        std::fs::read_link(path)
    }

    /// What `/proc/self/fdinfo/<fd>` says about open file `fd`: the kernel's
    /// text (`pos:`, `flags:`, ... and, for a DRM file, its driver's keys:
    /// `drm-client-id:`, `drm-total-vram:`, ...). The default reads it.
    fn fdinfo(&self, fd: BorrowedFd<'_>) -> io::Result<String> {
        use std::os::fd::AsRawFd;
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
    }

    /// `pidfd_open(pid, 0)`: a pidfd for process `pid` (`ESRCH` when there is
    /// none). The default answers `ENOSYS`, as for every process-control
    /// method below: a driver that does not model processes cannot recover
    /// one.
    fn pidfd_open(&self, pid: u32) -> io::Result<OwnedFd> {
        let _ = pid;
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `pidfd_getfd(pidfd, target_fd, 0)`: a duplicate (close-on-exec) of
    /// the target process's `target_fd`, the same open file. The kernel asks
    /// for ptrace access to the target (`PTRACE_MODE_ATTACH_REALCREDS`,
    /// `EPERM`), answers `EBADF` when `target_fd` is not open there and
    /// `ESRCH` when the process has exited.
    fn pidfd_getfd(&self, pidfd: BorrowedFd<'_>, target_fd: RawFd) -> io::Result<OwnedFd> {
        let _ = (pidfd, target_fd);
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `ptrace(PTRACE_SEIZE, pid, 0, 0)`: the calling thread becomes the
    /// tracer (the "ptrace parent") of `pid` without stopping it; `EPERM`
    /// when `pid` is traced already or may not be traced by the caller,
    /// `ESRCH` when it does not exist. The kernel ends the relation when
    /// the tracer exits.
    fn ptrace_seize(&self, pid: u32) -> io::Result<()> {
        let _ = pid;
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `ptrace(PTRACE_INTERRUPT, pid, 0, 0)`, then `waitpid(pid, __WALL)`
    /// for at most `timeout` until `pid` reports its ptrace stop (the
    /// process's own state, signals and job control are untouched).
    /// `ETIMEDOUT` when it did not stop in time (a task in a cgroup v1
    /// freezer cannot); `ESRCH` when the caller does not trace `pid`.
    fn ptrace_interrupt(&self, pid: u32, timeout: std::time::Duration) -> io::Result<()> {
        let _ = (pid, timeout);
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `ptrace(PTRACE_DETACH, pid, 0, 0)`: ends tracing and lets a stopped
    /// `pid` run on; `ESRCH` when the caller does not trace `pid` or it is
    /// not in a ptrace stop.
    fn ptrace_detach(&self, pid: u32) -> io::Result<()> {
        let _ = pid;
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// `getpid()`: the calling process's pid as this driver names
    /// processes, the tracer [`Driver::process_status`] shows for a process
    /// the caller traces. The default is the host's (`std::process::id`).
    fn caller_pid(&self) -> u32 {
        std::process::id()
    }

    /// The name and tracer of `pid` (`/proc/PID/status`); `ESRCH`-like
    /// `NotFound` when there is no such process.
    fn process_status(&self, pid: u32) -> io::Result<ProcessStatus> {
        let _ = pid;
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// The open fd numbers of `pid` (`/proc/PID/fd`).
    fn process_fds(&self, pid: u32) -> io::Result<Vec<RawFd>> {
        let _ = pid;
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }

    /// The cgroup freezer holding `pid` frozen, if any (`/proc/PID/cgroup`
    /// and the cgroup's `cgroup.freeze` or `freezer.state`).
    fn frozen_cgroup(&self, pid: u32) -> io::Result<Option<FrozenCgroup>> {
        let _ = pid;
        Err(io::Error::from_raw_os_error(libc::ENOSYS))
    }
}

/// Forwards every [`Driver`] method through a pointer type to the driver it
/// points to, so `&D`, `Box<D>` and `Arc<D>` (including `Arc<dyn Driver>`,
/// which is `Send + Sync` because `Driver` requires both) are drivers too.
macro_rules! forward_driver {
    ($($pointer:ty),+ $(,)?) => {$(
        impl<D: Driver + ?Sized> Driver for $pointer {
            fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
                (**self).open(path, flags)
            }

            unsafe fn ioctl(
                &self,
                fd: BorrowedFd<'_>,
                request: u64,
                arg: *mut c_void,
            ) -> io::Result<c_int> {
                // SAFETY: the caller upholds `Driver::ioctl`'s contract, which
                // is the pointed-to driver's contract unchanged.
                unsafe { (**self).ioctl(fd, request, arg) }
            }

            unsafe fn mmap(
                &self,
                addr: *mut c_void,
                len: usize,
                prot: c_int,
                flags: c_int,
                fd: BorrowedFd<'_>,
                offset: u64,
            ) -> io::Result<NonNull<c_void>> {
                // SAFETY: the caller upholds `Driver::mmap`'s contract, passed
                // on unchanged.
                unsafe { (**self).mmap(addr, len, prot, flags, fd, offset) }
            }

            unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()> {
                // SAFETY: the caller upholds `Driver::munmap`'s contract,
                // passed on unchanged.
                unsafe { (**self).munmap(addr, len) }
            }

            fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind> {
                (**self).fd_kind(fd)
            }

            fn device_number(&self, path: &Path) -> io::Result<DeviceNumber> {
                (**self).device_number(path)
            }

            fn read_sysfs(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
                (**self).read_sysfs(path, limit)
            }

            fn list_dir(&self, path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
                (**self).list_dir(path)
            }

            fn read_link(&self, path: &Path) -> io::Result<std::path::PathBuf> {
                (**self).read_link(path)
            }

            fn fdinfo(&self, fd: BorrowedFd<'_>) -> io::Result<String> {
                (**self).fdinfo(fd)
            }

            fn pidfd_open(&self, pid: u32) -> io::Result<OwnedFd> {
                (**self).pidfd_open(pid)
            }

            fn pidfd_getfd(&self, pidfd: BorrowedFd<'_>, target_fd: RawFd) -> io::Result<OwnedFd> {
                (**self).pidfd_getfd(pidfd, target_fd)
            }

            fn ptrace_seize(&self, pid: u32) -> io::Result<()> {
                (**self).ptrace_seize(pid)
            }

            fn ptrace_interrupt(&self, pid: u32, timeout: std::time::Duration) -> io::Result<()> {
                (**self).ptrace_interrupt(pid, timeout)
            }

            fn ptrace_detach(&self, pid: u32) -> io::Result<()> {
                (**self).ptrace_detach(pid)
            }

            fn caller_pid(&self) -> u32 {
                (**self).caller_pid()
            }

            fn process_status(&self, pid: u32) -> io::Result<ProcessStatus> {
                (**self).process_status(pid)
            }

            fn process_fds(&self, pid: u32) -> io::Result<Vec<RawFd>> {
                (**self).process_fds(pid)
            }

            fn frozen_cgroup(&self, pid: u32) -> io::Result<Option<FrozenCgroup>> {
                (**self).frozen_cgroup(pid)
            }
        }
    )+};
}

forward_driver!(&D, Box<D>, std::sync::Arc<D>);

/// At most `limit` bytes from the start of the file at `path` (sysfs files
/// report `st_size` 4096 whatever their content, so this reads to EOF).
pub fn read_file_prefix(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut buf = Vec::new();
    file.take(limit as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// `ptrace(request, pid, 0, 0)`.
fn ptrace(request: libc::c_uint, pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: SEIZE, INTERRUPT and DETACH with a null address and data read
    // and write no memory of ours.
    let ret = unsafe {
        libc::ptrace(
            request,
            pid,
            std::ptr::null_mut::<c_void>(),
            std::ptr::null_mut::<c_void>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The real kernel: plain system calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostDriver;

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

impl Driver for HostDriver {
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
        let path = cstring(path)?;
        // SAFETY: `path` is a valid NUL-terminated string for the duration of
        // the call; open(2) has no other memory arguments.
        let fd = unsafe { libc::open(path.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: open(2) succeeded, so `fd` is a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<c_int> {
        // SAFETY: the caller guarantees `arg` (and the pointers inside it) are
        // valid for the request, as this function's contract states.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ret)
    }

    unsafe fn mmap(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<NonNull<c_void>> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // SAFETY: the caller upholds the MAP_FIXED contract; otherwise the
        // kernel picks an unused range and touches no existing memory.
        let ptr = unsafe { libc::mmap(addr, len, prot, flags, fd.as_raw_fd(), offset) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(ptr).ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))
    }

    unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()> {
        // SAFETY: the caller guarantees the range is a mapping of ours that
        // nothing references any more.
        let ret = unsafe { libc::munmap(addr.as_ptr(), len) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is a writable buffer of the size fstat(2) fills.
        let ret = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstat(2) succeeded and initialised the whole struct.
        let st = unsafe { st.assume_init() };
        if st.st_mode & libc::S_IFMT == libc::S_IFCHR {
            return Ok(FdKind::CharDevice(DeviceNumber {
                major: libc::major(st.st_rdev),
                minor: libc::minor(st.st_rdev),
            }));
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        if link.as_os_str().as_bytes().starts_with(b"/dmabuf") {
            return Ok(FdKind::DmaBuf);
        }
        Ok(FdKind::Other)
    }

    fn device_number(&self, path: &Path) -> io::Result<DeviceNumber> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = std::fs::metadata(path)?;
        if !meta.file_type().is_char_device() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a character device", path.display()),
            ));
        }
        let rdev = meta.rdev();
        Ok(DeviceNumber {
            major: libc::major(rdev),
            minor: libc::minor(rdev),
        })
    }

    fn pidfd_open(&self, pid: u32) -> io::Result<OwnedFd> {
        let pid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        // SAFETY: pidfd_open(2) takes two integers and touches no memory.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pidfd_open(2) succeeded, so `fd` is a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    fn pidfd_getfd(&self, pidfd: BorrowedFd<'_>, target_fd: RawFd) -> io::Result<OwnedFd> {
        // SAFETY: pidfd_getfd(2) takes three integers and touches no memory.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target_fd, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pidfd_getfd(2) succeeded: `fd` is a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
    }

    fn ptrace_seize(&self, pid: u32) -> io::Result<()> {
        ptrace(libc::PTRACE_SEIZE, pid)
    }

    fn ptrace_interrupt(&self, pid: u32, timeout: std::time::Duration) -> io::Result<()> {
        ptrace(libc::PTRACE_INTERRUPT, pid)?;
        let tid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let mut status = 0;
            // SAFETY: `status` is a writable int for the duration of the call.
            let ret = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
            if ret < 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(err);
            }
            if ret == tid {
                if libc::WIFSTOPPED(status) {
                    return Ok(());
                }
                // Exited or killed while we waited.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn ptrace_detach(&self, pid: u32) -> io::Result<()> {
        ptrace(libc::PTRACE_DETACH, pid)
    }

    fn process_status(&self, pid: u32) -> io::Result<ProcessStatus> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        crate::process::parse_status(&text)
    }

    fn process_fds(&self, pid: u32) -> io::Result<Vec<RawFd>> {
        let mut fds = Vec::new();
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
            if let Some(fd) = entry?.file_name().to_str().and_then(|n| n.parse().ok()) {
                fds.push(fd);
            }
        }
        fds.sort_unstable();
        Ok(fds)
    }

    fn frozen_cgroup(&self, pid: u32) -> io::Result<Option<FrozenCgroup>> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
        Ok(crate::process::frozen_cgroup_in(
            &text,
            Path::new("/sys/fs/cgroup"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Counts the calls that reach it; answers every call with `ENODEV`
    /// (`read_sysfs` with its argument back, to show it is not the default).
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Counting {
        fn hit<T>(&self) -> io::Result<T> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Err(io::Error::from_raw_os_error(libc::ENODEV))
        }
    }

    impl Driver for Counting {
        fn open(&self, _: &Path, _: c_int) -> io::Result<OwnedFd> {
            self.hit()
        }
        unsafe fn ioctl(&self, _: BorrowedFd<'_>, _: u64, _: *mut c_void) -> io::Result<c_int> {
            self.hit()
        }
        unsafe fn mmap(
            &self,
            _: *mut c_void,
            _: usize,
            _: c_int,
            _: c_int,
            _: BorrowedFd<'_>,
            _: u64,
        ) -> io::Result<NonNull<c_void>> {
            self.hit()
        }
        unsafe fn munmap(&self, _: NonNull<c_void>, _: usize) -> io::Result<()> {
            self.hit()
        }
        fn fd_kind(&self, _: BorrowedFd<'_>) -> io::Result<FdKind> {
            self.hit()
        }
        fn device_number(&self, _: &Path) -> io::Result<DeviceNumber> {
            self.hit()
        }
        fn read_sysfs(&self, _: &Path, limit: usize) -> io::Result<Vec<u8>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(vec![0; limit])
        }
        fn list_dir(&self, _: &Path) -> io::Result<Vec<std::ffi::OsString>> {
            self.hit()
        }
        fn read_link(&self, _: &Path) -> io::Result<std::path::PathBuf> {
            self.hit()
        }
    }

    /// Calls every method once through `driver`; returns how many failed
    /// with the inner driver's `ENODEV`.
    fn call_all(driver: impl Driver) -> usize {
        let file = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsFd::as_fd(&file);
        let path = Path::new("/nonexistent");
        let enodev = |r: io::Result<()>| r.unwrap_err().raw_os_error() == Some(libc::ENODEV);
        let mut n = 0;
        n += usize::from(enodev(driver.open(path, 0).map(drop)));
        // SAFETY: the counting driver never dereferences its arguments.
        n += usize::from(enodev(
            unsafe { driver.ioctl(fd, 0, std::ptr::null_mut()) }.map(drop),
        ));
        // SAFETY: as above.
        n += usize::from(enodev(
            unsafe { driver.mmap(std::ptr::null_mut(), 1, 0, 0, fd, 0) }.map(drop),
        ));
        // SAFETY: as above; the pointer is never mapped or touched.
        n += usize::from(enodev(unsafe { driver.munmap(NonNull::dangling(), 1) }));
        n += usize::from(enodev(driver.fd_kind(fd).map(drop)));
        n += usize::from(enodev(driver.device_number(path).map(drop)));
        n += usize::from(enodev(driver.list_dir(path).map(drop)));
        n += usize::from(enodev(driver.read_link(path).map(drop)));
        assert_eq!(driver.read_sysfs(path, 3).unwrap(), vec![0; 3]);
        n
    }

    #[test]
    fn references_boxes_and_arcs_forward_every_method() {
        let inner = Counting::default();
        assert_eq!(call_all(&inner), 8);
        assert_eq!(call_all(Box::new(&inner)), 8);
        assert_eq!(inner.0.load(Ordering::Relaxed), 18);

        let shared: Arc<dyn Driver + Send + Sync> = Arc::new(Counting::default());
        assert_eq!(call_all(Arc::clone(&shared)), 8);
        let plain: Arc<dyn Driver> = Arc::new(Counting::default());
        assert_eq!(call_all(plain), 8);
        let boxed: Box<dyn Driver> = Box::new(Counting::default());
        assert_eq!(call_all(boxed), 8);
    }

    #[test]
    fn shared_dyn_driver_crosses_threads() {
        fn assert_driver<D: Driver + Clone + 'static>(_: &D) {}
        let shared: Arc<dyn Driver> = Arc::new(HostDriver);
        assert_driver(&shared);
        let worker = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || shared.device_number(Path::new("/dev/null")).is_ok())
        };
        assert!(worker.join().unwrap());
    }
}
