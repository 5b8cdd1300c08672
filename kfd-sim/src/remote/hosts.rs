//! Host processes as clients ([`Server::serve_host_processes`]): who a
//! client is, how long its simulated process lives, and the stand-in
//! device files that carry its open files through real CRIU.
//!
//! * A client is the host process at the other end of its connection
//!   (`SO_PEERCRED`, the pid in the served machine's pid namespace; the
//!   client names itself by its pid in its own namespace, a container's,
//!   which `NSpid:` ties to it), one instance of a pid: the pid and its start time
//!   (`/proc/PID/stat`), so a pid reused by another process (CRIU restores
//!   a task with the pid its dumped original had) is a new process.
//! * Its simulated process lives as long as that instance, not as long as
//!   a connection: a process may make several connections (a restored
//!   task's CRIU side, then the task itself) and close them again. The
//!   accepting thread watches a pidfd of every instance and ends its
//!   simulated process when it exits, as the kernel ends a KFD process
//!   with its `mm`.
//! * A stand-in file (see [`super`]'s docs) is paired with the simulator's
//!   file for as long as any process holds it: when a client or a
//!   connection ends, pairs whose stand-in no process on the host holds any
//!   more are released (the kernel's last `fput`), so the simulator's file
//!   is closed and collected like any other.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Mutex;
use std::thread::JoinHandle;

use rustix::event::{PollFd, PollFlags};

use super::server::{serve, unpoison, Observer, Server};
use super::socket::{self, Inbox};
use super::wire::{errno, op, Reader, Writer};
use crate::kernel::LIVE_CLIENTS;
use crate::{Pid, Sim};

/// Counts one more hold on `peer` as a live client.
pub(super) fn hold(sim: &Sim, peer: libc::pid_t) {
    let mut st = sim.lock();
    *st.remote_peers.entry(peer).or_insert(0) += 1;
    *unpoison(LIVE_CLIENTS.lock()).entry(peer).or_insert(0) += 1;
}

/// Drops one hold on `peer`; `true` when it was the last (the process is
/// gone, with its fds and mappings).
pub(super) fn release(sim: &Sim, peer: libc::pid_t) -> bool {
    let mut st = sim.lock();
    let left = st.remote_peers.get_mut(&peer).map(|n| {
        *n = n.saturating_sub(1);
        *n
    });
    let last = left == Some(0);
    if last {
        st.remote_peers.remove(&peer);
        st.remote_maps.retain(|&(p, _), _| p != peer);
    }
    let mut live = unpoison(LIVE_CLIENTS.lock());
    if let Some(n) = live.get_mut(&peer) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            live.remove(&peer);
        }
    }
    last
}

/// A stand-in device file a host client opened, and the simulator's file
/// it stands for, by server.
#[derive(Debug)]
pub(super) struct StandIn {
    pub(super) server: u64,
    pub(super) stand_in: OwnedFd,
    pub(super) file: OwnedFd,
}

static STAND_INS: Mutex<Vec<StandIn>> = Mutex::new(Vec::new());

thread_local! {
    /// The [`Server`] whose connection this thread serves.
    pub(super) static SERVING: Cell<Option<u64>> = const { Cell::new(None) };
}

/// `KCMP_FILE` of `<linux/kcmp.h>`.
const KCMP_FILE: libc::c_int = 0;

/// Whether fd `a` of process `pa` and fd `b` of process `pb` are the same
/// open file.
fn same_file(pa: libc::pid_t, a: RawFd, pb: libc::pid_t, b: RawFd) -> bool {
    // SAFETY: kcmp(2) only compares kernel objects; no memory involved.
    let ret = unsafe { libc::syscall(libc::SYS_kcmp, pa, pb, KCMP_FILE, a, b) };
    ret == 0
}

fn this_pid() -> libc::pid_t {
    libc::pid_t::try_from(std::process::id()).unwrap_or(0)
}

/// The simulator's file for `fd` when `fd` is a stand-in file of the
/// server this thread serves, else `fd`.
pub(super) fn resolve_stand_in(fd: OwnedFd) -> OwnedFd {
    let Some(server) = SERVING.with(Cell::get) else {
        return fd;
    };
    let table = unpoison(STAND_INS.lock());
    let me = this_pid();
    table
        .iter()
        .filter(|s| s.server == server)
        .find(|s| same_file(me, fd.as_raw_fd(), me, s.stand_in.as_raw_fd()))
        .and_then(|s| s.file.try_clone().ok())
        .unwrap_or(fd)
}

/// Pairs a stand-in file with the simulator's file it stands for.
pub(super) fn pair_stand_in(pair: StandIn) {
    unpoison(STAND_INS.lock()).push(pair);
}

/// Releases the pairs of `server` (the server is going away).
pub(super) fn forget_server(server: u64) {
    unpoison(STAND_INS.lock()).retain(|s| s.server != server);
    unpoison(HOSTS.lock()).retain(|&(s, _), _| s != server);
}

