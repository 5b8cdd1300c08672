//! The KFD half of the simulated kernel: `/dev/kfd` ioctl dispatch (by
//! number, with the kernel's fd-ownership, ptrace and capability rules, size
//! tolerance and copy-out even on failure), the KFD ioctls, the CRIU op state
//! machine, and `mmap` of `/dev/kfd` (doorbells, events, MMIO).
//!
//! Dispatch follows `kfd_ioctl()` (spec §1.1): a number outside
//! `[AMDKFD_COMMAND_START, COMMAND_END)` is `ENOTTY`; a caller that is not the
//! fd's owner gets `EBADF` unless the ioctl is CRIU_OP and the caller is the
//! owner's ptrace parent; CRIU_OP then needs the capability (`EACCES`). The
//! simulated table ends after EXPORT_DMABUF (0x24, KFD 1.12): the debugger
//! ioctls of 1.13+ (RUNTIME_ENABLE, DBG_TRAP) are not simulated and answer
//! `ENOTTY` like a kernel without them. This module never touches DRM state
//! beyond the "VM owned by a KFD process" marker of a render file.

pub(crate) mod adopt;
pub(crate) mod criu;
pub(crate) mod event;
pub(crate) mod event_wait;
pub(crate) mod mem_limit;
pub(crate) mod memory;
pub(crate) mod priv_data;
pub(crate) mod process;
pub(crate) mod queue;
pub(crate) mod saved;
pub(crate) mod scheduling;
pub(crate) mod svm;
pub(crate) mod tile_config;
pub(crate) mod waits;

use std::ffi::{c_int, c_void};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use kfd_sys::*;

use crate::hw::bo::{Memfd, PAGE_SIZE};
use crate::hw::{LDS_BASE, SCRATCH_BASE};
use crate::kernel::{marshal, typed, Ctx, FileKey, OpenFile, Pid, Shared, State};
use ::kfd::Errno;

/// One past the last ioctl number the simulated kernel implements.
pub(crate) const SIM_COMMAND_END: u32 = 0x25;

/// A handler: the KFD process is the fd owner's, the buffer is the
/// marshalled argument.
type Handler = fn(&mut Ctx<'_>, Pid, &mut [u8]) -> Result<c_int, Errno>;

/// One entry of the ioctl table (`struct amdkfd_ioctl_desc`).
struct IoctlDesc {
    /// The kernel's own request code (direction and size come from it).
    cmd: u32,
    /// Name used in fault specs.
    name: &'static str,
    /// `KFD_IOC_FLAG_CHECKPOINT_RESTORE`.
    checkpoint_restore: bool,
    func: Handler,
}

const fn d(cmd: u32, name: &'static str, func: Handler) -> IoctlDesc {
    IoctlDesc {
        cmd,
        name,
        checkpoint_restore: false,
        func,
    }
}

/// The names (for fault injection) of every ioctl the simulated
/// `/dev/kfd` handles.
pub(crate) fn ioctl_names() -> Vec<&'static str> {
    (0..=0xFF)
        .filter_map(lookup)
        .map(|desc| desc.name)
        .collect()
}

