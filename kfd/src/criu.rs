//! The five `AMDKFD_IOC_CRIU_OP` operations with typed inputs and outputs.
//!
//! PROCESS_INFO, CHECKPOINT and UNPAUSE run in the dumper on the target's
//! `/dev/kfd` fd (CRIU is its ptrace parent); RESTORE runs inside the restored
//! task on a freshly opened `/dev/kfd`; RESUME runs in CRIU's own process.
//! Every dma-buf fd the kernel installs is wrapped as an [`OwnedFd`] before
//! anything else happens, so no error path can leak one. This module never
//! interprets the private data blob: it is opaque and round-trips verbatim.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use kfd_sys::*;

use crate::error::{Error, Result};
use crate::ioctl::ioctl;
use crate::kfd::{count_u32, owned_fd, AllocFlags, GpuId, Kfd};
use crate::{Driver, FdKind};

/// What PROCESS_INFO reports about a paused process: the sizes CHECKPOINT
/// needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessInfo {
    /// GPUs the process can see (one device bucket each).
    pub num_devices: u32,
    /// BOs to checkpoint.
    pub num_bos: u32,
    /// Queues + events + SVM ranges (opaque objects).
    pub num_objects: u32,
    /// Bytes of private data.
    pub priv_data_size: u64,
    /// The target's pid in its own pid namespace.
    pub pid: u32,
}

/// A checkpointed BO: its bucket plus, for VRAM/GTT BOs, the dma-buf the
/// kernel exported into the caller's fd table (read-write iff the BO is
/// WRITABLE).
#[derive(Debug)]
pub struct CheckpointBo {
    /// The bucket as the kernel filled it; `dmabuf_fd` still holds the raw
    /// number of [`CheckpointBo::dmabuf`] (or [`KFD_INVALID_FD`]).
    pub bucket: kfd_criu_bo_bucket,
    /// The BO's contents, for VRAM/GTT BOs.
    pub dmabuf: Option<OwnedFd>,
}

impl CheckpointBo {
    /// The bucket's allocation flags.
    pub fn flags(&self) -> AllocFlags {
        AllocFlags::from_bits_retain(self.bucket.alloc_flags)
    }

    /// The user gpu_id that owns the BO.
    pub fn gpu_id(&self) -> GpuId {
        GpuId(self.bucket.gpu_id)
    }
}

/// Everything CHECKPOINT returns.
#[derive(Debug)]
pub struct Checkpoint {
    /// One bucket per GPU (user and actual gpu ids).
    pub devices: Vec<kfd_criu_device_bucket>,
    /// One entry per BO, in the kernel's order.
    pub bos: Vec<CheckpointBo>,
    /// The opaque private data blob.
    pub priv_data: Vec<u8>,
}

/// A BO re-created by RESTORE.
#[derive(Debug)]
pub struct RestoredBo {
    /// The bucket after the kernel updated it: `restored_offset` is the new
    /// mmap offset (for VRAM/GTT/doorbell/MMIO BOs), `dmabuf_fd` the raw
    /// number of [`RestoredBo::dmabuf`].
    pub bucket: kfd_criu_bo_bucket,
    /// A read-write dma-buf of the new BO (VRAM/GTT BOs), through which the
    /// caller writes the contents back.
    pub dmabuf: Option<OwnedFd>,
}

impl<D: Driver, F: AsFd> Kfd<D, F> {
    fn criu_op(&self, op: &'static str, args: &mut kfd_ioctl_criu_args) -> Result<()> {
        // SAFETY: callers set `devices`, `bos` and `priv_data` either to 0 or
        // to live buffers holding at least `num_devices`, `num_bos` and
        // `priv_data_size` elements, alive until this call returns.
        unsafe { ioctl(self.driver(), self.as_fd(), op, AMDKFD_IOC_CRIU_OP, args) }?;
        Ok(())
    }

