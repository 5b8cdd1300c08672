//! `/dev/kfd`: the amdkfd compute device, its memory, queue and event ioctls.
//!
//! [`Kfd`] wraps one open `/dev/kfd` file, owned ([`Kfd::open`]) or borrowed
//! ([`Kfd::from_fd`], for the dumper acting on a target's drained fd). Each
//! method performs exactly one KFD ioctl through [`crate::ioctl::ioctl`]; the
//! CRIU ops live in [`crate::criu`]. This module never keeps kernel state of
//! its own: handles and ids it returns are the kernel's.

use std::ffi::c_int;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use bitflags::bitflags;
use kfd_sys::*;

use crate::error::{Error, Result};
use crate::ioctl::ioctl;
use crate::mapping::DeviceMapping;
use crate::Driver;

/// The path of the KFD device node.
pub const KFD_PATH: &str = "/dev/kfd";

/// A KFD gpu_id: the non-zero 16-bit id of a GPU in the KFD topology (or, for
/// a restored process, the *user* id the application knows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GpuId(pub u32);

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

impl From<u32> for GpuId {
    fn from(id: u32) -> Self {
        GpuId(id)
    }
}

impl From<GpuId> for u32 {
    fn from(id: GpuId) -> Self {
        id.0
    }
}

/// A KFD memory handle: `(gpu_id << 32) | idr_slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemHandle(pub u64);

impl MemHandle {
    /// The gpu_id the handle was allocated on (as passed by the caller).
    pub fn gpu_id(self) -> GpuId {
        GpuId((self.0 >> 32) as u32)
    }

    /// The per-device IDR slot (what CRIU's private data records).
    pub fn slot(self) -> u32 {
        self.0 as u32
    }
}

bitflags! {
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`: memory type and attributes of a KFD BO.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AllocFlags: u32 {
        /// Local video memory.
        const VRAM = KFD_IOC_ALLOC_MEM_FLAGS_VRAM;
        /// System memory behind the GART.
        const GTT = KFD_IOC_ALLOC_MEM_FLAGS_GTT;
        /// Existing CPU memory.
        const USERPTR = KFD_IOC_ALLOC_MEM_FLAGS_USERPTR;
        /// The process doorbell page.
        const DOORBELL = KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL;
        /// The HDP-flush MMIO page.
        const MMIO_REMAP = KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP;
        /// Contiguous VRAM, best effort (KFD 1.16).
        const CONTIGUOUS_BEST_EFFORT = KFD_IOC_ALLOC_MEM_FLAGS_CONTIGUOUS_BEST_EFFORT;
        /// Extended coherence.
        const EXT_COHERENT = KFD_IOC_ALLOC_MEM_FLAGS_EXT_COHERENT;
        /// Uncached mapping.
        const UNCACHED = KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED;
        /// Fine-grained coherent.
        const COHERENT = KFD_IOC_ALLOC_MEM_FLAGS_COHERENT;
        /// Backs a double-mapped AQL ring (the kernel allocates half).
        const AQL_QUEUE_MEM = KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM;
        /// No fallback to another memory type.
        const NO_SUBSTITUTE = KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE;
        /// CPU-visible VRAM.
        const PUBLIC = KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC;
        /// GPU-executable mapping.
        const EXECUTABLE = KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;
        /// GPU-writable mapping (also: the checkpoint dma-buf is read-write).
        const WRITABLE = KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
        // Bits this crate does not name still round-trip (CRIU images carry
        // whatever the kernel reported).
        const _ = !0;
    }
}

impl AllocFlags {
    /// Whether the BO has GPU-side content a checkpoint must copy (VRAM or GTT).
    pub fn has_content(self) -> bool {
        self.intersects(AllocFlags::VRAM | AllocFlags::GTT)
    }
}

/// The KFD ioctl interface version (`GET_VERSION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Major version (1 for every kernel so far).
    pub major: u32,
    /// Minor version (1.7 CRIU API, 1.8 CRIU with GTT BOs, 1.12 EXPORT_DMABUF).
    pub minor: u32,
}

