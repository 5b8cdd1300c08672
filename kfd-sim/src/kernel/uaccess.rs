//! User memory access for ioctl handlers: `copy_from_user` /
//! `copy_to_user` on the caller's pointers, and marshalling a typed ioctl
//! argument through a kernel-side buffer.
//!
//! This module never decides what an ioctl means; it only moves bytes, with
//! the size limits and `EFAULT`s of the kernel's helpers.
//!
//! Whose memory a user pointer names is the calling thread's [`Space`]: this
//! host process's own ([`Space::Local`], every in-process [`SimDriver`]
//! call), or, while a [`crate::remote`] server thread runs a call of a
//! client process, that process's ([`Space::Remote`]), reached with
//! `process_vm_readv`/`process_vm_writev` as the kernel's `copy_*_user`
//! reach `current->mm`. Fd numbers inside arguments name the same caller's
//! fd table: [`user_fd`] (the kernel's `fdget`), [`install_fd`]
//! (`fd_install` of a new file) and [`close_user_fd`] (the rollback of an
//! install within the same call).
//!
//! [`SimDriver`]: crate::SimDriver

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};

use ::kfd::Errno;

/// The address space user pointers of the current call refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Space {
    /// This host process's memory.
    #[default]
    Local,
    /// The memory of host process `pid` (a remote client).
    Remote(libc::pid_t),
}

thread_local! {
    static SPACE: Cell<Space> = const { Cell::new(Space::Local) };
    /// The connection of the remote call this thread runs (-1: none).
    static CONN: Cell<RawFd> = const { Cell::new(-1) };
}

/// The address space of the call this thread is running.
pub(crate) fn current_space() -> Space {
    SPACE.with(Cell::get)
}

/// Runs `f` with user pointers naming host process `pid`'s memory and fd
/// numbers its fd table, reached through connection `conn` (open for the
/// whole of `f`).
pub(crate) fn in_remote_space<R>(pid: libc::pid_t, conn: RawFd, f: impl FnOnce() -> R) -> R {
    struct Restore(Space, RawFd);
    impl Drop for Restore {
        fn drop(&mut self) {
            SPACE.with(|s| s.set(self.0));
            CONN.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(
        SPACE.with(|s| s.replace(Space::Remote(pid))),
        CONN.with(|c| c.replace(conn)),
    );
    f()
}

/// An fd of the caller's table, held for the call (`fdget`).
#[derive(Debug)]
pub(crate) enum UserFd {
    /// A number of this process's table (an in-process caller).
    Local(RawFd),
    /// A copy of a remote client's fd, passed over its connection.
    Remote(OwnedFd),
}

impl UserFd {
    /// The fd in this process.
    pub(crate) fn raw(&self) -> RawFd {
        match self {
            UserFd::Local(fd) => *fd,
            UserFd::Remote(fd) => fd.as_raw_fd(),
        }
    }
}

/// The caller's fd `fd`: `EBADF` when it is not open there.
pub(crate) fn user_fd(fd: RawFd) -> Result<UserFd, Errno> {
    match current_space() {
        Space::Local => Ok(UserFd::Local(fd)),
        Space::Remote(_) => crate::remote::client_fd(CONN.with(Cell::get), fd).map(UserFd::Remote),
    }
}

/// Installs `file` in the caller's fd table; its number there.
pub(crate) fn install_fd(file: OwnedFd) -> Result<RawFd, Errno> {
    match current_space() {
        Space::Local => Ok(file.into_raw_fd()),
        Space::Remote(_) => crate::remote::client_install(CONN.with(Cell::get), file),
    }
}

/// Closes fd `fd` this call installed in the caller's table (a rollback:
/// the caller never saw it).
pub(crate) fn close_user_fd(fd: RawFd) {
    match current_space() {
        Space::Local => {
            // SAFETY: `fd` was installed by this call, never handed out, and
            // is closed exactly once here.
            unsafe { libc::close(fd) };
        }
        Space::Remote(_) => crate::remote::client_close(CONN.with(Cell::get), fd),
    }
}

/// The `/proc` maps file of the current call's address space.
pub(crate) fn maps_path() -> String {
    match current_space() {
        Space::Local => "/proc/self/maps".to_owned(),
        Space::Remote(pid) => format!("/proc/{pid}/maps"),
    }
}

/// Host pids whose memory the device may still reach (live clients of
/// `crate::remote`), with the number of holds on each (one per live host
/// instance, one per other connection); `crate::remote` keeps the count.
pub(crate) static LIVE_CLIENTS: Mutex<BTreeMap<libc::pid_t, usize>> = Mutex::new(BTreeMap::new());

/// Whether host process `pid` is a client being served (its userptr pages
/// still its memory).
pub(crate) fn client_alive(pid: libc::pid_t) -> bool {
    LIVE_CLIENTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains_key(&pid)
}

/// Reads `buf.len()` bytes at `addr` of process `pid`: `EFAULT` unless all
/// of them could be read, `ESRCH` when the process is gone.
pub(crate) fn remote_read(pid: libc::pid_t, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    let mut done = 0usize;
    while done < buf.len() {
        let local = libc::iovec {
            iov_base: buf[done..].as_mut_ptr().cast(),
            iov_len: buf.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut c_void,
            iov_len: buf.len() - done,
        };
        // SAFETY: `local` describes the unwritten tail of `buf`, ours and
        // writable; the remote iovec is only read by the kernel, which checks
        // it against the other process's mappings.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(Errno(libc::EFAULT)),
            _ => return Err(remote_errno()),
        }
    }
    Ok(())
}

/// Writes `data` at `addr` of process `pid`, as [`remote_read`] reads.
pub(crate) fn remote_write(pid: libc::pid_t, addr: u64, data: &[u8]) -> Result<(), Errno> {
    let mut done = 0usize;
    while done < data.len() {
        let local = libc::iovec {
            iov_base: data[done..].as_ptr() as *mut c_void,
            iov_len: data.len() - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut c_void,
            iov_len: data.len() - done,
        };
        // SAFETY: the kernel only reads `local` (the unwritten tail of
        // `data`) and writes the other process's memory, never ours.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(Errno(libc::EFAULT)),
            _ => return Err(remote_errno()),
        }
    }
    Ok(())
}

