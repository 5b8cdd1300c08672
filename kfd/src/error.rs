//! The error type of this crate: which operation failed, and with which errno.
//!
//! Every failed system call becomes an [`Error`] that names the operation the
//! way the kernel interface does (`"CRIU_OP CHECKPOINT"`, `"AMDGPU_GEM_VA MAP"`)
//! and keeps the raw errno, so callers can map it to their own return
//! conventions (the CRIU plugin turns `ESRCH` from RESUME into "not a KFD
//! process"). This module never performs a system call itself.

use std::fmt;
use std::path::PathBuf;

/// A failure of this crate's API.
///
/// Every variant maps to an errno through [`Error::errno`], so callers that
/// speak errno (CRIU hooks) never lose information.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call (ioctl, mmap, lseek, ...) failed with `errno`.
    #[error("{op} failed: {}", Errno(*.errno))]
    Os {
        /// The operation, e.g. `"CRIU_OP CHECKPOINT"` or `"AMDGPU_GEM_VA MAP"`.
        op: &'static str,
        /// The raw `errno` value.
        errno: i32,
    },
    /// `open(2)` of a device path failed.
    #[error("open {} failed: {}", .path.display(), Errno(*.errno))]
    Open {
        /// The path that could not be opened.
        path: PathBuf,
        /// The raw `errno` value.
        errno: i32,
    },
    /// The caller's arguments were rejected before any system call was made.
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The operation that was asked for.
        op: &'static str,
        /// What was wrong, in words a user can act on.
        reason: String,
    },
    /// The kernel answered with something that contradicts its own contract
    /// (for example a count larger than the buffer it was given).
    #[error("{op}: unexpected answer from the kernel: {reason}")]
    Protocol {
        /// The operation whose answer was inconsistent.
        op: &'static str,
        /// What was inconsistent.
        reason: String,
    },
    /// The device lacks something this crate needs (a GPU family without
    /// a supported SDMA packet, a missing SDMA ring).
    #[error("{op}: {reason}")]
    Unsupported {
        /// The operation that needs it.
        op: &'static str,
        /// What is missing.
        reason: String,
    },
    /// A staging slot was used while a copy into or out of it may still run.
    #[error("{op}: staging slot {slot} is busy; wait for its fence first")]
    Busy {
        /// The operation that was asked for.
        op: &'static str,
        /// The staging slot index.
        slot: usize,
    },
}

