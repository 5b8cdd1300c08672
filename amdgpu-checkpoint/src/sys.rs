//! The host system calls the engine needs beyond `std`: moving an fd above
//! a floor (`fcntl(F_DUPFD_CLOEXEC)`, through rustix), and the few places
//! where this crate needs `unsafe` outside the handle table's memory
//! ([`crate::handles`]): creating hsakmt's named semaphore
//! (`sem_open`), blocking signals in the calling thread while it
//! spawns another (`pthread_sigmask`), telling two open files apart
//! (`kcmp`), giving a thread a filesystem context of its own
//! (`unshare(CLONE_FS)`), and the dump guardian's process (`pipe2`, the
//! double `fork` of `spawn_orphan`, `poll`).
//!
//! Small wrappers, each `unsafe` block with its proof; nothing else. The
//! rest of the crate denies `unsafe_code`. This module never decides
//! anything: which fd, which name, which signals are the caller's choice.
//!
//! Only [`thread_cpu_time`] is public (the benches count the engine's CPU
//! with it); the rest serves the engine alone, and `spawn_orphan`, whose
//! soundness rests on what its caller runs in the forked process, is an
//! `unsafe fn`:
//!
//! ```
//! let _used = amdgpu_checkpoint::sys::thread_cpu_time();
//! ```
//!
//! ```compile_fail
//! // Forking a multi-threaded process is not for safe code outside.
//! let _ = amdgpu_checkpoint::sys::spawn_orphan(&[], || 0);
//! ```

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> std::time::Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// A close-on-exec duplicate of `fd` numbered `floor` or higher.
pub(crate) fn dup_at_least(fd: BorrowedFd<'_>, floor: i32) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, floor.max(0))?)
}

