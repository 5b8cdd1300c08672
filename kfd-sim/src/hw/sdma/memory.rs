//! The memory an SDMA job reads and writes: BO memfds and simulated host
//! memory behind [`DeviceMemory`], and the job's snapshot of its GPU VM
//! ([`VmView`]) that turns GPU virtual addresses into those backings.
//!
//! Atomic packets (SDMA ATOMIC, an AQL completion signal's decrement) and
//! a shader's atomics use [`VmView::update`] (a read-modify-write of a 4- or
//! 8-byte word; [`VmView::fetch_add_u64`] is its add): a real atomic
//! instruction on the word where the memory is mapped shared in this
//! process (a BO's memfd, this process's own pinned pages), so an update by
//! the CPU or another engine is never lost; memory reached only by copying
//! (another process's, or pages reached through `process_vm_readv`) is
//! updated under one process-wide lock, atomic with respect to every engine
//! but not to the CPU of the process owning it.
//!
//! This module never touches memory outside the ranges a [`VmView`] maps,
//! and never decodes packets or schedules jobs.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Serializes the read-modify-write of atomic packets on memory reached
/// only by copying: every engine of every simulated machine in this
/// process takes it (see the module docs).
static COPIED_ATOMICS: Mutex<()> = Mutex::new(());

/// Runs `rmw`, a read-modify-write by copies, under [`COPIED_ATOMICS`].
fn copied_atomic<T>(rmw: impl FnOnce() -> T) -> T {
    let _held = COPIED_ATOMICS
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    rmw()
}

/// A read-modify-write of a word: its width and the new value from the old.
#[derive(Clone, Copy)]
pub(crate) struct Rmw<'a> {
    /// 4 or 8 bytes.
    pub(crate) wide: bool,
    /// The new value from the old one (called again when another writer
    /// got in between; zero-extended for a 4-byte word, whose new value is
    /// truncated).
    pub(crate) f: &'a dyn Fn(u64) -> u64,
}

impl Rmw<'_> {
    /// Bytes of the word.
    pub(crate) fn len(self) -> usize {
        if self.wide {
            8
        } else {
            4
        }
    }

    /// The new bytes of a word holding `old` (little-endian); returns the
    /// old value.
    fn apply(self, bytes: &mut [u8; 8]) -> u64 {
        let n = self.len();
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&bytes[..n]);
        let old = u64::from_le_bytes(w);
        let new = (self.f)(old);
        bytes[..n].copy_from_slice(&new.to_le_bytes()[..n]);
        old
    }
}

/// The read-modify-write `rmw` on `memory` by copies, under
/// [`COPIED_ATOMICS`]; the previous value.
fn copied_update<M: DeviceMemory + ?Sized>(
    memory: &M,
    offset: u64,
    rmw: Rmw<'_>,
) -> Result<u64, MemoryError> {
    copied_atomic(|| {
        let n = rmw.len();
        let mut word = [0u8; 8];
        memory.read_at(offset, &mut word[..n])?;
        let old = rmw.apply(&mut word);
        memory.write_at(offset, &word[..n])?;
        Ok(old)
    })
}

/// Applies `rmw` to the word at host address `addr`, atomically (a
/// compare-and-swap loop), and returns its previous value.
///
/// # Safety
/// `addr` must be aligned to the word's size and valid for reads and
/// writes of it for the duration of the call.
unsafe fn host_update(addr: usize, rmw: Rmw<'_>) -> u64 {
    if rmw.wide {
        // SAFETY: the caller guarantees alignment and validity for the
        // call's duration, which is the only time the reference lives. The
        // word is shared memory that others (the application, other
        // engines) access with atomic instructions of the same size, as
        // they must for the device's atomics; a non-atomic access of theirs
        // is their race, as it is with a real GPU's.
        let word = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        match word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some((rmw.f)(v))) {
            Ok(old) | Err(old) => old,
        }
    } else {
        // SAFETY: as for the 8-byte word, for a 4-byte one.
        let word = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
        let f = |v: u32| Some((rmw.f)(u64::from(v)) as u32);
        match word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, f) {
            Ok(old) | Err(old) => u64::from(old),
        }
    }
}

