//! Anonymous host memory: one owner of `mmap(MAP_ANONYMOUS)` for the stack.
//!
//! An [`AnonymousMapping`] is `len` bytes of zero-filled, readable and
//! writable memory from
//! `mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | <sharing> [| MAP_NORESERVE], -1, 0)`,
//! optionally at a required address (`MAP_FIXED_NOREPLACE`), unmapped on
//! drop. It backs [`StagingBuffer`](crate::StagingBuffer), the simulated
//! applications' host memory in `kfd-sim`, and shared tables that must
//! survive `fork` (a CRIU plugin's restore-time handle table):
//!
//! ```
//! use kfd::anon::{AnonymousMapping, AnonymousOptions, Sharing};
//!
//! // Private memory, e.g. for a userptr BO (amdgpu's ANONONLY wants this).
//! let mut private = AnonymousMapping::private(4096)?;
//! private.as_mut_slice()[0] = 1;
//!
//! // Shared with processes forked later; pages are only committed when
//! // touched (MAP_NORESERVE), so a large, sparsely used table is cheap.
//! let table = AnonymousOptions::new(Sharing::Shared)
//!     .no_reserve()
//!     .map(1 << 20)?;
//! let slots = table.as_ptr().cast::<std::sync::atomic::AtomicU64>();
//! # let _ = slots;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! This module never maps a file or a device (those go through
//! [`crate::Driver::mmap`]) and never replaces an existing mapping.

use std::ffi::c_void;
use std::io;
use std::ptr::NonNull;

/// Who sees writes to the pages after `fork`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// `MAP_PRIVATE`: the pages are copied on write after `fork`; what
    /// amdgpu's `AMDGPU_GEM_USERPTR_ANONONLY` requires of userptr memory.
    Private,
    /// `MAP_SHARED`: one set of (shmem) pages, seen and written by every
    /// process forked after the mapping was made.
    Shared,
}

/// How to make an [`AnonymousMapping`]: sharing, reservation and placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnonymousOptions {
    sharing: Sharing,
    no_reserve: bool,
    fixed_at: Option<usize>,
    huge_pages: bool,
    dont_fork: bool,
}

impl AnonymousOptions {
    /// Read-write anonymous memory with `sharing`, at an address the kernel
    /// picks, with swap reserved for it.
    pub const fn new(sharing: Sharing) -> Self {
        AnonymousOptions {
            sharing,
            no_reserve: false,
            fixed_at: None,
            huge_pages: false,
            dont_fork: false,
        }
    }

    /// Adds `MAP_NORESERVE`: no swap is reserved, so address space can be
    /// much larger than what is touched (a write may then fail with
    /// `SIGBUS`/OOM under memory pressure instead of at `mmap` time).
    pub const fn no_reserve(mut self) -> Self {
        self.no_reserve = true;
        self
    }

    /// Requires the mapping to start at `addr` (page aligned), with
    /// `MAP_FIXED_NOREPLACE`: mapping fails with `EEXIST` when anything is
    /// mapped in the range already, instead of replacing it.
    pub const fn fixed_at(mut self, addr: usize) -> Self {
        self.fixed_at = Some(addr);
        self
    }

    /// Asks for transparent huge pages (`madvise(MADV_HUGEPAGE)`): where
    /// the kernel has them (`enabled` set to `always` or `madvise`), memory
    /// is faulted in and pinned 2 MiB at a time instead of 4 KiB, so a
    /// first touch of a large buffer costs hundreds of times fewer faults.
    /// A hint: a kernel without them maps small pages as before.
    pub const fn huge_pages(mut self) -> Self {
        self.huge_pages = true;
        self
    }

    /// Keeps the memory out of processes forked later
    /// (`madvise(MADV_DONTFORK)`): a child has nothing mapped there, and
    /// the caller's pages are never shared copy-on-write. Memory a device
    /// reaches through its pages (a userptr BO) needs this: after a fork
    /// the caller's next write would move it to a new page while the
    /// device goes on with the old one, now the child's. Not for
    /// [`Sharing::Shared`] memory meant to survive `fork`.
    pub const fn dont_fork(mut self) -> Self {
        self.dont_fork = true;
        self
    }

