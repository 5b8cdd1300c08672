//! The guardian's process ([`amdgpu_checkpoint::sys::spawn_orphan`])
//! starts with every signal at its default action and none blocked,
//! whatever the dumper installed: real CRIU's `SIGCHLD` handler reaps any
//! child that changes state and exits at a change it did not expect, and
//! the guardian's own `PTRACE_INTERRUPT` of the paused process is one (the
//! real-CRIU guardian test in kfd-sim-preload found it: the guardian died
//! before it could unpause). Its own test binary: it changes the process's
//! signal handling.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use amdgpu_checkpoint::sys::spawn_orphan;

/// Set by the dumper's handler (CRIU's would exit the process).
static HANDLED: AtomicBool = AtomicBool::new(false);

extern "C" fn dumper_handler(_: libc::c_int) {
    HANDLED.store(true, Ordering::SeqCst);
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: pipe2 returned two new descriptors we own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// `signal`'s current handler in this process.
fn handler_of(signal: libc::c_int) -> libc::sighandler_t {
    // SAFETY: sigaction is plain data; with a null new action sigaction
    // only writes the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(signal, std::ptr::null(), &mut old), 0);
        old.sa_sigaction
    }
}

/// Whether this thread blocks `signal`.
fn blocked(signal: libc::c_int) -> bool {
    // SAFETY: sigset_t is plain data; with a null new set pthread_sigmask
    // only writes the current mask, which sigismember then reads.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask),
            0
        );
        libc::sigismember(&mask, signal) == 1
    }
}

#[test]
fn the_orphan_starts_with_default_signal_handling() {
    // The dumper's: a SIGCHLD handler of its own, SIGUSR1 blocked.
    // SAFETY: sigaction is plain data; the handler only stores a flag.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = dumper_handler as *const () as usize;
        assert_eq!(
            libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()),
            0
        );
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        libc::sigaddset(&mut mask, libc::SIGUSR1);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()),
            0
        );
    }
    assert!(blocked(libc::SIGUSR1));
    let (report_r, report_w) = pipe();
    let keep = [report_w.as_raw_fd()];
    spawn_orphan(&keep, move || {
        HANDLED.store(false, Ordering::SeqCst);
        // A child of its own that exits: the dumper's handler would run.
        // SAFETY: fork in a single-threaded orphan; the child _exits at
        // once.
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
            u8::from(HANDLED.load(Ordering::SeqCst)),
            u8::from(blocked(libc::SIGUSR1)),
        ];
        // SAFETY: writes 3 bytes from a live array to the kept pipe.
        let n = unsafe { libc::write(report_w.as_raw_fd(), report.as_ptr().cast(), 3) };
        i32::from(n != 3)
    })
    .expect("spawn the orphan");
    // The orphan's copy of the write end is its own; ours closes here so
    // the read ends at its exit.
    let mut report = Vec::new();
    std::fs::File::from(report_r)
        .read_to_end(&mut report)
        .expect("read the orphan's report");
    assert_eq!(
        report,
        [1, 0, 0],
        "in the orphan: SIGCHLD at its default action, the dumper's handler never run, SIGUSR1 not blocked"
    );
    // The caller's own handling is untouched.
    assert_eq!(
        handler_of(libc::SIGCHLD),
        dumper_handler as *const () as usize
    );
    assert!(blocked(libc::SIGUSR1));
}