/// Memory the engine can reach through a VM mapping: a BO's backing memfd
/// or host memory pinned by a userptr BO. Accesses go through `read_at` /
/// `write_at`, so the engine never holds references into the memory.
pub(crate) trait DeviceMemory: Send + Sync + fmt::Debug {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Read `buf.len()` bytes at `offset` (inside `size`).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError>;
    /// Write `data` at `offset` (inside `size`).
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError>;

    /// Applies `rmw` to the little-endian word at `offset` (inside `size`)
    /// and returns its previous value, atomically with respect to every
    /// engine (see the module docs; memory mapped in this process also with
    /// respect to the CPU).
    fn update(&self, offset: u64, rmw: Rmw<'_>) -> Result<u64, MemoryError> {
        copied_update(self, offset, rmw)
    }

    /// The host address of byte 0 when this memory is host memory of this
    /// process that the engine may copy to and from directly (the pages of
    /// a userptr BO); `None` for memory reached only through accesses.
    /// When `Some`, the whole `size` bytes from that address stay valid for
    /// reads and writes while the memory lives.
    fn host_address(&self) -> Option<usize> {
        None
    }

    /// Read `len` bytes at `offset` (inside `size`) straight into host
    /// memory at `dst`, without an intermediate buffer where the memory
    /// allows it.
    ///
    /// # Safety
    /// `dst..dst+len` must be valid for writes for the duration of the call.
    unsafe fn read_to_host(
        &self,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let mut buf = vec![0u8; len];
        self.read_at(offset, &mut buf)?;
        // SAFETY: the caller guarantees `dst..dst+len` is writable; `buf` is
        // a fresh allocation of ours, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, len) };
        Ok(())
    }

    /// Write `len` bytes of host memory at `src` to `offset` (inside
    /// `size`), without an intermediate buffer where the memory allows it.
    ///
    /// # Safety
    /// `src..src+len` must be valid for reads for the duration of the call.
    unsafe fn write_from_host(
        &self,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let mut buf = vec![0u8; len];
        // SAFETY: the caller guarantees `src..src+len` is readable; `buf` is
        // a fresh allocation of ours.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), len) };
        self.write_at(offset, &buf)
    }
}

/// `pread(2)` or `pwrite(2)` of a whole range of a file of `size` bytes,
/// refused when it does not fit, retrying on short transfers and `EINTR`;
/// `io(done, left, offset)` performs one call.
pub(super) fn whole_range(
    size: u64,
    offset: u64,
    len: usize,
    mut io: impl FnMut(usize, usize, u64) -> isize,
) -> Result<(), MemoryError> {
    let err = MemoryError { offset, len };
    if offset.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(err);
    }
    let mut done = 0usize;
    while done < len {
        let at = offset.checked_add(done as u64).ok_or(err)?;
        let n = io(done, len - done, at);
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(err);
        }
        done += n as usize;
    }
    Ok(())
}

/// A [`DeviceMemory`] access failed (out of range or an I/O error of the
/// backing file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("device memory access of {len} bytes at offset {offset:#x} failed")]
pub(crate) struct MemoryError {
    /// Offset of the access.
    pub(crate) offset: u64,
    /// Length of the access.
    pub(crate) len: usize,
}

