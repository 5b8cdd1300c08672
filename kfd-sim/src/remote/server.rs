//! The serving side: the listening [`Server`], and one thread per
//! connection ([`Served`]) that runs a client's calls on the simulator in
//! the client's address space, answering the callbacks an ioctl needs.

use std::ffi::c_void;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use kfd::{DeviceNumber, Driver, FdKind, FrozenCgroup};

use super::hosts::{self, StandIn};
use super::socket::{self, Inbox};
use super::wire::{errno, ioc_size, op, Reader, Writer, MAX_SYSFS_READ};
use crate::kernel::{in_remote_space, on_caller_thread, CpuMapping, FileKey};
use crate::{Pid, Sim, SimDriver};
use ::kfd::Errno;

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
    pub(super) sim: Sim,
    pub(super) socket: OwnedFd,
    address: String,
    pub(super) id: u64,
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
        let address = format!("{}{}-{id}", socket::ADDRESS_PREFIX, std::process::id());
        let socket = socket::listen(&address)?;
        Ok(Server {
            sim: sim.clone(),
            socket,
            address,
            id,
        })
    }

    /// A server for `sim` on a socket file in `dir` (removed when the
    /// server is dropped), for clients in another network namespace than
    /// this process's, which cannot reach an abstract socket of it (a
    /// process restored into a container's namespace, a container given
    /// the directory).
    pub fn new_in(sim: &Sim, dir: &std::path::Path) -> io::Result<Server> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed) | 1 << 63;
        let path = dir.join(format!(
            "{}{}-{id}",
            socket::ADDRESS_PREFIX,
            std::process::id()
        ));
        let address = path
            .to_str()
            .filter(|p| p.starts_with('/'))
            .ok_or_else(|| errno(libc::EINVAL))?
            .to_owned();
        let socket = socket::listen(&address)?;
        Ok(Server {
            sim: sim.clone(),
            socket,
            address,
            id,
        })
    }

    /// The address a client passes to [`super::RemoteDriver::connect`].
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
        let mut pfd = [rustix::event::PollFd::new(
            &self.socket,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec::try_from(timeout).ok();
        let n = rustix::io::retry_on_intr(|| rustix::event::poll(&mut pfd, timeout.as_ref()))?;
        if n == 0 {
            return Err(errno(libc::ETIMEDOUT));
        }
        let conn = socket::accept(self.socket.as_fd())?;
        let peer = socket::peer_pid(conn.as_fd())?;
        let Some(host_pid) = u32::try_from(peer).ok().filter(|&p| client(p)) else {
            return Err(errno(libc::EPERM));
        };
        let mut inbox = Inbox::new();
        let (bind, _) = inbox
            .recv(conn.as_fd())?
            .ok_or_else(|| errno(libc::ECONNRESET))?;
        let mut r = Reader::new(bind);
        if r.u8()? != op::BIND || Pid(r.u32()?) != pid {
            return Err(errno(libc::EPERM));
        }
        socket::send(conn.as_fd(), &Writer::ok().0, &[])?;
        let connection = serve(&self.sim, self.id, conn, peer, pid, false, observer)?;
        Ok((connection, host_pid))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        hosts::forget_server(self.id);
        if self.address.starts_with('/') {
            let _ = std::fs::remove_file(&self.address);
        }
    }
}

/// Serves `conn` (host process `peer`, simulated process `pid`) on a new
/// thread. A `host` connection is one of several a host process may make
/// over its life ([`super::hosts`] ends its simulated process when the
/// process is gone); any other ends its simulated process with it.
pub(super) fn serve(
    sim: &Sim,
    server: u64,
    conn: OwnedFd,
    peer: libc::pid_t,
    pid: Pid,
    host: bool,
    observer: Observer,
) -> io::Result<Connection> {
    if !host {
        hosts::hold(sim, peer);
    }
    let served = Served {
        driver: sim.driver(pid),
        peer,
        observer,
        conn: -1,
        server,
        host,
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
    /// A connection of a host process ([`Server::serve_host_processes`]).
    host: bool,
}

impl Served {
    fn run(mut self, conn: OwnedFd) {
        self.conn = conn.as_raw_fd();
        hosts::SERVING.with(|s| s.set(Some(self.server)));
        let mut inbox = Inbox::new();
        // Until EOF or a reset: the client is gone.
        while let Ok(Some((msg, fds))) = inbox.recv(conn.as_fd()) {
            let reply = match self.call(msg, fds) {
                Ok(Some(reply)) => reply,
                // Killed before its call: its EOF comes next.
                Ok(None) => continue,
                Err(e) => (Writer::err(&e).0, None),
            };
            let fds: Vec<BorrowedFd<'_>> = reply.1.iter().map(AsFd::as_fd).collect();
            if socket::send(conn.as_fd(), &reply.0, &fds).is_err() {
                break;
            }
        }
        drop(conn);
        self.end();
    }

    /// The connection's end. For a host process that is not its death
    /// (CRIU's restore hands a task from one connection to another; see
    /// [`super::hosts`]); for any other client it is, and is handled as
    /// the kernel handles a process's death.
    fn end(&self) {
        let sim = self.driver.sim();
        if self.host {
            hosts::sweep_stand_ins(sim, self.server);
            return;
        }
        // One connection is one simulated process; the host process's fds
        // and mappings count until its last connection ends.
        hosts::release(sim, self.peer);
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
            (None, fds.into_iter().map(hosts::resolve_stand_in).collect())
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
                        hosts::pair_stand_in(StandIn {
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
                w.u8(u8::from(status.ns_pid.is_some()));
                w.u32(status.ns_pid.unwrap_or(0));
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
    socket::send(conn, msg, fd.as_slice()).map_err(gone)?;
    // An answer is a status, an errno or fd number: a few bytes.
    let mut inbox = Inbox::with_capacity(64);
    let (reply, mut fds) = inbox.recv(conn).map_err(gone)?.ok_or(Errno(libc::EBADF))?;
    let mut r = Reader::new(reply);
    match r.u8().map_err(gone)? {
        0 => Ok((r.rest().to_vec(), fds.pop())),
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
        .map(hosts::resolve_stand_in)
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

/// Keeps `PoisonError` in one place for the modules that lock statics.
pub(super) fn unpoison<T>(r: Result<T, PoisonError<T>>) -> T {
    r.unwrap_or_else(PoisonError::into_inner)
}