    /// `mmap(2)` of `len` bytes with these options.
    ///
    /// Errors: `EINVAL` for `len == 0` or an unaligned fixed address,
    /// `EEXIST` when the fixed range is taken (also on kernels before 4.17,
    /// which ignore `MAP_FIXED_NOREPLACE`: a mapping placed elsewhere is
    /// undone), `ENOMEM` when the memory or address space is not there.
    #[doc(alias = "mmap")]
    pub fn map(self, len: usize) -> io::Result<AnonymousMapping> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut flags = libc::MAP_ANONYMOUS
            | match self.sharing {
                Sharing::Private => libc::MAP_PRIVATE,
                Sharing::Shared => libc::MAP_SHARED,
            };
        if self.no_reserve {
            flags |= libc::MAP_NORESERVE;
        }
        let hint = match self.fixed_at {
            Some(addr) => {
                flags |= libc::MAP_FIXED_NOREPLACE;
                addr as *mut c_void
            }
            None => std::ptr::null_mut(),
        };
        // SAFETY: an anonymous mapping aliases no Rust object: without a
        // fixed address the kernel picks an unused range, and
        // MAP_FIXED_NOREPLACE fails rather than replace an existing mapping
        // (older kernels treat `hint` as a hint, checked below).
        let ptr =
            unsafe { libc::mmap(hint, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let Some(ptr) = NonNull::new(ptr.cast::<u8>()) else {
            // Only a fixed mapping at address 0 can land there; the kernel's
            // mmap_min_addr forbids that for unprivileged callers.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let mapping = AnonymousMapping { ptr, len };
        if self.huge_pages {
            // SAFETY: the range is exactly the mapping made above, owned by
            // `mapping` and not yet touched; MADV_HUGEPAGE changes how its
            // pages are backed, never their contents. Failure (EINVAL without
            // THP support) leaves small pages, which is fine for a hint.
            let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        }
        if self.dont_fork {
            // SAFETY: the range is exactly the mapping made above, owned by
            // `mapping`; MADV_DONTFORK changes only what a later fork maps,
            // never the contents.
            if unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_DONTFORK) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        match self.fixed_at {
            Some(addr) if addr != ptr.as_ptr() as usize => {
                drop(mapping);
                Err(io::Error::from_raw_os_error(libc::EEXIST))
            }
            _ => Ok(mapping),
        }
    }
}

/// Zero-filled anonymous read-write memory, unmapped on drop (see the
/// [module docs](self)).
///
/// The kernel maps whole pages; [`len`](AnonymousMapping::len) and the
/// slices cover the `len` bytes asked for.
#[derive(Debug)]
pub struct AnonymousMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is exclusively owned and not tied to a thread; access
// goes through `&self` / `&mut self` as for a `Vec<u8>`.
unsafe impl Send for AnonymousMapping {}
// SAFETY: shared access through this type only yields `&[u8]` or a raw
// pointer, as for a `Vec<u8>`.
unsafe impl Sync for AnonymousMapping {}

impl AnonymousMapping {
    /// `len` bytes of `MAP_PRIVATE` memory at an address the kernel picks.
    pub fn private(len: usize) -> io::Result<Self> {
        AnonymousOptions::new(Sharing::Private).map(len)
    }

    /// `len` bytes of `MAP_SHARED` memory at an address the kernel picks,
    /// shared with processes forked afterwards (add `MAP_NORESERVE` through
    /// [`AnonymousOptions::no_reserve`]).
    pub fn shared(len: usize) -> io::Result<Self> {
        AnonymousOptions::new(Sharing::Shared).map(len)
    }

    /// The first byte (page aligned).
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The address of the first byte, as a user pointer for an ioctl.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Its length in bytes, as asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an empty mapping cannot be made.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    ///
    /// For [`Sharing::Shared`] memory another process may write meanwhile;
    /// use [`as_ptr`](Self::as_ptr) with atomics for data written
    /// concurrently. The same holds for memory a device writes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, initialised (zero
        // filled by the kernel) and owned by `self`; the shared borrow of
        // `self` prevents mutation through this type meanwhile.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and the exclusive borrow of `self` makes
        // this the only reference through this type.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Gives up ownership without unmapping: the memory stays mapped until
    /// the caller `munmap`s `(ptr, len)` or the process exits.
    pub fn into_raw(self) -> (NonNull<u8>, usize) {
        let raw = (self.ptr, self.len);
        std::mem::forget(self);
        raw
    }
}

impl Drop for AnonymousMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the mapping made in `map`, unmapped once,
        // here; no borrow of it outlives `self`. A failing munmap cannot be
        // reported from drop and leaves the pages mapped, which is safe.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The value after `key` (`VmFlags:`, `THPeligible:`) in the
/// `/proc/self/smaps` entry of the mapping holding `addr`, trimmed.
#[cfg(test)]
pub(crate) fn smaps_value(addr: usize, key: &str) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            });
        if let Some((start, end)) = range {
            inside = (start..end).contains(&addr);
            continue;
        }
        if inside {
            if let Some(value) = line.strip_prefix(key) {
                return Some(value.trim().to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> usize {
        crate::staging::page_size()
    }

    #[test]
    fn private_memory_is_zeroed_writable_and_page_aligned() {
        let mut map = AnonymousMapping::private(page() + 1).unwrap();
        assert_eq!(map.len(), page() + 1);
        assert_eq!(map.addr() % page(), 0);
        assert_eq!(map.as_ptr().as_ptr() as usize, map.addr());
        assert!(map.as_slice().iter().all(|&b| b == 0));
        map.as_mut_slice()[page()] = 0xAB;
        assert_eq!(map.as_slice()[page()], 0xAB);
    }

    /// The `THPeligible` line of the `/proc/self/smaps` entry holding
    /// `addr`.
    fn thp_eligible(addr: usize) -> Option<bool> {
        smaps_value(addr, "THPeligible:").map(|v| v == "1")
    }

    #[test]
    fn huge_pages_ask_for_transparent_huge_pages_where_the_kernel_has_them() {
        const LEN: usize = 8 << 20;
        let mut huge = AnonymousOptions::new(Sharing::Private)
            .huge_pages()
            .map(LEN)
            .unwrap();
        huge.as_mut_slice()[LEN - 1] = 3;
        assert_eq!(huge.as_slice()[LEN - 1], 3);
        assert!(huge.as_slice()[..LEN - 1].iter().all(|&b| b == 0));
        let plain = AnonymousMapping::private(LEN).unwrap();
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        match (thp_eligible(huge.addr()), thp_eligible(plain.addr())) {
            (Some(asked), Some(not_asked)) if mode.contains("[madvise]") => {
                assert!(asked, "MADV_HUGEPAGE was not applied");
                assert!(!not_asked, "small-page memory became eligible");
            }
            (Some(asked), _) if mode.contains("[always]") => assert!(asked),
            // `never`, no THP in the kernel, or no THPeligible line (kernels
            // before 5.0): small pages, still usable, checked above.
            _ => eprintln!("transparent huge pages unavailable here ({mode:?}): usability only"),
        }
    }

    #[test]
    fn shared_no_reserve_memory_is_usable() {
        let mut map = AnonymousOptions::new(Sharing::Shared)
            .no_reserve()
            .map(64 << 20)
            .unwrap();
        map.as_mut_slice()[(64 << 20) - 1] = 7;
        assert_eq!(map.as_slice()[(64 << 20) - 1], 7);
        let shared = AnonymousMapping::shared(page()).unwrap();
        assert!(shared.as_slice().iter().all(|&b| b == 0));
    }

    #[test]
    fn zero_length_is_einval() {
        let err = AnonymousMapping::private(0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn fixed_placement_never_replaces_a_mapping() {
        let taken = AnonymousMapping::private(2 * page()).unwrap();
        let err = AnonymousOptions::new(Sharing::Private)
            .fixed_at(taken.addr() + page())
            .map(page())
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));

        drop(taken);

        // A freed range is free for a fixed placement. Other test threads
        // may map into the hole between the munmap and the fixed mmap (that
        // is EEXIST, the rule above at work), so take a fresh range and try
        // again; a dozen losses in a row would be no race but a bug.
        for _ in 0..12 {
            let (ptr, len) = AnonymousMapping::private(2 * page()).unwrap().into_raw();
            // SAFETY: `into_raw` handed the mapping over; nothing refers to it.
            assert_eq!(unsafe { libc::munmap(ptr.as_ptr().cast(), len) }, 0);
            match AnonymousOptions::new(Sharing::Private)
                .fixed_at(ptr.as_ptr() as usize)
                .map(len)
            {
                Ok(mut again) => {
                    assert_eq!(again.as_ptr(), ptr);
                    assert!(again.as_mut_slice().iter().all(|&b| b == 0));
                    return;
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => panic!("fixed placement in a freed range: {e}"),
            }
        }
        panic!("a freed range was taken by another mapping twelve times in a row");
    }

    #[test]
    fn unaligned_fixed_address_is_einval() {
        let taken = AnonymousMapping::private(page()).unwrap();
        let err = AnonymousOptions::new(Sharing::Private)
            .fixed_at(taken.addr() + 1)
            .map(page())
            .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }
}