impl DeviceMemory for crate::hw::bo::Memfd {
    fn size(&self) -> u64 {
        crate::hw::bo::Memfd::size(self)
    }
    fn update(&self, offset: u64, rmw: Rmw<'_>) -> Result<u64, MemoryError> {
        let n = rmw.len() as u64;
        let err = MemoryError {
            offset,
            len: rmw.len(),
        };
        if offset
            .checked_add(n)
            .is_none_or(|end| end > crate::hw::bo::Memfd::size(self))
        {
            return Err(err);
        }
        if !offset.is_multiple_of(n) {
            // No instruction updates a word across its alignment; the
            // hardware's atomics need it aligned too.
            return copied_update(self, offset, rmw);
        }
        // SAFETY: sysconf has no preconditions.
        let host_page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = u64::try_from(host_page)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(crate::hw::bo::PAGE_SIZE);
        let start = offset & !(page - 1);
        let len = page.min(crate::hw::bo::Memfd::size(self) - start) as usize;
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.file());
        // SAFETY: a new shared mapping of the page of our own file that
        // holds the word, at an address the kernel picks; no existing
        // memory is affected.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                start as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            // No mapping to be had (a read-only memfd, the map count):
            // atomic with respect to the engines only.
            return copied_update(self, offset, rmw);
        }
        // SAFETY: the mapping is page aligned and `offset - start` is a
        // multiple of the word's size below `len - size + 1` (the word lies inside the file,
        // whose size is sealed), so the word is aligned and mapped,
        // readable and writable, until the munmap below. Every other
        // mapping of the memfd (the application's, a dma-buf's) shows the
        // same page, so the CPU's atomics and this one exclude each other.
        let old = unsafe { host_update(map as usize + (offset - start) as usize, rmw) };
        // SAFETY: the mapping made above, unmapped once; nothing refers to
        // it any more.
        unsafe { libc::munmap(map, len) };
        Ok(old)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        crate::hw::bo::Memfd::read_at(self, offset, buf).map_err(|_| MemoryError {
            offset,
            len: buf.len(),
        })
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        crate::hw::bo::Memfd::write_at(self, offset, data).map_err(|_| MemoryError {
            offset,
            len: data.len(),
        })
    }
    unsafe fn read_to_host(
        &self,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        if let Some(src) = self.resident(offset, len) {
            // SAFETY: `resident` gives an address valid for `len` bytes of
            // reads while `self` lives; the caller guarantees the
            // destination. `copy` allows overlap (a userptr BO over the
            // simulator's own mapping is not possible, but costs nothing to
            // allow). The application may write the pages concurrently, as
            // it may under DMA; no reference to them is formed.
            unsafe { std::ptr::copy(src, dst, len) };
            return Ok(());
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.file());
        // One kernel copy from the memfd's pages into the destination.
        whole_range(
            crate::hw::bo::Memfd::size(self),
            offset,
            len,
            |done, left, at| {
                // SAFETY: the caller guarantees `dst..dst+len` is writable and
                // `done + left == len`; the kernel writes through the raw
                // pointer, no Rust reference to the destination exists.
                unsafe { libc::pread(fd, dst.add(done).cast(), left, at as libc::off_t) }
            },
        )
    }
    unsafe fn write_from_host(
        &self,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.file());
        whole_range(
            crate::hw::bo::Memfd::size(self),
            offset,
            len,
            |done, left, at| {
                // SAFETY: the caller guarantees `src..src+len` is readable and
                // `done + left == len`; the kernel reads through the raw pointer.
                unsafe { libc::pwrite(fd, src.add(done).cast(), left, at as libc::off_t) }
            },
        )
    }
}

/// Host memory pinned by a userptr BO (`GEM_USERPTR`): of this process, or
/// of a remote client process ([`crate::remote`]).
#[derive(Debug)]
pub(crate) struct UserMemory {
    addr: usize,
    len: usize,
    /// The client process whose memory this is (`None`: this process's).
    remote: Option<libc::pid_t>,
    /// `remote` is this process, as it was when the view was made (its
    /// memory never goes away under a served client's end): checked once
    /// here, not with a `getpid` per access.
    own: bool,
}

impl UserMemory {
    /// Wrap `len` bytes of host memory at `addr`.
    ///
    /// # Safety
    /// `addr..addr+len` must stay valid for reads and writes for as long as
    /// the returned object (or any clone of an `Arc` to it) lives. For a
    /// userptr BO this is the caller's promise in `kfd::Driver::ioctl`: host
    /// memory handed to the device stays valid until the device is done.
    pub(crate) unsafe fn new(addr: usize, len: usize) -> Self {
        UserMemory {
            addr,
            len,
            remote: None,
            own: true,
        }
    }

