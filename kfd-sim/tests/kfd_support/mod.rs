//! Test support: raw KFD ioctls through a `SimDriver`, and a minimal CRIU
//! emulation (dump with PROCESS_INFO + CHECKPOINT, content copy through the
//! dma-buf fds, restore with RESTORE, RESUME from CRIU's own /dev/kfd).
#![allow(dead_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use ::kfd::Driver;
use kfd_sim::workload::Workload;
use kfd_sim::{Pid, Sim, SimDriver};
use kfd_sys::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const KIB: u64 = 1024;

/// An ioctl with a typed argument; `Err(errno)` on failure.
pub fn ioctl<T: IntoBytes + FromBytes + Immutable + KnownLayout>(
    drv: &SimDriver,
    fd: BorrowedFd<'_>,
    request: u32,
    arg: &mut T,
) -> Result<i32, i32> {
    // SAFETY: `arg` is an exclusively borrowed T; callers pass requests whose
    // size is at most size_of::<T>() and pointers to live buffers.
    unsafe { drv.ioctl(fd, u64::from(request), (arg as *mut T).cast()) }
        .map_err(|e| e.raw_os_error().unwrap())
}

/// A request code with `nr`, the direction of `base` and `size` bytes.
pub fn resized(base: u32, size: usize) -> u32 {
    _IOC(_IOC_DIR(base), _IOC_TYPE(base), _IOC_NR(base), size)
}

pub fn open(drv: &SimDriver, path: &str) -> OwnedFd {
    drv.open(path.as_ref(), libc::O_RDWR | libc::O_CLOEXEC)
        .unwrap()
}

/// A process with /dev/kfd open and VMs acquired on every GPU it sees.
pub struct Proc {
    pub pid: Pid,
    pub drv: SimDriver,
    pub kfd: OwnedFd,
    pub renders: Vec<OwnedFd>,
    pub gpu_ids: Vec<u32>,
}

impl Proc {
    pub fn new(sim: &Sim) -> Proc {
        let pid = sim.spawn_process().unwrap();
        Proc::in_pid(sim, pid)
    }

    pub fn with_config(sim: &Sim, cfg: kfd_sim::ProcessConfig) -> Proc {
        let pid = sim.spawn_process_with(cfg).unwrap();
        Proc::in_pid(sim, pid)
    }

    pub fn in_pid(sim: &Sim, pid: Pid) -> Proc {
        let drv = sim.driver(pid);
        let kfd = open(&drv, "/dev/kfd");
        let gpu_ids = apertures(&drv, kfd.as_fd())
            .iter()
            .map(|a| a.gpu_id)
            .collect::<Vec<_>>();
        let mut renders = Vec::new();
        for &g in &gpu_ids {
            let r = open(&drv, sim.render_path(g).unwrap().to_str().unwrap());
            let mut a = kfd_ioctl_acquire_vm_args {
                drm_fd: r.as_raw_fd() as u32,
                gpu_id: g,
            };
            ioctl(&drv, kfd.as_fd(), AMDKFD_IOC_ACQUIRE_VM, &mut a).unwrap();
            renders.push(r);
        }
        Proc {
            pid,
            drv,
            kfd,
            renders,
            gpu_ids,
        }
    }

    pub fn ioctl<T: IntoBytes + FromBytes + Immutable + KnownLayout>(
        &self,
        request: u32,
        arg: &mut T,
    ) -> Result<i32, i32> {
        ioctl(&self.drv, self.kfd.as_fd(), request, arg)
    }

