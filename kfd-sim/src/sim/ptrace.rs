//! Process control as the kernel does it, for one simulated caller:
//! `PTRACE_SEIZE`/`INTERRUPT`/`DETACH`, `pidfd_open`, `pidfd_getfd`,
//! the pids `/proc` lists, `/proc/PID/status` and `/proc/PID/fd`, and the
//! cgroup freezer.
//!
//! The rules (kernel/ptrace.c, kernel/pid.c):
//! * SEIZE: `ESRCH` for no such process; `EPERM` for the caller itself, a
//!   process traced already, or one the caller may not trace.
//! * INTERRUPT and DETACH: `ESRCH` unless the caller is the tracer; DETACH
//!   also needs the tracee in a ptrace stop. A process in a cgroup v1
//!   freezer cannot stop (`ETIMEDOUT` after the wait).
//! * A tracer's exit detaches its tracees (`Sim::exit_process`).
//! * A pidfd names the process it was opened for, not its pid number: once
//!   that process has exited, another holding the same pid is not reached
//!   through it.
//! * `pidfd_getfd`: `ESRCH` when the process has exited, `EPERM` without
//!   ptrace access, `EBADF` when the fd is not open in the target. The fd
//!   returned is a duplicate of the same open file, so the KFD file keeps
//!   its owner and only the ptrace-parent rule lets a CRIU op through.
//!
//! Simulated processes share the host's fd table; the simulator knows a
//! process's fds as the ones it opened for it ([`SimDriver`]'s `open`).
//! This module never touches a real process.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use kfd::{FrozenCgroup, ProcessStatus};

use crate::hw::bo::memfd_create;
use crate::kernel::SimError;
use ::kfd::Errno;

use super::{Sim, SimDriver};
use crate::kernel::{FileKey, Pid, Process, State};

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

impl SimDriver {
    fn target(st: &State, pid: u32) -> io::Result<&Process> {
        st.processes
            .get(&Pid(pid))
            .ok_or_else(|| errno(libc::ESRCH))
    }

    pub(crate) fn sim_pidfd_open(&self, pid: u32) -> io::Result<OwnedFd> {
        let mut st = self.sim.lock();
        self.alive_io(&st)?;
        let instance = Self::target(&st, pid)?.instance;
        let fd = memfd_create("kfd-sim-pidfd", true)?;
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        st.pidfds.insert(key, (Pid(pid), instance));
        Ok(fd)
    }

