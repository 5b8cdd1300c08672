//! The client side: [`RemoteDriver`], a [`kfd::Driver`] whose every call is
//! a request to a [`super::Server`], answering the server's callbacks
//! while an ioctl runs.

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kfd::{DeviceNumber, Driver, FdKind, FrozenCgroup, ProcessStatus};

use super::socket::{self, Inbox};
use super::wire::{errno, ioc_size, op, Reader, Writer};
use crate::Pid;

/// A [`kfd::Driver`] acting as one simulated process of a machine another
/// host process serves ([`super::Server`]). Cheap to clone; clones share
/// the connection (one call at a time).
#[derive(Debug, Clone)]
pub struct RemoteDriver {
    link: Arc<Mutex<Link>>,
    pid: Pid,
    /// Whether device files are stand-ins this process opens itself
    /// ([`RemoteDriver::connect_host`]).
    stand_ins: bool,
}

/// The connection and its receive buffer.
struct Link {
    conn: OwnedFd,
    inbox: Inbox,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("conn", &self.conn).finish()
    }
}

impl RemoteDriver {
    /// Connects to the server at `address` as simulated process `pid` (the
    /// server must be accepting this process as `pid`).
    pub fn connect(address: &str, pid: Pid) -> io::Result<RemoteDriver> {
        Self::bind(socket::connect(address)?, pid, false)
    }

    /// Connects this host process to the server at `address`, which must
    /// be serving host processes ([`super::Server::serve_host_processes`]):
    /// it acts as the simulated process of its own pid, and its device
    /// files are the stand-in nodes at the paths it opens (see the module
    /// docs). The connection's fd sits above every fd open at the time, so
    /// a program that places fds at numbers of its choosing (CRIU restoring
    /// a task's files) never finds one taken by it. A process forked from
    /// this one shares the connection and must connect anew to act as
    /// itself.
    ///
    /// In a pid namespace of its own (a container's) the process names
    /// itself by its pid there (`getpid()`); the server, which checks it
    /// against the pid it sees, answers with that one, the pid the driver
    /// then acts as ([`RemoteDriver::pid`]).
    pub fn connect_host(address: &str) -> io::Result<RemoteDriver> {
        let conn = socket::above_open_fds(socket::connect(address)?)?;
        Self::bind(conn, Pid(std::process::id()), true)
    }

    fn bind(conn: OwnedFd, pid: Pid, stand_ins: bool) -> io::Result<RemoteDriver> {
        let mut driver = RemoteDriver {
            link: Arc::new(Mutex::new(Link {
                conn,
                inbox: Inbox::new(),
            })),
            pid,
            stand_ins,
        };
        let mut w = Writer::new();
        w.u8(op::BIND);
        w.u32(pid.0);
        let (reply, _) = driver.call(&w.0, None)?;
        // A host process's server names it as it sees it (another pid
        // namespace's pid); a server of one simulated process says nothing.
        if let Ok(seen) = Reader::new(&reply).u32() {
            driver.pid = Pid(seen);
        }
        Ok(driver)
    }

    /// The simulated process this driver acts as.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new fd of this driver's connection (the same open socket), above
    /// every fd open at the time, for a process that hands its connection
    /// to someone who places it (CRIU's `RESTORE_UNIX_SK`).
    pub fn connection(&self) -> io::Result<OwnedFd> {
        let copy = self.lock().conn.try_clone()?;
        socket::above_open_fds(copy)
    }

    /// The number of this driver's connection in this process.
    pub fn connection_fd(&self) -> RawFd {
        self.lock().conn.as_raw_fd()
    }

    /// The (device, inode) of the socket this driver's fd number names now:
    /// it differs from the connection's own when the number was replaced
    /// under the driver (a process restored by CRIU, whose memory holds a
    /// driver whose number CRIU gave a new connection).
    pub fn connection_identity(&self) -> io::Result<(u64, u64)> {
        socket::identity(&self.lock().conn)
    }

    /// The served machine's address the connection leads to now.
    pub fn connected_address(&self) -> Option<String> {
        socket::served_peer_name(self.lock().conn.as_fd())
    }

