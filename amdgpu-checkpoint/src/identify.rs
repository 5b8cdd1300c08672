//! Which files and mappings belong to this plugin.
//!
//! CRIU offers every unknown fd and every device mapping to every plugin in
//! turn; whatever is not a KFD or amdgpu render-node object must be answered
//! "not mine" (`-ENOTSUP`) so other plugins get their chance. This module
//! decides that, through [`Driver`] only (so the simulator answers the same
//! questions as the kernel), and names the traced process that holds a
//! file ([`traced_holder`]), once per file: a [`DrainedFile`] carries the
//! answer to the dump. It never changes anything (the only files it opens
//! are its own duplicates of the candidates, closed again).

use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::path::PathBuf;

use kfd::{DeviceNumber, Driver, FdKind};

/// The KFD device path.
pub const KFD_PATH: &str = "/dev/kfd";

/// The first render-node minor (`/dev/dri/renderD128`).
pub const FIRST_RENDER_MINOR: u32 = 128;
/// The last render-node minor.
pub const LAST_RENDER_MINOR: u32 = 255;

/// The path of render node `minor`.
pub fn render_node_path(minor: u32) -> PathBuf {
    PathBuf::from(format!("/dev/dri/renderD{minor}"))
}

/// What an fd handed to `DUMP_EXT_FILE` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdClass {
    /// `/dev/kfd`.
    Kfd,
    /// An amdgpu render node.
    Render {
        /// Its minor number (128..=255).
        minor: u32,
    },
    /// A dma-buf; whose it is can only be told by resolving it against the
    /// BOs the plugin dumped.
    DmaBuf,
    /// Anything else: not ours.
    Foreign,
}

/// The device numbers the plugin recognises on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Devices {
    /// `/dev/kfd`.
    pub kfd: DeviceNumber,
}