    /// Whether the caller may issue CRIU ops on this fd, asked without
    /// side effects: a CRIU_OP with an op number no kernel has. The kernel
    /// checks `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN` (in the initial
    /// user namespace) before it looks at the op, so `EACCES` means not
    /// permitted and the unknown op's `EINVAL` means permitted. Other
    /// errors (`ENOTTY`: a kernel without the CRIU ioctl) are returned.
    #[doc(alias = "AMDKFD_IOC_CRIU_OP")]
    pub fn criu_permitted(&self) -> Result<bool> {
        let mut args = kfd_ioctl_criu_args {
            op: u32::MAX,
            ..Default::default()
        };
        match self.criu_op("CRIU_OP (permission probe)", &mut args) {
            Ok(()) => Ok(true),
            Err(e) if e.errno() == libc::EINVAL => Ok(true),
            Err(e) if e.errno() == libc::EACCES => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `ioctl(fd, AMDKFD_IOC_CRIU_OP, &{op = KFD_CRIU_OP_PROCESS_INFO})`:
    /// pauses (evicts) the process's queues and reports its counts.
    ///
    /// Issued by the fd's owner or its ptrace parent holding
    /// `CAP_CHECKPOINT_RESTORE` or `CAP_SYS_ADMIN` (`EBADF` / `EACCES`
    /// otherwise). `ENODEV` if the process has no GPU. Every successful call
    /// adds one pause level; undo it with [`Kfd::unpause`].
    #[doc(alias = "AMDKFD_IOC_CRIU_OP")]
    pub fn process_info(&self) -> Result<ProcessInfo> {
        let mut args = kfd_ioctl_criu_args {
            op: KFD_CRIU_OP_PROCESS_INFO,
            ..Default::default()
        };
        self.criu_op("CRIU_OP PROCESS_INFO", &mut args)?;
        Ok(ProcessInfo {
            num_devices: args.num_devices,
            num_bos: args.num_bos,
            num_objects: args.num_objects,
            priv_data_size: args.priv_data_size,
            pid: args.pid,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_CRIU_OP, &{op = KFD_CRIU_OP_CHECKPOINT, ...})`:
    /// reads device and BO buckets and the private data of a paused process.
    ///
    /// `info` must be the answer of the preceding [`Kfd::process_info`]: the
    /// kernel refuses (`EINVAL`) when not paused or when any count or the
    /// private data size changed. VRAM/GTT BOs come with a dma-buf fd; the
    /// kernel installs them only when the whole call succeeds. Each call
    /// mints new fds.
    #[doc(alias = "AMDKFD_IOC_CRIU_OP")]
    pub fn checkpoint(&self, info: &ProcessInfo) -> Result<Checkpoint> {
        const OP: &str = "CRIU_OP CHECKPOINT";
        let priv_len = usize::try_from(info.priv_data_size).map_err(|_| {
            Error::invalid(OP, format!("{} bytes of private data", info.priv_data_size))
        })?;
        let mut devices = zeroed_vec::<kfd_criu_device_bucket>(OP, info.num_devices as usize)?;
        let mut buckets = zeroed_vec::<kfd_criu_bo_bucket>(OP, info.num_bos as usize)?;
        let mut priv_data = zeroed_vec::<u8>(OP, priv_len)?;
        // The kernel insists on non-null pointers even for empty arrays; an
        // empty Vec's dangling pointer is non-null and is never dereferenced
        // for zero elements.
        let mut args = kfd_ioctl_criu_args {
            devices: devices.as_mut_ptr() as u64,
            bos: buckets.as_mut_ptr() as u64,
            priv_data: priv_data.as_mut_ptr() as u64,
            priv_data_size: info.priv_data_size,
            num_devices: info.num_devices,
            num_bos: info.num_bos,
            num_objects: info.num_objects,
            op: KFD_CRIU_OP_CHECKPOINT,
            ..Default::default()
        };
        // SAFETY: the three pointers refer to the Vecs above, sized exactly
        // by the counts passed alongside them, alive until the call returns.
        unsafe {
            ioctl(
                self.driver(),
                self.as_fd(),
                OP,
                AMDKFD_IOC_CRIU_OP,
                &mut args,
            )
        }?;
        // Take ownership of every fd first, so an inconsistency found below
        // still closes them all.
        let mut bos = Vec::with_capacity(buckets.len());
        let mut bad_fd = None;
        for bucket in buckets {
            let dmabuf = match bucket.dmabuf_fd {
                KFD_INVALID_FD => None,
                raw => match owned_fd(OP, raw) {
                    Ok(fd) => Some(fd),
                    Err(err) => {
                        bad_fd.get_or_insert(err);
                        None
                    }
                },
            };
            bos.push(CheckpointBo { bucket, dmabuf });
        }
        if let Some(err) = bad_fd {
            return Err(err);
        }
        Ok(Checkpoint {
            devices,
            bos,
            priv_data,
        })
    }

    /// `ioctl(fd, AMDKFD_IOC_CRIU_OP, &{op = KFD_CRIU_OP_UNPAUSE})`: releases
    /// one pause level taken by [`Kfd::process_info`]; `EINVAL` if the
    /// process is not paused.
    #[doc(alias = "AMDKFD_IOC_CRIU_OP")]
    pub fn unpause(&self) -> Result<()> {
        let mut args = kfd_ioctl_criu_args {
            op: KFD_CRIU_OP_UNPAUSE,
            ..Default::default()
        };
        self.criu_op("CRIU_OP UNPAUSE", &mut args)
    }

    /// `ioctl(fd, AMDKFD_IOC_CRIU_OP, &{op = KFD_CRIU_OP_RESTORE, ...})`:
    /// re-creates the checkpointed process's BOs, queues and events in the
    /// calling process, which must have opened this fd itself.
    ///
    /// `devices` carry the user id from the image, the local actual id and
    /// the fd of an amdgpu render node (whose VM must not belong to a KFD
    /// process yet); `bos` come from the image (`dmabuf_fd` and
    /// `restored_offset` are ignored and overwritten). The kernel demands
    /// `num_devices` equal to the GPUs this process sees, consumes
    /// `priv_data` exactly and allows one RESTORE per process (`EINVAL`).
    /// Objects already created are not rolled back on failure.
    ///
    /// Returns the updated buckets with the new BOs' dma-bufs. If the kernel
    /// fails after it installed dma-buf fds (a later stage failed), those
    /// fds are closed here before the error is returned.
    #[doc(alias = "AMDKFD_IOC_CRIU_OP")]
    pub fn restore(
        &self,
        devices: &[kfd_criu_device_bucket],
        bos: &[kfd_criu_bo_bucket],
        priv_data: &[u8],
        num_objects: u32,
    ) -> Result<Vec<RestoredBo>> {
        const OP: &str = "CRIU_OP RESTORE";
        let mut devices = devices.to_vec();
        let mut buckets: Vec<kfd_criu_bo_bucket> = bos
            .iter()
            .map(|b| kfd_criu_bo_bucket {
                dmabuf_fd: KFD_INVALID_FD,
                ..*b
            })
            .collect();
        let mut args = kfd_ioctl_criu_args {
            devices: devices.as_mut_ptr() as u64,
            bos: if buckets.is_empty() {
                0
            } else {
                buckets.as_mut_ptr() as u64
            },
            priv_data: priv_data.as_ptr() as u64,
            priv_data_size: priv_data.len() as u64,
            num_devices: count_u32(OP, devices.len())?,
            num_bos: count_u32(OP, buckets.len())?,
            num_objects,
            op: KFD_CRIU_OP_RESTORE,
            ..Default::default()
        };
        // SAFETY: `devices` and `bos` point to owned Vecs of exactly the
        // counts passed (the kernel writes the BO buckets back);
        // `priv_data` points to the caller's slice of `priv_data_size` bytes,
        // which RESTORE only reads. All outlive the call.
        let ret = unsafe {
            ioctl(
                self.driver(),
                self.as_fd(),
                OP,
                AMDKFD_IOC_CRIU_OP,
                &mut args,
            )
        };
        if let Err(err) = ret {
            self.close_restored_fds(&buckets);
            return Err(err);
        }
        let mut restored = Vec::with_capacity(buckets.len());
        let mut bad_fd = None;
        for bucket in buckets {
            let dmabuf = match bucket.dmabuf_fd {
                KFD_INVALID_FD => None,
                raw => match owned_fd(OP, raw) {
                    Ok(fd) => Some(fd),
                    Err(err) => {
                        bad_fd.get_or_insert(err);
                        None
                    }
                },
            };
            restored.push(RestoredBo { bucket, dmabuf });
        }
        match bad_fd {
            Some(err) => Err(err),
            None => Ok(restored),
        }
    }

    /// After a failed RESTORE the bucket array holds real fds only if the BO
    /// stage completed (the kernel installs them after copying the buckets
    /// back). We passed `KFD_INVALID_FD` in every bucket, so any other value
    /// is kernel-written; it is closed only if it really is a dma-buf.
    fn close_restored_fds(&self, buckets: &[kfd_criu_bo_bucket]) {
        for bucket in buckets {
            let Ok(raw) = i32::try_from(bucket.dmabuf_fd) else {
                continue;
            };
            if raw < 0 {
                continue;
            }
            // SAFETY: only used to ask what `raw` is; the borrow ends before
            // any close.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
            if matches!(self.driver().fd_kind(fd), Ok(FdKind::DmaBuf)) {
                // SAFETY: the kernel installed this dma-buf fd for us in the
                // failed RESTORE (see above); nothing else owns it.
                drop(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
    }

    /// `ioctl(fd, AMDKFD_IOC_CRIU_OP, &{op = KFD_CRIU_OP_RESUME, pid})`:
    /// finishes the restore of process `pid` (in the caller's pid namespace)
    /// and lets its queues run again, asynchronously.
    ///
    /// `ESRCH` when `pid` does not exist or has no KFD process (CRIU treats
    /// that as "not a GPU process": check [`Error::errno`]); `EINVAL` when no
    /// RESTORE preceded it or it already ran.
    #[doc(alias = "AMDKFD_IOC_CRIU_OP")]
    pub fn resume(&self, pid: u32) -> Result<()> {
        let mut args = kfd_ioctl_criu_args {
            op: KFD_CRIU_OP_RESUME,
            pid,
            ..Default::default()
        };
        self.criu_op("CRIU_OP RESUME", &mut args)
    }
}

/// A zero-filled Vec of `len` elements, refusing sizes the allocator cannot
/// provide (`ENOMEM`) instead of aborting.
fn zeroed_vec<T: zerocopy::FromZeros + Clone>(op: &'static str, len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::Os {
        op,
        errno: libc::ENOMEM,
    })?;
    v.resize(len, T::new_zeroed());
    Ok(v)
}
