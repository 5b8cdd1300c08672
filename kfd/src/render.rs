//! `/dev/dri/renderD<minor>`: the amdgpu render node.
//!
//! [`RenderNode`] wraps one open render-node file (owned or borrowed) and
//! offers the DRM core and amdgpu ioctls a checkpoint tool needs: version,
//! GEM objects (create, close, mmap offset, userptr, VA map/unmap, mapping
//! info, handle listing and renaming), PRIME export/import, contexts, BO
//! lists, command submission, fence waits and device queries. Each method is
//! one ioctl (two for the calls that size a buffer first). This module keeps
//! no state: handles it returns belong to the DRM file and are released only
//! when the caller says so (or the file closes).
//!
//! amdgpu's argument unions (`drm_amdgpu_gem_create`, `drm_amdgpu_ctx`, ...)
//! are passed as their input struct, which is the union's full size, and the
//! output is read back from the same bytes: no `unsafe` union access.

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kfd_sys::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{Error, Result};
use crate::ioctl::ioctl;
use crate::kfd::count_u32;
use crate::mapping::DeviceMapping;
use crate::Driver;

/// A GEM handle, valid in one DRM file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GemHandle(pub u32);

/// An amdgpu submission context id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CtxId(pub u32);

/// An amdgpu BO list handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BoListHandle(pub u32);

/// The render node's minor number (`renderD<minor>`, 128 and up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RenderMinor(pub u32);

impl RenderMinor {
    /// `/dev/dri/renderD<minor>`.
    pub fn path(self) -> PathBuf {
        PathBuf::from(format!("/dev/dri/renderD{}", self.0))
    }
}

/// What `DRM_IOCTL_VERSION` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmVersion {
    /// Driver major version (amdgpu: 3).
    pub major: i32,
    /// Driver minor version (the KMS minor).
    pub minor: i32,
    /// Patch level.
    pub patchlevel: i32,
    /// Driver name (`"amdgpu"`).
    pub name: String,
    /// Driver date.
    pub date: String,
    /// Driver description.
    pub desc: String,
}

/// Parameters of `AMDGPU_GEM_CREATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GemCreate {
    /// Size in bytes.
    pub size: u64,
    /// Physical alignment in bytes.
    pub alignment: u64,
    /// `AMDGPU_GEM_DOMAIN_*` bits.
    pub domains: u64,
    /// `AMDGPU_GEM_CREATE_*` bits.
    pub flags: u64,
}

/// One IB of a command submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IbChunk {
    /// GPU address of the IB.
    pub va_start: u64,
    /// Its size in bytes.
    pub ib_bytes: u32,
    /// `AMDGPU_HW_IP_*` engine type.
    pub ip_type: u32,
    /// Engine instance (must be 0).
    pub ip_instance: u32,
    /// Ring of that engine.
    pub ring: u32,
    /// `AMDGPU_IB_FLAG_*`.
    pub flags: u32,
}

/// Identifies a submission for `WAIT_CS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubmissionFence {
    /// The context it was submitted on.
    pub ctx: CtxId,
    /// The sequence number CS returned.
    pub seq: u64,
    /// Engine type.
    pub ip_type: u32,
    /// Engine instance.
    pub ip_instance: u32,
    /// Ring.
    pub ring: u32,
}

/// The `drm_amdgpu_info` argument with its request union as plain words, so
/// it can be passed without `unsafe` union handling.
#[repr(C)]
#[derive(Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct InfoArgs {
    return_pointer: u64,
    return_size: u32,
    query: u32,
    request: [u32; 4],
}

const _: () = assert!(size_of::<InfoArgs>() == size_of::<drm_amdgpu_info>());
const _: () = assert!(size_of::<drm_amdgpu_gem_create_in>() == size_of::<drm_amdgpu_gem_create>());
const _: () = assert!(size_of::<drm_amdgpu_gem_mmap_in>() == size_of::<drm_amdgpu_gem_mmap>());
const _: () = assert!(size_of::<drm_amdgpu_ctx_in>() == size_of::<drm_amdgpu_ctx>());
const _: () = assert!(size_of::<drm_amdgpu_bo_list_in>() == size_of::<drm_amdgpu_bo_list>());
const _: () = assert!(size_of::<drm_amdgpu_cs_in>() == size_of::<drm_amdgpu_cs>());
const _: () = assert!(size_of::<drm_amdgpu_wait_cs_in>() == size_of::<drm_amdgpu_wait_cs>());

