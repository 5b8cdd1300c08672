//! Unpausing a process whose dump was cut short: what `amdgpu-criu unpause`
//! and the dump guardian do when CRIU died between `PROCESS_INFO` (which
//! paused the GPU queues) and `UNPAUSE`.
//!
//! The kernel accepts `CRIU_OP` on another process's `/dev/kfd` only from
//! the ptrace parent of that process's lead thread holding
//! `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN`. So [`unpause_process`]
//! seizes the process (`PTRACE_SEIZE` leaves it running; `PTRACE_INTERRUPT`
//! only so it can be detached, its signals and job control untouched), takes
//! its KFD fd with `pidfd_getfd`, issues `UNPAUSE` and detaches. Every
//! step runs on the calling thread: the kernel compares the tracer with the
//! calling *thread*.
//!
//! It never thaws a frozen cgroup (that is the user's call: it is reported
//! with the command that thaws it) and never touches a process that another
//! tracer holds (CRIU may still be at work).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use kfd::{Driver, FdKind, FrozenCgroup, Kfd};

use crate::identify::Devices;

/// How long to wait for the seized process to reach its ptrace stop.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// What [`unpause_process`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpaused {
    /// The process.
    pub pid: u32,
    /// Its KFD fd number (in the target) that carried the request.
    pub kfd_fd: i32,
    /// `true`: its queues were paused and now run; `false`: they were not
    /// paused (the kernel answered `EINVAL`), nothing changed.
    pub was_paused: bool,
    /// The cgroup freezer that still holds the process, if any.
    pub frozen: Option<FrozenCgroup>,
    /// Whether the explicit detach failed (the process did not reach its
    /// ptrace stop); the kernel detaches it when this process exits.
    pub detach_deferred: bool,
}