/// The ioctl table by number.
fn lookup(nr: u32) -> Option<IoctlDesc> {
    Some(match nr {
        0x01 => d(AMDKFD_IOC_GET_VERSION, "GET_VERSION", get_version),
        0x02 => d(AMDKFD_IOC_CREATE_QUEUE, "CREATE_QUEUE", queue::create_queue),
        0x03 => d(
            AMDKFD_IOC_DESTROY_QUEUE,
            "DESTROY_QUEUE",
            queue::destroy_queue,
        ),
        0x04 => d(
            AMDKFD_IOC_SET_MEMORY_POLICY,
            "SET_MEMORY_POLICY",
            set_memory_policy,
        ),
        0x05 => d(
            AMDKFD_IOC_GET_CLOCK_COUNTERS,
            "GET_CLOCK_COUNTERS",
            get_clock_counters,
        ),
        0x06 => d(
            AMDKFD_IOC_GET_PROCESS_APERTURES,
            "GET_PROCESS_APERTURES",
            get_process_apertures,
        ),
        0x07 => d(AMDKFD_IOC_UPDATE_QUEUE, "UPDATE_QUEUE", queue::update_queue),
        0x08 => d(AMDKFD_IOC_CREATE_EVENT, "CREATE_EVENT", event::create_event),
        0x09 => d(
            AMDKFD_IOC_DESTROY_EVENT,
            "DESTROY_EVENT",
            event::destroy_event,
        ),
        0x0A => d(AMDKFD_IOC_SET_EVENT, "SET_EVENT", event::set_event),
        0x0B => d(AMDKFD_IOC_RESET_EVENT, "RESET_EVENT", event::reset_event),
        0x0C => d(
            AMDKFD_IOC_WAIT_EVENTS,
            "WAIT_EVENTS",
            event_wait::wait_events,
        ),
        0x0D => d(
            AMDKFD_IOC_DBG_REGISTER_DEPRECATED,
            "DBG_REGISTER_DEPRECATED",
            deprecated,
        ),
        0x0E => d(
            AMDKFD_IOC_DBG_UNREGISTER_DEPRECATED,
            "DBG_UNREGISTER_DEPRECATED",
            deprecated,
        ),
        0x0F => d(
            AMDKFD_IOC_DBG_ADDRESS_WATCH_DEPRECATED,
            "DBG_ADDRESS_WATCH_DEPRECATED",
            deprecated,
        ),
        0x10 => d(
            AMDKFD_IOC_DBG_WAVE_CONTROL_DEPRECATED,
            "DBG_WAVE_CONTROL_DEPRECATED",
            deprecated,
        ),
        0x11 => d(
            AMDKFD_IOC_SET_SCRATCH_BACKING_VA,
            "SET_SCRATCH_BACKING_VA",
            set_scratch_backing_va,
        ),
        0x12 => d(
            AMDKFD_IOC_GET_TILE_CONFIG,
            "GET_TILE_CONFIG",
            tile_config::get_tile_config,
        ),
        0x13 => d(
            AMDKFD_IOC_SET_TRAP_HANDLER,
            "SET_TRAP_HANDLER",
            set_trap_handler,
        ),
        0x14 => d(
            AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
            "GET_PROCESS_APERTURES_NEW",
            get_process_apertures_new,
        ),
        0x15 => d(AMDKFD_IOC_ACQUIRE_VM, "ACQUIRE_VM", acquire_vm),
        0x16 => d(
            AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
            "ALLOC_MEMORY_OF_GPU",
            memory::alloc_memory_of_gpu,
        ),
        0x17 => d(
            AMDKFD_IOC_FREE_MEMORY_OF_GPU,
            "FREE_MEMORY_OF_GPU",
            memory::free_memory_of_gpu,
        ),
        0x18 => d(
            AMDKFD_IOC_MAP_MEMORY_TO_GPU,
            "MAP_MEMORY_TO_GPU",
            memory::map_memory_to_gpu,
        ),
        0x19 => d(
            AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU,
            "UNMAP_MEMORY_FROM_GPU",
            memory::unmap_memory_from_gpu,
        ),
        0x1A => d(AMDKFD_IOC_SET_CU_MASK, "SET_CU_MASK", queue::set_cu_mask),
        0x1B => d(
            AMDKFD_IOC_GET_QUEUE_WAVE_STATE,
            "GET_QUEUE_WAVE_STATE",
            queue::get_queue_wave_state,
        ),
        0x1C => d(
            AMDKFD_IOC_GET_DMABUF_INFO,
            "GET_DMABUF_INFO",
            memory::get_dmabuf_info,
        ),
        0x1D => d(
            AMDKFD_IOC_IMPORT_DMABUF,
            "IMPORT_DMABUF",
            memory::import_dmabuf,
        ),
        0x1E => d(
            AMDKFD_IOC_ALLOC_QUEUE_GWS,
            "ALLOC_QUEUE_GWS",
            queue::alloc_queue_gws,
        ),
        0x1F => d(AMDKFD_IOC_SMI_EVENTS, "SMI_EVENTS", smi_events),
        0x20 => d(AMDKFD_IOC_SVM, "SVM", svm::svm),
        0x21 => d(AMDKFD_IOC_SET_XNACK_MODE, "SET_XNACK_MODE", set_xnack_mode),
        0x22 => IoctlDesc {
            cmd: AMDKFD_IOC_CRIU_OP,
            name: "CRIU_OP",
            checkpoint_restore: true,
            func: criu::criu_op,
        },
        0x23 => d(
            AMDKFD_IOC_AVAILABLE_MEMORY,
            "AVAILABLE_MEMORY",
            available_memory,
        ),
        0x24 => d(
            AMDKFD_IOC_EXPORT_DMABUF,
            "EXPORT_DMABUF",
            memory::export_dmabuf,
        ),
        _ => return None,
    })
}