    pub fn alloc(
        &self,
        gpu: u32,
        va: u64,
        size: u64,
        flags: u32,
        mmap_offset: u64,
    ) -> Result<kfd_ioctl_alloc_memory_of_gpu_args, i32> {
        let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            handle: 0,
            mmap_offset,
            gpu_id: gpu,
            flags,
        };
        self.ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a)
            .map(|_| a)
    }

    /// MAP_MEMORY_TO_GPU; returns (result, n_success as copied back).
    pub fn map(&self, handle: u64, gpus: &[u32], n_success: u32) -> (Result<i32, i32>, u32) {
        let ids = gpus.to_vec();
        let mut m = kfd_ioctl_map_memory_to_gpu_args {
            handle,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: ids.len() as u32,
            n_success,
        };
        let r = self.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut m);
        (r, m.n_success)
    }

    pub fn unmap(&self, handle: u64, gpus: &[u32]) -> Result<i32, i32> {
        let ids = gpus.to_vec();
        let mut m = kfd_ioctl_unmap_memory_from_gpu_args {
            handle,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: ids.len() as u32,
            n_success: 0,
        };
        self.ioctl(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, &mut m)
    }

    pub fn free(&self, handle: u64) -> Result<i32, i32> {
        let mut f = kfd_ioctl_free_memory_of_gpu_args { handle };
        self.ioctl(AMDKFD_IOC_FREE_MEMORY_OF_GPU, &mut f)
    }

    pub fn create_queue(
        &self,
        gpu: u32,
        queue_type: u32,
    ) -> Result<kfd_ioctl_create_queue_args, i32> {
        let mut q = kfd_ioctl_create_queue_args {
            ring_base_address: 0x1_0000_0000,
            write_pointer_address: 0x1_0001_0000,
            read_pointer_address: 0x1_0001_0008,
            ring_size: 4096,
            gpu_id: gpu,
            queue_type,
            queue_percentage: 100,
            queue_priority: 7,
            eop_buffer_address: 0x1_0002_0000,
            eop_buffer_size: 4096,
            ctx_save_restore_address: 0x1_0003_0000,
            ctx_save_restore_size: 16384,
            ctl_stack_size: if queue_type == KFD_IOC_QUEUE_TYPE_COMPUTE_AQL {
                4096
            } else {
                0
            },
            ..Default::default()
        };
        self.ioctl(AMDKFD_IOC_CREATE_QUEUE, &mut q).map(|_| q)
    }

    pub fn create_event(&self, event_page: u64) -> Result<kfd_ioctl_create_event_args, i32> {
        let mut e = kfd_ioctl_create_event_args {
            event_page_offset: event_page,
            event_type: KFD_IOC_EVENT_SIGNAL,
            auto_reset: 1,
            ..Default::default()
        };
        self.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut e).map(|_| e)
    }
}

pub fn apertures(drv: &SimDriver, kfd: BorrowedFd<'_>) -> Vec<kfd_process_device_apertures> {
    let mut q = kfd_ioctl_get_process_apertures_new_args::default();
    ioctl(drv, kfd, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut q).unwrap();
    let mut list = vec![kfd_process_device_apertures::default(); q.num_of_nodes as usize];
    q.kfd_process_device_apertures_ptr = list.as_mut_ptr() as u64;
    ioctl(drv, kfd, AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut q).unwrap();
    list.truncate(q.num_of_nodes as usize);
    list
}

pub fn criu_op(
    drv: &SimDriver,
    fd: BorrowedFd<'_>,
    args: &mut kfd_ioctl_criu_args,
) -> Result<i32, i32> {
    ioctl(drv, fd, AMDKFD_IOC_CRIU_OP, args)
}

pub fn process_info(drv: &SimDriver, fd: BorrowedFd<'_>) -> Result<kfd_ioctl_criu_args, i32> {
    let mut a = kfd_ioctl_criu_args {
        op: KFD_CRIU_OP_PROCESS_INFO,
        ..Default::default()
    };
    criu_op(drv, fd, &mut a).map(|_| a)
}

pub fn unpause(drv: &SimDriver, fd: BorrowedFd<'_>) -> Result<i32, i32> {
    let mut a = kfd_ioctl_criu_args {
        op: KFD_CRIU_OP_UNPAUSE,
        ..Default::default()
    };
    criu_op(drv, fd, &mut a)
}

/// What CHECKPOINT produced, plus the BO contents read through the dma-bufs.
#[derive(Debug, Clone)]
pub struct Dump {
    pub info: kfd_ioctl_criu_args,
    pub devices: Vec<kfd_criu_device_bucket>,
    pub bos: Vec<kfd_criu_bo_bucket>,
    pub priv_data: Vec<u8>,
    pub contents: Vec<Option<Vec<u8>>>,
}