/// Why a process could not be unpaused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoverError {
    /// There is no process `pid`.
    #[error("no process {pid}")]
    NoSuchProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// The process has no `/dev/kfd` open: it has no GPU queues to unpause.
    #[error("process {pid} ({name}) has no /dev/kfd open: it uses no AMD GPU compute queues")]
    NoKfd {
        /// The process.
        pid: u32,
        /// Its name.
        name: String,
    },
    /// Another tracer holds the process.
    #[error(
        "process {pid} is traced by {tracer} ({tracer_name}); if that is a CRIU still dumping, \
         let it finish; otherwise end it and run unpause again"
    )]
    Traced {
        /// The process.
        pid: u32,
        /// The tracer's pid (`TracerPid`).
        tracer: u32,
        /// The tracer's name (`?` when it could not be read).
        tracer_name: String,
    },
    /// A permission the operation needs is missing.
    #[error("{op} on process {pid} was refused ({source}): {need}")]
    NotPermitted {
        /// The process.
        pid: u32,
        /// The step, e.g. `"PTRACE_SEIZE"`.
        op: &'static str,
        /// What the caller needs.
        need: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// A step failed for another reason.
    #[error("{op} on process {pid} failed: {source}")]
    Os {
        /// The process.
        pid: u32,
        /// The step.
        op: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The `UNPAUSE` request failed.
    #[error("CRIU_OP UNPAUSE on process {pid} failed: {source}")]
    Unpause {
        /// The process.
        pid: u32,
        /// The error.
        source: kfd::Error,
    },
}

const NEED_PTRACE: &str = "run as the process's user with ptrace allowed \
     (kernel.yama.ptrace_scope 0 or 1 with CAP_SYS_PTRACE), or as root";
const NEED_CR: &str = "CRIU_OP needs CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN: run as root";

fn os(pid: u32, op: &'static str) -> impl FnOnce(io::Error) -> RecoverError {
    move |source| match source.raw_os_error() {
        Some(libc::ESRCH) => RecoverError::NoSuchProcess { pid },
        Some(libc::EPERM) | Some(libc::EACCES) => RecoverError::NotPermitted {
            pid,
            op,
            need: NEED_PTRACE,
            source,
        },
        _ if source.kind() == io::ErrorKind::NotFound => RecoverError::NoSuchProcess { pid },
        _ => RecoverError::Os { pid, op, source },
    }
}

/// Unpauses the GPU queues of process `pid` (see the module docs). Returns
/// what was found; `was_paused == false` is not an error.
pub fn unpause_process<D: Driver>(driver: &D, pid: u32) -> Result<Unpaused, RecoverError> {
    unpause(driver, pid, None)
}

/// [`unpause_process`] of the very process `pidfd` was opened for (the dump
/// guardian opens it while the process is paused): when that process has
/// exited, another process that holds its pid now is neither seized nor
/// unpaused, and the answer is [`RecoverError::NoSuchProcess`].
pub fn unpause_process_pinned<D: Driver>(
    driver: &D,
    pid: u32,
    pidfd: BorrowedFd<'_>,
) -> Result<Unpaused, RecoverError> {
    unpause(driver, pid, Some(pidfd))
}

/// An fd number no process has open: `pidfd_getfd` of it answers `EBADF`
/// for a live process, `ESRCH` once the pidfd's process has exited.
const NO_SUCH_FD: i32 = i32::MAX;

fn unpause<D: Driver>(
    driver: &D,
    pid: u32,
    pinned: Option<BorrowedFd<'_>>,
) -> Result<Unpaused, RecoverError> {
    if let Some(pidfd) = pinned {
        if let Err(e) = driver.pidfd_getfd(pidfd, NO_SUCH_FD) {
            if e.raw_os_error() == Some(libc::ESRCH) {
                return Err(RecoverError::NoSuchProcess { pid });
            }
        }
    }
    let status = driver
        .process_status(pid)
        .map_err(os(pid, "reading /proc/PID/status"))?;
    if let Some(tracer) = status.tracer {
        return Err(traced(driver, pid, tracer));
    }
    let frozen = driver.frozen_cgroup(pid).ok().flatten();
    if let Err(e) = driver.ptrace_seize(pid) {
        // Lost a race with a tracer that attached after the status read?
        if e.raw_os_error() == Some(libc::EPERM) {
            if let Ok(Some(tracer)) = driver.process_status(pid).map(|s| s.tracer) {
                return Err(traced(driver, pid, tracer));
            }
        }
        return Err(os(pid, "PTRACE_SEIZE")(e));
    }
    let stopped = driver.ptrace_interrupt(pid, STOP_TIMEOUT).is_ok();
    let result = unpause_seized(driver, pid, &status.name, pinned);
    let detach_deferred = !(stopped && driver.ptrace_detach(pid).is_ok());
    let (kfd_fd, was_paused) = result?;
    Ok(Unpaused {
        pid,
        kfd_fd,
        was_paused,
        frozen,
        detach_deferred,
    })
}

fn traced<D: Driver>(driver: &D, pid: u32, tracer: u32) -> RecoverError {
    let tracer_name = driver
        .process_status(tracer)
        .map(|s| s.name)
        .unwrap_or_else(|_| "?".to_owned());
    RecoverError::Traced {
        pid,
        tracer,
        tracer_name,
    }
}

/// With `pid` seized: finds its KFD fd and unpauses through it; through
/// `pinned` when given, so that only that process's file is ever used
/// (should it have exited since the check, `pidfd_getfd` answers `ESRCH`).
fn unpause_seized<D: Driver>(
    driver: &D,
    pid: u32,
    name: &str,
    pinned: Option<BorrowedFd<'_>>,
) -> Result<(i32, bool), RecoverError> {
    let devices = Devices::probe(driver)
        .map_err(os(pid, "stat /dev/kfd"))?
        .ok_or_else(|| RecoverError::NoKfd {
            pid,
            name: name.to_owned(),
        })?;
    let opened;
    let pidfd = match pinned {
        Some(pidfd) => pidfd,
        None => {
            opened = driver.pidfd_open(pid).map_err(os(pid, "pidfd_open"))?;
            opened.as_fd()
        }
    };
    let fds = driver
        .process_fds(pid)
        .map_err(os(pid, "reading /proc/PID/fd"))?;
    for target_fd in fds {
        let fd = match driver.pidfd_getfd(pidfd, target_fd) {
            Ok(fd) => fd,
            // Closed since the listing.
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => continue,
            Err(e) => return Err(os(pid, "pidfd_getfd")(e)),
        };
        if driver.fd_kind(fd.as_fd()).ok() != Some(FdKind::CharDevice(devices.kfd)) {
            continue;
        }
        // One kfd_process per mm: any of its KFD fds reaches it.
        return match Kfd::from_fd(driver, fd).unpause() {
            Ok(()) => Ok((target_fd, true)),
            Err(kfd::Error::Os { errno, .. }) if errno == libc::EINVAL => Ok((target_fd, false)),
            Err(kfd::Error::Os { errno, op }) if errno == libc::EACCES => {
                Err(RecoverError::NotPermitted {
                    pid,
                    op,
                    need: NEED_CR,
                    source: io::Error::from_raw_os_error(errno),
                })
            }
            Err(source) => Err(RecoverError::Unpause { pid, source }),
        };
    }
    Err(RecoverError::NoKfd {
        pid,
        name: name.to_owned(),
    })
}