/// `kfd_ioctl()`: dispatch one ioctl on a `/dev/kfd` file owned by `owner`.
///
/// # Safety
/// The [`kfd::Driver::ioctl`] contract for `arg`.
pub(crate) unsafe fn ioctl(
    ctx: &mut Ctx<'_>,
    owner: Pid,
    request: u64,
    arg: *mut c_void,
) -> Result<c_int, Errno> {
    let request = request as u32;
    let nr = u32::from(_IOC_NR(request));
    if !(AMDKFD_COMMAND_START..SIM_COMMAND_END).contains(&nr) {
        return Err(Errno(libc::ENOTTY));
    }
    let desc = lookup(nr).ok_or(Errno(libc::ENOTTY))?;
    let user_size = _IOC_SIZE(request);
    let kernel_size = _IOC_SIZE(desc.cmd);
    let caller = ctx.caller;
    let ptrace_attached = desc.checkpoint_restore
        && ctx
            .st
            .processes
            .get(&owner)
            .is_some_and(|p| p.traced_by(owner, caller));
    if owner != caller && !ptrace_attached {
        return Err(Errno(libc::EBADF));
    }
    if desc.checkpoint_restore {
        let capable = ctx.st.processes.get(&caller).is_some_and(|p| p.capable);
        if !capable {
            return Err(Errno(libc::EACCES));
        }
    }
    let dir = _IOC_DIR(desc.cmd);
    let copy_in = dir & _IOC_WRITE != 0;
    let copy_out = dir & _IOC_READ != 0;
    let name = desc.name;
    let func = desc.func;
    // SAFETY: forwarded Driver::ioctl contract: `arg` is valid for
    // `_IOC_SIZE(request)` bytes.
    unsafe {
        marshal(arg, user_size, kernel_size, copy_in, copy_out, |buf| {
            // A WAIT_EVENTS woken from its sleep is the same call.
            if ctx.wait.is_none() {
                crate::kernel::fault::check(ctx.st, name)?;
            }
            if ctx.st.kfd(owner).is_none() {
                // The owner exited: its kfd_process is gone.
                return Err(Errno(libc::ESRCH));
            }
            func(ctx, owner, buf)
        })
    }
}

/// The KFD process of `pid`, or `ESRCH`.
pub(crate) fn proc_mut(st: &mut State, pid: Pid) -> Result<&mut process::KfdProcess, Errno> {
    st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))
}

fn get_version(ctx: &mut Ctx<'_>, _p: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let minor = ctx.sim.kfd_minor.load(std::sync::atomic::Ordering::Relaxed);
    typed(buf, |a: &mut kfd_ioctl_get_version_args| {
        a.major_version = KFD_IOCTL_MAJOR_VERSION;
        a.minor_version = minor;
        Ok(0)
    })
}

