//! User memory access for ioctl handlers: `copy_from_user` /
//! `copy_to_user` on the caller's pointers, and marshalling a typed ioctl
//! argument through a kernel-side buffer.
//!
//! This module never decides what an ioctl means; it only moves bytes, with
//! the size limits and `EFAULT`s of the kernel's helpers.

use std::ffi::{c_int, c_void};

use crate::Errno;

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
