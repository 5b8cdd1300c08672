//! The remote protocol's transport: `SOCK_SEQPACKET` unix sockets in the
//! abstract namespace, messages with at most [`MAX_FDS`] fds attached
//! (`SCM_RIGHTS`), through rustix's safe socket calls.
//!
//! Sends never raise `SIGPIPE`; received fds are close-on-exec and owned at
//! once, so none leaks when a message is refused; an interrupted call is
//! retried. A message longer than the receive buffer, or with more fds
//! than [`MAX_FDS`], is an error (`EMSGSIZE`), never a short read taken as
//! whole. This module never looks at what a message says ([`super::wire`]
//! does).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::retry_on_intr;
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix,
};

use super::wire::{errno, MAX_FDS, MAX_MESSAGE};

/// Prefix of every served machine's abstract socket name.
pub(crate) const ADDRESS_PREFIX: &str = "kfd-sim-remote-";

/// A served machine's address: an absolute path names a socket file,
/// anything else a name in the abstract namespace.
fn unix_address(name: &str) -> io::Result<SocketAddrUnix> {
    if name.starts_with('/') {
        Ok(SocketAddrUnix::new(name)?)
    } else {
        Ok(SocketAddrUnix::new_abstract_name(name.as_bytes())?)
    }
}

/// A close-on-exec `SOCK_SEQPACKET` unix socket.
fn seqpacket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}

/// A listening socket bound to abstract name `name`.
pub(super) fn listen(name: &str) -> io::Result<OwnedFd> {
    let socket = seqpacket()?;
    rustix::net::bind(&socket, &unix_address(name)?)?;
    rustix::net::listen(&socket, 8)?;
    Ok(socket)
}

/// A socket connected to the listener at abstract name `name`.
pub(super) fn connect(name: &str) -> io::Result<OwnedFd> {
    let socket = seqpacket()?;
    let address = unix_address(name)?;
    retry_on_intr(|| rustix::net::connect(&socket, &address))?;
    Ok(socket)
}

/// The next connection on `listener`.
pub(super) fn accept(listener: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    Ok(retry_on_intr(|| {
        rustix::net::accept_with(listener, rustix::net::SocketFlags::CLOEXEC)
    })?)
}

/// The host pid of the process that made the other end of `sock`
/// (`SO_PEERCRED`, as seen from this process's pid namespace).
pub(super) fn peer_pid(sock: BorrowedFd<'_>) -> io::Result<libc::pid_t> {
    let cred = rustix::net::sockopt::socket_peercred(sock)?;
    Ok(cred.pid.as_raw_nonzero().get())
}

/// The address `sock`'s peer is bound to, when it is a served machine's
/// (an abstract name, or a socket file's name, starting with
/// [`ADDRESS_PREFIX`]), as [`connect`] takes it.
pub(crate) fn served_peer_name(sock: BorrowedFd<'_>) -> Option<String> {
    let peer = rustix::net::getpeername(sock).ok()??;
    let unix = SocketAddrUnix::try_from(peer).ok()?;
    if let Some(name) = unix.abstract_name() {
        let name = std::str::from_utf8(name).ok()?;
        return name.starts_with(ADDRESS_PREFIX).then(|| name.to_owned());
    }
    let path = unix.path()?;
    let path = path.to_str().ok()?;
    let file = path.rsplit('/').next()?;
    file.starts_with(ADDRESS_PREFIX).then(|| path.to_owned())
}

