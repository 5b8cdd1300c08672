//! The remote protocol's messages: request and callback codes, and the
//! little-endian encoding both sides write and read.
//!
//! A request is one `SOCK_SEQPACKET` message: its code, then its fields; a
//! reply starts with a status byte (0: success, then the call's fields; 2:
//! failure, then an errno, a not-found flag and a message). During an
//! ioctl the server may send callbacks (codes from [`op::CB_INSTALL`] up)
//! before the reply, each answered by the client with a status byte and
//! its fields. This module only encodes; it never touches a socket.

use std::io;
use std::path::PathBuf;

/// Largest message either side sends (an ioctl argument is at most 16 KiB).
pub(super) const MAX_MESSAGE: usize = 64 * 1024;
/// Largest sysfs read served (a sysfs attribute is at most one page).
pub(super) const MAX_SYSFS_READ: usize = 32 * 1024;
/// Most fds one message carries.
pub(super) const MAX_FDS: usize = 2;

/// Request and callback codes.
pub(super) mod op {
    pub(crate) const BIND: u8 = 0;
    pub(crate) const OPEN: u8 = 1;
    pub(crate) const IOCTL: u8 = 2;
    pub(crate) const MMAP: u8 = 3;
    pub(crate) const MAPPED: u8 = 4;
    pub(crate) const MUNMAP: u8 = 5;
    pub(crate) const FD_KIND: u8 = 6;
    pub(crate) const DEVICE_NUMBER: u8 = 7;
    pub(crate) const READ_SYSFS: u8 = 8;
    pub(crate) const PIDFD_OPEN: u8 = 9;
    pub(crate) const PIDFD_GETFD: u8 = 10;
    pub(crate) const PTRACE_SEIZE: u8 = 11;
    pub(crate) const PTRACE_INTERRUPT: u8 = 12;
    pub(crate) const PTRACE_DETACH: u8 = 13;
    pub(crate) const PROCESS_STATUS: u8 = 14;
    pub(crate) const PROCESS_FDS: u8 = 15;
    pub(crate) const FROZEN_CGROUP: u8 = 16;
    /// Server to client, during an ioctl: install the attached fd, answer
    /// its number (`fd_install`).
    pub(crate) const CB_INSTALL: u8 = 0x80;
    /// Server to client, during an ioctl: send fd N (`fdget`).
    pub(crate) const CB_GET_FD: u8 = 0x81;
    /// Server to client, during an ioctl: close fd N, which this ioctl
    /// installed (its rollback).
    pub(crate) const CB_CLOSE: u8 = 0x82;
}

/// `_IOC_SIZE(request)`.
pub(super) fn ioc_size(request: u64) -> usize {
    ((request >> 16) & 0x3fff) as usize
}

pub(super) fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// A message being written.
pub(super) struct Writer(pub(super) Vec<u8>);

impl Writer {
    pub(super) fn new() -> Writer {
        Writer(Vec::new())
    }
    /// A success reply.
    pub(super) fn ok() -> Writer {
        Writer(vec![0])
    }
    /// A failure reply carrying `e`.
    pub(super) fn err(e: &io::Error) -> Writer {
        let mut w = Writer(vec![2]);
        w.i32(e.raw_os_error().unwrap_or(0));
        w.u8(u8::from(e.kind() == io::ErrorKind::NotFound));
        w.bytes(e.to_string().as_bytes());
        w
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A length-prefixed byte string.
    pub(super) fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
}

/// A message being read; running short is `EPROTO`.
pub(super) struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader(bytes)
    }
    /// What is left unread.
    pub(super) fn rest(&self) -> &'a [u8] {
        self.0
    }
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(errno(libc::EPROTO));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    pub(super) fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(super) fn i32(&mut self) -> io::Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    pub(super) fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub(super) fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(super) fn path(&mut self) -> io::Result<PathBuf> {
        let bytes = self.bytes()?;
        let s = std::str::from_utf8(bytes).map_err(|_| errno(libc::EINVAL))?;
        Ok(PathBuf::from(s))
    }
    /// The error of a failure reply (after its status byte).
    pub(super) fn error(&mut self) -> io::Error {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_in_order_and_a_short_message_is_eproto() {
        let mut w = Writer::new();
        w.u8(7);
        w.u32(0xdead_beef);
        w.i32(-5);
        w.u64(u64::MAX - 1);
        w.bytes(b"/dev/kfd");
        let mut r = Reader::new(&w.0);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 0xdead_beef);
        assert_eq!(r.i32().unwrap(), -5);
        assert_eq!(r.u64().unwrap(), u64::MAX - 1);
        assert_eq!(r.path().unwrap(), PathBuf::from("/dev/kfd"));
        assert!(r.rest().is_empty());
        let e = r.u8().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPROTO));
        // A length prefix past the end of the message.
        let mut w = Writer::new();
        w.u32(100);
        assert_eq!(
            Reader::new(&w.0).bytes().unwrap_err().raw_os_error(),
            Some(libc::EPROTO)
        );
    }

    #[test]
    fn failure_replies_keep_errno_not_found_and_message() {
        let reply = Writer::err(&errno(libc::EBUSY)).0;
        let mut r = Reader::new(&reply[1..]);
        assert_eq!(r.error().raw_os_error(), Some(libc::EBUSY));
        let reply = Writer::err(&io::Error::new(io::ErrorKind::NotFound, "no such node")).0;
        let e = Reader::new(&reply[1..]).error();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("no such node"));
        assert_eq!(
            ioc_size(kfd_sys::AMDKFD_IOC_CRIU_OP.into()),
            std::mem::size_of::<kfd_sys::kfd_ioctl_criu_args>()
        );
    }
}
