//! The simulated machine served to other host processes: a [`Server`] in
//! the process that owns the [`Sim`], and a [`RemoteDriver`] (a
//! [`kfd::Driver`]) in a client process, talking over a unix
//! `SOCK_SEQPACKET` socket in the abstract namespace (no file to clean up).
//!
//! One connection is one simulated process, for the life of the client:
//! * device fds are the simulator's memfds, passed with `SCM_RIGHTS` both
//!   ways, so the client holds the very open files (same inodes) the
//!   simulator keys its state on; the fds open in a live client count as
//!   open for the simulator's accounting (read from `/proc/PID/fd`);
//! * an ioctl's argument struct (`_IOC_SIZE` bytes) goes over the socket
//!   and comes back; user pointers inside it are the client's addresses,
//!   read and written with `process_vm_readv`/`process_vm_writev` (the
//!   kernel's `copy_*_user` on `current->mm`, `EFAULT` when unmapped), and
//!   userptr BOs the client creates pin the client's memory;
//! * fd numbers inside an argument are the client's: while its ioctl runs,
//!   the server asks the client for the fd a number names (`fdget`) and
//!   has the client install the fds the call creates (`fd_install`, the
//!   number written into the argument), over the same connection;
//! * `mmap` of a device fd hands the client the memfd behind the mapping
//!   (the BO's backing, shared), which the client maps itself;
//! * the client's end (its socket closes: exit, `SIGKILL`) is handled as
//!   the kernel handles a process's death: [`Sim::exit_process`] (its
//!   tracees detached, its KFD process torn down), its fds and mappings
//!   gone with it.
//!
//! Where the model stops short of the kernel:
//! * a client is one simulated process; a process it forks shares its
//!   connection, so (unlike a real fork) the child is not a process of its
//!   own, and the connection ends only when both are gone; a forked process
//!   that must be one (a dump guardian) connects anew as another simulated
//!   process, accepted with [`Server::accept_matching`];
//! * fds are received close-on-exec whatever the call asked for;
//! * an fd travelling in a message (between the server's reply and the
//!   client's receipt) is open nowhere, so [`Sim::accounting`] taken at
//!   that moment misses it; tests take it with the client idle or gone;
//! * pinned userptr pages of a client outlive it as in the kernel, but
//!   their contents do not: once the server has seen the client's end,
//!   device writes to them land nowhere and reads give zeros (between its
//!   death and that moment they reach its pid, still a zombie unless
//!   reaped at once).
//!
//! # Host processes with stand-in device files
//!
//! [`Server::serve_host_processes`] serves any host process that connects
//! with [`RemoteDriver::connect_host`], each as the simulated process of
//! its own pid, so that a real CRIU can dump a real process holding
//! simulated KFD state:
//! * the client opens a device path itself (a character device node that
//!   stands in for `/dev/kfd` or a render node, one CRIU has no handler
//!   for, such as `/dev/fuse`'s numbers) and passes that open file along
//!   with the `open`; the simulator's file (its memfd) stays in the server,
//!   paired with the stand-in file. Every fd a client passes later (an
//!   ioctl's, an mmap's, a number inside an argument) is matched against
//!   the stand-ins with `kcmp(KCMP_FILE)` (stand-in opens share one inode,
//!   not one file) and replaced by its simulator file, so a copy of the
//!   fd in another process (CRIU's, received from its parasite; a
//!   guardian's, from `pidfd_getfd`) reaches the same simulated file;
//! * the ptrace-parent rule of `CRIU_OP` is checked against the host
//!   kernel's tracer of the fd owner (`TracerPid`, a thread), which must
//!   be the calling thread (each ioctl carries the caller's tid), as the
//!   kernel compares `ptrace_parent()` with `current`: the host really
//!   seizes the process;
//! * stand-in pairs live as long as the server (a client closing its last
//!   copy of a stand-in does not release the simulator's file).
//!
//! This module never interprets ioctl arguments: [`SimDriver`] does, in
//! the client's address space.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use kfd::{DeviceNumber, Driver, FdKind, FrozenCgroup, ProcessStatus};

use crate::sim::{in_remote_space, on_caller_thread, CpuMapping, FileKey};
use crate::{Errno, Pid, Sim, SimDriver};

/// Largest message either side sends (an ioctl argument is at most 16 KiB).
const MAX_MESSAGE: usize = 64 * 1024;
/// Largest sysfs read served (a sysfs attribute is at most one page).
const MAX_SYSFS_READ: usize = 32 * 1024;
/// Most fds one message carries.
const MAX_FDS: usize = 2;

/// Host pids of the clients being served, with their connections: the
/// processes whose memory the device may still reach.
static LIVE: Mutex<BTreeMap<libc::pid_t, usize>> = Mutex::new(BTreeMap::new());

/// Whether host process `pid` is a client being served (its userptr pages
/// still its memory).
pub(crate) fn client_alive(pid: libc::pid_t) -> bool {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains_key(&pid)
}

/// A stand-in device file a host client opened, and the simulator's file
/// it stands for (see the module docs), by server.
#[derive(Debug)]
struct StandIn {
    server: u64,
    stand_in: OwnedFd,
    file: OwnedFd,
}

static STAND_INS: Mutex<Vec<StandIn>> = Mutex::new(Vec::new());

/// `KCMP_FILE` of `<linux/kcmp.h>`.
const KCMP_FILE: libc::c_int = 0;

/// Whether `a` and `b` (fds of this process) refer to the same open file.
fn same_file(a: RawFd, b: RawFd) -> bool {
    let me = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: kcmp(2) only compares kernel objects; no memory involved.
    let ret = unsafe { libc::syscall(libc::SYS_kcmp, me, me, KCMP_FILE, a, b) };
    ret == 0
}