    /// Wrap `len` bytes at `addr` of host process `pid`, reached with
    /// `process_vm_readv`/`process_vm_writev`. Pinned pages outlive their
    /// process's address space: once `pid` is gone (or no longer a client
    /// being served, [`crate::remote`]), writes land nowhere anyone can see
    /// and reads return zeros, never a device fault.
    pub(crate) fn remote(pid: libc::pid_t, addr: u64, len: usize) -> Self {
        UserMemory {
            addr: addr as usize,
            len,
            remote: Some(pid),
            own: u32::try_from(pid).is_ok_and(|p| p == std::process::id()),
        }
    }

    /// Wrap `len` bytes at `addr` of this host process, reached like a
    /// remote client's memory (`process_vm_readv`/`process_vm_writev` on
    /// our own pid): an access to pages the application has unmapped since
    /// is a device fault, never a crash of the simulator. For engines that
    /// run on their own schedule (user-mode queues), where no ioctl
    /// contract covers the memory's lifetime.
    pub(crate) fn checked(addr: u64, len: usize) -> Self {
        let me = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        UserMemory::remote(me, addr, len)
    }

    fn remote_read(
        &self,
        pid: libc::pid_t,
        start: usize,
        buf: &mut [u8],
    ) -> Result<(), MemoryError> {
        if !self.own && !crate::kernel::client_alive(pid) {
            buf.fill(0);
            return Ok(());
        }
        match crate::kernel::remote_read(pid, (self.addr + start) as u64, buf) {
            Ok(()) => Ok(()),
            Err(::kfd::Errno(libc::ESRCH)) => {
                buf.fill(0);
                Ok(())
            }
            Err(_) => Err(MemoryError {
                offset: start as u64,
                len: buf.len(),
            }),
        }
    }

    fn remote_write(&self, pid: libc::pid_t, start: usize, data: &[u8]) -> Result<(), MemoryError> {
        if !self.own && !crate::kernel::client_alive(pid) {
            return Ok(());
        }
        match crate::kernel::remote_write(pid, (self.addr + start) as u64, data) {
            Ok(()) | Err(::kfd::Errno(libc::ESRCH)) => Ok(()),
            Err(_) => Err(MemoryError {
                offset: start as u64,
                len: data.len(),
            }),
        }
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, MemoryError> {
        let err = MemoryError { offset, len };
        let start = usize::try_from(offset).map_err(|_| err)?;
        match start.checked_add(len) {
            Some(end) if end <= self.len => Ok(start),
            _ => Err(err),
        }
    }
}

impl DeviceMemory for UserMemory {
    fn size(&self) -> u64 {
        self.len as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let start = self.check(offset, buf.len())?;
        if let Some(pid) = self.remote {
            return self.remote_read(pid, start, buf);
        }
        // SAFETY: `check` keeps the range inside `addr..addr+len`, which
        // `UserMemory::new`'s contract keeps valid while `self` lives; `buf`
        // is our own buffer, so the two cannot overlap. Device memory may be
        // written concurrently by the application, as DMA memory is; the
        // bytes are copied without forming references into it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.addr + start) as *const u8,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let start = self.check(offset, data.len())?;
        if let Some(pid) = self.remote {
            return self.remote_write(pid, start, data);
        }
        // SAFETY: as in `read_at`: the range is inside the pinned host memory
        // and `data` is a separate buffer of ours.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (self.addr + start) as *mut u8, data.len())
        };
        Ok(())
    }
    fn update(&self, offset: u64, rmw: Rmw<'_>) -> Result<u64, MemoryError> {
        let start = self.check(offset, rmw.len())?;
        let addr = self.addr + start;
        if self.remote.is_some() || !addr.is_multiple_of(rmw.len()) {
            // Reached by copying (or not a word the hardware updates
            // atomically): serialized with every engine's.
            return copied_update(self, offset, rmw);
        }
        // SAFETY: `check` keeps the word inside `addr..addr+len`, which
        // `UserMemory::new`'s contract keeps valid for reads and writes
        // while `self` lives; it is aligned to its size (checked above).
        Ok(unsafe { host_update(addr, rmw) })
    }
    fn host_address(&self) -> Option<usize> {
        // Another process's memory is never this process's address.
        self.remote.is_none().then_some(self.addr)
    }
    unsafe fn read_to_host(
        &self,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let start = self.check(offset, len)?;
        if let Some(pid) = self.remote {
            let mut buf = vec![0u8; len];
            self.remote_read(pid, start, &mut buf)?;
            // SAFETY: the caller guarantees `dst..dst+len` is writable; `buf`
            // is a fresh allocation of ours.
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), dst, len) };
            return Ok(());
        }
        // SAFETY: the source is inside the pinned host memory (`check`), the
        // caller guarantees the destination; `copy` allows the two to overlap
        // (a copy between two userptr BOs over the same pages).
        unsafe { std::ptr::copy((self.addr + start) as *const u8, dst, len) };
        Ok(())
    }
    unsafe fn write_from_host(
        &self,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), MemoryError> {
        let start = self.check(offset, len)?;
        if let Some(pid) = self.remote {
            let mut buf = vec![0u8; len];
            // SAFETY: the caller guarantees `src..src+len` is readable; `buf`
            // is a fresh allocation of ours.
            unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), len) };
            return self.remote_write(pid, start, &buf);
        }
        // SAFETY: as in `read_to_host`, with the roles swapped.
        unsafe { std::ptr::copy(src, (self.addr + start) as *mut u8, len) };
        Ok(())
    }
}