/// Releases the stand-in pairs of `server` whose stand-in file no process
/// on the host holds any more (the pairs' own copies aside).
pub(super) fn sweep_stand_ins(sim: &Sim, server: u64) {
    let mut table = unpoison(STAND_INS.lock());
    let me = this_pid();
    let own: Vec<RawFd> = table.iter().map(|s| s.stand_in.as_raw_fd()).collect();
    let mut devices: Vec<u64> = table
        .iter()
        .filter(|s| s.server == server)
        .filter_map(|s| rustix::fs::fstat(&s.stand_in).ok().map(|st| st.st_rdev))
        .collect();
    devices.sort_unstable();
    devices.dedup();
    if devices.is_empty() {
        return;
    }
    let holders = stand_in_holders(&devices, me, &own);
    let before = table.len();
    table.retain(|s| {
        s.server != server
            || holders
                .iter()
                .any(|&(pid, fd)| same_file(me, s.stand_in.as_raw_fd(), pid, fd))
    });
    let released = before != table.len();
    drop(table);
    if released {
        // The simulator's files of released pairs are closed now.
        sim.lock().collect();
    }
}

/// Every (pid, fd) on the host that is a character device with one of the
/// `devices` numbers, this process's fds in `own` left out.
fn stand_in_holders(devices: &[u64], me: libc::pid_t, own: &[RawFd]) -> Vec<(libc::pid_t, RawFd)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for proc_ in procs.flatten() {
        let Some(pid) = proc_
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_.path().join("fd")) else {
            continue;
        };
        for entry in fds.flatten() {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<RawFd>().ok())
            else {
                continue;
            };
            if pid == me && own.contains(&fd) {
                continue;
            }
            // stat(2) of the magic link is the open file's node.
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if meta.file_type().is_char_device() && devices.binary_search(&meta.rdev()).is_ok() {
                out.push((pid, fd));
            }
        }
    }
    out
}

/// The host instances being served, by (server, pid): their start times.
static HOSTS: Mutex<BTreeMap<(u64, libc::pid_t), u64>> = Mutex::new(BTreeMap::new());

/// The start time of host process `pid` (field 22 of `/proc/PID/stat`, in
/// clock ticks since boot): with the pid, the identity of one process.
fn start_time(pid: libc::pid_t) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The name (field 2) may hold spaces and parentheses: fields after it
    // start after its last ')'. Field 3 is the first of them.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| errno(libc::EPROTO))?;
    rest.split_whitespace()
        .nth(22 - 3)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| errno(libc::EPROTO))
}

/// Host process `pid`'s pid in its own (innermost) pid namespace: the last
/// field of `NSpid:` in `/proc/PID/status` (this process's pid namespace
/// is the served machine's); `pid` itself on a kernel without the line.
fn namespace_pid(pid: libc::pid_t) -> io::Result<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let own = kfd::process::parse_status(&status)?.ns_pid;
    match own {
        Some(own) => Ok(own),
        None => u32::try_from(pid).map_err(|_| errno(libc::EPERM)),
    }
}

/// Ends the simulated process of host instance `pid` of `server` (its
/// process exited), as the kernel handles a process's death.
fn end_host(sim: &Sim, server: u64, pid: libc::pid_t) {
    unpoison(HOSTS.lock()).remove(&(server, pid));
    release(sim, pid);
    if let Ok(p) = u32::try_from(pid) {
        // Gone already when the test ended it some other way.
        let _ = sim.exit_process(Pid(p));
    }
    sweep_stand_ins(sim, server);
}

/// A host instance the accepting thread watches.
struct Watched {
    pid: libc::pid_t,
    pidfd: OwnedFd,
}

impl Server {
    /// Serves every host process that connects with
    /// [`super::RemoteDriver::connect_host`], each as the simulated process
    /// of its own pid (created at its first connection, ended when the
    /// process exits), with stand-in device files (see the module docs),
    /// until the returned [`HostService`] is dropped. `observer` sees every
    /// client's calls.
    pub fn serve_host_processes(&self, observer: Observer) -> io::Result<HostService> {
        let (stop_r, stop_w) = socket::pipe()?;
        let listener = self.socket.try_clone()?;
        let sim = self.sim.clone();
        let id = self.id;
        let thread = std::thread::Builder::new()
            .name("kfd-sim-remote-hosts".into())
            .spawn(move || host_accept_loop(&sim, id, &listener, &stop_r, &observer))?;
        Ok(HostService {
            stop: Some(stop_w),
            thread: Some(thread),
        })
    }
}

