//! Which files and mappings belong to this plugin.
//!
//! CRIU offers every unknown fd and every device mapping to every plugin in
//! turn; whatever is not a KFD or amdgpu render-node object must be answered
//! "not mine" (`-ENOTSUP`) so other plugins get their chance. This module
//! decides that, through [`Driver`] only (so the simulator answers the same
//! questions as the kernel), and names the traced process that holds a
//! file ([`traced_holder`]); it never changes anything (the only files it
//! opens are its own duplicates of the candidates, closed again).

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