/// What a VM range shows.
#[derive(Debug, Clone)]
pub(crate) enum RangeBacking {
    /// Memory, starting `offset` bytes into it.
    Memory {
        /// The memory.
        memory: Arc<dyn DeviceMemory>,
        /// Offset of the range's first byte in the memory.
        offset: u64,
    },
    /// A PRT (partially resident) range: reads return zero, writes vanish,
    /// and neither faults.
    Prt,
}

/// One mapped range of a [`VmView`].
#[derive(Debug, Clone)]
pub(crate) struct VmRange {
    /// First GPU VA.
    pub(crate) va: u64,
    /// Length in bytes.
    pub(crate) len: u64,
    /// The PTEs allow reads.
    pub(crate) readable: bool,
    /// The PTEs allow writes.
    pub(crate) writable: bool,
    /// What the range shows.
    pub(crate) backing: RangeBacking,
}

/// A snapshot of one DRM file's GPU VM, as the engine sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct VmView {
    ranges: Vec<VmRange>,
}

/// Which way an access goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Read,
    Write,
}

/// Where a piece of an access lands.
#[derive(Debug, Clone, Copy)]
pub(super) enum Landing<'a> {
    Memory(&'a dyn DeviceMemory, u64),
    Prt,
    Fault,
}

impl VmView {
    /// A view over `ranges`; overlapping ranges are a caller bug, the later
    /// one (by VA) is then shadowed where they overlap.
    pub(crate) fn new(mut ranges: Vec<VmRange>) -> Self {
        ranges.retain(|r| r.len != 0);
        ranges.sort_by_key(|r| r.va);
        VmView { ranges }
    }