impl Devices {
    /// Looks up `/dev/kfd`. `Ok(None)` when the machine has none (then every
    /// hook answers "not mine").
    pub fn probe<D: Driver + ?Sized>(driver: &D) -> io::Result<Option<Devices>> {
        match driver.device_number(KFD_PATH.as_ref()) {
            Ok(kfd) => Ok(Some(Devices { kfd })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Classifies a character device number: KFD, a render node (its
    /// `/dev/dri/renderD<minor>` has exactly this number), or foreign.
    pub fn classify_device<D: Driver + ?Sized>(&self, driver: &D, dev: DeviceNumber) -> FdClass {
        if dev.major == self.kfd.major && dev.minor == self.kfd.minor {
            return FdClass::Kfd;
        }
        if (FIRST_RENDER_MINOR..=LAST_RENDER_MINOR).contains(&dev.minor)
            && driver
                .device_number(&render_node_path(dev.minor))
                .is_ok_and(|node| node == dev)
        {
            return FdClass::Render { minor: dev.minor };
        }
        FdClass::Foreign
    }

    /// Classifies an open fd.
    pub fn classify_fd<D: Driver + ?Sized>(
        &self,
        driver: &D,
        fd: BorrowedFd<'_>,
    ) -> io::Result<FdClass> {
        Ok(match driver.fd_kind(fd)? {
            FdKind::CharDevice(dev) => self.classify_device(driver, dev),
            FdKind::DmaBuf => FdClass::DmaBuf,
            FdKind::Other => FdClass::Foreign,
        })
    }

    /// Classifies a device mapping offered to `HANDLE_DEVICE_VMA`. KFD
    /// mappings (doorbells, MMIO remap, events) share the KFD major.
    pub fn classify_vma<D: Driver + ?Sized>(&self, driver: &D, dev: DeviceNumber) -> FdClass {
        if dev.major == self.kfd.major {
            return FdClass::Kfd;
        }
        self.classify_device(driver, dev)
    }
}

/// Where a traced process holds a file: its pid (as the driver names
/// processes) and the fd number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// The process.
    pub pid: u32,
    /// The fd number in that process.
    pub fd: RawFd,
}

/// A file CRIU drained from a task for `DUMP_EXT_FILE`, with the traced
/// process that holds it: identified once (a search of every traced
/// process's fds costs a `pidfd_getfd` per fd) and handed down.
#[derive(Debug, Clone, Copy)]
pub struct DrainedFile<'fd> {
    /// CRIU's copy of the task's file.
    pub fd: BorrowedFd<'fd>,
    /// The process holding it and its fd number there; `None` when it
    /// could not be named (then the dump tells a second `/dev/kfd` file of
    /// one process only after `PROCESS_INFO` paused it).
    pub holder: Option<Holder>,
}

impl<'fd> DrainedFile<'fd> {
    /// `fd` and its holder among the processes the caller traces
    /// ([`traced_holder`]).
    pub fn identify<D: Driver + ?Sized>(driver: &D, fd: BorrowedFd<'fd>) -> Self {
        DrainedFile {
            fd,
            holder: traced_holder(driver, fd),
        }
    }
}

/// The process the caller traces (CRIU traces the whole tree it dumps)
/// that holds the very open file `fd` (CRIU's drained copy of one of its
/// fds), and its fd number there (the lowest when it holds the file
/// twice); `None` when none does or it cannot be told (no process control
/// in the driver, no `kcmp`). Found without touching the file: among the
/// traced processes' fds of the same kind, the one that is the same file
/// description. Device files opened twice share an inode, so the inode
/// would not do.
pub fn traced_holder<D: Driver + ?Sized>(driver: &D, fd: BorrowedFd<'_>) -> Option<Holder> {
    let kind = driver.fd_kind(fd).ok()?;
    let me = driver.caller_pid();
    let mut pids: Vec<u32> = driver
        .list_dir(std::path::Path::new("/proc"))
        .ok()?
        .into_iter()
        .filter_map(|name| name.to_str()?.parse::<u32>().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter().find_map(|pid| {
        let traced = driver
            .process_status(pid)
            .is_ok_and(|status| status.tracer == Some(me));
        if !traced {
            return None;
        }
        held_at(driver, pid, fd, kind).map(|fd| Holder { pid, fd })
    })
}

/// The lowest fd number at which process `pid` holds the open file `fd`
/// (of kind `kind`).
fn held_at<D: Driver + ?Sized>(
    driver: &D,
    pid: u32,
    fd: BorrowedFd<'_>,
    kind: FdKind,
) -> Option<RawFd> {
    use std::os::fd::AsFd;
    let pidfd = driver.pidfd_open(pid).ok()?;
    let mut fds = driver.process_fds(pid).ok()?;
    fds.sort_unstable();
    fds.into_iter().find(|&target_fd| {
        driver
            .pidfd_getfd(pidfd.as_fd(), target_fd)
            .is_ok_and(|theirs| {
                driver.fd_kind(theirs.as_fd()).ok() == Some(kind)
                    && crate::sys::same_open_file(fd, theirs.as_fd()).unwrap_or(false)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd::HostDriver;
    use std::os::fd::AsFd;

    #[test]
    fn sockets_and_null_are_foreign() {
        let devices = Devices {
            kfd: DeviceNumber {
                major: 4095,
                minor: 0,
            },
        };
        let (sock, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(
            devices.classify_fd(&HostDriver, sock.as_fd()).unwrap(),
            FdClass::Foreign
        );
        let null = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(
            devices.classify_fd(&HostDriver, null.as_fd()).unwrap(),
            FdClass::Foreign
        );
        // /dev/null is 1:3: a char device, but neither KFD nor a render node.
        let dev = DeviceNumber { major: 1, minor: 3 };
        assert_eq!(devices.classify_vma(&HostDriver, dev), FdClass::Foreign);
        let kfd_like = DeviceNumber {
            major: 4095,
            minor: 7,
        };
        assert_eq!(devices.classify_vma(&HostDriver, kfd_like), FdClass::Kfd);
        assert_eq!(
            devices.classify_device(&HostDriver, kfd_like),
            FdClass::Foreign
        );
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod real_kernel_tests {
    use super::*;
    use kfd::HostDriver;
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

    /// Forks a child that holds the open files it has and waits to be
    /// killed; its pid.
    fn holder() -> libc::pid_t {
        // SAFETY: the child only calls pause (async-signal-safe) until it
        // is killed; it never returns into the caller.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            loop {
                // SAFETY: pause takes no arguments.
                unsafe { libc::pause() };
            }
        }
        pid
    }

    fn open_null() -> OwnedFd {
        // SAFETY: a NUL-terminated literal path; a new fd on success.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: open succeeded: the fd is new and ours.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// In a single-threaded process (the kernel names the tracer by
    /// thread): two traced children, each holding its own open file of
    /// one device node (as two GPU processes hold /dev/kfd); the drained
    /// copy of the second child's file must name the second child.
    fn dumper_side() -> [i64; 3] {
        let first_file = open_null();
        let first = holder();
        drop(first_file);
        let second_file = open_null();
        let second = holder();
        let mut named = [-1i64, -1, i64::from(second)];
        let seized = [first, second]
            .iter()
            .all(|&pid| HostDriver.ptrace_seize(pid as u32).is_ok());
        if seized {
            if let Some(task) = traced_holder(&HostDriver, second_file.as_fd()) {
                named[0] = i64::from(task.pid);
                named[1] = i64::from(task.fd);
            }
        }
        for pid in [first, second] {
            // SAFETY: kill and waitpid of the children forked above.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        named[1] = if named[1] == i64::from(second_file.as_raw_fd()) {
            1
        } else {
            named[1]
        };
        named
    }

    #[test]
    fn the_holder_named_is_the_process_holding_that_very_file() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two ints.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: pipe2 succeeded: both fds are ours.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child runs `dumper_side` (open, fork, ptrace, reads of
        // /proc; glibc's malloc works after fork) and ends with _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            drop(r);
            let named = std::panic::catch_unwind(dumper_side).unwrap_or([-2, -2, -2]);
            let bytes: Vec<u8> = named.iter().flat_map(|v| v.to_ne_bytes()).collect();
            // SAFETY: writes from a live buffer, then ends the child.
            unsafe {
                libc::write(w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                libc::_exit(0);
            }
        }
        drop(w);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut bytes).unwrap();
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        assert_eq!(bytes.len(), 24, "the dumper's side failed");
        let v: Vec<i64> = bytes
            .chunks(8)
            .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            v[0], v[2],
            "named pid {} instead of the second holder {}",
            v[0], v[2]
        );
        assert_eq!(v[1], 1, "named the wrong fd number ({})", v[1]);
    }
}