/// How many times a list-returning ioctl is re-issued when the object count
/// grew between the sizing call and the filling call.
const MAX_GROW_ATTEMPTS: usize = 8;

/// An open amdgpu render node, owned (`F = OwnedFd`) or borrowed.
#[derive(Debug)]
pub struct RenderNode<D: Driver, F: AsFd = OwnedFd> {
    driver: D,
    fd: F,
}

impl<D: Driver> RenderNode<D> {
    /// Opens `/dev/dri/renderD<minor>` read-write with `O_CLOEXEC`.
    pub fn open(driver: D, minor: RenderMinor) -> Result<Self> {
        Self::open_path(driver, &minor.path())
    }

    /// Opens a render node at `path`.
    pub fn open_path(driver: D, path: &Path) -> Result<Self> {
        let fd = driver
            .open(path, libc::O_RDWR | libc::O_CLOEXEC)
            .map_err(|err| Error::Open {
                path: path.to_path_buf(),
                errno: err.raw_os_error().unwrap_or(libc::EIO),
            })?;
        Ok(RenderNode { driver, fd })
    }
}

impl<D: Driver, F: AsFd> RenderNode<D, F> {
    /// Wraps an fd that refers to a render node (nothing is checked; other
    /// files answer `ENOTTY` or `EINVAL`).
    pub fn from_fd(driver: D, fd: F) -> Self {
        RenderNode { driver, fd }
    }

    /// The driver this node issues its calls through.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Gives back the fd.
    pub fn into_fd(self) -> F {
        self.fd
    }

    /// An ioctl whose argument carries no user pointers.
    fn call<T: IntoBytes + FromBytes>(
        &self,
        op: &'static str,
        request: u32,
        arg: &mut T,
    ) -> Result<c_int> {
        // SAFETY: every caller passes an argument without user pointers, or
        // one whose pointers refer to live buffers of the described size (as
        // stated at the call site).
        unsafe { ioctl(&self.driver, self.fd.as_fd(), op, request, arg) }
    }

