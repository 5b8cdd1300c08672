//! The host system calls the engine needs beyond `std`: moving an fd above
//! a floor (`fcntl(F_DUPFD_CLOEXEC)`, through rustix), and the few places
//! where this crate needs `unsafe` outside the handle table's memory
//! ([`crate::handles`]): creating hsakmt's named semaphore
//! (`sem_open`), and blocking signals in the calling thread while it
//! spawns another (`pthread_sigmask`).
//!
//! Small safe wrappers, each `unsafe` block with its proof; nothing else.
//! The rest of the crate denies `unsafe_code`. This module never decides
//! anything: which fd, which name, which signals are the caller's choice.

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{BorrowedFd, OwnedFd};

/// A close-on-exec duplicate of `fd` numbered `floor` or higher.
pub fn dup_at_least(fd: BorrowedFd<'_>, floor: i32) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, floor.max(0))?)
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

/// The calling thread's signal mask from before
/// [`block_signals_except`], put back when this is dropped. It stays on
/// the thread that made it (it is neither `Send` nor `Sync`).
#[must_use = "dropping it restores the signal mask at once"]
pub struct BlockedSignals {
    old: libc::sigset_t,
    /// A signal mask belongs to one thread.
    _thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for BlockedSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlockedSignals")
    }
}

/// `pthread_sigmask(SIG_BLOCK)` of every signal except `keep`, in the
/// calling thread only; threads it spawns meanwhile inherit the mask. The
/// old mask comes back when the returned value is dropped.
#[doc(alias = "pthread_sigmask")]
pub fn block_signals_except(keep: &[libc::c_int]) -> io::Result<BlockedSignals> {
    // SAFETY: sigset_t is plain data; sigfillset initialises it in place.
    let mut block: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `block` is a valid, writable sigset_t.
    unsafe { libc::sigfillset(&mut block) };
    for &signal in keep {
        // SAFETY: `block` is a valid, writable sigset_t; an invalid signal
        // number is reported, not undefined.
        if unsafe { libc::sigdelset(&mut block, signal) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: sigset_t is plain data; pthread_sigmask writes the old mask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both sets are valid for the call; this changes only the
    // calling thread's mask, which `BlockedSignals` (pinned to this thread)
    // restores.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(BlockedSignals {
        old,
        _thread: PhantomData,
    })
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: `old` is the mask pthread_sigmask read on this very thread
        // (the value cannot leave it); restoring it is always valid.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::fd::AsRawFd;

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

    /// The calling thread's current signal mask.
    fn current_mask() -> libc::sigset_t {
        // SAFETY: sigset_t is plain data; with a null new set
        // pthread_sigmask only writes the current mask into `mask`.
        unsafe {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            assert_eq!(
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask),
                0
            );
            mask
        }
    }

    fn blocks(mask: &libc::sigset_t, signal: libc::c_int) -> bool {
        // SAFETY: `mask` is a valid sigset_t; sigismember only reads it.
        unsafe { libc::sigismember(mask, signal) == 1 }
    }

    #[test]
    fn spawned_threads_inherit_the_blocked_mask_and_the_caller_gets_its_back() {
        std::thread::spawn(|| {
            assert!(!blocks(&current_mask(), libc::SIGCHLD));
            let blocked = block_signals_except(&[libc::SIGSEGV]).unwrap();
            let child = std::thread::spawn(|| {
                let mask = current_mask();
                (blocks(&mask, libc::SIGCHLD), blocks(&mask, libc::SIGSEGV))
            });
            drop(blocked);
            assert_eq!(child.join().unwrap(), (true, false));
            assert!(!blocks(&current_mask(), libc::SIGCHLD));
        })
        .join()
        .unwrap();
        assert!(block_signals_except(&[0x7fff]).is_err());
    }
}