thread_local! {
    /// The [`Server`] whose connection this thread serves.
    static SERVING: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The simulator's file for `fd` when `fd` is a stand-in file of the
/// server this thread serves, else `fd`.
fn resolve_stand_in(fd: OwnedFd) -> OwnedFd {
    let Some(server) = SERVING.with(std::cell::Cell::get) else {
        return fd;
    };
    let table = STAND_INS.lock().unwrap_or_else(PoisonError::into_inner);
    if table.is_empty() {
        return fd;
    }
    table
        .iter()
        .filter(|s| s.server == server)
        .find(|s| same_file(fd.as_raw_fd(), s.stand_in.as_raw_fd()))
        .and_then(|s| s.file.try_clone().ok())
        .unwrap_or(fd)
}

mod op {
    pub(super) const BIND: u8 = 0;
    pub(super) const OPEN: u8 = 1;
    pub(super) const IOCTL: u8 = 2;
    pub(super) const MMAP: u8 = 3;
    pub(super) const MAPPED: u8 = 4;
    pub(super) const MUNMAP: u8 = 5;
    pub(super) const FD_KIND: u8 = 6;
    pub(super) const DEVICE_NUMBER: u8 = 7;
    pub(super) const READ_SYSFS: u8 = 8;
    pub(super) const PIDFD_OPEN: u8 = 9;
    pub(super) const PIDFD_GETFD: u8 = 10;
    pub(super) const PTRACE_SEIZE: u8 = 11;
    pub(super) const PTRACE_INTERRUPT: u8 = 12;
    pub(super) const PTRACE_DETACH: u8 = 13;
    pub(super) const PROCESS_STATUS: u8 = 14;
    pub(super) const PROCESS_FDS: u8 = 15;
    pub(super) const FROZEN_CGROUP: u8 = 16;
    /// Server to client, during an ioctl: install the attached fd, answer
    /// its number (`fd_install`).
    pub(super) const CB_INSTALL: u8 = 0x80;
    /// Server to client, during an ioctl: send fd N (`fdget`).
    pub(super) const CB_GET_FD: u8 = 0x81;
    /// Server to client, during an ioctl: close fd N, which this ioctl
    /// installed (its rollback).
    pub(super) const CB_CLOSE: u8 = 0x82;
}

/// What a client asked for, as the [`Server`]'s observer sees it before the
/// call runs (the calls that reach the device; `munmap`, `fd_kind`, sysfs
/// reads and process control are not shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteOp {
    /// `open(2)`.
    Open,
    /// `ioctl(2)` with this request code.
    Ioctl(u64),
    /// `mmap(2)` of a device fd.
    Mmap,
}

/// One call of a client, shown to the observer before it runs.
#[derive(Debug)]
#[non_exhaustive]
pub struct RemoteCall<'a> {
    /// The simulated process making it.
    pub pid: Pid,
    /// The call.
    pub op: RemoteOp,
    /// An ioctl's argument struct as the client passed it (empty otherwise).
    pub arg: &'a [u8],
    /// The device the call's fd refers to, when it is one of the simulator's.
    pub device: Option<DeviceNumber>,
}

/// Whether the client lives on after the observer saw its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The call runs.
    Run,
    /// The client is sent `SIGKILL` before the call reaches the simulator.
    Kill,
}