/// `unshare(CLONE_FS)`: the calling thread gets its own copy of the root,
/// working directory and umask it shared with the other threads of its
/// process. The kernel lets a process join another mount namespace
/// (`setns(CLONE_NEWNS)`) only while no other thread shares its
/// filesystem context, so a helper thread that calls this leaves its
/// process free to do so.
pub(crate) fn unshare_fs() -> io::Result<()> {
    // SAFETY: unshare(2) with CLONE_FS alone takes no pointer and touches
    // no memory of this process; it replaces the calling thread's
    // fs_struct (root, cwd, umask) by a copy, which no Rust invariant
    // depends on (file descriptors stay shared).
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `sem_open(name, O_CREAT, 0666, 1)` then `sem_close`: makes sure the named
/// semaphore exists (an existing one is left as it is).
pub(crate) fn ensure_named_semaphore(name: &CStr) -> io::Result<()> {
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
pub(crate) struct BlockedSignals {
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
pub(crate) fn block_signals_except(keep: &[libc::c_int]) -> io::Result<BlockedSignals> {
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

/// Signals a thread of the plugin keeps: the synchronous ones, raised by
/// its own faults (blocking them is undefined); every other signal is
/// CRIU's, for CRIU's thread (`SIGCHLD` of a parasite, `SIGINT`).
pub const SYNCHRONOUS_SIGNALS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// `SIGCHLD` blocked in the calling thread until the returned value is
/// dropped.
fn block_sigchld() -> io::Result<BlockedSignals> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it in place.
    let mut block: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `block` is a valid, writable sigset_t; SIGCHLD is valid.
    unsafe {
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGCHLD);
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

/// Whether `a` and `b` are the same open file (one file description, as a
/// `dup`, a `pidfd_getfd` or an fd passed over a socket are):
/// `kcmp(getpid(), getpid(), KCMP_FILE, a, b)`. Device files opened twice
/// share their inode but not their description, which is what tells them
/// apart here. Errors where the kernel has no `kcmp` (`ENOSYS`) or a
/// seccomp filter refuses it.
#[doc(alias = "kcmp")]
pub(crate) fn same_open_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> io::Result<bool> {
    const KCMP_FILE: libc::c_long = 0;
    let me = libc::c_long::from(std::process::id() as i32);
    // SAFETY: kcmp(2) takes integers only (two pids, a type and two fd
    // numbers) and reads no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            me,
            me,
            KCMP_FILE,
            libc::c_long::from(a.as_raw_fd()),
            libc::c_long::from(b.as_raw_fd()),
        )
    };
    match ret {
        0 => Ok(true),
        r if r > 0 => Ok(false),
        _ => Err(io::Error::last_os_error()),
    }
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints, as pipe2(2) fills.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both fds are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Runs `body` in a new process that is not a child of the caller: a double
/// fork whose intermediate process exits at once and is reaped here before
/// this returns, so the caller never sees a child it did not make. The new
/// process starts its own session, has `/dev/null` as its standard streams
/// and every fd but `keep` closed, and exits with `body`'s status. Returns
/// its pid.
///
/// # Safety
///
/// `body` runs in the forked copy of a possibly multi-threaded process,
/// where only the forking thread exists: it must not take a lock another
/// thread of the caller could hold at the fork (stdio, `log`, the caller's
/// mutexes), which would never be released there; glibc leaves `malloc`
/// usable after fork. It must not rely on fds other than `keep` and the
/// standard streams (`/dev/null`), which are closed.
pub(crate) unsafe fn spawn_orphan(keep: &[RawFd], body: impl FnOnce() -> i32) -> io::Result<u32> {
    let (pid_r, pid_w) = pipe()?;
    // The intermediate process's exit must reach no SIGCHLD handler of the
    // host before it is reaped here: CRIU's (during a dump) reaps any child
    // and fails the dump on it. Blocked in this thread, the signal waits
    // until the reap below; the host's handler then finds no child. (CRIU
    // runs its own helpers the same way, `cr_system`.)
    let _sigchld = block_sigchld()?;
    // SAFETY: the intermediate child only calls async-signal-safe functions
    // (fork, write, _exit) before it exits; the grandchild runs `body`
    // under the caller's promise (this function's contract) and ends with
    // _exit, never returning into the caller's stack frames.
    let intermediate = unsafe { libc::fork() };
    if intermediate < 0 {
        return Err(io::Error::last_os_error());
    }
    if intermediate == 0 {
        // SAFETY: as above.
        let guardian = unsafe { libc::fork() };
        if guardian == 0 {
            orphan_main(keep, body);
        }
        let bytes = guardian.to_ne_bytes();
        // SAFETY: writes 4 bytes from a live local array; then _exit, which
        // runs no destructor or atexit handler of the caller.
        unsafe {
            libc::write(pid_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
            libc::_exit(if guardian > 0 { 0 } else { 1 });
        }
    }
    drop(pid_w);
    let mut status = 0;
    loop {
        // SAFETY: `status` is a writable int for the duration of the call.
        let ret = unsafe { libc::waitpid(intermediate, &mut status, 0) };
        if ret >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // ECHILD: the host reaped it first (CRIU's own waits); the pid
            // pipe still tells what happened.
            break;
        }
    }
    let mut bytes = [0u8; 4];
    let mut file = std::fs::File::from(pid_r);
    std::io::Read::read_exact(&mut file, &mut bytes)
        .map_err(|_| io::Error::other("the guardian's intermediate process died"))?;
    let pid = libc::pid_t::from_ne_bytes(bytes);
    if pid <= 0 {
        return Err(io::Error::other("fork of the guardian failed"));
    }
    Ok(pid as u32)
}

/// The orphan's side of [`spawn_orphan`]; never returns.
fn orphan_main(keep: &[RawFd], body: impl FnOnce() -> i32) -> ! {
    default_signals();
    // SAFETY: setsid takes no arguments; failure (already a leader) is
    // harmless.
    unsafe { libc::setsid() };
    // SAFETY: a NUL-terminated literal path.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
    if null >= 0 {
        for std_fd in 0..3 {
            // SAFETY: dup2 of an open fd onto a standard stream number.
            unsafe { libc::dup2(null, std_fd) };
        }
    }
    // Close every fd but the standard streams and `keep`: the caller's
    // pipes and sockets must see EOF when the caller closes them.
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|&fd| fd > 2).collect();
    keep.sort_unstable();
    // SAFETY: sysconf takes an integer and reads no memory of ours.
    let open_max = RawFd::try_from(unsafe { libc::sysconf(libc::_SC_OPEN_MAX) })
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(1 << 20);
    let mut first: RawFd = 3;
    for &fd in keep.iter().chain(std::iter::once(&RawFd::MAX)) {
        if fd > first {
            // SAFETY: close_range(2) takes integers; it closes fds of this
            // (forked) process only, none of which a Rust object here owns
            // past this point (the caller's objects are dead copies).
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_close_range,
                    first as libc::c_uint,
                    (fd - 1) as libc::c_uint,
                    0 as libc::c_uint,
                )
            };
            if ret < 0 {
                // Before Linux 5.9: one by one, up to the fd limit.
                for stale in first..fd.min(open_max) {
                    // SAFETY: as above; EBADF for numbers not open.
                    unsafe { libc::close(stale) };
                }
            }
        }
        first = fd.saturating_add(1);
    }
    let code = body();
    // SAFETY: ends this process without unwinding into the caller's frames
    // or running its atexit handlers.
    unsafe { libc::_exit(code) }
}

