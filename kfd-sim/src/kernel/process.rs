//! Simulated processes ([`Process`]) and the host memory the simulator
//! owns for them ([`HostRegion`], an [`AnonymousMapping`] each), with the
//! snapshot CRIU's pages dump would take ([`HostMemorySnapshot`]).
//!
//! This module never maps memory except through [`AnonymousMapping`] and
//! never replaces an existing mapping; an exited process's memory is
//! retired, not unmapped ([`retired`](super::retired)).

use std::io;

use kfd::{AnonymousMapping, AnonymousOptions, Sharing};

use crate::amdkfd::process::KfdProcess;
use ::kfd::Errno;

use super::Pid;

/// A simulated process.
#[derive(Debug)]
pub(crate) struct Process {
    /// Which process this is among all that ever held its pid (the
    /// kernel's `struct pid`): a pidfd names it, not the pid number.
    pub(crate) instance: u64,
    pub(crate) capable: bool,
    pub(crate) ptrace_parent: Option<Pid>,
    /// GPU indices the device cgroup allows, in topology order.
    pub(crate) visible: Vec<usize>,
    /// Its own `/dev/dri` (a container's), see `ProcessConfig::dev_dri`.
    pub(crate) dev_dri: Option<Vec<super::DevDriNode>>,
    /// The KFD process, created by the first open of `/dev/kfd`.
    pub(crate) kfd: Option<KfdProcess>,
    /// Its name (`/proc/PID/status` `Name:`).
    pub(crate) comm: String,
    /// Whether it sits in a ptrace stop its tracer asked for.
    pub(crate) ptrace_stopped: bool,
    /// Whether other processes may ptrace it (same credentials and no
    /// Yama restriction); when false, `PTRACE_SEIZE` and `pidfd_getfd`
    /// answer `EPERM`.
    pub(crate) ptrace_allowed: bool,
    /// The fds the simulator opened for it (device files), by number, with
    /// the open file each referred to.
    pub(crate) fds: std::collections::BTreeMap<std::os::fd::RawFd, super::FileKey>,
    /// The cgroup freezer holding it, if any.
    pub(crate) frozen: Option<kfd::FrozenCgroup>,
    /// Whether it stands for the host process of the same pid (a client
    /// of [`crate::remote::Server::serve_host_processes`]): its ptrace
    /// parent is then the one the host kernel reports, since the host
    /// really traces it (CRIU's seize of a real process).
    pub(crate) host: bool,
    /// Its pid in its own (innermost) pid namespace, when that is not the
    /// simulator's pid (a host process in a container: `NSpid:`'s last
    /// field); what `PROCESS_INFO` reports and `/proc/PID/status` shows.
    pub(crate) ns_pid: Option<u32>,
    /// Its user addresses are real CPU mappings of a host process (a host
    /// process, or `ProcessConfig::host_address_space`): the kernel's
    /// checks of CPU mappings apply (`super::address_space`).
    pub(crate) real_mm: bool,
}

impl Process {
    /// Whether `tracer` is its ptrace parent (`ptrace_parent()` of its lead
    /// thread in the kernel). For a host process the kernel's tracer is a
    /// thread: it must be the calling thread ([`on_caller_thread`]; the
    /// caller's main thread when none is set).
    pub(crate) fn traced_by(&self, pid: Pid, tracer: Pid) -> bool {
        if self.host {
            let thread = CALLER_THREAD.with(std::cell::Cell::get).unwrap_or(tracer.0);
            return host_tracer(pid) == Some(Pid(thread));
        }
        self.ptrace_parent == Some(tracer)
    }
}