impl Version {
    /// The oldest interface the CRIU path supports (1.8: CRIU SDMA transfers
    /// with GTT BOs), as upstream CRIU requires.
    pub const MIN_CRIU: Version = Version { major: 1, minor: 8 };

    /// Whether this kernel has the CRIU ioctl in the form this crate uses.
    pub fn supports_criu(self) -> bool {
        self.major == Self::MIN_CRIU.major && self.minor >= Self::MIN_CRIU.minor
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A request to `ALLOC_MEMORY_OF_GPU` for a VRAM, GTT, doorbell or MMIO BO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRequest {
    /// The GPU (user id).
    pub gpu_id: GpuId,
    /// GPU virtual address of the allocation.
    pub va_addr: u64,
    /// Size in bytes.
    pub size: u64,
    /// Memory type and attributes; must not contain [`AllocFlags::USERPTR`]
    /// (use [`Kfd::alloc_userptr`]).
    pub flags: AllocFlags,
}

/// A BO allocated by `ALLOC_MEMORY_OF_GPU`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// The KFD handle.
    pub handle: MemHandle,
    /// The offset to mmap the BO at: on the VM's render node for VRAM/GTT, on
    /// `/dev/kfd` for doorbell and MMIO pages.
    pub mmap_offset: u64,
}

/// A request to `CREATE_QUEUE`. Addresses are GPU virtual addresses of BOs
/// the process allocated (the kernel validates them against its VM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueRequest {
    /// The GPU (user id).
    pub gpu_id: GpuId,
    /// `KFD_IOC_QUEUE_TYPE_*`.
    pub queue_type: u32,
    /// Ring buffer address.
    pub ring_base_address: u64,
    /// Ring size in bytes (at least [`KFD_MIN_QUEUE_RING_SIZE`], power of two).
    pub ring_size: u32,
    /// Address of the write pointer.
    pub write_pointer_address: u64,
    /// Address of the read pointer.
    pub read_pointer_address: u64,
    /// Percentage of the device the queue may use, 0..=100.
    pub queue_percentage: u32,
    /// Priority, 0..=15.
    pub queue_priority: u32,
    /// End-of-pipe buffer address.
    pub eop_buffer_address: u64,
    /// End-of-pipe buffer size.
    pub eop_buffer_size: u64,
    /// Context save/restore area address.
    pub ctx_save_restore_address: u64,
    /// Context save/restore area size.
    pub ctx_save_restore_size: u32,
    /// Control stack size.
    pub ctl_stack_size: u32,
}

/// A queue created by `CREATE_QUEUE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    /// The queue id (per process).
    pub queue_id: u32,
    /// The doorbell's mmap offset on `/dev/kfd`.
    pub doorbell_offset: u64,
}

/// An event created by `CREATE_EVENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The event id.
    pub event_id: u32,
    /// Trigger data (signal events).
    pub trigger_data: u32,
    /// mmap offset of the event page on `/dev/kfd`.
    pub page_offset: u64,
    /// Slot of this event in the event page.
    pub slot_index: u32,
}

/// What `GET_DMABUF_INFO` reports about a dma-buf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmabufInfo {
    /// BO size in bytes.
    pub size: u64,
    /// The exporting GPU's topology (actual) id.
    pub gpu_id: GpuId,
    /// VRAM or GTT, plus PUBLIC when CPU access is required.
    pub flags: AllocFlags,
    /// Size of the BO's metadata.
    pub metadata_size: u32,
}

/// An open `/dev/kfd`, owned (`F = OwnedFd`) or borrowed (`F = BorrowedFd`).
///
/// Every method issues its ioctl on this fd through the driver `D`.
#[derive(Debug)]
pub struct Kfd<D: Driver, F: AsFd = OwnedFd> {
    driver: D,
    fd: F,
}

impl<D: Driver> Kfd<D> {
    /// Opens `/dev/kfd` read-write with `O_CLOEXEC`.
    ///
    /// Opening creates (or finds) the caller's KFD process; a 32-bit caller
    /// gets `EPERM`.
    pub fn open(driver: D) -> Result<Self> {
        Self::open_path(driver, Path::new(KFD_PATH))
    }