/// Buffers sized from `info`, CHECKPOINT into them; returns the raw result.
pub fn checkpoint_raw(
    drv: &SimDriver,
    fd: BorrowedFd<'_>,
    info: &kfd_ioctl_criu_args,
) -> (Result<i32, i32>, Dump) {
    let mut devices = vec![kfd_criu_device_bucket::default(); info.num_devices as usize];
    let mut bos = vec![kfd_criu_bo_bucket::default(); info.num_bos as usize];
    let mut priv_data = vec![0u8; info.priv_data_size as usize];
    let mut a = kfd_ioctl_criu_args {
        devices: devices.as_mut_ptr() as u64,
        bos: if bos.is_empty() {
            8
        } else {
            bos.as_mut_ptr() as u64
        },
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: info.priv_data_size,
        num_devices: info.num_devices,
        num_bos: info.num_bos,
        num_objects: info.num_objects,
        op: KFD_CRIU_OP_CHECKPOINT,
        ..Default::default()
    };
    let r = criu_op(drv, fd, &mut a);
    (
        r,
        Dump {
            info: *info,
            devices,
            bos,
            priv_data,
            contents: Vec::new(),
        },
    )
}

/// Reads `len` bytes of a dma-buf through mmap, as a CPU copier would.
pub fn read_dmabuf(fd: i32, len: usize) -> Vec<u8> {
    // SAFETY: a fresh shared read-only mapping of an fd we own, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of dma-buf fd {fd}");
    let mut out = vec![0u8; len];
    // SAFETY: the mapping is `len` bytes long and readable.
    unsafe { std::ptr::copy_nonoverlapping(p as *const u8, out.as_mut_ptr(), len) };
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(p, len) };
    out
}

/// Writes `data` into a dma-buf through mmap.
pub fn write_dmabuf(fd: i32, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    // SAFETY: a fresh shared read-write mapping of an fd we own, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            data.len(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of dma-buf fd {fd}");
    // SAFETY: the mapping is data.len() bytes long and writable.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p as *mut u8, data.len()) };
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(p, data.len()) };
}

pub fn close(fd: i32) {
    // SAFETY: closing an fd this test owns, once.
    unsafe { libc::close(fd) };
}

/// CRIU's dump of `target_fd` (owned by a process `criu` ptraces):
/// PROCESS_INFO, CHECKPOINT, copy contents out, close the dma-bufs. The
/// target stays paused.
pub fn dump(tracer: &SimDriver, target_fd: BorrowedFd<'_>) -> Dump {
    let info = process_info(tracer, target_fd).unwrap();
    let (r, mut d) = checkpoint_raw(tracer, target_fd, &info);
    r.unwrap();
    for b in &d.bos {
        if b.dmabuf_fd == KFD_INVALID_FD {
            d.contents.push(None);
        } else {
            d.contents
                .push(Some(read_dmabuf(b.dmabuf_fd as i32, b.size as usize)));
            close(b.dmabuf_fd as i32);
        }
    }
    d
}

/// What a restore left behind in the restored process.
pub struct Restored {
    pub pid: Pid,
    pub kfd: OwnedFd,
    pub renders: Vec<OwnedFd>,
    pub bos: Vec<kfd_criu_bo_bucket>,
}

/// Builds the RESTORE arguments for `dump` in process `pid` of `sim`, with
/// `actual` giving the target gpu_id of each device bucket, and runs it.
/// On success the contents are written back through the dma-bufs, which are
/// then closed.
pub fn restore_with(
    sim: &Sim,
    pid: Pid,
    dump: &Dump,
    actual: &[u32],
    priv_data: &[u8],
) -> (Result<i32, i32>, Restored) {
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    let mut renders = Vec::new();
    let mut devices = dump.devices.clone();
    // Render nodes the process may not open itself (hidden by its cgroup)
    // come from a process that sees every GPU, as fds in the same host.
    let all_seeing = sim.driver(sim.spawn_process().unwrap());
    for (d, &a) in devices.iter_mut().zip(actual) {
        let path = sim
            .render_path(a)
            .or_else(|| sim.render_path(sim.gpus()[0].gpu_id))
            .unwrap();
        let r = drv
            .open(&path, libc::O_RDWR | libc::O_CLOEXEC)
            .unwrap_or_else(|_| open(&all_seeing, path.to_str().unwrap()));
        d.actual_gpu_id = a;
        d.drm_fd = r.as_raw_fd() as u32;
        renders.push(r);
    }
    let mut bos = dump.bos.clone();
    for b in &mut bos {
        b.restored_offset = 0;
        b.dmabuf_fd = 0;
    }
    let mut priv_data = priv_data.to_vec();
    let mut a = kfd_ioctl_criu_args {
        devices: devices.as_mut_ptr() as u64,
        bos: if bos.is_empty() {
            0
        } else {
            bos.as_mut_ptr() as u64
        },
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: priv_data.len() as u64,
        num_devices: devices.len() as u32,
        num_bos: bos.len() as u32,
        num_objects: dump.info.num_objects,
        op: KFD_CRIU_OP_RESTORE,
        ..Default::default()
    };
    let r = criu_op(&drv, kfd.as_fd(), &mut a);
    if r.is_ok() {
        for (b, c) in bos.iter().zip(&dump.contents) {
            if let Some(c) = c {
                // A (mutated) bucket may make a smaller BO than was dumped:
                // the dma-buf's own size bounds the copy.
                // SAFETY: lseek on a dma-buf fd RESTORE installed for us.
                let real =
                    unsafe { libc::lseek(b.dmabuf_fd as i32, 0, libc::SEEK_END) }.max(0) as usize;
                let len = c.len().min(real);
                write_dmabuf(b.dmabuf_fd as i32, &c[..len]);
                close(b.dmabuf_fd as i32);
            }
        }
    }
    (
        r,
        Restored {
            pid,
            kfd,
            renders,
            bos,
        },
    )
}