/// The errno of a failed `process_vm_*` call: `ESRCH` stays (the process is
/// gone), everything else is the `EFAULT` `copy_*_user` answers.
fn remote_errno() -> Errno {
    match Errno::last() {
        Errno(libc::ESRCH) => Errno(libc::ESRCH),
        Errno(libc::EPERM) => Errno(libc::EPERM),
        _ => Errno(libc::EFAULT),
    }
}

/// Largest buffer a single copy-in may need (1 GiB); larger requests fail
/// with `ENOMEM` instead of exhausting host memory.
pub(crate) const MAX_KERNEL_BUFFER: usize = 1 << 30;

/// Copies `len` bytes from the caller's memory at `addr` (`copy_from_user`).
/// A null address is `EFAULT`.
///
/// Every user pointer reaching the simulator comes inside an ioctl argument,
/// whose validity the caller of [`Driver::ioctl`] guarantees for the size the
/// kernel uses; the simulator only reads the sizes the kernel would.
pub(crate) fn copy_from_user(addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if len > MAX_KERNEL_BUFFER {
        // kvmalloc of an absurd size fails in the kernel too.
        return Err(Errno(libc::ENOMEM));
    }
    if addr == 0 {
        return Err(Errno(libc::EFAULT));
    }
    let mut out = vec![0u8; len];
    if let Space::Remote(pid) = current_space() {
        remote_read(pid, addr, &mut out).map_err(|_| Errno(libc::EFAULT))?;
        return Ok(out);
    }
    // SAFETY: the Driver::ioctl contract makes the caller guarantee that user
    // pointers inside the argument are valid for the size the kernel reads;
    // `out` is a fresh buffer of `len` bytes that cannot overlap it.
    unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, out.as_mut_ptr(), len) };
    Ok(out)
}

/// Copies `data` to the caller's memory at `addr` (`copy_to_user`). A null
/// address is `EFAULT`.
pub(crate) fn copy_to_user(addr: u64, data: &[u8]) -> Result<(), Errno> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno(libc::EFAULT));
    }
    if let Space::Remote(pid) = current_space() {
        return remote_write(pid, addr, data).map_err(|_| Errno(libc::EFAULT));
    }
    // SAFETY: the Driver::ioctl contract makes the caller guarantee that user
    // pointers inside the argument are valid for writes of the size the
    // kernel writes; `data` is simulator memory and cannot overlap it.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as usize as *mut u8, data.len()) };
    Ok(())
}

/// The kernel's argument marshalling for one ioctl: a buffer of
/// `max(user_size, kernel_size)` bytes, the first `user_size` copied in when
/// `copy_in` (zero-filled otherwise), the handler run on it, and the first
/// `user_size` bytes copied back when `copy_out` — also when the handler
/// failed. A failed copy-in is `EFAULT`; a failed copy-out turns any result
/// into `EFAULT`.
///
/// # Safety
/// `arg` must be valid for reads and writes of `user_size` bytes (the
/// [`Driver::ioctl`] contract).
pub(crate) unsafe fn marshal(
    arg: *mut c_void,
    user_size: usize,
    kernel_size: usize,
    copy_in: bool,
    copy_out: bool,
    handler: impl FnOnce(&mut [u8]) -> Result<c_int, Errno>,
) -> Result<c_int, Errno> {
    let mut buf = vec![0u8; user_size.max(kernel_size)];
    if (copy_in || copy_out) && user_size > 0 && arg.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    if copy_in && user_size > 0 {
        // SAFETY: the caller guarantees `arg` is valid for `user_size` bytes;
        // `buf` holds at least that many and is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(arg as *const u8, buf.as_mut_ptr(), user_size) };
    }
    let ret = handler(&mut buf);
    if copy_out && user_size > 0 {
        // SAFETY: as above, `arg` is valid for writes of `user_size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), arg as *mut u8, user_size) };
    }
    ret
}

/// Runs `f` on a typed copy of the argument at the start of `buf` and writes
/// the (possibly updated) struct back, whatever `f` returns.
pub(crate) fn typed<T, R>(buf: &mut [u8], f: impl FnOnce(&mut T) -> R) -> R
where
    T: zerocopy::FromBytes + zerocopy::IntoBytes + zerocopy::Immutable + zerocopy::KnownLayout,
{
    let size = std::mem::size_of::<T>();
    // The marshalling buffer is never smaller than the kernel's struct; a
    // shorter one would be a dispatch-table bug, answered with a zeroed struct.
    let mut value = T::read_from_prefix(buf)
        .map(|(v, _)| v)
        .unwrap_or_else(|_| T::new_zeroed());
    let r = f(&mut value);
    if buf.len() >= size {
        buf[..size].copy_from_slice(value.as_bytes());
    }
    r
}
