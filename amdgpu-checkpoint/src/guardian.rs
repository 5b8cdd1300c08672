//! The dump guardian: a small process that unpauses a dumped process if the
//! dumper (CRIU) dies between `PROCESS_INFO` and `UNPAUSE`.
//!
//! [`Guardian::arm`] is called right after a process was paused. It starts
//! a process outside the dumper's process tree (a double fork whose
//! intermediate is reaped at once, a new session, `/dev/null` for its
//! standard streams, every other inherited fd closed so the dumper's pipes
//! and sockets behave as before) that waits on a pidfd of the dumper and on
//! a pipe from it:
//!
//! * the dump ends (the [`Guardian`] is dropped, after `UNPAUSE` or a
//!   failure the engine handled): a byte on the pipe, the guardian exits
//!   without a trace;
//! * the dumper dies first: its death detached the paused process, so the
//!   guardian seizes it, takes its KFD fd and issues `UNPAUSE` exactly as
//!   `amdgpu-criu unpause` does ([`crate::recover`]), and appends what it
//!   did to `amdgpu-guardian-<pid>.log` in the dump log's directory.
//!
//! It never acts while the dumper lives, never thaws a frozen cgroup (the
//! log says how) and never writes anything when the dump ends normally.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use kfd::{Driver, HostDriver};

use crate::recover::{unpause_process, RecoverError};
use crate::sys;

/// The file name the guardian of process `pid` logs to.
pub fn log_name(pid: u32) -> String {
    format!("amdgpu-guardian-{pid}.log")
}

/// How long the guardian waits for the dead dumper's tracee to be released
/// (the kernel detaches it as the dumper exits; its threads may lag).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// An armed guardian. Dropping it tells the guardian the dump ended.
#[derive(Debug)]
pub struct Guardian {
    done: Option<OwnedFd>,
    pid: u32,
    target: u32,
}

/// Why a guardian could not start (the dump goes on; recovery after a
/// dumper's death is then manual).
#[derive(Debug, thiserror::Error)]
#[error("cannot start the dump guardian for pid {target} ({step}: {source}); if this dump is killed, run `amdgpu-criu unpause --pid {target}`")]
pub struct GuardianError {
    /// The paused process.
    pub target: u32,
    /// The failed step.
    pub step: &'static str,
    /// The system's answer.
    pub source: io::Error,
}

impl Guardian {
    /// Starts the guardian of paused process `target`, watching the calling
    /// process; it logs to `log_dir` if it ever acts.
    pub fn arm(target: u32, log_dir: &Path) -> Result<Guardian, GuardianError> {
        let fail = |step| {
            move |source| GuardianError {
                target,
                step,
                source,
            }
        };
        let dumper = std::process::id();
        let dumper_fd = HostDriver
            .pidfd_open(dumper)
            .map_err(fail("pidfd_open of the dumper"))?;
        let (done_r, done_w) = sys::pipe().map_err(fail("pipe"))?;
        let log = log_dir.join(log_name(target));
        let keep = [dumper_fd.as_raw_fd(), done_r.as_raw_fd()];
        let pid = sys::spawn_orphan(&keep, move || {
            watch(dumper, dumper_fd, done_r, target, &log)
        })
        .map_err(fail("fork"))?;
        Ok(Guardian {
            done: Some(done_w),
            pid,
            target,
        })
    }

    /// The guardian process's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process it guards.
    pub fn target(&self) -> u32 {
        self.target
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        if let Some(fd) = self.done.take() {
            // A full pipe or a dead guardian: nothing more to tell it.
            let _ = std::fs::File::from(fd).write_all(b"d");
        }
    }
}

/// The guardian process's body: returns its exit status.
fn watch(dumper: u32, dumper_fd: OwnedFd, done: OwnedFd, target: u32, log: &Path) -> i32 {
    let mut done = std::fs::File::from(done);
    let mut pipe_open = true;
    loop {
        let ready = if pipe_open {
            sys::poll_readable(&[dumper_fd.as_fd(), done.as_fd()])
        } else {
            sys::poll_readable(&[dumper_fd.as_fd()])
        };
        let Ok(ready) = ready else { return 2 };
        if pipe_open && ready[1] {
            let mut byte = [0u8; 1];
            match done.read(&mut byte) {
                Ok(1) => return 0,
                // The dumper closed the pipe without a word (it cannot
                // have exec'd: the pipe is close-on-exec); the pidfd
                // decides.
                _ => pipe_open = false,
            }
        }
        if ready[0] {
            break;
        }
    }
    // The dumper is gone. Did it end the dump just before?
    if pipe_open && nonblocking_byte(&done) {
        return 0;
    }
    recover(dumper, target, log)
}

fn nonblocking_byte(done: &std::fs::File) -> bool {
    matches!(sys::poll_ready_now(done.as_fd()), Ok(true))
        && matches!((&*done).read(&mut [0u8; 1]), Ok(1))
}

fn recover(dumper: u32, target: u32, log: &Path) -> i32 {
    let started = Instant::now();
    let result = loop {
        match unpause_process(&HostDriver, target) {
            // The kernel is still detaching the dead dumper's tracees.
            Err(RecoverError::Traced { tracer, .. })
                if tracer == dumper && started.elapsed() < RELEASE_WAIT =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => break other,
        }
    };
    let mut text = format!(
        "amdgpu guardian: the dumper (pid {dumper}) ended before the dump of pid {target} finished\n"
    );
    let code = match &result {
        Ok(done) => {
            if done.was_paused {
                text += &format!("amdgpu guardian: pid {target}: GPU queues unpaused\n");
            } else {
                text += &format!("amdgpu guardian: pid {target}: GPU queues were not paused\n");
            }
            if let Some(frozen) = &done.frozen {
                text += &format!(
                    "amdgpu guardian: pid {target} is still frozen in {frozen}; thaw it with: {}\n",
                    frozen.thaw_command()
                );
            }
            0
        }
        Err(e) => {
            text += &format!(
                "amdgpu guardian: pid {target}: {e}; recover it with `amdgpu-criu unpause --pid {target}`\n"
            );
            1
        }
    };
    let _ = append(log, &text);
    code
}

fn append(log: &Path, text: &str) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?
        .write_all(text.as_bytes())
}

/// The pid, in this process's pid namespace, of the paused process: a process this one traces (CRIU seized the tree) whose pid in
/// its own namespace (`NSpid`'s last field) is `kfd_pid`, the pid
/// `PROCESS_INFO` reports. `None` when no such process is found (then
/// nothing can be guarded).
pub fn locate_target(kfd_pid: u32) -> Option<u32> {
    let me = std::process::id();
    let traced_by_me = |pid: u32| -> Option<bool> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .map(str::to_owned)
        };
        let tracer: u32 = field("TracerPid:")?.parse().ok()?;
        let inner: u32 = match field("NSpid:") {
            Some(ns) => ns.split_whitespace().last()?.parse().ok()?,
            None => pid,
        };
        Some(tracer == me && inner == kfd_pid)
    };
    // The common case: one pid namespace.
    if traced_by_me(kfd_pid) == Some(true) {
        return Some(kfd_pid);
    }
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| traced_by_me(pid) == Some(true))
}