/// Restores onto the same GPUs (actual = the dumped actual ids).
pub fn restore(sim: &Sim, pid: Pid, dump: &Dump) -> Restored {
    let actual: Vec<u32> = dump.devices.iter().map(|d| d.actual_gpu_id).collect();
    let (r, restored) = restore_with(sim, pid, dump, &actual, &dump.priv_data);
    r.unwrap();
    restored
}

/// RESUME of `target` issued by `criu` on its own /dev/kfd.
pub fn resume(tracer: &SimDriver, target: Pid) -> Result<i32, i32> {
    let kfd = open(tracer, "/dev/kfd");
    let mut a = kfd_ioctl_criu_args {
        pid: target.0,
        op: KFD_CRIU_OP_RESUME,
        ..Default::default()
    };
    criu_op(tracer, kfd.as_fd(), &mut a)
}

/// A CRIU process ptracing `target`.
pub fn criu_for(sim: &Sim, target: Pid) -> SimDriver {
    let criu = sim.spawn_process().unwrap();
    sim.ptrace_attach(criu, target).unwrap();
    sim.driver(criu)
}

/// Full checkpoint of a workload and restore into a fresh process under a
/// new pid; returns the restored pid and the checkpoint-time description.
pub fn checkpoint_restore(
    sim: &Sim,
    w: Workload,
) -> (Pid, kfd_sim::workload::WorkloadDescription, Restored) {
    let tracer = criu_for(sim, w.pid());
    let d = dump(&tracer, w.kfd_fd().unwrap());
    let desc = w.describe().unwrap();
    w.exit().unwrap();
    let new_pid = sim.spawn_process().unwrap();
    let restored = restore(sim, new_pid, &d);
    resume(&tracer, new_pid).unwrap();
    (new_pid, desc, restored)
}

/// SVM ioctl arguments with room for four attributes.
#[repr(C)]
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Svm4 {
    pub head: kfd_ioctl_svm_args,
    pub attrs: [kfd_ioctl_svm_attribute; 4],
}

/// An SVM ioctl with up to four attributes (the request code's size says
/// how many); the attributes as copied back.
pub fn svm_call(
    p: &Proc,
    op: u32,
    start: u64,
    size: u64,
    attrs: &[(u32, u32)],
) -> Result<Vec<(u32, u32)>, i32> {
    let mut a = Svm4 {
        head: kfd_ioctl_svm_args {
            start_addr: start,
            size,
            op,
            nattr: attrs.len() as u32,
            attrs: [],
        },
        attrs: [kfd_ioctl_svm_attribute::default(); 4],
    };
    for (slot, &(t, v)) in a.attrs.iter_mut().zip(attrs) {
        *slot = kfd_ioctl_svm_attribute {
            r#type: t,
            value: v,
        };
    }
    let request = resized(AMDKFD_IOC_SVM, 24 + 8 * attrs.len());
    p.ioctl(request, &mut a)?;
    Ok(a.attrs[..attrs.len()]
        .iter()
        .map(|x| (x.r#type, x.value))
        .collect())
}

/// SVM SET_ATTR.
pub fn svm_set(p: &Proc, start: u64, size: u64, attrs: &[(u32, u32)]) -> Result<(), i32> {
    svm_call(p, KFD_IOCTL_SVM_OP_SET_ATTR, start, size, attrs).map(|_| ())
}
