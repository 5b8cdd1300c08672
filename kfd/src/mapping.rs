//! CPU mappings of device memory made through [`Driver::mmap`].
//!
//! A [`DeviceMapping`] owns one `mmap` of a device file (a BO through its
//! render node's fake offset, or a doorbell/event page of `/dev/kfd`) and
//! unmaps it on drop. It never hands out references into the mapping: the
//! device may change the bytes at any time, so access is by copy only.

use std::ffi::{c_int, c_void};
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::Driver;

/// An `mmap` of a device file, unmapped on drop.
#[derive(Debug)]
pub struct DeviceMapping<D: Driver> {
    driver: D,
    ptr: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access
// goes through `&self`/`&mut self` methods that copy bytes, and `D` is `Send`.
unsafe impl<D: Driver> Send for DeviceMapping<D> {}
// SAFETY: shared references only allow copies out of and into the mapping,
// which are not Rust references, and `D` is `Sync`.
unsafe impl<D: Driver> Sync for DeviceMapping<D> {}

impl<D: Driver> DeviceMapping<D> {
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, offset)` through `driver`.
    pub(crate) fn new(
        driver: D,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        prot: c_int,
        op: &'static str,
    ) -> Result<Self> {
        if len == 0 {
            return Err(Error::invalid(op, "cannot map 0 bytes"));
        }
        // SAFETY: no MAP_FIXED, so the kernel picks an unused range and no
        // existing memory is replaced.
        let ptr = unsafe {
            driver.mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd,
                offset,
            )
        }
        .map_err(|err| Error::from_io(op, &err))?;
        Ok(DeviceMapping { driver, ptr, len })
    }

    /// The start of the mapping.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr.cast()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: mappings have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `bytes` into the mapping at `offset`.
    ///
    /// Not ordered with the device: write before submitting work that reads
    /// it (the submission ioctl orders the two).
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        self.check("write to device mapping", offset, bytes.len())?;
        // SAFETY: `offset + bytes.len() <= self.len` (checked), the mapping is
        // live and writable memory of `self.len` bytes, and `bytes` cannot
        // overlap it (it is a Rust slice, the mapping is never lent out).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.as_ptr().as_ptr().add(offset),
                bytes.len(),
            );
        }
        Ok(())
    }

    /// Copies bytes out of the mapping at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check("read from device mapping", offset, out.len())?;
        // SAFETY: the range is inside the live mapping (checked) and `out`
        // is a distinct Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.as_ptr().as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }

    /// Unmaps now, reporting a failing `munmap` (dropping unmaps too, but
    /// cannot report).
    pub fn unmap(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: as in `drop`; `this` is never used or dropped afterwards.
        let ret = unsafe { this.driver.munmap(this.ptr, this.len) };
        // SAFETY: `this.driver` is read exactly once and `this` is not dropped,
        // so the driver is dropped exactly once here.
        drop(unsafe { std::ptr::read(&this.driver) });
        ret.map_err(|err| Error::from_io("munmap", &err))
    }

    fn check(&self, op: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::invalid(
                op,
                format!(
                    "{len} bytes at offset {offset} exceed the {}-byte mapping",
                    self.len
                ),
            )),
        }
    }
}

impl<D: Driver> Drop for DeviceMapping<D> {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the mapping made in `new`, and no
        // reference into it exists (this type never lends one out).
        // A failing munmap leaves the range mapped; drop cannot report it and
        // leaking the range is the only safe fallback.
        let _ = unsafe { self.driver.munmap(self.ptr, self.len) };
    }
}