/// The deprecated debugger ioctls answer `EPERM` in current kernels.
fn deprecated(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> {
    Err(Errno(libc::EPERM))
}

/// Ioctls the simulator does not model answer `EOPNOTSUPP`, a value the real
/// handlers never return, so a test relying on them fails loudly.
fn not_simulated() -> Result<c_int, Errno> {
    Err(Errno(libc::EOPNOTSUPP))
}

fn smi_events(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> {
    not_simulated()
}

/// `kfd_bind_process_to_device`: the pdd must have a VM (`ENODEV`).
pub(crate) fn bind(p: &process::KfdProcess, pdd: usize) -> Result<(), Errno> {
    match p.pdds.get(pdd) {
        Some(pdd) if pdd.drm_file.is_some() => Ok(()),
        _ => Err(Errno(libc::ENODEV)),
    }
}

/// Turns render file `key` (open as the caller's `drm_fd`) into the compute
/// VM of pdd `pdd_idx` of `pid` (`kfd_process_device_init_vm`): the file must
/// be on the pdd's GPU and its VM must not belong to a KFD process yet
/// (`EINVAL`). Like the kernel's `get_file`, the pdd keeps the file open (a
/// dup of `drm_fd`) until the process exits, so the file outlives the
/// application's own fds.
pub(crate) fn init_vm(
    ctx: &mut Ctx<'_>,
    pid: Pid,
    pdd_idx: usize,
    key: FileKey,
    drm_fd: i32,
) -> Result<(), Errno> {
    let gpu = proc_mut(ctx.st, pid)?.pdds[pdd_idx].gpu;
    let render = ctx.st.render_mut(key).ok_or(Errno(libc::EINVAL))?;
    if render.kfd_vm_owner.is_some() || render.gpu != gpu {
        return Err(Errno(libc::EINVAL));
    }
    // SAFETY: F_DUPFD_CLOEXEC has no memory arguments; `drm_fd` was just
    // resolved to this render file, and a failure is reported as an errno.
    let dup = unsafe { libc::fcntl(drm_fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(Errno::last());
    }
    // SAFETY: fcntl succeeded, so `dup` is a new descriptor we own.
    let held = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(dup) };
    render.kfd_vm_owner = Some(pid);
    let pdd = &mut proc_mut(ctx.st, pid)?.pdds[pdd_idx];
    pdd.drm_file = Some(key);
    pdd.drm_file_ref = Some(held);
    Ok(())
}

fn acquire_vm(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a: kfd_ioctl_acquire_vm_args = typed(buf, |a: &mut kfd_ioctl_acquire_vm_args| *a);
    let drm = {
        let fd = i32::try_from(a.drm_fd).map_err(|_| Errno(libc::EINVAL))?;
        crate::kernel::user_fd(fd).map_err(|_| Errno(libc::EINVAL))?
    };
    let key = FileKey::of_raw(drm.raw()).map_err(|_| Errno(libc::EINVAL))?;
    let p = proc_mut(ctx.st, pid)?;
    let pdd_idx = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::EINVAL))?;
    if let Some(existing) = p.pdds[pdd_idx].drm_file {
        return if existing == key {
            Ok(0)
        } else {
            Err(Errno(libc::EBUSY))
        };
    }
    if !matches!(ctx.st.files.get(&key), Some(OpenFile::Render(_))) {
        return Err(Errno(libc::EINVAL));
    }
    init_vm(ctx, pid, pdd_idx, key, drm.raw())?;
    Ok(0)
}

// GFX9 apertures (`kfd_init_apertures_v9`): LDS and scratch where the
// hardware puts them (`crate::hw::LDS_BASE`, `SCRATCH_BASE`), GPUVM from
// 16 KiB (after the kernel's CWSR and IB pages) to 2^47 - 1.

/// `pdd->gpuvm_base` on GFX9 dGPUs.
pub(crate) const GPUVM_BASE: u64 = 16 << 10;
pub(crate) const GPUVM_LIMIT: u64 = (1 << 47) - 1;

fn apertures_of(ctx: &Ctx<'_>, gpu: usize) -> kfd_process_device_apertures {
    kfd_process_device_apertures {
        lds_base: LDS_BASE,
        lds_limit: LDS_BASE + 0xFFFF_FFFF,
        scratch_base: SCRATCH_BASE,
        scratch_limit: SCRATCH_BASE + 0xFFFF_FFFF,
        gpuvm_base: GPUVM_BASE,
        gpuvm_limit: GPUVM_LIMIT,
        // The kernel reports the topology (actual) id here (spec §1.5).
        gpu_id: ctx.sim.gpus[gpu].id(),
        ..Default::default()
    }
}