/// Every signal back to its default action and none blocked: the caller's
/// handlers are not the orphan's. Real CRIU's `SIGCHLD` handler, for one,
/// reaps any child that changes state and exits the process when it did
/// not expect the change, and the guardian's own `PTRACE_INTERRUPT` of the
/// paused process is such a change.
fn default_signals() {
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL installs no handler code; numbers the C library
        // keeps for itself answer EINVAL, which changes nothing.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `none` is a valid sigset_t to initialise and then read.
    unsafe {
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// `poll(2)` for readability of `fds`, forever (`EINTR` retried); returns
/// which are readable (or hung up).
pub(crate) fn poll_readable(fds: &[BorrowedFd<'_>]) -> io::Result<Vec<bool>> {
    let mut pollfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `pollfds` is a live array of `len` pollfd structs.
        let ret = unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, -1) };
        if ret >= 0 {
            break;
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
    Ok(pollfds.iter().map(|p| p.revents != 0).collect())
}

/// Whether `fd` is readable right now (`poll` with a zero timeout).
pub(crate) fn poll_ready_now(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut pollfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pollfd` is one live pollfd struct.
    let ret = unsafe { libc::poll(&mut pollfd, 1, 0) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pollfd.revents & libc::POLLIN != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::fd::AsRawFd;

    #[test]
    fn one_file_is_told_from_another_open_of_the_same_inode() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let dup = dup_at_least(file.as_fd(), 10).unwrap();
        let again = std::fs::File::open("/dev/null").unwrap();
        assert!(same_open_file(file.as_fd(), dup.as_fd()).unwrap());
        assert!(!same_open_file(file.as_fd(), again.as_fd()).unwrap());
    }

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

    /// Set by the dumper's handler in the test below (CRIU's would exit
    /// the process).
    static HANDLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    extern "C" fn dumper_handler(_: libc::c_int) {
        HANDLED.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// `signal`'s current handler in this process.
    fn handler_of(signal: libc::c_int) -> libc::sighandler_t {
        // SAFETY: sigaction is plain data; with a null new action sigaction
        // only writes the current one into `old`.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, std::ptr::null(), &mut old);
            old.sa_sigaction
        }
    }

    /// The dumper's side of the test below, in a forked child of the test
    /// process (its signal handling is changed there, not in the test
    /// harness): installs a SIGCHLD handler and blocks SIGUSR1, spawns the
    /// orphan and returns what the orphan reported (SIGCHLD at its default,
    /// the dumper's handler never run, SIGUSR1 not blocked) and what the
    /// caller kept (its handler, SIGUSR1 blocked).
    fn dumper_side() -> Vec<u8> {
        // SAFETY: sigaction and sigset_t are plain data; the handler only
        // stores a flag; this process is the test's own forked child.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = dumper_handler as *const () as usize;
            libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut());
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
        }
        let blocked_before = blocks(&current_mask(), libc::SIGUSR1);
        let Ok((report_r, report_w)) = pipe() else {
            return vec![9];
        };
        let keep = [report_w.as_raw_fd()];
        let body = move || {
            HANDLED.store(false, std::sync::atomic::Ordering::SeqCst);
            // A child of its own that exits: the dumper's handler
            // would run.
            // SAFETY: fork in a single-threaded orphan; the child
            // _exits at once.
            let child = unsafe { libc::fork() };
            if child == 0 {
                // SAFETY: ends the child without running anything of ours.
                unsafe { libc::_exit(0) };
            }
            let mut status = 0;
            // SAFETY: `status` is a writable int.
            unsafe { libc::waitpid(child, &mut status, 0) };
            let report = [
                u8::from(handler_of(libc::SIGCHLD) == libc::SIG_DFL),
                u8::from(HANDLED.load(std::sync::atomic::Ordering::SeqCst)),
                u8::from(blocks(&current_mask(), libc::SIGUSR1)),
            ];
            // SAFETY: writes 3 bytes from a live array to the kept pipe.
            let n = unsafe { libc::write(report_w.as_raw_fd(), report.as_ptr().cast(), 3) };
            i32::from(n != 3)
        };
        // SAFETY: the body calls fork, waitpid, sigaction, pthread_sigmask
        // and write only, and takes no lock.
        let spawned = unsafe { spawn_orphan(&keep, body) };
        if spawned.is_err() {
            return vec![8];
        }
        // The orphan's copy of the write end is its own; ours closed with
        // the closure, so the read ends at its exit.
        let mut report = Vec::new();
        if std::io::Read::read_to_end(&mut std::fs::File::from(report_r), &mut report).is_err() {
            return vec![7];
        }
        report.push(u8::from(blocked_before));
        report.push(u8::from(
            handler_of(libc::SIGCHLD) == dumper_handler as *const () as usize,
        ));
        report.push(u8::from(blocks(&current_mask(), libc::SIGUSR1)));
        report
    }

    #[test]
    fn the_orphan_starts_with_default_signal_handling() {
        // Real CRIU's SIGCHLD handler reaps any child that changes state and
        // exits at a change it did not expect, and the guardian's own
        // PTRACE_INTERRUPT of the paused process is one (the real-CRIU
        // guardian test in kfd-sim-preload found it: the guardian died
        // before it could unpause).
        let (r, w) = pipe().unwrap();
        // SAFETY: the child runs `dumper_side` (pipe, sigaction, the double
        // fork, a read; glibc's malloc works after fork) and ends with
        // _exit, never returning into the test harness.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            drop(r);
            let report = std::panic::catch_unwind(dumper_side).unwrap_or_else(|_| vec![6]);
            // SAFETY: writes the report from a live buffer, then ends the
            // child.
            unsafe {
                libc::write(w.as_raw_fd(), report.as_ptr().cast(), report.len());
                libc::_exit(0);
            }
        }
        drop(w);
        let mut report = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut report).unwrap();
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert_eq!(
            report.len(),
            6,
            "the dumper's side failed early: {report:?}"
        );
        assert_eq!(report[3], 1, "the dumper blocked SIGUSR1");
        assert_eq!(
            report[..3],
            [1, 0, 0],
            "in the orphan: SIGCHLD at its default action, the dumper's handler never run, SIGUSR1 not blocked"
        );
        // The caller's own handling is untouched.
        assert_eq!(report[4], 1, "the dumper's SIGCHLD handler stays");
        assert_eq!(report[5], 1, "SIGUSR1 stays blocked in the dumper");
    }
}