    /// One request and its reply: the reply's payload (after the status)
    /// and the fd it carried.
    fn call(
        &self,
        msg: &[u8],
        fd: Option<BorrowedFd<'_>>,
    ) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
        let mut link = self.lock();
        let Link { conn, inbox } = &mut *link;
        let (reply, mut fds) = exchange(conn.as_fd(), inbox, msg, fd.as_slice())?;
        drop(link);
        let mut r = Reader::new(&reply);
        match r.u8()? {
            0 => Ok((r.rest().to_vec(), fds.pop())),
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

/// Whether `fd`, an fd of this process, is a connection to a served
/// machine (a [`RemoteDriver`]'s): a socket whose peer has a served
/// machine's address.
pub fn is_connection(fd: BorrowedFd<'_>) -> bool {
    socket::is_socket(fd) && socket::served_peer_name(fd).is_some()
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
            socket::send(conn, &w.0, &[])
        }
        op::CB_GET_FD => {
            let fd = r.i32()?;
            // SAFETY: F_GETFD reads no memory; it only tells whether `fd`
            // is open.
            if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                let mut w = Writer(vec![1]);
                w.i32(libc::EBADF);
                return socket::send(conn, &w.0, &[]);
            }
            // SAFETY: `fd` was just checked to be open; it is only borrowed
            // for the send, which duplicates it into the message.
            let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
            socket::send(conn, &w.0, &[borrowed])
        }
        op::CB_CLOSE => {
            let fd = r.i32()?;
            // SAFETY: `fd` was installed by the ioctl still running (the
            // server's rollback); the caller never saw its number, so
            // nothing here owns it.
            unsafe { libc::close(fd) };
            socket::send(conn, &w.0, &[])
        }
        _ => Err(errno(libc::EPROTO)),
    }
}

/// How long a request waits for its reply before it checks whether its
/// connection is still the one it was sent on.
const REPLACED_CHECK: Duration = Duration::from_millis(100);

/// Sends a request and receives its reply, answering the server's
/// callbacks meanwhile.
///
/// A process real CRIU dumps in the middle of a call (ROCr's event thread
/// sits in WAIT_EVENTS, slice after slice) is restored with the call's
/// receive to be restarted, on the fd number CRIU gave a new connection:
/// the request went to the old machine and no reply will come. The kernel
/// restarts such a system call; so does the client: a reply that takes
/// longer than [`REPLACED_CHECK`] makes it look at the socket its number
/// names, and when that is no longer the one the request was sent on, it
/// sends the request again there. (A call whose reply was already on its
/// way when the process was frozen runs twice: the old run's effect is in
/// the checkpoint the new machine restored. Only a dump in the instant
/// between the server's reply and its receipt does that.)
fn exchange(
    conn: BorrowedFd<'_>,
    inbox: &mut Inbox,
    msg: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    loop {
        let sent_on = socket::identity(conn)?;
        socket::send(conn, msg, fds)?;
        if let Some(reply) = reply(conn, inbox, sent_on)? {
            return Ok(reply);
        }
    }
}

/// Receives the reply to a request sent on the socket `sent_on`,
/// answering the server's callbacks meanwhile; `None` when `conn` names
/// another socket by now (see [`exchange`]).
fn reply(
    conn: BorrowedFd<'_>,
    inbox: &mut Inbox,
    sent_on: (u64, u64),
) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    loop {
        if !socket::readable(conn, REPLACED_CHECK)? {
            if socket::identity(conn)? != sent_on {
                return Ok(None);
            }
            continue;
        }
        let (msg, fds) = inbox.recv(conn)?.ok_or_else(|| errno(libc::ECONNRESET))?;
        if msg.first().is_some_and(|&c| c >= op::CB_INSTALL) {
            let msg = msg.to_vec();
            answer_callback(conn, &msg, fds)?;
            continue;
        }
        return Ok(Some((msg.to_vec(), fds)));
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
        if size > 0 {
            // SAFETY: the Driver::ioctl contract makes `arg` valid for reads
            // of `_IOC_SIZE(request)` bytes.
            w.bytes(unsafe { std::slice::from_raw_parts(arg.cast::<u8>(), size) });
        } else {
            w.bytes(&[]);
        }
        // SAFETY: gettid(2) takes no arguments and cannot fail.
        let tid = unsafe { libc::gettid() };
        w.u32(u32::try_from(tid).unwrap_or(0));
        let mut link = self.lock();
        let Link { conn, inbox } = &mut *link;
        let (reply, _) = exchange(conn.as_fd(), inbox, &w.0, &[fd])?;
        drop(link);
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
        let in_namespace = r.u8()? != 0;
        let ns_pid = r.u32()?;
        Ok(ProcessStatus {
            name,
            tracer: traced.then_some(tracer),
            ns_pid: in_namespace.then_some(ns_pid),
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