    /// `ioctl(fd, DRM_IOCTL_VERSION, &v)`, twice: once for the string
    /// lengths, once with buffers of those lengths.
    #[doc(alias = "DRM_IOCTL_VERSION")]
    pub fn version(&self) -> Result<DrmVersion> {
        const OP: &str = "DRM_IOCTL_VERSION";
        let mut probe = drm_version::default();
        self.call(OP, DRM_IOCTL_VERSION, &mut probe)?;
        // Bounded so a confused driver cannot make us allocate gigabytes.
        let cap = |len: usize| len.min(4096);
        let mut name = vec![0u8; cap(probe.name_len)];
        let mut date = vec![0u8; cap(probe.date_len)];
        let mut desc = vec![0u8; cap(probe.desc_len)];
        let mut v = drm_version {
            name_len: name.len(),
            name: name.as_mut_ptr() as usize,
            date_len: date.len(),
            date: date.as_mut_ptr() as usize,
            desc_len: desc.len(),
            desc: desc.as_mut_ptr() as usize,
            ..Default::default()
        };
        // SAFETY: each string pointer refers to a live Vec of exactly the
        // capacity passed in the matching `*_len`; the kernel writes at most
        // that many bytes.
        unsafe { ioctl(&self.driver, self.fd.as_fd(), OP, DRM_IOCTL_VERSION, &mut v) }?;
        let text = |buf: &[u8], len: usize| {
            let len = len.min(buf.len());
            let s = &buf[..len];
            let s = s.split(|&b| b == 0).next().unwrap_or(s);
            String::from_utf8_lossy(s).into_owned()
        };
        Ok(DrmVersion {
            major: v.version_major,
            minor: v.version_minor,
            patchlevel: v.version_patchlevel,
            name: text(&name, v.name_len),
            date: text(&date, v.date_len),
            desc: text(&desc, v.desc_len),
        })
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_GEM_CREATE, &args)`: creates a BO.
    ///
    /// `EINVAL` for unknown domain or flag bits (DOORBELL is rejected);
    /// `ENOMEM` when out of memory.
    #[doc(alias = "DRM_IOCTL_AMDGPU_GEM_CREATE")]
    pub fn gem_create(&self, req: &GemCreate) -> Result<GemHandle> {
        let mut args = drm_amdgpu_gem_create_in {
            bo_size: req.size,
            alignment: req.alignment,
            domains: req.domains,
            domain_flags: req.flags,
        };
        self.call("AMDGPU_GEM_CREATE", DRM_IOCTL_AMDGPU_GEM_CREATE, &mut args)?;
        let out = read_out::<drm_amdgpu_gem_create_out>(&args);
        Ok(GemHandle(out.handle))
    }

    /// `ioctl(fd, DRM_IOCTL_GEM_CLOSE, &{handle})`: drops this file's handle
    /// (`EINVAL` if unknown).
    #[doc(alias = "DRM_IOCTL_GEM_CLOSE")]
    pub fn gem_close(&self, handle: GemHandle) -> Result<()> {
        let mut args = drm_gem_close {
            handle: handle.0,
            pad: 0,
        };
        self.call("DRM_IOCTL_GEM_CLOSE", DRM_IOCTL_GEM_CLOSE, &mut args)?;
        Ok(())
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_GEM_MMAP, &{handle})`: the fake offset to
    /// `mmap` the BO through this file.
    ///
    /// `ENOENT` for an unknown handle; `EPERM` for userptr or no-CPU-access
    /// BOs.
    #[doc(alias = "DRM_IOCTL_AMDGPU_GEM_MMAP")]
    pub fn gem_mmap_offset(&self, handle: GemHandle) -> Result<u64> {
        let mut args = drm_amdgpu_gem_mmap_in {
            handle: handle.0,
            _pad: 0,
        };
        self.call("AMDGPU_GEM_MMAP", DRM_IOCTL_AMDGPU_GEM_MMAP, &mut args)?;
        Ok(read_out::<drm_amdgpu_gem_mmap_out>(&args).addr_ptr)
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_GEM_USERPTR, &args)`: wraps `size` bytes of
    /// host memory at `addr` in a GEM object.
    ///
    /// `addr` and `size` must be page aligned (`EINVAL`); a writable mapping
    /// needs `AMDGPU_GEM_USERPTR_REGISTER` (`EACCES`). libdrm passes
    /// `ANONONLY | REGISTER | VALIDATE`.
    ///
    /// # Safety
    /// The range must be memory of this process that stays mapped, and that
    /// nothing else reads or writes while the device may access it, until
    /// the GEM object is closed and no submission using it is in flight.
    #[doc(alias = "DRM_IOCTL_AMDGPU_GEM_USERPTR")]
    pub unsafe fn gem_userptr(&self, addr: u64, size: u64, flags: u32) -> Result<GemHandle> {
        let mut args = drm_amdgpu_gem_userptr {
            addr,
            size,
            flags,
            handle: 0,
        };
        // SAFETY: the struct holds no pointer the kernel dereferences during
        // the call; the userptr range's lifetime is the caller's contract.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                "AMDGPU_GEM_USERPTR",
                DRM_IOCTL_AMDGPU_GEM_USERPTR,
                &mut args,
            )
        }?;
        Ok(GemHandle(args.handle))
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_GEM_VA, &{op = AMDGPU_VA_OP_MAP, ...})`:
    /// maps `size` bytes of the BO at `offset_in_bo` to GPU address `va`.
    ///
    /// `va`, `offset_in_bo` and `size` must be 4 KiB aligned; `va` below
    /// 64 KiB, in the canonical hole or overlapping another mapping of this
    /// VM gives `EINVAL`; an unknown handle `ENOENT`. `flags` are
    /// `AMDGPU_VM_PAGE_*` (libdrm uses READABLE | WRITEABLE | EXECUTABLE).
    #[doc(alias = "DRM_IOCTL_AMDGPU_GEM_VA")]
    pub fn gem_va_map(
        &self,
        handle: GemHandle,
        va: u64,
        offset_in_bo: u64,
        size: u64,
        flags: u32,
    ) -> Result<()> {
        self.gem_va(
            "AMDGPU_GEM_VA MAP",
            AMDGPU_VA_OP_MAP,
            handle,
            va,
            offset_in_bo,
            size,
            flags,
        )
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_GEM_VA, &{op = AMDGPU_VA_OP_UNMAP, ...})`:
    /// removes the mapping that starts at `va` (`ENOENT` if none does).
    #[doc(alias = "DRM_IOCTL_AMDGPU_GEM_VA")]
    pub fn gem_va_unmap(
        &self,
        handle: GemHandle,
        va: u64,
        offset_in_bo: u64,
        size: u64,
    ) -> Result<()> {
        self.gem_va(
            "AMDGPU_GEM_VA UNMAP",
            AMDGPU_VA_OP_UNMAP,
            handle,
            va,
            offset_in_bo,
            size,
            0,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn gem_va(
        &self,
        op: &'static str,
        operation: u32,
        handle: GemHandle,
        va: u64,
        offset_in_bo: u64,
        size: u64,
        flags: u32,
    ) -> Result<()> {
        let mut args = drm_amdgpu_gem_va {
            handle: handle.0,
            _pad: 0,
            operation,
            flags,
            va_address: va,
            offset_in_bo,
            map_size: size,
        };
        self.call(op, DRM_IOCTL_AMDGPU_GEM_VA, &mut args)?;
        Ok(())
    }

    /// The kernel's fdinfo of this file (`/proc/self/fdinfo/<fd>`): for an
    /// amdgpu file its memory keys (`drm-total-vram:`, `drm-memory-gtt:`,
    /// ...), the memory its GPU VM holds.
    pub fn fdinfo(&self) -> Result<String> {
        self.driver
            .fdinfo(self.fd.as_fd())
            .map_err(|e| Error::from_io("read /proc/self/fdinfo of a render node", &e))
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_GEM_OP, &{op = AMDGPU_GEM_OP_GET_MAPPING_INFO})`:
    /// the BO's mappings in this file's VM.
    ///
    /// Starts with room for 8 entries and grows to the count the kernel
    /// reports when that is larger. Kernels without the op answer `EINVAL`.
    #[doc(alias = "DRM_IOCTL_AMDGPU_GEM_OP")]
    pub fn gem_mapping_info(&self, handle: GemHandle) -> Result<Vec<drm_amdgpu_gem_vm_entry>> {
        const OP: &str = "AMDGPU_GEM_OP GET_MAPPING_INFO";
        let mut capacity = 8usize;
        for _ in 0..MAX_GROW_ATTEMPTS {
            let mut entries = vec![drm_amdgpu_gem_vm_entry::default(); capacity];
            let mut args = drm_amdgpu_gem_op {
                handle: handle.0,
                op: AMDGPU_GEM_OP_GET_MAPPING_INFO,
                value: entries.as_mut_ptr() as u64,
                num_entries: count_u32(OP, capacity)?,
                padding: 0,
            };
            // SAFETY: `value` points to `entries`, `num_entries` writable
            // records alive until the call returns.
            unsafe {
                ioctl(
                    &self.driver,
                    self.fd.as_fd(),
                    OP,
                    DRM_IOCTL_AMDGPU_GEM_OP,
                    &mut args,
                )
            }?;
            let count = args.num_entries as usize;
            if count <= capacity {
                entries.truncate(count);
                return Ok(entries);
            }
            capacity = count;
        }
        Err(Error::protocol(OP, "the mapping count kept growing"))
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES, &args)`: every BO handle
    /// of this DRM file with its creation parameters.
    ///
    /// Starts with room for 8 entries and grows to the count the kernel
    /// reports. Kernels without the ioctl answer `EINVAL`.
    #[doc(alias = "DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES")]
    pub fn gem_list_handles(&self) -> Result<Vec<drm_amdgpu_gem_list_handles_entry>> {
        const OP: &str = "AMDGPU_GEM_LIST_HANDLES";
        let mut capacity = 8usize;
        for _ in 0..MAX_GROW_ATTEMPTS {
            let mut entries = vec![drm_amdgpu_gem_list_handles_entry::default(); capacity];
            let mut args = drm_amdgpu_gem_list_handles {
                entries: entries.as_mut_ptr() as u64,
                num_entries: count_u32(OP, capacity)?,
                padding: 0,
            };
            // SAFETY: `entries` points to `num_entries` writable records
            // alive until the call returns.
            unsafe {
                ioctl(
                    &self.driver,
                    self.fd.as_fd(),
                    OP,
                    DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES,
                    &mut args,
                )
            }?;
            let count = args.num_entries as usize;
            if count <= capacity {
                entries.truncate(count);
                return Ok(entries);
            }
            capacity = count;
        }
        Err(Error::protocol(OP, "the handle count kept growing"))
    }

    /// `ioctl(fd, DRM_IOCTL_GEM_CHANGE_HANDLE, &{handle, new_handle})`: moves
    /// a GEM object to the handle number `new_handle` (used to give a
    /// restored BO its checkpointed handle). Kernels without it answer
    /// `EINVAL` or `ENOTTY`; a taken `new_handle` gives `EBUSY`-like errors.
    #[doc(alias = "DRM_IOCTL_GEM_CHANGE_HANDLE")]
    pub fn gem_change_handle(&self, handle: GemHandle, new_handle: GemHandle) -> Result<()> {
        let mut args = drm_gem_change_handle {
            handle: handle.0,
            new_handle: new_handle.0,
        };
        self.call(
            "DRM_IOCTL_GEM_CHANGE_HANDLE",
            DRM_IOCTL_GEM_CHANGE_HANDLE,
            &mut args,
        )?;
        Ok(())
    }

    /// `ioctl(fd, DRM_IOCTL_PRIME_HANDLE_TO_FD, &{handle, flags})`: exports a
    /// BO as a dma-buf. `flags` ⊆ `DRM_CLOEXEC | DRM_RDWR` (`EINVAL`
    /// otherwise); userptr BOs give `EPERM`.
    #[doc(alias = "DRM_IOCTL_PRIME_HANDLE_TO_FD")]
    pub fn prime_handle_to_fd(&self, handle: GemHandle, flags: u32) -> Result<OwnedFd> {
        const OP: &str = "DRM_IOCTL_PRIME_HANDLE_TO_FD";
        let mut args = drm_prime_handle {
            handle: handle.0,
            flags,
            fd: -1,
        };
        self.call(OP, DRM_IOCTL_PRIME_HANDLE_TO_FD, &mut args)?;
        crate::kfd::owned_fd(OP, args.fd as u32)
    }

    /// `ioctl(fd, DRM_IOCTL_PRIME_FD_TO_HANDLE, &{fd})`: imports a dma-buf.
    ///
    /// Importing a dma-buf this file already knows returns the existing
    /// handle (a BO created through this file, or an earlier import), so
    /// closing the returned handle may close one the caller did not create.
    #[doc(alias = "DRM_IOCTL_PRIME_FD_TO_HANDLE")]
    pub fn prime_fd_to_handle(&self, dmabuf: BorrowedFd<'_>) -> Result<GemHandle> {
        let mut args = drm_prime_handle {
            handle: 0,
            flags: 0,
            fd: dmabuf.as_raw_fd(),
        };
        self.call(
            "DRM_IOCTL_PRIME_FD_TO_HANDLE",
            DRM_IOCTL_PRIME_FD_TO_HANDLE,
            &mut args,
        )?;
        Ok(GemHandle(args.handle))
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_CTX, &{op = AMDGPU_CTX_OP_ALLOC_CTX, priority})`:
    /// a new submission context (ids start at 1).
    #[doc(alias = "DRM_IOCTL_AMDGPU_CTX")]
    pub fn ctx_alloc(&self, priority: i32) -> Result<CtxId> {
        let mut args = drm_amdgpu_ctx_in {
            op: AMDGPU_CTX_OP_ALLOC_CTX,
            flags: 0,
            ctx_id: 0,
            priority,
        };
        self.call("AMDGPU_CTX ALLOC", DRM_IOCTL_AMDGPU_CTX, &mut args)?;
        Ok(CtxId(read_out::<drm_amdgpu_ctx_out_alloc>(&args).ctx_id))
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_CTX, &{op = AMDGPU_CTX_OP_FREE_CTX, ctx_id})`:
    /// frees a context (`EINVAL` if unknown).
    #[doc(alias = "DRM_IOCTL_AMDGPU_CTX")]
    pub fn ctx_free(&self, ctx: CtxId) -> Result<()> {
        let mut args = drm_amdgpu_ctx_in {
            op: AMDGPU_CTX_OP_FREE_CTX,
            flags: 0,
            ctx_id: ctx.0,
            priority: 0,
        };
        self.call("AMDGPU_CTX FREE", DRM_IOCTL_AMDGPU_CTX, &mut args)?;
        Ok(())
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_BO_LIST, &{op = AMDGPU_BO_LIST_OP_CREATE, ...})`:
    /// a list of BOs a submission uses (`ENOENT` for an unknown handle).
    #[doc(alias = "DRM_IOCTL_AMDGPU_BO_LIST")]
    pub fn bo_list_create(&self, handles: &[GemHandle]) -> Result<BoListHandle> {
        const OP: &str = "AMDGPU_BO_LIST CREATE";
        let entries: Vec<drm_amdgpu_bo_list_entry> = handles
            .iter()
            .map(|h| drm_amdgpu_bo_list_entry {
                bo_handle: h.0,
                bo_priority: 0,
            })
            .collect();
        let mut args = drm_amdgpu_bo_list_in {
            operation: AMDGPU_BO_LIST_OP_CREATE,
            list_handle: 0,
            bo_number: count_u32(OP, entries.len())?,
            bo_info_size: size_of::<drm_amdgpu_bo_list_entry>() as u32,
            bo_info_ptr: entries.as_ptr() as u64,
        };
        // SAFETY: `bo_info_ptr` points to `bo_number` entries of
        // `bo_info_size` bytes that outlive the call; the kernel only reads.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                OP,
                DRM_IOCTL_AMDGPU_BO_LIST,
                &mut args,
            )
        }?;
        Ok(BoListHandle(
            read_out::<drm_amdgpu_bo_list_out>(&args).list_handle,
        ))
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_BO_LIST, &{op = AMDGPU_BO_LIST_OP_DESTROY, list_handle})`:
    /// destroys a BO list (the kernel accepts unknown handles).
    #[doc(alias = "DRM_IOCTL_AMDGPU_BO_LIST")]
    pub fn bo_list_destroy(&self, list: BoListHandle) -> Result<()> {
        let mut args = drm_amdgpu_bo_list_in {
            operation: AMDGPU_BO_LIST_OP_DESTROY,
            list_handle: list.0,
            ..Default::default()
        };
        self.call(
            "AMDGPU_BO_LIST DESTROY",
            DRM_IOCTL_AMDGPU_BO_LIST,
            &mut args,
        )?;
        Ok(())
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_CS, &args)` with one IB chunk per entry of
    /// `ibs`: submits them on `ctx`, returning the fence to wait on.
    ///
    /// `EINVAL` for no IB, an unknown context, or a bad engine/instance/ring;
    /// `ENOENT` for an unknown BO list; `ECANCELED` for a guilty context. The
    /// kernel does not check that the IBs and the memory they touch are
    /// mapped: a bad address becomes a GPU VM fault, reported by the fence.
    /// All IBs must target the same engine and ring (the fence identifies
    /// one ring).
    ///
    /// # Safety
    /// The device executes the IBs asynchronously: every memory they write
    /// through a userptr BO must not be read or written by the CPU (no live
    /// Rust reference into it) until the returned fence has signalled, and
    /// must stay mapped until then (the contract of
    /// [`RenderNode::gem_userptr`]).
    #[doc(alias = "DRM_IOCTL_AMDGPU_CS")]
    pub unsafe fn cs_submit(
        &self,
        ctx: CtxId,
        bo_list: Option<BoListHandle>,
        ibs: &[IbChunk],
    ) -> Result<SubmissionFence> {
        const OP: &str = "AMDGPU_CS";
        let Some(first) = ibs.first() else {
            return Err(Error::invalid(OP, "a submission needs at least one IB"));
        };
        if ibs.iter().any(|ib| {
            (ib.ip_type, ib.ip_instance, ib.ring) != (first.ip_type, first.ip_instance, first.ring)
        }) {
            return Err(Error::invalid(
                OP,
                "all IBs of a submission must use the same ring",
            ));
        }
        let ib_data: Vec<drm_amdgpu_cs_chunk_ib> = ibs
            .iter()
            .map(|ib| drm_amdgpu_cs_chunk_ib {
                _pad: 0,
                flags: ib.flags,
                va_start: ib.va_start,
                ib_bytes: ib.ib_bytes,
                ip_type: ib.ip_type,
                ip_instance: ib.ip_instance,
                ring: ib.ring,
            })
            .collect();
        let chunks: Vec<drm_amdgpu_cs_chunk> = ib_data
            .iter()
            .map(|data| drm_amdgpu_cs_chunk {
                chunk_id: AMDGPU_CHUNK_ID_IB,
                length_dw: (size_of::<drm_amdgpu_cs_chunk_ib>() / 4) as u32,
                chunk_data: data as *const drm_amdgpu_cs_chunk_ib as u64,
            })
            .collect();
        let chunk_ptrs: Vec<u64> = chunks
            .iter()
            .map(|c| c as *const drm_amdgpu_cs_chunk as u64)
            .collect();
        let mut args = drm_amdgpu_cs_in {
            ctx_id: ctx.0,
            bo_list_handle: bo_list.map_or(0, |l| l.0),
            num_chunks: count_u32(OP, chunk_ptrs.len())?,
            flags: 0,
            chunks: chunk_ptrs.as_ptr() as u64,
        };
        // SAFETY: `chunks` points to `num_chunks` u64 pointers, each to a
        // chunk record whose `chunk_data` points to an IB record of
        // `length_dw` dwords; all three Vecs outlive the call and the kernel
        // only reads them.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                OP,
                DRM_IOCTL_AMDGPU_CS,
                &mut args,
            )
        }?;
        Ok(SubmissionFence {
            ctx,
            seq: read_out::<drm_amdgpu_cs_out>(&args).handle,
            ip_type: first.ip_type,
            ip_instance: first.ip_instance,
            ring: first.ring,
        })
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_WAIT_CS, &args)`: waits until `fence`
    /// signals or `timeout` passes (`None` waits forever, `Some(ZERO)` polls).
    ///
    /// The kernel takes an absolute `CLOCK_MONOTONIC` deadline; it is
    /// computed here once, so a retried (interrupted) call does not extend
    /// the wait. Returns `true` when the submission completed, `false` on
    /// timeout; a submission that completed with an error (for example a VM
    /// fault) returns that error.
    #[doc(alias = "DRM_IOCTL_AMDGPU_WAIT_CS")]
    pub fn wait_cs(&self, fence: &SubmissionFence, timeout: Option<Duration>) -> Result<bool> {
        let mut args = drm_amdgpu_wait_cs_in {
            handle: fence.seq,
            timeout: deadline_ns(timeout),
            ip_type: fence.ip_type,
            ip_instance: fence.ip_instance,
            ring: fence.ring,
            ctx_id: fence.ctx.0,
        };
        self.call("AMDGPU_WAIT_CS", DRM_IOCTL_AMDGPU_WAIT_CS, &mut args)?;
        Ok(read_out::<drm_amdgpu_wait_cs_out>(&args).status == 0)
    }

    /// `ioctl(fd, DRM_IOCTL_AMDGPU_INFO, &{query, return_pointer, return_size})`
    /// with a `T`-sized answer buffer: a generic device query. `request`
    /// fills the query's parameter union (up to 16 bytes).
    ///
    /// The kernel copies `min(size_of::<T>(), its answer size)` bytes; the
    /// rest of `T` stays zero.
    #[doc(alias = "DRM_IOCTL_AMDGPU_INFO")]
    pub fn info<T: FromBytes + IntoBytes>(&self, query: u32, request: [u32; 4]) -> Result<T> {
        const OP: &str = "AMDGPU_INFO";
        let mut answer = T::new_zeroed();
        let mut args = InfoArgs {
            return_pointer: answer.as_mut_bytes().as_mut_ptr() as u64,
            return_size: u32::try_from(size_of::<T>())
                .map_err(|_| Error::invalid(OP, "answer type too large"))?,
            query,
            request,
        };
        // SAFETY: `return_pointer` points to `answer`, `return_size` writable
        // bytes that outlive the call; any bytes are a valid `T`.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                OP,
                DRM_IOCTL_AMDGPU_INFO,
                &mut args,
            )
        }?;
        Ok(answer)
    }

    /// `AMDGPU_INFO` query `AMDGPU_INFO_ACCEL_WORKING`: whether the GPU
    /// accepts work.
    #[doc(alias = "AMDGPU_INFO_ACCEL_WORKING")]
    pub fn accel_working(&self) -> Result<bool> {
        Ok(self.info::<u32>(AMDGPU_INFO_ACCEL_WORKING, [0; 4])? != 0)
    }

    /// `AMDGPU_INFO` query `AMDGPU_INFO_DEV_INFO`: family, VA range and more.
    #[doc(alias = "AMDGPU_INFO_DEV_INFO")]
    pub fn device_info(&self) -> Result<drm_amdgpu_info_device> {
        self.info(AMDGPU_INFO_DEV_INFO, [0; 4])
    }

    /// `AMDGPU_INFO` query `AMDGPU_INFO_HW_IP_INFO` for engine type `ip_type`
    /// (`AMDGPU_HW_IP_*`), instance `ip_instance` (≥ 1 gives `EINVAL`).
    #[doc(alias = "AMDGPU_INFO_HW_IP_INFO")]
    pub fn hw_ip_info(&self, ip_type: u32, ip_instance: u32) -> Result<drm_amdgpu_info_hw_ip> {
        self.info(AMDGPU_INFO_HW_IP_INFO, [ip_type, ip_instance, 0, 0])
    }
}

impl<D: Driver + Clone, F: AsFd> RenderNode<D, F> {
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, offset)`: maps a BO through
    /// this file at the offset [`RenderNode::gem_mmap_offset`] returned.
    ///
    /// A KFD BO can be mapped only through the render node that owns its VM
    /// (`EACCES` otherwise).
    pub fn mmap(&self, offset: u64, len: usize, prot: c_int) -> Result<DeviceMapping<D>> {
        DeviceMapping::new(
            self.driver.clone(),
            self.fd.as_fd(),
            offset,
            len,
            prot,
            "mmap render node",
        )
    }
}

