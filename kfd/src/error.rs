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

/// Formats an errno as `"<description> (<NAME>)"`, e.g.
/// `"Invalid argument (EINVAL)"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The symbolic name (`"EINVAL"`), if this errno is one the stack meets.
    pub fn name(self) -> Option<&'static str> {
        errno_name(self.0)
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

fn errno_name(errno: i32) -> Option<&'static str> {
    use libc::*;
    let name = match errno {
        EPERM => "EPERM",
        ENOENT => "ENOENT",
        ESRCH => "ESRCH",
        EINTR => "EINTR",
        EIO => "EIO",
        ENXIO => "ENXIO",
        E2BIG => "E2BIG",
        EBADF => "EBADF",
        EAGAIN => "EAGAIN",
        ENOMEM => "ENOMEM",
        EACCES => "EACCES",
        EFAULT => "EFAULT",
        EBUSY => "EBUSY",
        EEXIST => "EEXIST",
        ENODEV => "ENODEV",
        ENOTDIR => "ENOTDIR",
        EINVAL => "EINVAL",
        ENFILE => "ENFILE",
        EMFILE => "EMFILE",
        ENOTTY => "ENOTTY",
        EFBIG => "EFBIG",
        ENOSPC => "ENOSPC",
        ESPIPE => "ESPIPE",
        ERANGE => "ERANGE",
        EDEADLK => "EDEADLK",
        ENOSYS => "ENOSYS",
        ENODATA => "ENODATA",
        ETIME => "ETIME",
        EPROTO => "EPROTO",
        EOVERFLOW => "EOVERFLOW",
        EOPNOTSUPP => "EOPNOTSUPP",
        EADDRINUSE => "EADDRINUSE",
        ETIMEDOUT => "ETIMEDOUT",
        ECANCELED => "ECANCELED",
        EHWPOISON => "EHWPOISON",
        _ => return None,
    };
    Some(name)
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