/// Sends one message with `fds` attached.
pub(super) fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if data.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
        return Err(errno(libc::EMSGSIZE));
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(errno(libc::EMSGSIZE));
    }
    retry_on_intr(|| {
        sendmsg(
            sock,
            &[IoSlice::new(data)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
    })?;
    Ok(())
}

/// A connection's receive buffer: one [`MAX_MESSAGE`] allocation for the
/// life of the connection, not one per message.
pub(super) struct Inbox {
    buf: Box<[u8]>,
}

impl Inbox {
    pub(super) fn new() -> Inbox {
        Inbox::with_capacity(MAX_MESSAGE)
    }

    /// An inbox for messages of at most `len` bytes (a callback's answer).
    pub(super) fn with_capacity(len: usize) -> Inbox {
        Inbox {
            buf: vec![0u8; len].into_boxed_slice(),
        }
    }

    /// Receives one message from `sock`: its bytes (in this buffer) and
    /// the fds attached; `None` at the peer's end.
    pub(super) fn recv(
        &mut self,
        sock: BorrowedFd<'_>,
    ) -> io::Result<Option<(&[u8], Vec<OwnedFd>)>> {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = retry_on_intr(|| {
            recvmsg(
                sock,
                &mut [IoSliceMut::new(&mut self.buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
        })?;
        // Own every received fd first, so none leaks on error.
        let mut fds = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        if got.bytes == 0 && fds.is_empty() {
            return Ok(None);
        }
        if got
            .flags
            .intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC)
        {
            return Err(errno(libc::EMSGSIZE));
        }
        Ok(Some((&self.buf[..got.bytes], fds)))
    }
}

/// A pipe (both ends close-on-exec): the read end and the write end.
pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Moves `fd` to the lowest free number above every fd open in this
/// process (close-on-exec), so that a program that places fds at chosen
/// numbers, as CRIU does when it restores a task's files, never finds one
/// of them taken by it.
pub(super) fn above_open_fds(fd: OwnedFd) -> io::Result<OwnedFd> {
    let highest = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .max()
        .unwrap_or(0);
    let moved = rustix::io::fcntl_dupfd_cloexec(&fd, highest + 1)?;
    Ok(moved)
}

/// Whether `sock` has something to read (a message, or its peer's end)
/// within `timeout`.
pub(super) fn readable(sock: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<bool> {
    let mut pfd = [rustix::event::PollFd::new(
        &sock,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::event::Timespec::try_from(timeout).ok();
    let n = retry_on_intr(|| rustix::event::poll(&mut pfd, timeout.as_ref()))?;
    Ok(n > 0)
}

/// Whether `fd`, an fd of this process, is a socket.
pub(crate) fn is_socket(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket
    })
}

/// `fd`'s (device, inode).
pub(crate) fn identity(fd: impl AsFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_bytes_and_fds_and_oversized_ones_are_refused() {
        let (a, b) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let (r, w) = pipe().unwrap();
        send(a.as_fd(), b"hello", &[r.as_fd(), w.as_fd()]).unwrap();
        let mut inbox = Inbox::new();
        let (bytes, fds) = inbox.recv(b.as_fd()).unwrap().unwrap();
        assert_eq!(bytes, b"hello");
        assert_eq!(fds.len(), 2);
        assert_eq!(identity(&fds[0]).unwrap(), identity(&r).unwrap());
        let three = [r.as_fd(), w.as_fd(), r.as_fd()];
        assert_eq!(
            send(a.as_fd(), b"x", &three).unwrap_err().raw_os_error(),
            Some(libc::EMSGSIZE)
        );
        let big = vec![0u8; MAX_MESSAGE + 1];
        assert_eq!(
            send(a.as_fd(), &big, &[]).unwrap_err().raw_os_error(),
            Some(libc::EMSGSIZE)
        );
        drop(a);
        assert!(inbox.recv(b.as_fd()).unwrap().is_none(), "end of the peer");
    }

    #[test]
    fn a_moved_fd_sits_above_every_open_fd() {
        let (r, w) = pipe().unwrap();
        // An fd high above what the test harness holds, open while the
        // pipe's end moves.
        let high = rustix::io::fcntl_dupfd_cloexec(&r, 900).unwrap();
        let moved = above_open_fds(w).unwrap();
        assert!(std::os::fd::AsRawFd::as_raw_fd(&moved) > std::os::fd::AsRawFd::as_raw_fd(&high));
        assert!(!is_socket(r.as_fd()));
    }
}