    /// Opens a KFD device node at `path` (for tests and unusual layouts).
    pub fn open_path(driver: D, path: &Path) -> Result<Self> {
        let fd = driver
            .open(path, libc::O_RDWR | libc::O_CLOEXEC)
            .map_err(|err| Error::Open {
                path: path.to_path_buf(),
                errno: err.raw_os_error().unwrap_or(libc::EIO),
            })?;
        Ok(Kfd { driver, fd })
    }
}

impl<D: Driver, F: AsFd> Kfd<D, F> {
    /// Wraps an fd that already refers to `/dev/kfd` (owned or borrowed, e.g.
    /// a dumpee's fd received from CRIU). Nothing is checked: the kernel
    /// rejects ioctls on other files (`ENOTTY`, `EBADF`).
    pub fn from_fd(driver: D, fd: F) -> Self {
        Kfd { driver, fd }
    }

    /// The driver this handle issues its calls through.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Gives back the fd.
    pub fn into_fd(self) -> F {
        self.fd
    }

    fn call<T: zerocopy::IntoBytes + zerocopy::FromBytes>(
        &self,
        op: &'static str,
        request: u32,
        arg: &mut T,
    ) -> Result<c_int> {
        // SAFETY: only called from this module with argument structs that
        // carry no user pointers, or whose pointers the caller set to live
        // buffers of the described length (documented at each call site).
        unsafe { ioctl(&self.driver, self.fd.as_fd(), op, request, arg) }
    }