fn get_process_apertures(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let gpus: Vec<usize> = proc_mut(ctx.st, pid)?.pdds.iter().map(|p| p.gpu).collect();
    let list: Vec<_> = gpus.iter().map(|&g| apertures_of(ctx, g)).collect();
    typed(buf, |a: &mut kfd_ioctl_get_process_apertures_args| {
        let n = list.len().min(a.process_apertures.len());
        a.process_apertures[..n].copy_from_slice(&list[..n]);
        a.num_of_nodes = n as u32;
        Ok(0)
    })
}

fn get_process_apertures_new(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let gpus: Vec<usize> = proc_mut(ctx.st, pid)?.pdds.iter().map(|p| p.gpu).collect();
    let list: Vec<_> = gpus.iter().map(|&g| apertures_of(ctx, g)).collect();
    typed(buf, |a: &mut kfd_ioctl_get_process_apertures_new_args| {
        if a.num_of_nodes == 0 {
            // Query: report how many entries the caller needs.
            a.num_of_nodes = list.len() as u32;
            return Ok(0);
        }
        let n = list.len().min(a.num_of_nodes as usize);
        let bytes: Vec<u8> = list[..n]
            .iter()
            .flat_map(|e| zerocopy::IntoBytes::as_bytes(e).to_vec())
            .collect();
        a.num_of_nodes = n as u32;
        crate::kernel::copy_to_user(a.kfd_process_device_apertures_ptr, &bytes)?;
        Ok(0)
    })
}

fn available_memory(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let gpu_id = typed(buf, |a: &mut kfd_ioctl_get_available_memory_args| a.gpu_id);
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(gpu_id).ok_or(Errno(libc::EINVAL))?;
    let gpu = p.pdds[pdd].gpu;
    let avail = mem_limit::available_vram(ctx.sim, &ctx.st.bos, gpu);
    typed(buf, |a: &mut kfd_ioctl_get_available_memory_args| {
        a.available = avail;
        Ok(0)
    })
}

fn get_clock_counters(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let gpu_id = typed(buf, |a: &mut kfd_ioctl_get_clock_counters_args| a.gpu_id);
    let has_gpu = proc_mut(ctx.st, pid)?.pdd_by_user_id(gpu_id).is_some();
    typed(buf, |a: &mut kfd_ioctl_get_clock_counters_args| {
        // The GPU clock runs at 100 MHz on GFX9 (one tick per 10 ns); 0 when
        // the gpu_id is unknown, as the kernel does.
        a.gpu_clock_counter = if has_gpu {
            crate::hw::clock::now_ns(libc::CLOCK_MONOTONIC_RAW) / 10
        } else {
            0
        };
        a.cpu_clock_counter = crate::hw::clock::now_ns(libc::CLOCK_MONOTONIC_RAW);
        a.system_clock_counter = crate::hw::clock::now_ns(libc::CLOCK_BOOTTIME);
        a.system_clock_freq = 1_000_000_000;
        Ok(0)
    })
}

fn set_memory_policy(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_set_memory_policy_args| *a);
    let valid =
        |v: u32| v == KFD_IOC_CACHE_POLICY_COHERENT || v == KFD_IOC_CACHE_POLICY_NONCOHERENT;
    if !valid(a.default_policy) || !valid(a.alternate_policy) {
        return Err(Errno(libc::EINVAL));
    }
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::EINVAL))?;
    bind(p, pdd).map_err(|_| Errno(libc::ESRCH))?;
    p.pdds[pdd].memory_policy = (
        a.default_policy,
        a.alternate_policy,
        a.alternate_aperture_base,
        a.alternate_aperture_size,
    );
    Ok(0)
}

fn set_scratch_backing_va(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_set_scratch_backing_va_args| *a);
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::EINVAL))?;
    bind(p, pdd)?;
    p.pdds[pdd].scratch_backing_va = a.va_addr;
    Ok(0)
}

fn set_trap_handler(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_set_trap_handler_args| *a);
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::ENODEV))?;
    bind(p, pdd)?;
    p.pdds[pdd].trap_handler = (a.tba_addr, a.tma_addr);
    Ok(0)
}