    pub(crate) fn sim_pidfd_getfd(
        &self,
        pidfd: BorrowedFd<'_>,
        target_fd: RawFd,
    ) -> io::Result<OwnedFd> {
        let key = FileKey::of_raw(pidfd.as_raw_fd())?;
        let st = self.sim.lock();
        self.alive_io(&st)?;
        let (pid, instance) = *st.pidfds.get(&key).ok_or_else(|| errno(libc::EBADF))?;
        let target = Self::target(&st, pid.0)?;
        // The process the pidfd was opened for exited; another holds its
        // pid now.
        if target.instance != instance {
            return Err(errno(libc::ESRCH));
        }
        if pid != self.pid && !target.ptrace_allowed && target.ptrace_parent != Some(self.pid) {
            return Err(errno(libc::EPERM));
        }
        let file = *target
            .fds
            .get(&target_fd)
            .ok_or_else(|| errno(libc::EBADF))?;
        // The fd number may have been closed (and reused) since.
        if FileKey::of_raw(target_fd).ok() != Some(file) {
            return Err(errno(libc::EBADF));
        }
        // SAFETY: F_DUPFD_CLOEXEC reads no memory; `target_fd` was just
        // checked to be open.
        let fd = unsafe { libc::fcntl(target_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fcntl succeeded: `fd` is a new descriptor we own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    pub(crate) fn sim_ptrace_seize(&self, pid: u32) -> io::Result<()> {
        let mut st = self.sim.lock();
        self.alive_io(&st)?;
        let me = self.pid;
        let target = st
            .processes
            .get_mut(&Pid(pid))
            .ok_or_else(|| errno(libc::ESRCH))?;
        if Pid(pid) == me || target.ptrace_parent.is_some() || !target.ptrace_allowed {
            return Err(errno(libc::EPERM));
        }
        target.ptrace_parent = Some(me);
        Ok(())
    }

    pub(crate) fn sim_ptrace_interrupt(&self, pid: u32, timeout: Duration) -> io::Result<()> {
        let mut st = self.sim.lock();
        self.alive_io(&st)?;
        let me = self.pid;
        let target = st
            .processes
            .get_mut(&Pid(pid))
            .ok_or_else(|| errno(libc::ESRCH))?;
        if target.ptrace_parent != Some(me) {
            return Err(errno(libc::ESRCH));
        }
        if matches!(target.frozen, Some(FrozenCgroup::V1 { .. })) {
            // The v1 freezer holds the task where no trap is taken; the
            // waiter gives up after its timeout.
            drop(st);
            std::thread::sleep(timeout);
            return Err(errno(libc::ETIMEDOUT));
        }
        target.ptrace_stopped = true;
        Ok(())
    }

    pub(crate) fn sim_ptrace_detach(&self, pid: u32) -> io::Result<()> {
        let mut st = self.sim.lock();
        self.alive_io(&st)?;
        let me = self.pid;
        let target = st
            .processes
            .get_mut(&Pid(pid))
            .ok_or_else(|| errno(libc::ESRCH))?;
        if target.ptrace_parent != Some(me) || !target.ptrace_stopped {
            return Err(errno(libc::ESRCH));
        }
        target.ptrace_parent = None;
        target.ptrace_stopped = false;
        Ok(())
    }

    pub(crate) fn sim_process_status(&self, pid: u32) -> io::Result<ProcessStatus> {
        let st = self.sim.lock();
        let target = Self::target(&st, pid).map_err(|_| not_found(pid))?;
        Ok(ProcessStatus {
            name: target.comm.clone(),
            tracer: target.ptrace_parent.map(|p| p.0),
            // A host client's own pid namespace (a container's), as its
            // host reports it.
            ns_pid: target.ns_pid,
        })
    }

    /// The pids of the live processes, as `/proc` lists them.
    pub(crate) fn sim_pids(&self) -> Vec<String> {
        let st = self.sim.lock();
        st.processes.keys().map(|pid| pid.0.to_string()).collect()
    }

    pub(crate) fn sim_process_fds(&self, pid: u32) -> io::Result<Vec<RawFd>> {
        let st = self.sim.lock();
        let target = Self::target(&st, pid).map_err(|_| not_found(pid))?;
        Ok(target
            .fds
            .iter()
            .filter(|(&fd, &key)| FileKey::of_raw(fd).ok() == Some(key))
            .map(|(&fd, _)| fd)
            .collect())
    }

    pub(crate) fn sim_frozen_cgroup(&self, pid: u32) -> io::Result<Option<FrozenCgroup>> {
        let st = self.sim.lock();
        let target = Self::target(&st, pid).map_err(|_| not_found(pid))?;
        Ok(target.frozen.clone())
    }

    fn alive_io(&self, st: &State) -> io::Result<()> {
        if st.processes.contains_key(&self.pid) {
            Ok(())
        } else {
            Err(Errno(libc::ESRCH).into())
        }
    }
}

fn not_found(pid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("/proc/{pid}: no such process"),
    )
}

impl Sim {
    /// Sets the name `/proc/PID/status` reports for `pid`.
    pub fn set_process_name(&self, pid: Pid, name: &str) -> Result<(), SimError> {
        let mut st = self.lock();
        let p = st
            .processes
            .get_mut(&pid)
            .ok_or(SimError::NoSuchProcess(pid))?;
        p.comm = name.to_owned();
        Ok(())
    }

    /// Allows or forbids other processes to ptrace `pid` (other credentials,
    /// Yama's `ptrace_scope`): forbidden, `PTRACE_SEIZE` and `pidfd_getfd`
    /// answer `EPERM`.
    pub fn set_ptrace_allowed(&self, pid: Pid, allowed: bool) -> Result<(), SimError> {
        let mut st = self.lock();
        let p = st
            .processes
            .get_mut(&pid)
            .ok_or(SimError::NoSuchProcess(pid))?;
        p.ptrace_allowed = allowed;
        Ok(())
    }

    /// Puts `pid` in a frozen cgroup (or takes it out with `None`).
    pub fn set_frozen_cgroup(
        &self,
        pid: Pid,
        frozen: Option<FrozenCgroup>,
    ) -> Result<(), SimError> {
        let mut st = self.lock();
        let p = st
            .processes
            .get_mut(&pid)
            .ok_or(SimError::NoSuchProcess(pid))?;
        p.frozen = frozen;
        Ok(())
    }

    /// The tracer of `pid` (`None` when untraced or gone).
    pub fn tracer_of(&self, pid: Pid) -> Option<Pid> {
        self.lock()
            .processes
            .get(&pid)
            .and_then(|p| p.ptrace_parent)
    }
}