/// The accepting side of [`Server::serve_host_processes`]: stops accepting
/// and watching when dropped (connections being served run on until their
/// clients end).
#[derive(Debug)]
pub struct HostService {
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for HostService {
    fn drop(&mut self) {
        // Closing the pipe's write end wakes the accept loop.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn host_accept_loop(
    sim: &Sim,
    server: u64,
    listener: &OwnedFd,
    stop: &OwnedFd,
    observer: &Observer,
) {
    let mut watched: Vec<Watched> = Vec::new();
    loop {
        let mut pfds = vec![
            PollFd::new(listener, PollFlags::IN),
            PollFd::new(stop, PollFlags::IN),
        ];
        pfds.extend(watched.iter().map(|w| PollFd::new(&w.pidfd, PollFlags::IN)));
        match rustix::event::poll(&mut pfds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        if !pfds[1].revents().is_empty() {
            return;
        }
        let listener_ready = !pfds[0].revents().is_empty();
        let exited: Vec<usize> = pfds[2..]
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.revents().is_empty())
            .map(|(i, _)| i)
            .collect();
        drop(pfds);
        for &i in exited.iter().rev() {
            let gone = watched.swap_remove(i);
            end_host(sim, server, gone.pid);
        }
        if listener_ready {
            // A client that fails its handshake is refused; the others are
            // served on.
            if let Ok(Some(new)) = accept_host(sim, server, listener, observer) {
                watched.push(new);
            }
        }
    }
}

/// One host client: its handshake names its own pid as its pid namespace
/// numbers it (checked against `SO_PEERCRED`'s pid, this namespace's, and
/// that process's `NSpid:`); the simulated process of that pid's instance
/// (this namespace's pid) serves it, and `PROCESS_INFO` reports its own
/// namespace's pid, as the kernel does.
/// Returns the instance to watch when it is a new one.
fn accept_host(
    sim: &Sim,
    server: u64,
    listener: &OwnedFd,
    observer: &Observer,
) -> io::Result<Option<Watched>> {
    let conn = socket::accept(listener.as_fd())?;
    let peer = socket::peer_pid(conn.as_fd())?;
    let mut inbox = Inbox::with_capacity(64);
    let (bind, _) = inbox
        .recv(conn.as_fd())?
        .ok_or_else(|| errno(libc::ECONNRESET))?;
    let mut r = Reader::new(bind);
    let refuse = |conn: &OwnedFd, e: io::Error| {
        let _ = socket::send(conn.as_fd(), &Writer::err(&e).0, &[]);
        Err(e)
    };
    // The client names itself by its pid in its own pid namespace (its
    // getpid(), a container's), which the kernel shows this process as
    // the last field of the peer's `NSpid:`.
    let own = namespace_pid(peer)?;
    if r.u8()? != op::BIND || r.u32()? != own {
        return refuse(&conn, errno(libc::EPERM));
    }
    let instance = match instance_of(sim, server, peer, own) {
        Ok(instance) => instance,
        Err(e) => return refuse(&conn, e),
    };
    let pid = Pid(u32::try_from(peer).map_err(|_| errno(libc::EPERM))?);
    // The reply names the client as the served machine knows it (its pid
    // here), the pid it acts as.
    let mut ok = Writer::ok();
    ok.u32(pid.0);
    socket::send(conn.as_fd(), &ok.0, &[])?;
    // The serving thread ends with its connection; nothing waits for it.
    serve(sim, server, conn, peer, pid, true, observer.clone())?;
    Ok(instance)
}

/// Finds or makes the simulated process of host process `peer`'s current
/// instance; the new instance to watch when there was none.
fn instance_of(sim: &Sim, server: u64, peer: libc::pid_t, own: u32) -> io::Result<Option<Watched>> {
    let start = start_time(peer)?;
    let known = unpoison(HOSTS.lock()).get(&(server, peer)).copied();
    match known {
        Some(s) if s == start => return Ok(None),
        // The pid's previous process exited and the watcher has not seen
        // it yet: it ends before the new one begins.
        Some(_) => end_host(sim, server, peer),
        None => {}
    }
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(peer).ok_or_else(|| errno(libc::ESRCH))?,
        rustix::process::PidfdFlags::empty(),
    )?;
    // The pidfd names the process whose start time was read only if the pid
    // was not reused in between.
    if start_time(peer)? != start {
        return Err(errno(libc::ESRCH));
    }
    let pid = Pid(u32::try_from(peer).map_err(|_| errno(libc::EPERM))?);
    sim.host_process(pid).map_err(io::Error::other)?;
    // The GPUs of its mount namespace's /dev (a container's), before it
    // opens /dev/kfd (see `super::view`).
    if let Some(nodes) = super::view::stand_in_renders(Path::new(&format!("/proc/{peer}/root"))) {
        sim.give_dri_view(pid, &nodes);
    }
    if let Some(p) = sim.lock().processes.get_mut(&pid) {
        p.ns_pid = (own != pid.0).then_some(own);
    }
    unpoison(HOSTS.lock()).insert((server, peer), start);
    hold(sim, peer);
    Ok(Some(Watched { pid: peer, pidfd }))
}