fn set_xnack_mode(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let requested = typed(buf, |a: &mut kfd_ioctl_set_xnack_mode_args| a.xnack_enabled);
    let p = proc_mut(ctx.st, pid)?;
    if requested < 0 {
        // Query.
        let cur = i32::from(p.xnack);
        return typed(buf, |a: &mut kfd_ioctl_set_xnack_mode_args| {
            a.xnack_enabled = cur;
            Ok(0)
        });
    }
    if requested != 0 && !xnack_capable(ctx.sim, p) {
        return Err(Errno(libc::EPERM));
    }
    if !p.queues.is_empty() {
        // The mode cannot change while the process has queues.
        return Err(Errno(libc::EBUSY));
    }
    p.xnack = requested != 0;
    Ok(0)
}

/// Whether every GPU of the process can run with XNACK on
/// (`kfd_process_xnack_mode`): GFX 9.0.1 up to, not including, GFX 10.1.1.
/// Kernels also require `noretry=0` on parts other than gfx90a; the
/// simulated kernel runs with retry faults enabled.
pub(crate) fn xnack_capable(sim: &Shared, p: &process::KfdProcess) -> bool {
    p.pdds.iter().all(|pdd| {
        let gfx = sim.gpus[pdd.gpu].info.gfx_target_version;
        (90001..100101).contains(&gfx)
    })
}

/// The process's doorbell slice on pdd `pdd` (created on first use).
pub(crate) fn doorbell_page(
    sim: &Shared,
    p: &mut process::KfdProcess,
    pdd: usize,
) -> Result<Arc<Memfd>, Errno> {
    let slice = sim.gpus[p.pdds[pdd].gpu].doorbell_slice;
    let entry = &mut p.pdds[pdd].doorbell_page;
    if let Some(page) = entry {
        return Ok(page.clone());
    }
    let page = Arc::new(Memfd::new("kfd-sim-doorbells", slice)?);
    *entry = Some(page.clone());
    Ok(page)
}

/// `kfd_mmap()`: what an mmap of `/dev/kfd` at `offset` shows, for the
/// calling process `pid`: the memfd and the offset inside it.
pub(crate) fn mmap(
    sim: &Shared,
    st: &mut State,
    pid: Pid,
    offset: u64,
    len: u64,
) -> Result<(Arc<Memfd>, u64), Errno> {
    let p = st.kfd_mut(pid).ok_or(Errno(libc::EINVAL))?;
    let gpu_id = KFD_MMAP_GET_GPU_ID(offset);
    match offset & KFD_MMAP_TYPE_MASK {
        KFD_MMAP_TYPE_DOORBELL => {
            let gpu = sim
                .gpus
                .iter()
                .position(|g| g.id() == gpu_id)
                .ok_or(Errno(libc::ENODEV))?;
            let pdd = p.pdd_by_gpu(gpu).ok_or(Errno(libc::EINVAL))?;
            if len != sim.gpus[gpu].doorbell_slice {
                return Err(Errno(libc::EINVAL));
            }
            Ok((doorbell_page(sim, p, pdd)?, 0))
        }
        KFD_MMAP_TYPE_MMIO => {
            let gpu = sim
                .gpus
                .iter()
                .position(|g| g.id() == gpu_id)
                .ok_or(Errno(libc::ENODEV))?;
            p.pdd_by_gpu(gpu).ok_or(Errno(libc::EINVAL))?;
            if len != PAGE_SIZE {
                return Err(Errno(libc::EINVAL));
            }
            Ok((sim.gpus[gpu].mmio_page.clone(), 0))
        }
        KFD_MMAP_TYPE_EVENTS => {
            let size = u64::from(KFD_SIGNAL_EVENT_LIMIT) * 8;
            if len.div_ceil(PAGE_SIZE) != size.div_ceil(PAGE_SIZE) {
                return Err(Errno(libc::EINVAL));
            }
            match &p.signal_page {
                Some(process::SignalPage::Kernel(page)) => Ok((page.clone(), 0)),
                _ => Err(Errno(libc::EINVAL)),
            }
        }
        // KFD_MMAP_TYPE_RESERVED_MEM: the CWSR TBA/TMA area, not simulated.
        _ => Err(Errno(libc::EINVAL)),
    }
}