impl<D: Driver, F: AsFd> AsFd for RenderNode<D, F> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The size of a dma-buf: `lseek(fd, 0, SEEK_END)`, then back to the start.
///
/// This is a plain system call on the dma-buf fd, not a [`Driver`] call: the
/// simulated kernel hands out real fds whose size `lseek` reports the same
/// way. The file position of `dmabuf` is left at 0.
pub fn dmabuf_size(dmabuf: BorrowedFd<'_>) -> Result<u64> {
    const OP: &str = "lseek dma-buf";
    // SAFETY: lseek has no memory arguments; `dmabuf` is a live fd.
    let end = unsafe { libc::lseek(dmabuf.as_raw_fd(), 0, libc::SEEK_END) };
    if end < 0 {
        return Err(Error::from_io(OP, &std::io::Error::last_os_error()));
    }
    // SAFETY: as above.
    let start = unsafe { libc::lseek(dmabuf.as_raw_fd(), 0, libc::SEEK_SET) };
    if start < 0 {
        return Err(Error::from_io(OP, &std::io::Error::last_os_error()));
    }
    Ok(end as u64)
}

/// The absolute `CLOCK_MONOTONIC` deadline WAIT_CS takes: `u64::MAX`
/// (infinite) for `None`, now + `timeout` otherwise.
pub(crate) fn deadline_ns(timeout: Option<Duration>) -> u64 {
    let Some(timeout) = timeout else {
        return u64::MAX;
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // CLOCK_MONOTONIC always exists on Linux; a failure would leave `ts` at
    // 0, which only makes the deadline earlier (a poll), never later.
    debug_assert_eq!(ret, 0);
    let now = (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64);
    let deadline = now.saturating_add(u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX));
    // Keep the top bit clear: the kernel reads a set top bit as "infinite".
    deadline.min(i64::MAX as u64)
}