    /// `ioctl(fd, AMDKFD_IOC_GET_VERSION, &args)`: the interface version.
    ///
    /// Only the process that opened the fd may call it (`EBADF` otherwise,
    /// even for a ptrace parent).
    #[doc(alias = "AMDKFD_IOC_GET_VERSION")]
    pub fn version(&self) -> Result<Version> {
        let mut args = kfd_ioctl_get_version_args::default();
        self.call("GET_VERSION", AMDKFD_IOC_GET_VERSION, &mut args)?;
        Ok(Version {
            major: args.major_version,
            minor: args.minor_version,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_ACQUIRE_VM, &{drm_fd, gpu_id})`: makes the VM of
    /// the render-node file `drm` the process's compute VM on `gpu_id`.
    ///
    /// `EINVAL` for an unknown gpu or a file that is not an amdgpu render
    /// node or whose VM already belongs to a KFD process; `EBUSY` when the GPU
    /// already has another VM (the same file again succeeds).
    #[doc(alias = "AMDKFD_IOC_ACQUIRE_VM")]
    pub fn acquire_vm(&self, gpu_id: GpuId, drm: BorrowedFd<'_>) -> Result<()> {
        let mut args = kfd_ioctl_acquire_vm_args {
            drm_fd: fd_arg(drm),
            gpu_id: gpu_id.0,
        };
        self.call("ACQUIRE_VM", AMDKFD_IOC_ACQUIRE_VM, &mut args)?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_AVAILABLE_MEMORY, &args)`: VRAM still available
    /// to this process on `gpu_id`, rounded down to 2 MiB (KFD 1.9).
    ///
    /// `EINVAL` for an unknown gpu; no VM is needed.
    #[doc(alias = "AMDKFD_IOC_AVAILABLE_MEMORY")]
    pub fn available_memory(&self, gpu_id: GpuId) -> Result<u64> {
        let mut args = kfd_ioctl_get_available_memory_args {
            gpu_id: gpu_id.0,
            ..Default::default()
        };
        self.call("AVAILABLE_MEMORY", AMDKFD_IOC_AVAILABLE_MEMORY, &mut args)?;
        Ok(args.available)
    }

    /// `ioctl(fd, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &args)`: allocates a VRAM,
    /// GTT, doorbell or MMIO-remap BO at `va_addr`.
    ///
    /// The GPU's VM must have been acquired (`ENODEV` otherwise). `EINVAL`
    /// for size 0, an unknown gpu or no memory type; `EADDRINUSE` when the
    /// range overlaps an SVM range; `ENOMEM` when over the memory limit.
    /// USERPTR requests are refused here (see [`Kfd::alloc_userptr`]).
    #[doc(alias = "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU")]
    pub fn alloc_memory(&self, req: &AllocRequest) -> Result<Allocation> {
        const OP: &str = "ALLOC_MEMORY_OF_GPU";
        if req.flags.contains(AllocFlags::USERPTR) {
            return Err(Error::invalid(
                OP,
                "USERPTR allocations need a CPU address; use alloc_userptr",
            ));
        }
        let mut args = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: req.va_addr,
            size: req.size,
            gpu_id: req.gpu_id.0,
            flags: req.flags.bits(),
            ..Default::default()
        };
        self.call(OP, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut args)?;
        Ok(Allocation {
            handle: MemHandle(args.handle),
            mmap_offset: args.mmap_offset,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &args)` with
    /// `KFD_IOC_ALLOC_MEM_FLAGS_USERPTR`: wraps `size` bytes of this process's
    /// memory at `cpu_addr` as a BO mapped at GPU address `va_addr`.
    ///
    /// # Safety
    /// `cpu_addr..cpu_addr + size` must be anonymous memory of this process
    /// that stays mapped, and that nothing else relies on the contents of, for
    /// as long as the BO exists: the device (or a simulated one) reads and
    /// writes it behind the compiler's back.
    #[doc(alias = "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU")]
    pub unsafe fn alloc_userptr(
        &self,
        gpu_id: GpuId,
        va_addr: u64,
        cpu_addr: u64,
        size: u64,
        flags: AllocFlags,
    ) -> Result<Allocation> {
        let mut args = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr,
            size,
            mmap_offset: cpu_addr,
            gpu_id: gpu_id.0,
            flags: (flags | AllocFlags::USERPTR).bits(),
            ..Default::default()
        };
        // SAFETY: the caller guarantees the userptr range stays valid for the
        // BO's lifetime; the struct itself holds no other pointer.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                "ALLOC_MEMORY_OF_GPU USERPTR",
                AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
                &mut args,
            )
        }?;
        Ok(Allocation {
            handle: MemHandle(args.handle),
            mmap_offset: args.mmap_offset,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_FREE_MEMORY_OF_GPU, &{handle})`: frees a BO.
    ///
    /// `EINVAL` for an unknown handle, `EBUSY` while it is still mapped,
    /// `EPERM` for the event signal page.
    #[doc(alias = "AMDKFD_IOC_FREE_MEMORY_OF_GPU")]
    pub fn free_memory(&self, handle: MemHandle) -> Result<()> {
        let mut args = kfd_ioctl_free_memory_of_gpu_args { handle: handle.0 };
        self.call(
            "FREE_MEMORY_OF_GPU",
            AMDKFD_IOC_FREE_MEMORY_OF_GPU,
            &mut args,
        )?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_MAP_MEMORY_TO_GPU, &args)`: maps a BO into the
    /// VMs of `gpus` (user ids) at its virtual address.
    ///
    /// `EINVAL` for an empty list or an unknown gpu; `ENOMEM` for an unknown
    /// handle slot. An interrupted call resumes after the devices already
    /// mapped (the kernel reports them in `n_success`).
    #[doc(alias = "AMDKFD_IOC_MAP_MEMORY_TO_GPU")]
    pub fn map_memory(&self, handle: MemHandle, gpus: &[GpuId]) -> Result<()> {
        const OP: &str = "MAP_MEMORY_TO_GPU";
        let ids: Vec<u32> = gpus.iter().map(|g| g.0).collect();
        let mut args = kfd_ioctl_map_memory_to_gpu_args {
            handle: handle.0,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: count_u32(OP, ids.len())?,
            n_success: 0,
        };
        // SAFETY: `device_ids_array_ptr` points to `ids`, `n_devices` u32s
        // that live until the call returns; the kernel only reads them.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                OP,
                AMDKFD_IOC_MAP_MEMORY_TO_GPU,
                &mut args,
            )
        }?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, &args)`: unmaps a BO from
    /// the VMs of `gpus` (user ids).
    #[doc(alias = "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU")]
    pub fn unmap_memory(&self, handle: MemHandle, gpus: &[GpuId]) -> Result<()> {
        const OP: &str = "UNMAP_MEMORY_FROM_GPU";
        let ids: Vec<u32> = gpus.iter().map(|g| g.0).collect();
        let mut args = kfd_ioctl_unmap_memory_from_gpu_args {
            handle: handle.0,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: count_u32(OP, ids.len())?,
            n_success: 0,
        };
        // SAFETY: `device_ids_array_ptr` points to `ids`, `n_devices` u32s
        // that live until the call returns; the kernel only reads them.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                OP,
                AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU,
                &mut args,
            )
        }?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_CREATE_QUEUE, &args)`: creates a user-mode queue.
    ///
    /// Needs the GPU's VM (`ESRCH`/`ENODEV` otherwise); `EINVAL` for bad
    /// sizes, percentages or priorities; `ENOSPC` when out of queues.
    #[doc(alias = "AMDKFD_IOC_CREATE_QUEUE")]
    pub fn create_queue(&self, req: &QueueRequest) -> Result<Queue> {
        let mut args = kfd_ioctl_create_queue_args {
            ring_base_address: req.ring_base_address,
            write_pointer_address: req.write_pointer_address,
            read_pointer_address: req.read_pointer_address,
            doorbell_offset: 0,
            ring_size: req.ring_size,
            gpu_id: req.gpu_id.0,
            queue_type: req.queue_type,
            queue_percentage: req.queue_percentage,
            queue_priority: req.queue_priority,
            queue_id: 0,
            eop_buffer_address: req.eop_buffer_address,
            eop_buffer_size: req.eop_buffer_size,
            ctx_save_restore_address: req.ctx_save_restore_address,
            ctx_save_restore_size: req.ctx_save_restore_size,
            ctl_stack_size: req.ctl_stack_size,
        };
        self.call("CREATE_QUEUE", AMDKFD_IOC_CREATE_QUEUE, &mut args)?;
        Ok(Queue {
            queue_id: args.queue_id,
            doorbell_offset: args.doorbell_offset,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_DESTROY_QUEUE, &{queue_id})`: destroys a queue
    /// (`EINVAL` for an unknown id).
    #[doc(alias = "AMDKFD_IOC_DESTROY_QUEUE")]
    pub fn destroy_queue(&self, queue_id: u32) -> Result<()> {
        let mut args = kfd_ioctl_destroy_queue_args {
            queue_id,
            ..Default::default()
        };
        self.call("DESTROY_QUEUE", AMDKFD_IOC_DESTROY_QUEUE, &mut args)?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_CREATE_EVENT, &args)`: creates an event of
    /// `event_type` (`KFD_IOC_EVENT_*`).
    ///
    /// `node_id` matters only for event types bound to a node. `ENOSPC` when
    /// the signal page is full.
    #[doc(alias = "AMDKFD_IOC_CREATE_EVENT")]
    pub fn create_event(&self, event_type: u32, auto_reset: bool, node_id: u32) -> Result<Event> {
        let mut args = kfd_ioctl_create_event_args {
            event_type,
            auto_reset: u32::from(auto_reset),
            node_id,
            ..Default::default()
        };
        self.call("CREATE_EVENT", AMDKFD_IOC_CREATE_EVENT, &mut args)?;
        Ok(Event {
            event_id: args.event_id,
            trigger_data: args.event_trigger_data,
            page_offset: args.event_page_offset,
            slot_index: args.event_slot_index,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_DESTROY_EVENT, &{event_id})`: destroys an event
    /// (`EINVAL` for an unknown id).
    #[doc(alias = "AMDKFD_IOC_DESTROY_EVENT")]
    pub fn destroy_event(&self, event_id: u32) -> Result<()> {
        let mut args = kfd_ioctl_destroy_event_args {
            event_id,
            ..Default::default()
        };
        self.call("DESTROY_EVENT", AMDKFD_IOC_DESTROY_EVENT, &mut args)?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_SET_EVENT, &{event_id})`: signals an event.
    #[doc(alias = "AMDKFD_IOC_SET_EVENT")]
    pub fn set_event(&self, event_id: u32) -> Result<()> {
        let mut args = kfd_ioctl_set_event_args {
            event_id,
            ..Default::default()
        };
        self.call("SET_EVENT", AMDKFD_IOC_SET_EVENT, &mut args)?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_RESET_EVENT, &{event_id})`: clears an event.
    #[doc(alias = "AMDKFD_IOC_RESET_EVENT")]
    pub fn reset_event(&self, event_id: u32) -> Result<()> {
        let mut args = kfd_ioctl_reset_event_args {
            event_id,
            ..Default::default()
        };
        self.call("RESET_EVENT", AMDKFD_IOC_RESET_EVENT, &mut args)?;
        Ok(())
    }

    /// `ioctl(fd, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &args)`, twice: first
    /// with a zero count to learn the number of GPUs, then with an array of
    /// that size. The `gpu_id` of each entry is the device's topology
    /// (actual) id.
    #[doc(alias = "AMDKFD_IOC_GET_PROCESS_APERTURES_NEW")]
    pub fn process_apertures(&self) -> Result<Vec<kfd_process_device_apertures>> {
        const OP: &str = "GET_PROCESS_APERTURES_NEW";
        let mut args = kfd_ioctl_get_process_apertures_new_args::default();
        self.call(OP, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut args)?;
        let capacity = args.num_of_nodes;
        let mut apertures = vec![kfd_process_device_apertures::default(); capacity as usize];
        if capacity == 0 {
            return Ok(apertures);
        }
        let mut args = kfd_ioctl_get_process_apertures_new_args {
            kfd_process_device_apertures_ptr: apertures.as_mut_ptr() as u64,
            num_of_nodes: capacity,
            pad: 0,
        };
        // SAFETY: the pointer refers to `capacity` writable entries that
        // outlive the call, and `num_of_nodes` tells the kernel that capacity.
        unsafe {
            ioctl(
                &self.driver,
                self.fd.as_fd(),
                OP,
                AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
                &mut args,
            )
        }?;
        if args.num_of_nodes > capacity {
            return Err(Error::protocol(
                OP,
                format!(
                    "{} entries reported for a {capacity}-entry array",
                    args.num_of_nodes
                ),
            ));
        }
        apertures.truncate(args.num_of_nodes as usize);
        Ok(apertures)
    }

    /// `ioctl(fd, AMDKFD_IOC_GET_DMABUF_INFO, &args)` without a metadata
    /// buffer: size, exporting GPU (topology id) and memory type of an amdgpu
    /// dma-buf.
    ///
    /// `EINVAL` for a foreign exporter or a BO that is neither VRAM nor GTT;
    /// a non-dma-buf fd gives `EBADF` or `EINVAL`.
    #[doc(alias = "AMDKFD_IOC_GET_DMABUF_INFO")]
    pub fn dmabuf_info(&self, dmabuf: BorrowedFd<'_>) -> Result<DmabufInfo> {
        let mut args = kfd_ioctl_get_dmabuf_info_args {
            dmabuf_fd: fd_arg(dmabuf),
            ..Default::default()
        };
        self.call("GET_DMABUF_INFO", AMDKFD_IOC_GET_DMABUF_INFO, &mut args)?;
        Ok(DmabufInfo {
            size: args.size,
            gpu_id: GpuId(args.gpu_id),
            flags: AllocFlags::from_bits_retain(args.flags),
            metadata_size: args.metadata_size,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_IMPORT_DMABUF, &args)`: imports an amdgpu
    /// dma-buf as a KFD BO at `va_addr` on `gpu_id` (user id).
    ///
    /// Needs the GPU's VM; `EINVAL` for an unknown gpu or a dma-buf that is
    /// not an amdgpu VRAM/GTT BO.
    #[doc(alias = "AMDKFD_IOC_IMPORT_DMABUF")]
    pub fn import_dmabuf(
        &self,
        gpu_id: GpuId,
        va_addr: u64,
        dmabuf: BorrowedFd<'_>,
    ) -> Result<MemHandle> {
        let mut args = kfd_ioctl_import_dmabuf_args {
            va_addr,
            handle: 0,
            gpu_id: gpu_id.0,
            dmabuf_fd: fd_arg(dmabuf),
        };
        self.call("IMPORT_DMABUF", AMDKFD_IOC_IMPORT_DMABUF, &mut args)?;
        Ok(MemHandle(args.handle))
    }

    /// `ioctl(fd, AMDKFD_IOC_EXPORT_DMABUF, &args)`: exports a KFD BO as a
    /// dma-buf opened read-write with `O_CLOEXEC` (KFD 1.12; older kernels
    /// answer `ENOTTY`).
    #[doc(alias = "AMDKFD_IOC_EXPORT_DMABUF")]
    pub fn export_dmabuf(&self, handle: MemHandle) -> Result<OwnedFd> {
        const OP: &str = "EXPORT_DMABUF";
        let mut args = kfd_ioctl_export_dmabuf_args {
            handle: handle.0,
            flags: (libc::O_RDWR | libc::O_CLOEXEC) as u32,
            dmabuf_fd: 0,
        };
        self.call(OP, AMDKFD_IOC_EXPORT_DMABUF, &mut args)?;
        owned_fd(OP, args.dmabuf_fd)
    }
}

impl<D: Driver + Clone, F: AsFd> Kfd<D, F> {
    /// `mmap(NULL, len, prot, MAP_SHARED, fd, offset)` on `/dev/kfd`: maps a
    /// doorbell, MMIO or event page at a KFD mmap offset.
    ///
    /// `ENODEV` for an unknown gpu in a doorbell offset, `EINVAL` for an MMIO
    /// mapping that is not exactly one page.
    pub fn mmap(&self, offset: u64, len: usize, prot: c_int) -> Result<DeviceMapping<D>> {
        DeviceMapping::new(
            self.driver.clone(),
            self.fd.as_fd(),
            offset,
            len,
            prot,
            "mmap /dev/kfd",
        )
    }
}

impl<D: Driver, F: AsFd> AsFd for Kfd<D, F> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An fd as the `u32` the KFD argument structs carry.
pub(crate) fn fd_arg(fd: BorrowedFd<'_>) -> u32 {
    // An open fd is never negative, so the cast keeps its value.
    fd.as_raw_fd() as u32
}

/// Takes ownership of an fd number the kernel just installed for us.
pub(crate) fn owned_fd(op: &'static str, raw: u32) -> Result<OwnedFd> {
    let raw = i32::try_from(raw)
        .ok()
        .filter(|&fd| fd >= 0)
        .ok_or_else(|| Error::protocol(op, format!("invalid fd {raw:#x} returned")))?;
    // SAFETY: the ioctl succeeded and installed `raw` as a new descriptor in
    // our table, which nobody else owns yet.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A slice length as the `u32` count the kernel takes.
pub(crate) fn count_u32(op: &'static str, len: usize) -> Result<u32> {
    u32::try_from(len)
        .map_err(|_| Error::invalid(op, format!("{len} entries do not fit a u32 count")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_handle_splits_gpu_and_slot() {
        let handle = MemHandle(0x0000_1234_0000_0007);
        assert_eq!(handle.gpu_id(), GpuId(0x1234));
        assert_eq!(handle.slot(), 7);
        assert_eq!(GpuId(0x1234).to_string(), "0x1234");
    }

    #[test]
    fn version_gates_criu() {
        assert!(Version { major: 1, minor: 8 }.supports_criu());
        assert!(Version {
            major: 1,
            minor: 17
        }
        .supports_criu());
        assert!(!Version { major: 1, minor: 7 }.supports_criu());
        assert!(!Version { major: 2, minor: 9 }.supports_criu());
        assert_eq!(
            Version {
                major: 1,
                minor: 11
            }
            .to_string(),
            "1.11"
        );
    }

    #[test]
    fn alloc_flags_keep_unknown_bits() {
        let flags = AllocFlags::from_bits_retain(0x8000_0001 | 1 << 20);
        assert!(flags.contains(AllocFlags::VRAM | AllocFlags::WRITABLE));
        assert_eq!(flags.bits(), 0x8010_0001);
        assert!(flags.has_content());
        assert!(!AllocFlags::DOORBELL.has_content());
    }

    #[test]
    fn owned_fd_rejects_invalid_numbers() {
        assert!(owned_fd("X", KFD_INVALID_FD).is_err());
        assert!(owned_fd("X", 0x8000_0000).is_err());
    }
}