    /// Reads `buf.len()` bytes at GPU VA `va` (a PRT range reads zeros);
    /// `Err` names the first VA that is not readable.
    pub(crate) fn read(&self, va: u64, buf: &mut [u8]) -> Result<(), super::VmFault> {
        let mut done = 0usize;
        while done < buf.len() {
            let at = va.wrapping_add(done as u64);
            let left = (buf.len() - done) as u64;
            let (landing, n) = self.resolve(at, left, Access::Read);
            let piece = &mut buf[done..done + n as usize];
            let ok = match landing {
                Landing::Memory(memory, offset) => memory.read_at(offset, piece).is_ok(),
                Landing::Prt => {
                    piece.fill(0);
                    true
                }
                Landing::Fault => false,
            };
            if !ok {
                return Err(super::VmFault {
                    va: at,
                    write: false,
                });
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Writes `data` at GPU VA `va` (a PRT range swallows it); `Err` names
    /// the first VA that is not writable (the pieces before it were
    /// written, as a device's writes land until the fault).
    pub(crate) fn write(&self, va: u64, data: &[u8]) -> Result<(), super::VmFault> {
        let mut done = 0usize;
        while done < data.len() {
            let at = va.wrapping_add(done as u64);
            let left = (data.len() - done) as u64;
            let (landing, n) = self.resolve(at, left, Access::Write);
            let piece = &data[done..done + n as usize];
            let ok = match landing {
                Landing::Memory(memory, offset) => memory.write_at(offset, piece).is_ok(),
                Landing::Prt => true,
                Landing::Fault => false,
            };
            if !ok {
                return Err(super::VmFault {
                    va: at,
                    write: true,
                });
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Adds `delta` to the little-endian 64-bit word at GPU VA `va` and
    /// returns its previous value, atomically ([`VmView::update`]).
    pub(crate) fn fetch_add_u64(&self, va: u64, delta: u64) -> Result<u64, super::VmFault> {
        let add = move |old: u64| old.wrapping_add(delta);
        self.update(
            va,
            Rmw {
                wide: true,
                f: &add,
            },
        )
    }

    /// Applies `rmw` to the little-endian word at GPU VA `va` and returns
    /// its previous value, atomically as [`DeviceMemory::update`] makes it
    /// (a PRT range reads zero and swallows the update); `Err` names the
    /// first VA that is not readable and writable.
    pub(crate) fn update(&self, va: u64, rmw: Rmw<'_>) -> Result<u64, super::VmFault> {
        let len = rmw.len() as u64;
        let (landing, n) = self.resolve(va, len, Access::Write);
        let readable = self.resolve(va, len, Access::Read);
        let fault = |write| super::VmFault { va, write };
        match (landing, readable.0) {
            (_, Landing::Fault) => Err(fault(false)),
            (Landing::Fault, _) => Err(fault(true)),
            (Landing::Prt, _) if n == len => Ok(0),
            (Landing::Memory(memory, offset), _) if n == len => {
                memory.update(offset, rmw).map_err(|_| fault(true))
            }
            // Across two ranges: no one instruction reaches both.
            _ => copied_atomic(|| {
                let mut word = [0u8; 8];
                self.read(va, &mut word[..rmw.len()])?;
                let old = rmw.apply(&mut word);
                self.write(va, &word[..rmw.len()])?;
                Ok(old)
            }),
        }
    }

    /// Resolve the longest prefix (≤ `len`, ≥ 1 byte) of an access at `va`
    /// that lands in one place.
    pub(super) fn resolve(&self, va: u64, len: u64, access: Access) -> (Landing<'_>, u64) {
        let idx = self.ranges.partition_point(|r| r.va <= va);
        let next_start = self.ranges.get(idx).map_or(u64::MAX, |r| r.va);
        let unmapped = || {
            (
                Landing::Fault,
                len.min(next_start.saturating_sub(va)).max(1),
            )
        };
        let Some(range) = idx.checked_sub(1).map(|i| &self.ranges[i]) else {
            return unmapped();
        };
        let into = va - range.va;
        if into >= range.len {
            return unmapped();
        }
        let piece = len.min(range.len - into);
        let allowed = match access {
            Access::Read => range.readable,
            Access::Write => range.writable,
        };
        if !allowed {
            return (Landing::Fault, piece);
        }
        match &range.backing {
            RangeBacking::Prt => (Landing::Prt, piece),
            RangeBacking::Memory { memory, offset } => {
                let start = offset.checked_add(into);
                match start.and_then(|s| s.checked_add(piece).map(|e| (s, e))) {
                    Some((s, e)) if e <= memory.size() => {
                        (Landing::Memory(memory.as_ref(), s), piece)
                    }
                    _ => (Landing::Fault, piece),
                }
            }
        }
    }
}
