//! Fds across a connected unix socket (`SCM_RIGHTS`), and who is at the
//! other end (`SO_PEERCRED`), through rustix's safe socket calls.
//!
//! Fds cross in batches of at most [`FDS_PER_MESSAGE`] (CRIU's
//! `CR_SCM_MAX_FD`), each message carrying one data byte. Sends never raise
//! `SIGPIPE` (`MSG_NOSIGNAL`); received fds are close-on-exec
//! (`MSG_CMSG_CLOEXEC`) and owned at once, so none leaks when a message is
//! refused. An interrupted call is retried. A peer that closes early, sends
//! a message without fds, or more fds than announced (the control data is
//! cut, `MSG_CTRUNC`) is an error, never a hang or a short result.
//!
//! This module never looks at what the fds are or at the bytes around them
//! ([`super::protocol`] does).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::{align_of, size_of, MaybeUninit};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

use rustix::io::retry_on_intr;
use rustix::net::{
    recvmsg, sendmsg, sockopt::socket_peercred, RecvAncillaryBuffer, RecvAncillaryMessage,
    RecvFlags, ReturnFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

/// The most fds one `sendmsg` carries (CRIU's `CR_SCM_MAX_FD`).
pub const FDS_PER_MESSAGE: usize = 252;

/// `CMSG_SPACE(fds * sizeof(int))`: one `SCM_RIGHTS` message of `fds` fds,
/// header and payload each padded as the kernel pads them (`CMSG_ALIGN`).
fn rights_space(fds: usize) -> usize {
    let align = size_of::<usize>();
    size_of::<libc::cmsghdr>().next_multiple_of(align)
        + (fds * size_of::<RawFd>()).next_multiple_of(align)
}

/// Sends `fds` over `sock` with `SCM_RIGHTS`, at most [`FDS_PER_MESSAGE`]
/// per message, each message carrying one data byte.
pub fn send_fds(sock: BorrowedFd<'_>, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    for batch in fds.chunks(FDS_PER_MESSAGE) {
        let mut space =
            vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(batch.len()))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(batch)) {
            return Err(io::Error::other(format!(
                "no room for {} fds in one control message",
                batch.len()
            )));
        }
        let byte = [0u8; 1];
        let sent = retry_on_intr(|| {
            sendmsg(
                sock,
                &[IoSlice::new(&byte)],
                &mut control,
                SendFlags::NOSIGNAL,
            )
        })?;
        if sent != 1 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "sendmsg sent no byte with the fds",
            ));
        }
    }
    Ok(())
}

/// Receives exactly `count` fds sent by [`send_fds`] from `sock`.
pub fn recv_fds(sock: BorrowedFd<'_>, count: usize) -> io::Result<Vec<OwnedFd>> {
    let mut out: Vec<OwnedFd> = Vec::with_capacity(count);
    while out.len() < count {
        let want = (count - out.len()).min(FDS_PER_MESSAGE);
        // Room for `want` fds and no more, starting at a cmsghdr boundary
        // (where the ancillary buffer starts): a message with more fds than
        // announced arrives cut, with MSG_CTRUNC.
        let space = rights_space(want);
        let align = align_of::<libc::cmsghdr>();
        let mut storage = vec![MaybeUninit::<u8>::uninit(); space + align];
        let skip = storage.as_ptr().addr().wrapping_neg() % align;
        let mut control = RecvAncillaryBuffer::new(&mut storage[skip..skip + space]);
        let mut byte = [0u8; 1];
        let got = retry_on_intr(|| {
            recvmsg(
                sock,
                &mut [IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
        })?;
        // Take ownership of every received fd first, so none leaks on error.
        let mut batch = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                batch.extend(fds);
            }
        }
        if got.bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the peer closed after {} of {count} fds", out.len()),
            ));
        }
        if got.flags.contains(ReturnFlags::CTRUNC) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more fds than announced (control data truncated)",
            ));
        }
        if batch.is_empty() || batch.len() > want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a message with {} fds, expected 1 to {want}", batch.len()),
            ));
        }
        out.extend(batch);
    }
    Ok(out)
}

/// The uid of the peer of `sock` (`SO_PEERCRED`).
pub(super) fn peer_uid(sock: BorrowedFd<'_>) -> io::Result<libc::uid_t> {
    Ok(socket_peercred(sock)?.uid.as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn fds_cross_a_socket_in_batches() {
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<std::fs::File> = (0..FDS_PER_MESSAGE + 3)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        let borrowed: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let got = std::thread::scope(|scope| {
            let sender = scope.spawn(|| send_fds(a.as_fd(), &borrowed));
            let got = recv_fds(b.as_fd(), files.len()).unwrap();
            sender.join().unwrap().unwrap();
            got
        });
        assert_eq!(got.len(), files.len());
        use std::os::unix::fs::MetadataExt;
        let null = std::fs::metadata("/dev/null").unwrap().rdev();
        for fd in got {
            assert_eq!(std::fs::File::from(fd).metadata().unwrap().rdev(), null);
        }
        // A peer that closes early is an error, not a hang.
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(recv_fds(b.as_fd(), 1).is_err());
    }

    #[test]
    fn received_fds_are_close_on_exec() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/dev/null").unwrap();
        send_fds(a.as_fd(), &[file.as_fd()]).unwrap();
        let got = recv_fds(b.as_fd(), 1).unwrap();
        let flags = rustix::io::fcntl_getfd(&got[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn more_fds_than_announced_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<std::fs::File> = (0..3)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        let borrowed: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        send_fds(a.as_fd(), &borrowed).unwrap();
        let err = recv_fds(b.as_fd(), 2).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn a_peer_is_known_by_its_uid() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(
            peer_uid(a.as_fd()).unwrap(),
            rustix::process::geteuid().as_raw()
        );
    }

    #[test]
    fn control_space_matches_the_kernel_padding() {
        // CMSG_SPACE on 64-bit Linux: a 16-byte header, payload padded to 8.
        if size_of::<usize>() == 8 {
            assert_eq!(rights_space(1), 24);
            assert_eq!(rights_space(2), 24);
            assert_eq!(rights_space(3), 32);
            assert_eq!(rights_space(FDS_PER_MESSAGE), 16 + 1008);
        }
    }
}