/// Reads a union's output member back from the bytes of its input member.
fn read_out<O: FromBytes>(args: &(impl IntoBytes + Immutable)) -> O {
    // The compile-time asserts above guarantee every input struct is at least
    // as large as the output read from it.
    O::read_from_prefix(args.as_bytes())
        .map(|(out, _)| out)
        .unwrap_or_else(|_| O::new_zeroed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_absolute_and_bounded() {
        assert_eq!(deadline_ns(None), u64::MAX);
        let a = deadline_ns(Some(Duration::ZERO));
        let b = deadline_ns(Some(Duration::from_secs(10)));
        assert!(b >= a + 10_000_000_000, "{a} {b}");
        assert!(deadline_ns(Some(Duration::MAX)) < 1 << 63);
    }

    #[test]
    fn outputs_are_read_from_input_bytes() {
        let args = drm_amdgpu_gem_create_in {
            bo_size: 0x1234_5678_0000_0009,
            ..Default::default()
        };
        assert_eq!(read_out::<drm_amdgpu_gem_create_out>(&args).handle, 9);
    }

    #[test]
    fn render_minor_path() {
        assert_eq!(
            RenderMinor(128).path(),
            PathBuf::from("/dev/dri/renderD128")
        );
    }

    #[test]
    fn dmabuf_size_of_a_regular_file_uses_lseek() {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 12345]).unwrap();
        assert_eq!(dmabuf_size(file.as_fd()).unwrap(), 12345);
        assert_eq!(file.stream_position().unwrap(), 0);
        file.seek(SeekFrom::End(0)).unwrap();
    }

    #[test]
    fn dmabuf_size_of_a_socket_is_espipe() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let err = dmabuf_size(a.as_fd()).unwrap_err();
        assert_eq!(err.errno(), libc::ESPIPE);
        assert_eq!(err.op(), "lseek dma-buf");
    }
}