impl Error {
    /// The errno that best describes this error: the kernel's own for
    /// [`Error::Os`] and [`Error::Open`], `EINVAL` for rejected arguments,
    /// `EPROTO` for inconsistent kernel answers, `ENODEV` for unsupported
    /// devices (deliberately not `EOPNOTSUPP`, which CRIU reads as "not
    /// mine") and `EBUSY` for busy slots.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Os { errno, .. } | Error::Open { errno, .. } => *errno,
            Error::InvalidArgument { .. } => libc::EINVAL,
            Error::Protocol { .. } => libc::EPROTO,
            Error::Unsupported { .. } => libc::ENODEV,
            Error::Busy { .. } => libc::EBUSY,
        }
    }

    /// The operation that failed (`"open"` for [`Error::Open`]).
    pub fn op(&self) -> &'static str {
        match self {
            Error::Os { op, .. }
            | Error::InvalidArgument { op, .. }
            | Error::Protocol { op, .. }
            | Error::Unsupported { op, .. }
            | Error::Busy { op, .. } => op,
            Error::Open { .. } => "open",
        }
    }

    /// An [`Error::Os`] from an `io::Error` returned by a [`crate::Driver`]
    /// method; errors without an OS code become `EIO`.
    pub(crate) fn from_io(op: &'static str, err: &std::io::Error) -> Self {
        Error::Os {
            op,
            errno: err.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            reason: reason.into(),
        }
    }

    pub(crate) fn protocol(op: &'static str, reason: impl Into<String>) -> Self {
        Error::Protocol {
            op,
            reason: reason.into(),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A kernel error number (`EINVAL`, `EBADF`, ...), as a system call (or the
/// simulated kernel) returns it.
///
/// Displays as `"<description> (<NAME>)"`, e.g. `"Invalid argument (EINVAL)"`,
/// and converts into [`std::io::Error`] with the same raw OS error. This is
/// the one errno type of the stack: the `kfd-sim` crate re-exports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno` (`EIO` if the C library reports
    /// none).
    pub fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    /// The symbolic name (`"EINVAL"`), if this errno is one the stack meets.
    pub fn name(self) -> Option<&'static str> {
        errno_name(self.0)
    }

    /// The errno called `name` (`"EINVAL"`, upper case), if it is one the
    /// stack meets: the inverse of [`Errno::name`].
    pub fn from_name(name: &str) -> Option<Errno> {
        ERRNO_NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(v, _)| Errno(*v))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let desc = describe(self.0);
        match errno_name(self.0) {
            Some(name) => write!(f, "{desc} ({name})"),
            None => write!(f, "{desc} (errno {})", self.0),
        }
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// The C library's description of `errno` (`strerror`).
fn describe(errno: i32) -> String {
    let mut buf = [0u8; 128];
    // SAFETY: `buf` is writable for its full length, which is the length we
    // pass; the XSI strerror_r writes a NUL-terminated string into it (or
    // fails without writing past it).
    let ret = unsafe { libc::strerror_r(errno, buf.as_mut_ptr().cast(), buf.len()) };
    if ret != 0 {
        return format!("Unknown error {errno}");
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// The errnos the stack meets, by name: the one table behind
/// [`Errno::name`] and [`Errno::from_name`] (and so behind the simulator's
/// fault specs). Linux aliases (`EWOULDBLOCK`, `EDEADLOCK`, `ENOTSUP`) are
/// left out so that every number has one name.
const ERRNO_NAMES: &[(i32, &str)] = {
    use libc::*;
    &[
        (EPERM, "EPERM"),
        (ENOENT, "ENOENT"),
        (ESRCH, "ESRCH"),
        (EINTR, "EINTR"),
        (EIO, "EIO"),
        (ENXIO, "ENXIO"),
        (E2BIG, "E2BIG"),
        (EBADF, "EBADF"),
        (EAGAIN, "EAGAIN"),
        (ENOMEM, "ENOMEM"),
        (EACCES, "EACCES"),
        (EFAULT, "EFAULT"),
        (EBUSY, "EBUSY"),
        (EEXIST, "EEXIST"),
        (ENODEV, "ENODEV"),
        (ENOTDIR, "ENOTDIR"),
        (EINVAL, "EINVAL"),
        (ENFILE, "ENFILE"),
        (EMFILE, "EMFILE"),
        (ENOTTY, "ENOTTY"),
        (EFBIG, "EFBIG"),
        (ENOSPC, "ENOSPC"),
        (ESPIPE, "ESPIPE"),
        (ERANGE, "ERANGE"),
        (EDEADLK, "EDEADLK"),
        (ENOSYS, "ENOSYS"),
        (ENODATA, "ENODATA"),
        (ETIME, "ETIME"),
        (EPROTO, "EPROTO"),
        (EOVERFLOW, "EOVERFLOW"),
        (EOPNOTSUPP, "EOPNOTSUPP"),
        (EADDRINUSE, "EADDRINUSE"),
        (ETIMEDOUT, "ETIMEDOUT"),
        (ECANCELED, "ECANCELED"),
        (EHWPOISON, "EHWPOISON"),
    ]
};

fn errno_name(errno: i32) -> Option<&'static str> {
    ERRNO_NAMES
        .iter()
        .find(|(v, _)| *v == errno)
        .map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_error_names_operation_description_and_errno() {
        let err = Error::Os {
            op: "CRIU_OP CHECKPOINT",
            errno: libc::EINVAL,
        };
        assert_eq!(
            err.to_string(),
            "CRIU_OP CHECKPOINT failed: Invalid argument (EINVAL)"
        );
        assert_eq!(err.errno(), libc::EINVAL);
        assert_eq!(err.op(), "CRIU_OP CHECKPOINT");
    }

    #[test]
    fn esrch_is_distinguishable() {
        let err = Error::Os {
            op: "CRIU_OP RESUME",
            errno: libc::ESRCH,
        };
        assert_eq!(err.errno(), libc::ESRCH);
        assert!(err.to_string().ends_with("(ESRCH)"), "{err}");
    }

    #[test]
    fn errno_names_round_trip_and_are_unique() {
        for (value, name) in ERRNO_NAMES {
            assert_eq!(Errno(*value).name(), Some(*name));
            assert_eq!(Errno::from_name(name), Some(Errno(*value)));
        }
        assert_eq!(Errno::from_name("EWHAT"), None);
        assert_eq!(Errno(4095).name(), None);
        let err: std::io::Error = Errno(libc::EBUSY).into();
        assert_eq!(err.raw_os_error(), Some(libc::EBUSY));
    }

    #[test]
    fn unknown_errno_keeps_the_number() {
        let text = Errno(4095).to_string();
        assert!(text.ends_with("(errno 4095)"), "{text}");
    }

    #[test]
    fn open_error_names_path() {
        let err = Error::Open {
            path: PathBuf::from("/dev/kfd"),
            errno: libc::ENOENT,
        };
        assert_eq!(
            err.to_string(),
            "open /dev/kfd failed: No such file or directory (ENOENT)"
        );
        assert_eq!(err.op(), "open");
    }

    #[test]
    fn non_os_errors_map_to_errnos() {
        assert_eq!(Error::invalid("x", "y").errno(), libc::EINVAL);
        assert_eq!(Error::protocol("x", "y").errno(), libc::EPROTO);
        let unsupported = Error::Unsupported {
            op: "SDMA copy format",
            reason: "GPU family 110".into(),
        };
        assert_eq!(unsupported.errno(), libc::ENODEV);
        assert_eq!(unsupported.op(), "SDMA copy format");
        assert_eq!(
            Error::Busy {
                op: "staging",
                slot: 1
            }
            .errno(),
            libc::EBUSY
        );
        assert_eq!(
            Error::invalid("AMDGPU_CS", "no IB").to_string(),
            "AMDGPU_CS: no IB"
        );
    }
}