/// Called before each call a client makes.
pub type Observer = Arc<dyn Fn(&RemoteCall<'_>) -> Verdict + Send + Sync>;

/// A listening socket serving one simulated machine.
#[derive(Debug)]
pub struct Server {
    sim: Sim,
    socket: OwnedFd,
    address: String,
    id: u64,
}

/// A connection being served: one simulated process of a client.
#[derive(Debug)]
pub struct Connection {
    thread: JoinHandle<()>,
}

impl Connection {
    /// Waits until the client's end was handled (its simulated process
    /// exited, its fds and mappings no longer count).
    pub fn join(self) {
        // The serving thread never panics on client input; a panic is a
        // simulator bug and is passed on.
        if let Err(panic) = self.thread.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Server {
    /// A server for `sim` on a fresh abstract socket address.
    pub fn new(sim: &Sim) -> io::Result<Server> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let address = format!("kfd-sim-remote-{}-{id}", std::process::id());
        let socket = seqpacket()?;
        let (addr, len) = sockaddr(&address)?;
        // SAFETY: `addr` is an initialised sockaddr_un of `len` bytes.
        if unsafe { libc::bind(socket.as_raw_fd(), (&raw const addr).cast(), len) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: listen(2) on a socket we own; no memory involved.
        if unsafe { libc::listen(socket.as_raw_fd(), 8) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Server {
            sim: sim.clone(),
            socket,
            address,
            id,
        })
    }

    /// The address a client passes to [`RemoteDriver::connect`].
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Accepts one connection from host process `client` (checked with
    /// `SO_PEERCRED`) acting as simulated process `pid`, waiting at most
    /// `timeout`, and serves it on a new thread until the client's end.
    /// `ETIMEDOUT` when no client came; `EPERM` when another process or
    /// another simulated process connected (that connection is refused).
    pub fn accept(
        &self,
        client: u32,
        pid: Pid,
        timeout: Duration,
        observer: Observer,
    ) -> io::Result<Connection> {
        self.accept_matching(|peer| peer == client, pid, timeout, observer)
            .map(|(connection, _)| connection)
    }

    /// [`Server::accept`] for a client whose host pid is not known in
    /// advance (a process a client started, such as a dump guardian):
    /// accepts a host process for which `client` answers `true`; returns
    /// the connection and that process's pid.
    pub fn accept_matching(
        &self,
        client: impl Fn(u32) -> bool,
        pid: Pid,
        timeout: Duration,
        observer: Observer,
    ) -> io::Result<(Connection, u32)> {
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        let (conn, peer) = accept_peer(&self.socket)?;
        let Some(host_pid) = u32::try_from(peer).ok().filter(|&p| client(p)) else {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        };
        let (bind, _) = recv(conn.as_fd())?.ok_or_else(|| errno(libc::ECONNRESET))?;
        let mut r = Reader::new(&bind);
        if r.u8()? != op::BIND || Pid(r.u32()?) != pid {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        send(conn.as_fd(), &Writer::ok().0, &[])?;
        let connection = serve(&self.sim, self.id, conn, peer, pid, observer)?;
        Ok((connection, host_pid))
    }

    /// Serves every host process that connects with
    /// [`RemoteDriver::connect_host`], each as the simulated process of its
    /// own pid (created at its first connection), with stand-in device
    /// files (see the module docs), until the returned [`HostService`] is
    /// dropped. `observer` sees every client's calls.
    pub fn serve_host_processes(&self, observer: Observer) -> io::Result<HostService> {
        let (stop_r, stop_w) = pipe()?;
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

impl Drop for Server {
    fn drop(&mut self) {
        STAND_INS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|s| s.server != self.id);
    }
}

/// The accepting side of [`Server::serve_host_processes`]: stops accepting
/// when dropped (connections being served run on until their clients end).
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

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn host_accept_loop(
    sim: &Sim,
    server: u64,
    listener: &OwnedFd,
    stop: &OwnedFd,
    observer: &Observer,
) {
    loop {
        let mut pfds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if pfds[1].revents != 0 {
            return;
        }
        // A client that fails its handshake is refused; the others are
        // served on.
        let _ = accept_host(sim, server, listener, observer);
    }
}

/// The next connection on `listener`, with its peer's host pid
/// (`SO_PEERCRED`).
fn accept_peer(listener: &OwnedFd) -> io::Result<(OwnedFd, libc::pid_t)> {
    // SAFETY: accept4(2) with null address pointers writes no memory.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: accept4 returned a new descriptor we own.
    let conn = unsafe { OwnedFd::from_raw_fd(fd) };
    let peer = peer_pid(conn.as_fd())?;
    Ok((conn, peer))
}

/// One host client: its handshake names its own pid (checked with
/// `SO_PEERCRED`), the simulated process of that pid serves it.
fn accept_host(sim: &Sim, server: u64, listener: &OwnedFd, observer: &Observer) -> io::Result<()> {
    let (conn, peer) = accept_peer(listener)?;
    let (bind, _) = recv(conn.as_fd())?.ok_or_else(|| errno(libc::ECONNRESET))?;
    let mut r = Reader::new(&bind);
    let refuse = |conn: &OwnedFd, e: io::Error| {
        let _ = send(conn.as_fd(), &Writer::err(&e).0, &[]);
        Err(e)
    };
    if r.u8()? != op::BIND || i64::from(r.u32()?) != i64::from(peer) {
        return refuse(&conn, errno(libc::EPERM));
    }
    let pid = u32::try_from(peer)
        .map_err(|_| errno(libc::EPERM))
        .and_then(|p| sim.host_process(Pid(p)).map_err(io::Error::other));
    let pid = match pid {
        Ok(pid) => pid,
        Err(e) => return refuse(&conn, e),
    };
    send(conn.as_fd(), &Writer::ok().0, &[])?;
    // The serving thread ends with its client; nothing waits for it.
    serve(sim, server, conn, peer, pid, observer.clone()).map(drop)
}

/// Serves `conn` (host process `peer`, simulated process `pid`) on a new
/// thread.
fn serve(
    sim: &Sim,
    server: u64,
    conn: OwnedFd,
    peer: libc::pid_t,
    pid: Pid,
    observer: Observer,
) -> io::Result<Connection> {
    {
        let mut st = sim.lock();
        *st.remote_peers.entry(peer).or_insert(0) += 1;
        *LIVE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(peer)
            .or_insert(0) += 1;
    }
    let served = Served {
        driver: sim.driver(pid),
        peer,
        observer,
        conn: -1,
        server,
    };
    let thread = std::thread::Builder::new()
        .name(format!("kfd-sim-remote-{}", pid.0))
        .spawn(move || served.run(conn))?;
    Ok(Connection { thread })
}

struct Served {
    driver: SimDriver,
    peer: libc::pid_t,
    observer: Observer,
    /// The connection (owned by `run`).
    conn: RawFd,
    /// The [`Server`]'s id (its stand-in files).
    server: u64,
}

impl Served {
    fn run(mut self, conn: OwnedFd) {
        self.conn = conn.as_raw_fd();
        SERVING.with(|s| s.set(Some(self.server)));
        // Until EOF or a reset: the client is gone.
        while let Ok(Some((msg, fds))) = recv(conn.as_fd()) {
            let reply = match self.call(&msg, fds) {
                Ok(Some(reply)) => reply,
                // Killed before its call: its EOF comes next.
                Ok(None) => continue,
                Err(e) => (Writer::err(&e).0, None),
            };
            let fds: Vec<BorrowedFd<'_>> = reply.1.iter().map(AsFd::as_fd).collect();
            if send(conn.as_fd(), &reply.0, &fds).is_err() {
                break;
            }
        }
        self.end();
    }

    /// The client's death, as the kernel handles it.
    fn end(&self) {
        let sim = self.driver.sim();
        {
            let mut st = sim.lock();
            let peer = self.peer;
            let left = st.remote_peers.get_mut(&peer).map(|n| {
                *n -= 1;
                *n
            });
            if left == Some(0) {
                // Its last connection: the process is gone, with its fds
                // and mappings.
                st.remote_peers.remove(&peer);
                st.remote_maps.retain(|&(p, _), _| p != peer);
            }
            let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = live.get_mut(&peer) {
                *n -= 1;
                if *n == 0 {
                    live.remove(&peer);
                }
            }
        }
        // Gone already when the test ended it some other way.
        let _ = sim.exit_process(self.driver.pid());
    }

    fn device_of(&self, fd: BorrowedFd<'_>) -> Option<DeviceNumber> {
        match self.driver.fd_kind(fd) {
            Ok(FdKind::CharDevice(dev)) => Some(dev),
            _ => None,
        }
    }

    /// Shows the call to the observer; `false` when the client was killed.
    fn observe(&self, op: RemoteOp, arg: &[u8], fd: Option<BorrowedFd<'_>>) -> bool {
        let call = RemoteCall {
            pid: self.driver.pid(),
            op,
            arg,
            device: fd.and_then(|fd| self.device_of(fd)),
        };
        if (self.observer)(&call) == Verdict::Kill {
            // SAFETY: kill(2) sends a signal; no memory involved. The peer
            // is our connected client (SO_PEERCRED), alive until its socket
            // closes, so the pid names it.
            unsafe { libc::kill(self.peer, libc::SIGKILL) };
            return false;
        }
        true
    }

    /// One request: its reply (bytes, an fd to pass), or `None` when the
    /// client was killed before the call.
    #[allow(clippy::type_complexity)]
    fn call(
        &self,
        msg: &[u8],
        fds: Vec<OwnedFd>,
    ) -> io::Result<Option<(Vec<u8>, Option<OwnedFd>)>> {
        let mut r = Reader::new(msg);
        let code = r.u8()?;
        // An open's fd is the stand-in being opened; any other fd a client
        // passes may be a stand-in for a file of ours.
        let (stand_in, fds) = if code == op::OPEN {
            (fds.into_iter().next(), Vec::new())
        } else {
            (None, fds.into_iter().map(resolve_stand_in).collect())
        };
        let fd = || {
            fds.first()
                .map(AsFd::as_fd)
                .ok_or_else(|| errno(libc::EBADF))
        };
        let d = &self.driver;
        let reply = match code {
            op::OPEN => {
                let path = r.path()?;
                let flags = r.i32()?;
                if !self.observe(RemoteOp::Open, &[], None) {
                    return Ok(None);
                }
                let file = d.open(&path, flags)?;
                match stand_in {
                    Some(stand_in) => {
                        STAND_INS
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(StandIn {
                                server: self.server,
                                stand_in,
                                file,
                            });
                        (Writer::ok().0, None)
                    }
                    None => (Writer::ok().0, Some(file)),
                }
            }
            op::IOCTL => {
                let request = r.u64()?;
                let value = r.u64()?;
                let mut arg = r.bytes()?.to_vec();
                // The calling thread (the kernel's `current`).
                let tid = r.u32()?;
                let fd = fd()?;
                if arg.len() != ioc_size(request) {
                    return Err(errno(libc::EPROTO));
                }
                if !self.observe(RemoteOp::Ioctl(request), &arg, Some(fd)) {
                    return Ok(None);
                }
                let ptr = if arg.is_empty() {
                    value as usize as *mut c_void
                } else {
                    arg.as_mut_ptr().cast()
                };
                let call = || {
                    // SAFETY: `ptr` is our buffer of `_IOC_SIZE(request)`
                    // bytes (or, for a size of 0, the client's value, which
                    // the simulator never dereferences for such requests);
                    // user pointers inside it are the client's and reached
                    // only through the remote space set around the call.
                    unsafe { d.ioctl(fd, request, ptr) }
                };
                let result = on_caller_thread(tid, || in_remote_space(self.peer, self.conn, call));
                let mut w = Writer::new();
                match result {
                    Ok(ret) => {
                        w.u8(0);
                        w.i32(ret);
                    }
                    Err(e) => {
                        w.u8(1);
                        w.i32(e.raw_os_error().unwrap_or(libc::EIO));
                    }
                }
                w.bytes(&arg);
                (w.0, None)
            }
            op::MMAP => {
                let len = usize::try_from(r.u64()?).map_err(|_| errno(libc::EINVAL))?;
                let offset = r.u64()?;
                let fd = fd()?;
                if !self.observe(RemoteOp::Mmap, &[], Some(fd)) {
                    return Ok(None);
                }
                match d.mmap_backing(fd, len, offset)? {
                    Some((memfd, at)) => {
                        let copy = memfd.file().try_clone()?;
                        let mut w = Writer::ok();
                        w.u8(0);
                        w.u64(at);
                        (w.0, Some(OwnedFd::from(copy)))
                    }
                    None => {
                        // Not a device of ours: the client maps its own fd;
                        // a dma-buf's mapping is accounted.
                        let key = FileKey::of_raw(fd.as_raw_fd())?;
                        let dmabuf = d.sim().lock().bos.by_key(key).is_some();
                        let mut w = Writer::ok();
                        w.u8(1);
                        w.u8(u8::from(dmabuf));
                        (w.0, None)
                    }
                }
            }
            op::MAPPED => {
                let addr = usize::try_from(r.u64()?).map_err(|_| errno(libc::EINVAL))?;
                let len = usize::try_from(r.u64()?).map_err(|_| errno(libc::EINVAL))?;
                d.sim()
                    .lock()
                    .remote_maps
                    .insert((self.peer, addr), CpuMapping { len });
                (Writer::ok().0, None)
            }
            op::MUNMAP => {
                let start = usize::try_from(r.u64()?).map_err(|_| errno(libc::EINVAL))?;
                let len = usize::try_from(r.u64()?).map_err(|_| errno(libc::EINVAL))?;
                let end = start.saturating_add(len);
                let peer = self.peer;
                d.sim()
                    .lock()
                    .remote_maps
                    .retain(|&(p, a), m| p != peer || a < start || a + m.len > end);
                (Writer::ok().0, None)
            }
            op::FD_KIND => {
                let kind = d.fd_kind(fd()?)?;
                let mut w = Writer::ok();
                match kind {
                    FdKind::CharDevice(dev) => {
                        w.u8(0);
                        w.u32(dev.major);
                        w.u32(dev.minor);
                    }
                    FdKind::DmaBuf => w.u8(1),
                    _ => w.u8(2),
                }
                (w.0, None)
            }
            op::DEVICE_NUMBER => {
                let dev = d.device_number(&r.path()?)?;
                let mut w = Writer::ok();
                w.u32(dev.major);
                w.u32(dev.minor);
                (w.0, None)
            }
            op::READ_SYSFS => {
                let path = r.path()?;
                let limit = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
                let bytes = d.read_sysfs(&path, limit.min(MAX_SYSFS_READ + 1))?;
                if bytes.len() > MAX_SYSFS_READ {
                    return Err(errno(libc::EFBIG));
                }
                let mut w = Writer::ok();
                w.bytes(&bytes);
                (w.0, None)
            }
            op::PIDFD_OPEN => {
                let pidfd = d.pidfd_open(r.u32()?)?;
                (Writer::ok().0, Some(pidfd))
            }
            op::PIDFD_GETFD => {
                let target = r.i32()?;
                let file = d.pidfd_getfd(fd()?, target)?;
                (Writer::ok().0, Some(file))
            }
            op::PTRACE_SEIZE => {
                d.ptrace_seize(r.u32()?)?;
                (Writer::ok().0, None)
            }
            op::PTRACE_INTERRUPT => {
                let pid = r.u32()?;
                let timeout = Duration::from_millis(r.u64()?);
                d.ptrace_interrupt(pid, timeout)?;
                (Writer::ok().0, None)
            }
            op::PTRACE_DETACH => {
                d.ptrace_detach(r.u32()?)?;
                (Writer::ok().0, None)
            }
            op::PROCESS_STATUS => {
                let status = d.process_status(r.u32()?)?;
                let mut w = Writer::ok();
                w.bytes(status.name.as_bytes());
                w.u8(u8::from(status.tracer.is_some()));
                w.u32(status.tracer.unwrap_or(0));
                (w.0, None)
            }
            op::PROCESS_FDS => {
                let fds = d.process_fds(r.u32()?)?;
                let mut w = Writer::ok();
                w.u32(u32::try_from(fds.len()).map_err(|_| errno(libc::E2BIG))?);
                for fd in fds {
                    w.i32(fd);
                }
                (w.0, None)
            }
            op::FROZEN_CGROUP => {
                let frozen = d.frozen_cgroup(r.u32()?)?;
                let mut w = Writer::ok();
                match frozen {
                    None => w.u8(0),
                    Some(FrozenCgroup::V2 { dir }) => {
                        w.u8(2);
                        w.bytes(dir.as_os_str().as_encoded_bytes());
                    }
                    Some(FrozenCgroup::V1 { dir }) => {
                        w.u8(1);
                        w.bytes(dir.as_os_str().as_encoded_bytes());
                    }
                }
                (w.0, None)
            }
            _ => return Err(errno(libc::EPROTO)),
        };
        Ok(Some(reply))
    }
}

/// One callback to the client of connection `conn` during its ioctl; the
/// answer's payload and fd. The client is waiting for its reply, so
/// nothing else is on the connection.
fn callback(
    conn: RawFd,
    msg: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> Result<(Vec<u8>, Option<OwnedFd>), Errno> {
    // SAFETY: `conn` is the connection of the call this thread is serving
    // (set by `in_remote_space` around it); `Served::run` owns it and keeps
    // it open until the call has returned.
    let conn = unsafe { BorrowedFd::borrow_raw(conn) };
    let gone = |_| Errno(libc::EBADF);
    send(conn, msg, fd.as_slice()).map_err(gone)?;
    let (reply, mut fds) = recv(conn).map_err(gone)?.ok_or(Errno(libc::EBADF))?;
    let mut r = Reader::new(&reply);
    match r.u8().map_err(gone)? {
        0 => Ok((reply[1..].to_vec(), fds.pop())),
        _ => Err(Errno(r.i32().unwrap_or(libc::EBADF))),
    }
}

/// The client's fd `fd` (`fdget` in the caller's table).
pub(crate) fn client_fd(conn: RawFd, fd: RawFd) -> Result<OwnedFd, Errno> {
    let mut w = Writer::new();
    w.u8(op::CB_GET_FD);
    w.i32(fd);
    callback(conn, &w.0, None)?
        .1
        .map(resolve_stand_in)
        .ok_or(Errno(libc::EBADF))
}

/// Installs `file` in the client's fd table; its number there.
pub(crate) fn client_install(conn: RawFd, file: OwnedFd) -> Result<RawFd, Errno> {
    let (reply, _) = callback(conn, &[op::CB_INSTALL], Some(file.as_fd()))?;
    Reader::new(&reply).i32().map_err(|_| Errno(libc::EPROTO))
}

/// Closes the client's fd `fd`, installed by the running call.
pub(crate) fn client_close(conn: RawFd, fd: RawFd) {
    let mut w = Writer::new();
    w.u8(op::CB_CLOSE);
    w.i32(fd);
    // A client gone meanwhile closed it already.
    let _ = callback(conn, &w.0, None);
}

/// The client's side of a callback: its answer.
fn answer_callback(conn: BorrowedFd<'_>, msg: &[u8], mut fds: Vec<OwnedFd>) -> io::Result<()> {
    let mut r = Reader::new(msg);
    let code = r.u8()?;
    let mut w = Writer::ok();
    match code {
        op::CB_INSTALL => {
            let file = fds.pop().ok_or_else(|| errno(libc::EPROTO))?;
            // The ioctl's caller owns the number from now on, as the
            // kernel's fd_install hands it over.
            w.i32(std::os::fd::IntoRawFd::into_raw_fd(file));
            send(conn, &w.0, &[])
        }
        op::CB_GET_FD => {
            let fd = r.i32()?;
            // SAFETY: F_GETFD reads no memory; it only tells whether `fd`
            // is open.
            if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                let mut w = Writer(vec![1]);
                w.i32(libc::EBADF);
                return send(conn, &w.0, &[]);
            }
            // SAFETY: `fd` was just checked to be open; it is only borrowed
            // for the send, which duplicates it into the message.
            let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
            send(conn, &w.0, &[borrowed])
        }
        op::CB_CLOSE => {
            let fd = r.i32()?;
            // SAFETY: `fd` was installed by the ioctl still running (the
            // server's rollback); the caller never saw its number, so
            // nothing here owns it.
            unsafe { libc::close(fd) };
            send(conn, &w.0, &[])
        }
        _ => Err(errno(libc::EPROTO)),
    }
}

/// Receives the reply to a request, answering the server's callbacks
/// meanwhile.
fn reply(conn: BorrowedFd<'_>) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    loop {
        let (msg, fds) = recv(conn)?.ok_or_else(|| errno(libc::ECONNRESET))?;
        if msg.first().is_some_and(|&c| c >= op::CB_INSTALL) {
            answer_callback(conn, &msg, fds)?;
            continue;
        }
        return Ok((msg, fds));
    }
}

/// Whether this process can reach a child's memory the way the server
/// serves a remote client (`process_vm_readv`, which a seccomp filter or
/// Yama's `ptrace_scope` 2 or 3 may forbid); the reason when not. Tests of
/// the served machine ask first and skip, saying why, when it cannot.
pub fn child_memory_reachable() -> Result<(), String> {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start sleep(1): {e}"))?;
    let result = (|| {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id()))
            .map_err(|e| format!("/proc/PID/maps of a child: {e}"))?;
        let start = maps
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|p| p.starts_with('r'))
            })
            .and_then(|l| l.split('-').next())
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .ok_or("no readable mapping in a child")?;
        let pid = libc::pid_t::try_from(child.id()).map_err(|e| e.to_string())?;
        crate::sim::remote_read(pid, start, &mut [0u8; 1])
            .map_err(|e| format!("process_vm_readv of a child: {e}"))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// A [`kfd::Driver`] acting as one simulated process of a machine another
/// host process serves ([`Server`]). Cheap to clone; clones share the
/// connection (one call at a time).
#[derive(Debug, Clone)]
pub struct RemoteDriver {
    conn: Arc<Mutex<OwnedFd>>,
    pid: Pid,
    /// Whether device files are stand-ins this process opens itself
    /// ([`RemoteDriver::connect_host`]).
    stand_ins: bool,
}

impl RemoteDriver {
    /// Connects to the server at `address` as simulated process `pid` (the
    /// server must be accepting this process as `pid`).
    pub fn connect(address: &str, pid: Pid) -> io::Result<RemoteDriver> {
        Self::bind(address, pid, false)
    }

    /// Connects this host process to the server at `address`, which must
    /// be serving host processes ([`Server::serve_host_processes`]): it
    /// acts as the simulated process of its own pid, and its device files
    /// are the stand-in nodes at the paths it opens (see the module docs).
    /// A process forked from this one shares the connection and must
    /// connect anew to act as itself.
    pub fn connect_host(address: &str) -> io::Result<RemoteDriver> {
        Self::bind(address, Pid(std::process::id()), true)
    }

    fn bind(address: &str, pid: Pid, stand_ins: bool) -> io::Result<RemoteDriver> {
        let socket = seqpacket()?;
        let (addr, len) = sockaddr(address)?;
        // SAFETY: `addr` is an initialised sockaddr_un of `len` bytes.
        if unsafe { libc::connect(socket.as_raw_fd(), (&raw const addr).cast(), len) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let driver = RemoteDriver {
            conn: Arc::new(Mutex::new(socket)),
            pid,
            stand_ins,
        };
        let mut w = Writer::new();
        w.u8(op::BIND);
        w.u32(pid.0);
        driver.call(&w.0, None)?;
        Ok(driver)
    }

    /// The simulated process this driver acts as.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// One request and its reply: the reply's payload (after the status)
    /// and the fd it carried.
    fn call(
        &self,
        msg: &[u8],
        fd: Option<BorrowedFd<'_>>,
    ) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        send(conn.as_fd(), msg, fd.as_slice())?;
        let (reply, mut fds) = reply(conn.as_fd())?;
        drop(conn);
        let mut r = Reader::new(&reply);
        match r.u8()? {
            0 => Ok((reply[1..].to_vec(), fds.pop())),
            _ => Err(r.error()),
        }
    }

    fn simple(&self, code: u8, pid: u32) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
        let mut w = Writer::new();
        w.u8(code);
        w.u32(pid);
        self.call(&w.0, None)
    }

    fn register(&self, code: u8, addr: usize, len: usize) -> io::Result<()> {
        let mut w = Writer::new();
        w.u8(code);
        w.u64(addr as u64);
        w.u64(len as u64);
        self.call(&w.0, None).map(drop)
    }
}

fn want_fd(fd: Option<OwnedFd>) -> io::Result<OwnedFd> {
    fd.ok_or_else(|| errno(libc::EPROTO))
}

impl Driver for RemoteDriver {
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
        let mut w = Writer::new();
        w.u8(op::OPEN);
        w.bytes(path.as_os_str().as_encoded_bytes());
        w.i32(flags);
        if self.stand_ins {
            // The stand-in node at `path`: this process's own open file,
            // which the server pairs with the simulator's.
            let stand_in = kfd::HostDriver.open(path, flags)?;
            self.call(&w.0, Some(stand_in.as_fd()))?;
            return Ok(stand_in);
        }
        want_fd(self.call(&w.0, None)?.1)
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<c_int> {
        if request == u64::from(kfd_sys::AMDKFD_IOC_WAIT_EVENTS) {
            // SAFETY: the Driver::ioctl contract: `arg` is the argument.
            let sliced = unsafe {
                crate::amdkfd::event_wait::in_slices(arg, |a| self.ioctl(fd, request, a))
            };
            if let Some(r) = sliced {
                return r;
            }
        }
        let size = ioc_size(request);
        let mut w = Writer::new();
        w.u8(op::IOCTL);
        w.u64(request);
        w.u64(arg as usize as u64);
        if size > 0 && arg.is_null() {
            return Err(errno(libc::EFAULT));
        }
        let bytes = if size > 0 {
            // SAFETY: the Driver::ioctl contract makes `arg` valid for reads
            // of `_IOC_SIZE(request)` bytes.
            unsafe { std::slice::from_raw_parts(arg.cast::<u8>(), size) }.to_vec()
        } else {
            Vec::new()
        };
        w.bytes(&bytes);
        // SAFETY: gettid(2) takes no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        w.u32(u32::try_from(tid).unwrap_or(0));
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        send(conn.as_fd(), &w.0, &[fd])?;
        let (reply, _) = reply(conn.as_fd())?;
        drop(conn);
        let mut r = Reader::new(&reply);
        match r.u8()? {
            // A protocol-level failure (no argument came back).
            2.. => Err(r.error()),
            status => {
                let value = r.i32()?;
                let back = r.bytes()?;
                if back.len() == size && size > 0 {
                    // SAFETY: as above, `arg` is valid for writes of `size`
                    // bytes; `back` is our receive buffer.
                    unsafe { std::ptr::copy_nonoverlapping(back.as_ptr(), arg.cast(), size) };
                }
                if status == 0 {
                    Ok(value)
                } else {
                    Err(io::Error::from_raw_os_error(value))
                }
            }
        }
    }

    unsafe fn mmap(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<NonNull<c_void>> {
        let mut w = Writer::new();
        w.u8(op::MMAP);
        w.u64(len as u64);
        w.u64(offset);
        let (reply, memfd) = self.call(&w.0, Some(fd))?;
        let mut r = Reader::new(&reply);
        let (source, file_offset, account) = match r.u8()? {
            0 => (want_fd(memfd)?, r.u64()?, true),
            _ => (fd.try_clone_to_owned()?, offset, r.u8()? != 0),
        };
        let file_offset = libc::off_t::try_from(file_offset).map_err(|_| errno(libc::EOVERFLOW))?;
        // SAFETY: the caller upholds Driver::mmap's MAP_FIXED contract;
        // `source` is open for the call.
        let ptr = unsafe { libc::mmap(addr, len, prot, flags, source.as_raw_fd(), file_offset) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr).ok_or_else(|| errno(libc::EFAULT))?;
        if account {
            if let Err(e) = self.register(op::MAPPED, ptr.as_ptr() as usize, len) {
                // SAFETY: the mapping was made just above and handed out to
                // no one.
                unsafe { libc::munmap(ptr.as_ptr(), len) };
                return Err(e);
            }
        }
        Ok(ptr)
    }

    unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()> {
        // SAFETY: the caller guarantees the range is a mapping of ours that
        // nothing references any more.
        if unsafe { libc::munmap(addr.as_ptr(), len) } < 0 {
            return Err(io::Error::last_os_error());
        }
        self.register(op::MUNMAP, addr.as_ptr() as usize, len)
    }

    fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind> {
        let (reply, _) = self.call(&[op::FD_KIND], Some(fd))?;
        let mut r = Reader::new(&reply);
        Ok(match r.u8()? {
            0 => FdKind::CharDevice(DeviceNumber {
                major: r.u32()?,
                minor: r.u32()?,
            }),
            1 => FdKind::DmaBuf,
            _ => FdKind::Other,
        })
    }

    fn device_number(&self, path: &Path) -> io::Result<DeviceNumber> {
        let mut w = Writer::new();
        w.u8(op::DEVICE_NUMBER);
        w.bytes(path.as_os_str().as_encoded_bytes());
        let (reply, _) = self.call(&w.0, None)?;
        let mut r = Reader::new(&reply);
        Ok(DeviceNumber {
            major: r.u32()?,
            minor: r.u32()?,
        })
    }

    fn read_sysfs(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        let mut w = Writer::new();
        w.u8(op::READ_SYSFS);
        w.bytes(path.as_os_str().as_encoded_bytes());
        w.u64(limit as u64);
        let (reply, _) = self.call(&w.0, None)?;
        let mut bytes = Reader::new(&reply).bytes()?.to_vec();
        bytes.truncate(limit);
        Ok(bytes)
    }

    fn pidfd_open(&self, pid: u32) -> io::Result<OwnedFd> {
        want_fd(self.simple(op::PIDFD_OPEN, pid)?.1)
    }

    fn pidfd_getfd(&self, pidfd: BorrowedFd<'_>, target_fd: RawFd) -> io::Result<OwnedFd> {
        let mut w = Writer::new();
        w.u8(op::PIDFD_GETFD);
        w.i32(target_fd);
        want_fd(self.call(&w.0, Some(pidfd))?.1)
    }

    fn ptrace_seize(&self, pid: u32) -> io::Result<()> {
        self.simple(op::PTRACE_SEIZE, pid).map(drop)
    }

    fn ptrace_interrupt(&self, pid: u32, timeout: Duration) -> io::Result<()> {
        let mut w = Writer::new();
        w.u8(op::PTRACE_INTERRUPT);
        w.u32(pid);
        w.u64(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        self.call(&w.0, None).map(drop)
    }

    fn ptrace_detach(&self, pid: u32) -> io::Result<()> {
        self.simple(op::PTRACE_DETACH, pid).map(drop)
    }

    fn caller_pid(&self) -> u32 {
        self.pid.0
    }

    fn process_status(&self, pid: u32) -> io::Result<ProcessStatus> {
        let (reply, _) = self.simple(op::PROCESS_STATUS, pid)?;
        let mut r = Reader::new(&reply);
        let name = String::from_utf8_lossy(r.bytes()?).into_owned();
        let traced = r.u8()? != 0;
        let tracer = r.u32()?;
        Ok(ProcessStatus {
            name,
            tracer: traced.then_some(tracer),
            // The simulator models no pid namespaces.
            ns_pid: None,
        })
    }

    fn process_fds(&self, pid: u32) -> io::Result<Vec<RawFd>> {
        let (reply, _) = self.simple(op::PROCESS_FDS, pid)?;
        let mut r = Reader::new(&reply);
        let n = r.u32()?;
        (0..n).map(|_| r.i32()).collect()
    }

    fn frozen_cgroup(&self, pid: u32) -> io::Result<Option<FrozenCgroup>> {
        let (reply, _) = self.simple(op::FROZEN_CGROUP, pid)?;
        let mut r = Reader::new(&reply);
        let kind = r.u8()?;
        if kind == 0 {
            return Ok(None);
        }
        let dir = r.path()?;
        Ok(Some(if kind == 1 {
            FrozenCgroup::V1 { dir }
        } else {
            FrozenCgroup::V2 { dir }
        }))
    }
}

/// `_IOC_SIZE(request)`.
fn ioc_size(request: u64) -> usize {
    ((request >> 16) & 0x3fff) as usize
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; no memory involved.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket(2) returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An abstract-namespace `sockaddr_un` for `name` and its length.
fn sockaddr(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(errno(libc::ENAMETOOLONG));
    }
    // sun_path[0] == 0: the abstract namespace.
    for (dst, &src) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

fn peer_pid(sock: BorrowedFd<'_>) -> io::Result<libc::pid_t> {
    // SAFETY: ucred is plain old data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is writable for `len` bytes.
    let ret = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid)
}

/// Sends one message with `fds` attached (`SCM_RIGHTS`).
fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if data.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
        return Err(errno(libc::EMSGSIZE));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut c_void,
        iov_len: data.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain old data; all zeroes is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: `control` (64 bytes, 8-aligned) holds CMSG_SPACE of two
        // fds; CMSG_FIRSTHDR of a header with that buffer is inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as usize;
            let out = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                out.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` and `control`, both alive; the
        // kernel only reads them.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message and the fds attached to it; `None` at EOF.
fn recv(sock: BorrowedFd<'_>) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut data = vec![0u8; MAX_MESSAGE];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain old data.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    let n = loop {
        // SAFETY: `msg` points at our writable buffers of the sizes given.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` and set msg_controllen; the CMSG
    // macros walk only inside it.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    // Each received fd is new in this process and ours.
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if n == 0 && fds.is_empty() {
        return Ok(None);
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(errno(libc::EMSGSIZE));
    }
    data.truncate(n);
    Ok(Some((data, fds)))
}

/// A message being written.
struct Writer(Vec<u8>);

impl Writer {
    fn new() -> Writer {
        Writer(Vec::new())
    }
    fn ok() -> Writer {
        Writer(vec![0])
    }
    fn err(e: &io::Error) -> Writer {
        let mut w = Writer(vec![2]);
        w.i32(e.raw_os_error().unwrap_or(0));
        w.u8(u8::from(e.kind() == io::ErrorKind::NotFound));
        w.bytes(e.to_string().as_bytes());
        w
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
}

/// A message being read; running short is `EPROTO`.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader(bytes)
    }
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(errno(libc::EPROTO));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i32(&mut self) -> io::Result<i32> {
        Ok(i32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn path(&mut self) -> io::Result<PathBuf> {
        let bytes = self.bytes()?;
        let s = std::str::from_utf8(bytes).map_err(|_| errno(libc::EINVAL))?;
        Ok(PathBuf::from(s))
    }
    /// The error of a failure reply (after its status byte).
    fn error(&mut self) -> io::Error {
        let Ok(code) = self.i32() else {
            return errno(libc::EPROTO);
        };
        let not_found = self.u8().unwrap_or(0) != 0;
        let message = self
            .bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        if code != 0 {
            io::Error::from_raw_os_error(code)
        } else if not_found {
            io::Error::new(io::ErrorKind::NotFound, message)
        } else {
            io::Error::other(message)
        }
    }
}
