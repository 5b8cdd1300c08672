//! The two host system calls the plugin core needs that `std` lacks: moving
//! an fd above a floor (`fcntl(F_DUPFD_CLOEXEC)`) and creating hsakmt's
//! named semaphore (`sem_open`).
//!
//! Small safe wrappers, each `unsafe` block with its proof; nothing else.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A close-on-exec duplicate of `fd` numbered `floor` or higher.
pub fn dup_at_least(fd: BorrowedFd<'_>, floor: i32) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes an int argument and touches no memory;
    // `fd` is open for the duration of the borrow.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, floor.max(0)) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl succeeded, so `new` is a fresh descriptor owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// `sem_open(name, O_CREAT, 0666, 1)` then `sem_close`: makes sure the named
/// semaphore exists (an existing one is left as it is).
pub fn ensure_named_semaphore(name: &CStr) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated; with O_CREAT sem_open reads exactly
    // two variadic arguments, a mode_t and an unsigned int, passed here with
    // the C default argument promotions (both as unsigned int).
    let sem = unsafe {
        libc::sem_open(
            name.as_ptr(),
            libc::O_CREAT,
            0o666 as libc::c_uint,
            1 as libc::c_uint,
        )
    };
    if sem == libc::SEM_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sem` was returned by a successful sem_open and is closed once.
    unsafe { libc::sem_close(sem) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn duplicates_land_at_or_above_the_floor() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let dup = dup_at_least(file.as_fd(), 200).unwrap();
        assert!(dup.as_raw_fd() >= 200);
        use std::os::unix::fs::MetadataExt;
        let original = file.metadata().unwrap();
        let copy = std::fs::File::from(dup).metadata().unwrap();
        assert_eq!((original.dev(), original.ino()), (copy.dev(), copy.ino()));
    }
}
