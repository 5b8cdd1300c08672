//! Page-aligned host memory for DMA staging.
//!
//! A [`StagingBuffer`] owns an anonymous private mapping (what amdgpu's
//! userptr with `ANONONLY` requires), sized to a whole number of pages. It is
//! host memory, not a device file, so it is made with `mmap(2)` directly
//! rather than through [`crate::Driver`]. It never hands its memory to a
//! device by itself: [`crate::copy::CopyEngine`] does that and guards access
//! while a copy may be running.

use std::ptr::NonNull;

use crate::error::{Error, Result};

/// The host page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory arguments.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

/// Page-aligned anonymous host memory, unmapped on drop.
#[derive(Debug)]
pub struct StagingBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer exclusively owns its mapping; access goes through `&self`
// / `&mut self` like a `Vec<u8>`.
unsafe impl Send for StagingBuffer {}
// SAFETY: shared access only yields `&[u8]`, as for a `Vec<u8>`.
unsafe impl Sync for StagingBuffer {}

impl StagingBuffer {
    /// Maps `len` bytes (rounded up to whole pages) of zeroed anonymous
    /// memory.
    pub fn new(len: usize) -> Result<Self> {
        const OP: &str = "mmap staging buffer";
        if len == 0 {
            return Err(Error::invalid(
                OP,
                "a staging buffer needs at least one byte",
            ));
        }
        let len = len
            .checked_next_multiple_of(page_size())
            .ok_or_else(|| Error::invalid(OP, format!("{len} bytes overflow")))?;
        // SAFETY: an anonymous mapping at an address of the kernel's choosing
        // replaces no existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::from_io(OP, &std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| Error::protocol(OP, "mmap returned NULL"))?;
        Ok(StagingBuffer { ptr, len })
    }

    /// Its length in bytes (a multiple of the page size).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a staging buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address (page aligned).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable, initialised (zero-filled by
        // the kernel) bytes owned by `self`; the shared borrow of `self`
        // prevents mutation through this type meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and the exclusive borrow of `self` makes
        // this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for StagingBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is our mapping and no borrow of it outlives
        // `self`. A failing munmap cannot be reported from drop and leaves
        // the pages mapped, which is safe.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_pages_and_is_zeroed_and_writable() {
        let page = page_size();
        let mut buf = StagingBuffer::new(page + 1).unwrap();
        assert_eq!(buf.len(), 2 * page);
        assert_eq!(buf.as_ptr() as usize % page, 0);
        assert!(buf.as_slice().iter().all(|&b| b == 0));
        buf.as_mut_slice()[page] = 0xAB;
        assert_eq!(buf.as_slice()[page], 0xAB);
    }

    #[test]
    fn zero_length_is_refused() {
        assert_eq!(StagingBuffer::new(0).unwrap_err().errno(), libc::EINVAL);
        assert!(StagingBuffer::new(usize::MAX).is_err());
    }
}
