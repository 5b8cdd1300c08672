//! Page-aligned host memory for DMA staging.
//!
//! A [`StagingBuffer`] owns an anonymous private mapping (what amdgpu's
//! userptr with `ANONONLY` requires), sized to a whole number of pages. It is
//! host memory, not a device file, so it is an
//! [`AnonymousMapping`] rather than a mapping made through [`crate::Driver`]. It never hands its memory to a
//! device by itself: [`crate::copy::CopyEngine`] does that and guards access
//! while a copy may be running.
//!
//! The mapping asks for transparent huge pages
//! ([`AnonymousOptions::huge_pages`]): a dump of many processes at once
//! faults in fresh staging memory for each, and 2 MiB pages cut that cost
//! (measured on the 8-process data-parallel dump of `benches`: the
//! simulated copy engines' fault time per dump fell from 0.11–0.16 to
//! 0.035–0.048 CPU-seconds, the dumps 15–22 % faster). Under the kernel's
//! default `defrag=madvise` such a fault may compact memory first; where
//! that is unwanted, THP `enabled=never` gives small pages as before.
//!
//! It is never inherited by a fork ([`AnonymousOptions::dont_fork`]): the
//! dumper forks guardians while copy engines write staging buffers through
//! their userptr BOs, and pages shared copy-on-write with a child would
//! leave the device writing the child's copy.

use crate::anon::{AnonymousMapping, AnonymousOptions, Sharing};
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
    map: AnonymousMapping,
}

impl StagingBuffer {
    /// Maps `len` bytes (rounded up to whole pages) of zeroed anonymous
    /// memory, transparent huge pages asked for, kept out of forks (module
    /// docs).
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
        let map = AnonymousOptions::new(Sharing::Private)
            .huge_pages()
            .dont_fork()
            .map(len)
            .map_err(|e| Error::from_io(OP, &e))?;
        Ok(StagingBuffer { map })
    }

    /// Its length in bytes (a multiple of the page size).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a staging buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The start address (page aligned).
    pub fn as_ptr(&self) -> *const u8 {
        self.map.as_ptr().as_ptr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.map.as_slice()
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.map.as_mut_slice()
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
    fn staging_memory_is_not_inherited_by_forks() {
        // A fork (the dump guardian) while a copy engine writes the buffer
        // through its userptr BO must not share its pages copy-on-write:
        // the parent's next write would move it to a new page while the
        // GPU writes the old one, now the child's.
        let mut buf = StagingBuffer::new(3 * page_size()).unwrap();
        buf.as_mut_slice()[0] = 1;
        let addr = buf.as_ptr() as usize;
        let flags = crate::anon::smaps_value(addr, "VmFlags:").expect("the buffer is in smaps");
        assert!(
            flags.split_whitespace().any(|f| f == "dc"),
            "no MADV_DONTFORK (\"dc\") on the staging buffer: {flags:?}"
        );
        // SAFETY: the child only calls mincore and _exit (async-signal-safe)
        // on memory of its own, then ends without returning into the harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut vec = [0u8; 3];
            // SAFETY: `vec` holds one byte per page of the range asked about;
            // mincore answers ENOMEM for a range that is not mapped.
            let ret = unsafe {
                libc::mincore(addr as *mut libc::c_void, 3 * page_size(), vec.as_mut_ptr())
            };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ret < 0 { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above; `status` is writable.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the forked child has the staging buffer mapped"
        );
        assert_eq!(buf.as_slice()[0], 1);
    }

    #[test]
    fn zero_length_is_refused() {
        assert_eq!(StagingBuffer::new(0).unwrap_err().errno(), libc::EINVAL);
        assert!(StagingBuffer::new(usize::MAX).is_err());
    }
}