thread_local! {
    /// The host thread (tid) making the call being served, when the caller
    /// is a host process.
    static CALLER_THREAD: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` as a call of host thread `tid` (`current` in the kernel).
pub(crate) fn on_caller_thread<R>(tid: u32, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<u32>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLER_THREAD.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CALLER_THREAD.with(|c| c.replace(Some(tid))));
    f()
}

/// The host kernel's tracer of host process `pid`, a thread (`TracerPid`
/// of `/proc/PID/status`; `None` when untraced or gone).
pub(crate) fn host_tracer(pid: Pid) -> Option<Pid> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.0)).ok()?;
    let tracer: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()?;
    (tracer != 0).then_some(Pid(tracer))
}

/// A CPU mapping made through [`Driver::mmap`].
#[derive(Debug, Clone)]
pub(crate) struct CpuMapping {
    pub(crate) len: usize,
}

/// Anonymous host memory owned by the simulator: the simulated
/// applications' CPU memory that USERPTR BOs point at. Unmapped when the
/// simulator is dropped, or when its owner process exits.
#[derive(Debug)]
pub(crate) struct HostRegion {
    map: AnonymousMapping,
    /// The process whose memory this is (`None`: the simulator's, kept
    /// until the simulator is dropped).
    pub(crate) owner: Option<Pid>,
}

/// One region of a process's host memory with its contents, as CRIU's
/// pages dump captures it (see [`Sim::host_memory_of`](crate::Sim::host_memory_of)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMemorySnapshot {
    /// Address of the first byte (page aligned).
    pub addr: u64,
    /// The contents (a whole number of pages).
    pub bytes: Vec<u8>,
}

impl HostRegion {
    pub(crate) fn new(len: usize, owner: Option<Pid>) -> Result<HostRegion, Errno> {
        let map = AnonymousMapping::private(len).map_err(|e| io_errno(&e))?;
        Ok(HostRegion { map, owner })
    }

    /// Maps `len` bytes at exactly `addr` (page aligned, `len` a whole
    /// number of pages); `EEXIST` when anything in the host process is
    /// mapped there already. A range an exited process's memory left
    /// reserved ([`retired`](super::retired)) is taken back.
    pub(crate) fn new_at(addr: usize, len: usize, owner: Pid) -> Result<HostRegion, Errno> {
        if let Some(map) = super::retired::take(addr, len) {
            return Ok(HostRegion {
                map,
                owner: Some(owner),
            });
        }
        let map = AnonymousOptions::new(Sharing::Private)
            .fixed_at(addr)
            .map(len)
            .map_err(|e| io_errno(&e))?;
        Ok(HostRegion {
            map,
            owner: Some(owner),
        })
    }

    /// Ends the region with its process's exit: the pages are freed, the
    /// range stays reserved for a restore ([`retired`](super::retired)).
    pub(crate) fn retire(self) {
        super::retired::keep(self.map);
    }

    pub(crate) fn addr(&self) -> usize {
        self.map.addr()
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn overlaps(&self, addr: usize, len: usize) -> bool {
        addr < self.addr() + self.len() && self.addr() < addr.saturating_add(len)
    }

    pub(crate) fn contains(&self, addr: u64, len: usize) -> bool {
        let Ok(addr) = usize::try_from(addr) else {
            return false;
        };
        addr >= self.addr()
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr() + self.len())
    }
}

/// The errno of a failed host system call (`EIO` if it carries none).
fn io_errno(err: &io::Error) -> Errno {
    Errno(err.raw_os_error().unwrap_or(libc::EIO))
}

impl super::State {
    fn host_region(&self, addr: u64, len: usize) -> Option<&HostRegion> {
        let a = usize::try_from(addr).ok()?;
        let (_, r) = self.host_regions.range(..=a).next_back()?;
        r.contains(addr, len).then_some(r)
    }

    /// Reads simulator-owned host memory (`None` outside every region).
    pub(crate) fn read_host(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self.host_region(addr, len)?;
        let mut out = vec![0u8; len];
        // SAFETY: `[addr, addr+len)` lies inside a live region mapped
        // read-write by this simulator; `out` is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), len) };
        Some(out)
    }

    /// Writes simulator-owned host memory; false outside every region.
    pub(crate) fn write_host(&self, addr: u64, data: &[u8]) -> bool {
        if self.host_region(addr, data.len()).is_none() {
            return false;
        }
        // SAFETY: as in read_host, the range is inside a live read-write region.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len())
        };
        true
    }
}
