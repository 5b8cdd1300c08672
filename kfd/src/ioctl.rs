//! The one typed ioctl entry point every wrapper in this crate goes through.
//!
//! [`ioctl`] checks that the request code's size field matches the argument
//! type, retries `EINTR`/`EAGAIN` a bounded number of times (as libhsakmt's
//! `kmtIoctl` and the CRIU plugin's `drmIoctl` do) and turns a failure into an
//! [`Error`] naming the operation. It never interprets the argument: typed
//! wrappers in [`crate::kfd`] and [`crate::render`] do that.

use std::ffi::{c_int, c_void};
use std::os::fd::BorrowedFd;

use zerocopy::{FromBytes, IntoBytes};

use crate::error::{Error, Result};
use crate::Driver;

/// How many times an ioctl interrupted by `EINTR` or refused with `EAGAIN` is
/// issued again before the error is returned (libhsakmt uses the same bound).
pub const MAX_RETRIES: u32 = 200;

/// Performs `ioctl(fd, request, arg)` through `driver`, retrying `EINTR` and
/// `EAGAIN` up to [`MAX_RETRIES`] times.
///
/// `op` names the operation in the error (`"CRIU_OP CHECKPOINT"`). The size
/// encoded in `request` must equal `size_of::<T>()`; a mismatch is rejected
/// with [`Error::InvalidArgument`] before the system call, so the kernel can
/// never read or write past `arg`. `T: FromBytes` makes any bytes the kernel
/// writes back a valid `T`; `T: IntoBytes` guarantees the struct has no
/// uninitialised padding for the kernel to read.
///
/// On success returns the ioctl's non-negative result.
///
/// # Safety
/// Every user pointer inside `arg` must be valid for the use the kernel makes
/// of it during the call (reads and writes of the array length it describes),
/// and host memory the call hands to the device (userptr) must stay valid
/// until the device no longer uses it — the contract of [`Driver::ioctl`].
pub unsafe fn ioctl<D, T>(
    driver: &D,
    fd: BorrowedFd<'_>,
    op: &'static str,
    request: u32,
    arg: &mut T,
) -> Result<c_int>
where
    D: Driver + ?Sized,
    T: IntoBytes + FromBytes,
{
    let encoded = kfd_sys::_IOC_SIZE(request);
    if encoded != size_of::<T>() {
        return Err(Error::invalid(
            op,
            format!(
                "request {request:#010x} encodes a {encoded}-byte argument, but the argument type has {} bytes",
                size_of::<T>()
            ),
        ));
    }
    let ptr = (arg as *mut T).cast::<c_void>();
    let mut retries = 0;
    loop {
        // SAFETY: `ptr` points to a live, exclusively borrowed `T` of exactly
        // `_IOC_SIZE(request)` bytes (checked above), so the kernel's copy-in
        // and copy-out stay inside it; the pointers inside it are valid per
        // this function's contract.
        match unsafe { driver.ioctl(fd, u64::from(request), ptr) } {
            Ok(ret) => return Ok(ret),
            Err(err) => {
                let errno = err.raw_os_error().unwrap_or(libc::EIO);
                if (errno == libc::EINTR || errno == libc::EAGAIN) && retries < MAX_RETRIES {
                    retries += 1;
                    continue;
                }
                return Err(Error::Os { op, errno });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{DeviceNumber, FdKind};
    use std::io;
    use std::os::fd::{AsFd, OwnedFd};
    use std::path::Path;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A driver whose ioctl fails with `errno` the first `failures` times.
    struct Flaky {
        errno: i32,
        failures: u32,
        calls: AtomicU32,
    }

    impl Driver for Flaky {
        fn open(&self, _: &Path, _: c_int) -> io::Result<OwnedFd> {
            Err(io::Error::from_raw_os_error(libc::ENOENT))
        }
        unsafe fn ioctl(&self, _: BorrowedFd<'_>, _: u64, arg: *mut c_void) -> io::Result<c_int> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                return Err(io::Error::from_raw_os_error(self.errno));
            }
            // SAFETY: the tests below pass an 8-byte argument.
            unsafe { arg.cast::<u64>().write_unaligned(0x1234) };
            Ok(7)
        }
        unsafe fn mmap(
            &self,
            _: *mut c_void,
            _: usize,
            _: c_int,
            _: c_int,
            _: BorrowedFd<'_>,
            _: u64,
        ) -> io::Result<NonNull<c_void>> {
            Err(io::Error::from_raw_os_error(libc::ENODEV))
        }
        unsafe fn munmap(&self, _: NonNull<c_void>, _: usize) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EINVAL))
        }
        fn fd_kind(&self, _: BorrowedFd<'_>) -> io::Result<FdKind> {
            Ok(FdKind::Other)
        }
        fn device_number(&self, _: &Path) -> io::Result<DeviceNumber> {
            Err(io::Error::from_raw_os_error(libc::ENOENT))
        }
    }

    fn flaky(errno: i32, failures: u32) -> Flaky {
        Flaky {
            errno,
            failures,
            calls: AtomicU32::new(0),
        }
    }

    const REQ: u32 = kfd_sys::_IOWR::<u64>(b'K', 0x01);

    #[test]
    fn eintr_and_eagain_are_retried() {
        let file = std::fs::File::open("/dev/null").unwrap();
        for errno in [libc::EINTR, libc::EAGAIN] {
            let driver = flaky(errno, 5);
            let mut arg = 0u64;
            // SAFETY: a plain integer argument, no pointers.
            let ret = unsafe { ioctl(&driver, file.as_fd(), "TEST", REQ, &mut arg) }.unwrap();
            assert_eq!(ret, 7);
            assert_eq!(arg, 0x1234);
            assert_eq!(driver.calls.load(Ordering::SeqCst), 6);
        }
    }

    #[test]
    fn retries_are_bounded() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let driver = flaky(libc::EINTR, u32::MAX);
        let mut arg = 0u64;
        // SAFETY: a plain integer argument, no pointers.
        let err = unsafe { ioctl(&driver, file.as_fd(), "TEST", REQ, &mut arg) }.unwrap_err();
        assert_eq!(err.errno(), libc::EINTR);
        assert_eq!(driver.calls.load(Ordering::SeqCst), MAX_RETRIES + 1);
    }

    #[test]
    fn other_errors_are_not_retried() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let driver = flaky(libc::EINVAL, u32::MAX);
        let mut arg = 0u64;
        // SAFETY: a plain integer argument, no pointers.
        let err =
            unsafe { ioctl(&driver, file.as_fd(), "GET_VERSION", REQ, &mut arg) }.unwrap_err();
        assert_eq!(driver.calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            err.to_string(),
            "GET_VERSION failed: Invalid argument (EINVAL)"
        );
    }

    #[test]
    fn size_mismatch_is_rejected_before_the_call() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let driver = flaky(libc::EINVAL, 0);
        let mut arg = 0u32;
        // SAFETY: the call is refused before reaching the driver.
        let err = unsafe { ioctl(&driver, file.as_fd(), "TEST", REQ, &mut arg) }.unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL);
        assert_eq!(driver.calls.load(Ordering::SeqCst), 0);
        assert!(err.to_string().contains("8-byte"), "{err}");
    }
}
