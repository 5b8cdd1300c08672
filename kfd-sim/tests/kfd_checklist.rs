//! The simulator checklist of spec §6, KFD and core items, one test (or a
//! few) per item, each through raw ioctls on a `SimDriver`.

mod kfd_support;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use ::kfd::{DeviceNumber, Driver, FdKind};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{ProcessConfig, Sim, SimConfig, DRM_MAJOR, KFD_MAJOR};
use kfd_support::*;
use kfd_sys::*;

const VRAM_W: u32 = KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
const GTT_W: u32 = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;

fn sim(n: usize) -> Sim {
    Sim::synthetic(n, SimConfig::default()).unwrap()
}

// §6.1 dispatch by nr, size tolerance, copy-out even on error.

#[test]
fn item1_kfd_dispatch_is_by_number_with_enotty_outside_the_table() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let mut v = kfd_ioctl_get_version_args::default();
    for nr in [0u8, 0x25, 0x26, 0x80, 0xFF] {
        let req = _IOC(_IOC_READ, b'K', nr, 8);
        assert_eq!(p.ioctl(req, &mut v), Err(libc::ENOTTY), "nr {nr:#x}");
    }
    // The type byte is not looked at: 'd' with GET_VERSION's number works.
    let req = _IOC(_IOC_READ, b'd', 0x01, 8);
    p.ioctl(req, &mut v).unwrap();
    assert_eq!((v.major_version, v.minor_version), (1, 18));
    // A non-device fd is not an ioctl target.
    let (r, _w) = std::io::pipe().unwrap();
    let fd: OwnedFd = r.into();
    assert_eq!(
        ioctl(&p.drv, fd.as_fd(), AMDKFD_IOC_GET_VERSION, &mut v),
        Err(libc::ENOTTY)
    );
}

#[test]
fn item1_minor_version_is_configurable() {
    let sim = Sim::synthetic(
        1,
        SimConfig {
            kfd_minor_version: 11,
            ..SimConfig::default()
        },
    )
    .unwrap();
    let p = Proc::new(&sim);
    let mut v = kfd_ioctl_get_version_args::default();
    p.ioctl(AMDKFD_IOC_GET_VERSION, &mut v).unwrap();
    assert_eq!(v.minor_version, 11);
}

#[test]
fn item1_struct_size_differences_are_tolerated() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    // Larger than the kernel's struct: the tail is copied back untouched-as-zero.
    let mut big = [0xAAu8; 16];
    p.ioctl(resized(AMDKFD_IOC_GET_VERSION, 16), &mut big)
        .unwrap();
    assert_eq!(&big[..8], &[1, 0, 0, 0, 18, 0, 0, 0]);
    assert_eq!(
        &big[8..],
        &[0; 8],
        "IOR buffers are zeroed before the handler, tail included"
    );
    // Smaller (an older struct without the pad): still works.
    let mut small = [0u8; 12];
    small[8..12].copy_from_slice(&p.gpu_ids[0].to_ne_bytes());
    p.ioctl(resized(AMDKFD_IOC_AVAILABLE_MEMORY, 12), &mut small)
        .unwrap();
    let avail = u64::from_ne_bytes(small[..8].try_into().unwrap());
    assert!(avail > 0 && avail % (2 << 20) == 0, "{avail:#x}");
}

#[test]
fn item1_arguments_are_copied_out_even_on_failure() {
    let sim = sim(2);
    let p = Proc::new(&sim);
    let bo = p
        .alloc(p.gpu_ids[0], 0x10_0000_0000, 64 * KIB, VRAM_W, 0)
        .unwrap();
    // The second device id is unknown: one device mapped, EINVAL, n_success = 1 copied back.
    let (r, n) = p.map(bo.handle, &[p.gpu_ids[0], 0xDEAD], 0);
    assert_eq!(r, Err(libc::EINVAL));
    assert_eq!(n, 1);
    // Retrying from n_success continues where it stopped.
    let (r, n) = p.map(bo.handle, &[p.gpu_ids[0], p.gpu_ids[1]], 1);
    assert_eq!((r, n), (Ok(0), 2));
    // PROCESS_INFO fails (the process sees no GPU) yet its struct comes back.
    let criu = criu_for(&sim, p.pid);
    let none = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![]),
            ..ProcessConfig::default()
        })
        .unwrap();
    let drv = sim.driver(none);
    let kfd = open(&drv, "/dev/kfd");
    let mut a = kfd_ioctl_criu_args {
        pid: 0x5A5A,
        op: KFD_CRIU_OP_PROCESS_INFO,
        ..Default::default()
    };
    assert_eq!(criu_op(&drv, kfd.as_fd(), &mut a), Err(libc::ENODEV));
    assert_eq!(
        a.pid, 0x5A5A,
        "the struct is copied back as the handler left it"
    );
    drop(criu);
}

#[test]
fn item1_null_argument_is_efault() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    // SAFETY: a null argument is exactly what is being tested; the simulator
    // must not dereference it.
    let r = unsafe {
        p.drv.ioctl(
            p.kfd.as_fd(),
            u64::from(AMDKFD_IOC_GET_VERSION),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EFAULT));
}

// §6.2 fd ownership, ptrace, capability.

#[test]
fn item2_non_owner_gets_ebadf_even_for_get_version() {
    let sim = sim(1);
    let owner = Proc::new(&sim);
    let other = sim.driver(sim.spawn_process().unwrap());
    let mut v = kfd_ioctl_get_version_args::default();
    assert_eq!(
        ioctl(&other, owner.kfd.as_fd(), AMDKFD_IOC_GET_VERSION, &mut v),
        Err(libc::EBADF)
    );
    assert_eq!(
        process_info(&other, owner.kfd.as_fd()).map(|_| ()),
        Err(libc::EBADF)
    );
    // The ptrace parent may issue CRIU_OP, but nothing else.
    let criu = criu_for(&sim, owner.pid);
    assert_eq!(
        ioctl(&criu, owner.kfd.as_fd(), AMDKFD_IOC_GET_VERSION, &mut v),
        Err(libc::EBADF)
    );
    process_info(&criu, owner.kfd.as_fd()).unwrap();
    unpause(&criu, owner.kfd.as_fd()).unwrap();
}

#[test]
fn item2_criu_op_needs_the_capability_and_ebadf_comes_first() {
    let sim = sim(1);
    let owner = Proc::new(&sim);
    let weak = sim
        .spawn_process_with(ProcessConfig {
            checkpoint_restore_capable: false,
            ..ProcessConfig::default()
        })
        .unwrap();
    let weak_drv = sim.driver(weak);
    // Not the ptrace parent and not capable: EBADF, not EACCES.
    assert_eq!(
        process_info(&weak_drv, owner.kfd.as_fd()).map(|_| ()),
        Err(libc::EBADF)
    );
    // Ptrace parent without the capability: EACCES.
    sim.ptrace_attach(weak, owner.pid).unwrap();
    assert_eq!(
        process_info(&weak_drv, owner.kfd.as_fd()).map(|_| ()),
        Err(libc::EACCES)
    );
    // The owner itself without the capability: EACCES on CRIU_OP, GET_VERSION fine.
    sim.set_checkpoint_restore_capable(owner.pid, false)
        .unwrap();
    assert_eq!(
        process_info(&owner.drv, owner.kfd.as_fd()).map(|_| ()),
        Err(libc::EACCES)
    );
    let mut v = kfd_ioctl_get_version_args::default();
    owner.ioctl(AMDKFD_IOC_GET_VERSION, &mut v).unwrap();
    // Capability back: the tracer succeeds.
    sim.set_checkpoint_restore_capable(weak, true).unwrap();
    process_info(&weak_drv, owner.kfd.as_fd()).unwrap();
    // Detached, it is a stranger again.
    sim.ptrace_detach(owner.pid).unwrap();
    assert_eq!(unpause(&weak_drv, owner.kfd.as_fd()), Err(libc::EBADF));
}

#[test]
fn item2_dup_and_fd_passing_resolve_to_the_same_open_file() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let dup = p.kfd.try_clone().unwrap();
    let mut v = kfd_ioctl_get_version_args::default();
    ioctl(&p.drv, dup.as_fd(), AMDKFD_IOC_GET_VERSION, &mut v).unwrap();
    // Pass the fd over a unix socket (SCM_RIGHTS) and use the received one.
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let received = pass_fd(&a, &b, p.kfd.as_raw_fd());
    ioctl(&p.drv, received.as_fd(), AMDKFD_IOC_GET_VERSION, &mut v).unwrap();
    assert_eq!(
        p.drv.fd_kind(received.as_fd()).unwrap(),
        FdKind::CharDevice(DeviceNumber {
            major: KFD_MAJOR,
            minor: 0
        })
    );
    // Ownership follows the open file, not the fd: another process still gets EBADF.
    let other = sim.driver(sim.spawn_process().unwrap());
    assert_eq!(
        ioctl(&other, received.as_fd(), AMDKFD_IOC_GET_VERSION, &mut v),
        Err(libc::EBADF)
    );
    // Render nodes identify as DRM char devices.
    let minor = sim.gpus()[0].render_minor;
    assert_eq!(
        p.drv.fd_kind(p.renders[0].as_fd()).unwrap(),
        FdKind::CharDevice(DeviceNumber {
            major: DRM_MAJOR,
            minor
        })
    );
    assert_eq!(
        p.drv
            .device_number(format!("/dev/dri/renderD{minor}").as_ref())
            .unwrap(),
        DeviceNumber {
            major: DRM_MAJOR,
            minor
        }
    );
    assert_eq!(
        p.drv.device_number("/dev/kfd".as_ref()).unwrap(),
        DeviceNumber {
            major: KFD_MAJOR,
            minor: 0
        }
    );
    assert!(p.drv.device_number("/dev/dri/renderD250".as_ref()).is_err());
    assert!(p
        .drv
        .open("/dev/dri/renderD250".as_ref(), libc::O_RDWR)
        .is_err());
}

fn pass_fd(
    tx: &std::os::unix::net::UnixStream,
    rx: &std::os::unix::net::UnixStream,
    fd: i32,
) -> OwnedFd {
    use std::mem::{size_of, zeroed};
    // SAFETY: plain sendmsg/recvmsg with SCM_RIGHTS on a connected socket
    // pair; every buffer lives on this stack frame for the calls' duration.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let space = libc::CMSG_SPACE(size_of::<i32>() as u32) as usize;
        let mut cbuf = vec![0u8; space];
        let mut msg: libc::msghdr = zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<i32>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
        assert_eq!(libc::sendmsg(tx.as_raw_fd(), &msg, 0), 1);
        let mut rbuf = vec![0u8; space];
        let mut rmsg: libc::msghdr = zeroed();
        let mut rbyte = [0u8; 1];
        let mut riov = libc::iovec {
            iov_base: rbyte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        rmsg.msg_iov = &mut riov;
        rmsg.msg_iovlen = 1;
        rmsg.msg_control = rbuf.as_mut_ptr().cast();
        rmsg.msg_controllen = space;
        assert_eq!(libc::recvmsg(rx.as_raw_fd(), &mut rmsg, 0), 1);
        let rcmsg = libc::CMSG_FIRSTHDR(&rmsg);
        let got = std::ptr::read_unaligned(libc::CMSG_DATA(rcmsg).cast::<i32>());
        OwnedFd::from_raw_fd(got)
    }
}

// §6.3 PROCESS_INFO.

#[test]
fn item3_process_info_enodev_without_gpus() {
    let sim = sim(2);
    let pid = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![]),
            ..ProcessConfig::default()
        })
        .unwrap();
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    assert_eq!(
        process_info(&drv, kfd.as_fd()).map(|_| ()),
        Err(libc::ENODEV)
    );
}

#[test]
fn item3_process_info_counts_and_size_follow_the_formula() {
    let sim = sim(2);
    let p = Proc::new(&sim);
    let (g0, g1) = (p.gpu_ids[0], p.gpu_ids[1]);
    p.alloc(g0, 0x10_0000_0000, 64 * KIB, VRAM_W, 0).unwrap();
    p.alloc(g1, 0x20_0000_0000, 64 * KIB, GTT_W, 0).unwrap();
    // A trap-handler-like entry at 0 < va <= gpuvm_base (16 KiB) is not counted.
    p.alloc(g0, 0x2000, 4 * KIB, GTT_W, 0).unwrap();
    // VA 0 is counted.
    p.alloc(g1, 0, 4 * KIB, GTT_W, 0).unwrap();
    let q = p.create_queue(g0, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL).unwrap();
    p.create_queue(g1, KFD_IOC_QUEUE_TYPE_SDMA).unwrap();
    p.create_event(0).unwrap();
    p.create_event(0).unwrap();
    let criu = criu_for(&sim, p.pid);
    let info = process_info(&criu, p.kfd.as_fd()).unwrap();
    assert_eq!(info.pid, p.pid.0);
    assert_eq!(
        (info.num_devices, info.num_bos, info.num_objects),
        (2, 3, 4)
    );
    let d = 2u64;
    let compute = 120 + 2048 + 4096; // MQD (1 XCC) + control stack
    let sdma = 120 + 512;
    let expected = 8 + 8 * d + 272 * 3 + compute + sdma + 64 * 2;
    assert_eq!(info.priv_data_size, expected);
    assert!(q.queue_id < 1024);
    // With MAX_GPU_INSTANCE 16 the BO record is 80 bytes.
    let small = Sim::synthetic(
        1,
        SimConfig {
            max_gpu_instance: 16,
            ..SimConfig::default()
        },
    )
    .unwrap();
    let p16 = Proc::new(&small);
    p16.alloc(p16.gpu_ids[0], 0x10_0000_0000, 4 * KIB, GTT_W, 0)
        .unwrap();
    let info = process_info(&p16.drv, p16.kfd.as_fd()).unwrap();
    assert_eq!(info.priv_data_size, 8 + 8 + 80);
}

#[test]
fn item3_eviction_is_reference_counted() {
    let sim = sim(1);
    let mut w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    process_info(&criu, w.kfd_fd().unwrap()).unwrap();
    process_info(&criu, w.kfd_fd().unwrap()).unwrap();
    unpause(&criu, w.kfd_fd().unwrap()).unwrap();
    assert!(
        w.step().is_err(),
        "one UNPAUSE undoes only one of two PROCESS_INFO levels"
    );
    // queues_paused was cleared by the first UNPAUSE.
    assert_eq!(unpause(&criu, w.kfd_fd().unwrap()), Err(libc::EINVAL));
    process_info(&criu, w.kfd_fd().unwrap()).unwrap();
    unpause(&criu, w.kfd_fd().unwrap()).unwrap();
    assert!(w.step().is_err());
}

// §6.4 CHECKPOINT.

#[test]
fn item4_checkpoint_rejects_null_pointers_unpaused_and_stale_counts() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    p.alloc(p.gpu_ids[0], 0x10_0000_0000, 64 * KIB, VRAM_W, 0)
        .unwrap();
    let criu = criu_for(&sim, p.pid);
    let fd = p.kfd.as_fd();
    let info = process_info(&criu, fd).unwrap();
    let (r, _) = checkpoint_raw(&criu, fd, &info);
    r.unwrap();
    let mut dev = vec![kfd_criu_device_bucket::default(); 1];
    let mut bos = vec![kfd_criu_bo_bucket::default(); 1];
    let mut priv_data = vec![0u8; info.priv_data_size as usize];
    let base = kfd_ioctl_criu_args {
        devices: dev.as_mut_ptr() as u64,
        bos: bos.as_mut_ptr() as u64,
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: info.priv_data_size,
        num_devices: info.num_devices,
        num_bos: info.num_bos,
        num_objects: info.num_objects,
        op: KFD_CRIU_OP_CHECKPOINT,
        ..Default::default()
    };
    for null in 0..3 {
        let mut a = base;
        match null {
            0 => a.devices = 0,
            1 => a.bos = 0,
            _ => a.priv_data = 0,
        }
        assert_eq!(
            criu_op(&criu, fd, &mut a),
            Err(libc::EINVAL),
            "null pointer {null}"
        );
    }
    for stale in 0..4 {
        let mut a = base;
        match stale {
            0 => a.num_devices += 1,
            1 => a.num_bos += 1,
            2 => a.num_objects += 1,
            _ => a.priv_data_size -= 1,
        }
        assert_eq!(
            criu_op(&criu, fd, &mut a),
            Err(libc::EINVAL),
            "stale count {stale}"
        );
    }
    // Allocating between PROCESS_INFO and CHECKPOINT makes the counts stale.
    p.alloc(p.gpu_ids[0], 0x11_0000_0000, 4 * KIB, GTT_W, 0)
        .unwrap();
    let mut a = base;
    assert_eq!(criu_op(&criu, fd, &mut a), Err(libc::EINVAL));
    // Not paused: EINVAL.
    unpause(&criu, fd).unwrap();
    let info = kfd_ioctl_criu_args { num_bos: 2, ..info };
    let (r, _) = checkpoint_raw(&criu, fd, &info);
    assert_eq!(r, Err(libc::EINVAL));
    // The bos pointer is required even with no BOs.
    let q = Proc::new(&sim);
    let info = process_info(&q.drv, q.kfd.as_fd()).unwrap();
    assert_eq!(info.num_bos, 0);
    let mut a = kfd_ioctl_criu_args { bos: 0, ..base };
    a.num_bos = 0;
    a.num_objects = 0;
    a.priv_data_size = info.priv_data_size;
    assert_eq!(criu_op(&q.drv, q.kfd.as_fd(), &mut a), Err(libc::EINVAL));
}

#[test]
fn item4_checkpoint_layout_fds_and_offsets() {
    let sim = sim(2);
    let p = Proc::new(&sim);
    let (g0, g1) = (p.gpu_ids[0], p.gpu_ids[1]);
    let vram = p.alloc(g0, 0x10_0000_0000, 64 * KIB, VRAM_W, 0).unwrap();
    let ro = p
        .alloc(g0, 0x10_0010_0000, 8 * KIB, KFD_IOC_ALLOC_MEM_FLAGS_VRAM, 0)
        .unwrap();
    let gtt = p.alloc(g1, 0x20_0000_0000, 16 * KIB, GTT_W, 0).unwrap();
    let host = sim.alloc_host_memory(16 * KIB as usize).unwrap();
    let uptr = p
        .alloc(
            g1,
            host,
            16 * KIB,
            KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
            host,
        )
        .unwrap();
    let db = p
        .alloc(
            g0,
            0x10_0020_0000,
            8 * KIB,
            KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL,
            0,
        )
        .unwrap();
    let mmio = p
        .alloc(
            g1,
            0x20_0020_0000,
            4 * KIB,
            KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP,
            0,
        )
        .unwrap();
    assert_eq!(p.map(vram.handle, &[g0, g1], 0), (Ok(0), 2));
    assert_eq!(p.map(gtt.handle, &[g1], 0), (Ok(0), 1));
    let q = p.create_queue(g0, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL).unwrap();
    let ev = p.create_event(0).unwrap();
    let w = Workload::attach(&sim, p.pid);
    w.write_bo(vram.handle, 0, b"vram contents").unwrap();

    let criu = criu_for(&sim, p.pid);
    let d = dump(&criu, p.kfd.as_fd());
    // Devices: user == actual before any restore; drm_fd/pad zero.
    for (dev, &g) in d.devices.iter().zip(&[g0, g1]) {
        assert_eq!(
            (dev.user_gpu_id, dev.actual_gpu_id, dev.drm_fd, dev.pad),
            (g, g, 0, 0)
        );
    }
    let by_handle = |h: u64| {
        let (gpu, slot) = ((h >> 32) as u32, h as u32);
        let i = d.bos.iter().position(|b| {
            b.gpu_id == gpu && {
                let rec = 8 + 8 * 2 + 272 * d.bos.iter().position(|x| std::ptr::eq(x, b)).unwrap();
                u32::from_le_bytes(d.priv_data[rec + 8..rec + 12].try_into().unwrap()) == slot
            }
        });
        i.unwrap()
    };
    let iv = by_handle(vram.handle);
    assert_eq!(
        d.bos[iv].offset, vram.mmap_offset,
        "VRAM offset is the DRM fake offset"
    );
    assert_eq!(d.contents[iv].as_ref().unwrap()[..13], *b"vram contents");
    assert_eq!(d.bos[iv].alloc_flags, VRAM_W);
    assert_eq!(d.bos[iv].addr, 0x10_0000_0000);
    let rec = 8 + 16 + 272 * iv;
    let mapped: Vec<u32> = (0..3)
        .map(|j| {
            u32::from_le_bytes(
                d.priv_data[rec + 12 + 4 * j..rec + 16 + 4 * j]
                    .try_into()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(
        mapped,
        vec![g0, g1, 0],
        "mapped_gpuids in pdd order, zero-terminated"
    );
    let idb = by_handle(db.handle);
    assert_eq!(
        d.bos[idb].offset,
        KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(g0)
    );
    assert_eq!(d.bos[idb].dmabuf_fd, KFD_INVALID_FD);
    let im = by_handle(mmio.handle);
    assert_eq!(d.bos[im].offset, KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID(g1));
    assert_eq!(d.bos[im].dmabuf_fd, KFD_INVALID_FD);
    let iu = by_handle(uptr.handle);
    assert_eq!(d.bos[iu].dmabuf_fd, KFD_INVALID_FD);
    let rec = 8 + 16 + 272 * iu;
    assert_eq!(
        u64::from_le_bytes(d.priv_data[rec..rec + 8].try_into().unwrap()),
        host,
        "user_addr recorded"
    );
    // Process record and device records.
    assert_eq!(&d.priv_data[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    assert!(d.priv_data[8..24].iter().all(|&b| b == 0));
    // Objects right after the BO hole: the queue (type 0) then the event (type 1).
    let objs = 8 + 16 + 272 * d.bos.len();
    assert_eq!(
        u32::from_le_bytes(d.priv_data[objs..objs + 4].try_into().unwrap()),
        0
    );
    assert_eq!(
        u32::from_le_bytes(d.priv_data[objs + 76..objs + 80].try_into().unwrap()),
        q.queue_id
    );
    let ev_off = objs + 120 + 2048 + 4096;
    assert_eq!(
        u32::from_le_bytes(d.priv_data[ev_off..ev_off + 4].try_into().unwrap()),
        1
    );
    assert_eq!(
        u32::from_le_bytes(d.priv_data[ev_off + 16..ev_off + 20].try_into().unwrap()),
        ev.event_id
    );

    // A second CHECKPOINT (still paused) mints new fds in the caller:
    // RW iff WRITABLE, never CLOEXEC, only for VRAM/GTT.
    let (r, d2) = checkpoint_raw(&criu, p.kfd.as_fd(), &d.info);
    r.unwrap();
    let ir = by_handle(ro.handle);
    for (i, b) in d2.bos.iter().enumerate() {
        if b.dmabuf_fd == KFD_INVALID_FD {
            assert!(
                b.alloc_flags & (KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT) == 0
            );
            continue;
        }
        let fd = b.dmabuf_fd as i32;
        // SAFETY: fcntl queries on an fd the checkpoint installed for us.
        let (fl, fdfl) = unsafe {
            (
                libc::fcntl(fd, libc::F_GETFL),
                libc::fcntl(fd, libc::F_GETFD),
            )
        };
        assert_eq!(fdfl & libc::FD_CLOEXEC, 0, "no CLOEXEC");
        let want = if i == ir {
            libc::O_RDONLY
        } else {
            libc::O_RDWR
        };
        assert_eq!(fl & libc::O_ACCMODE, want, "bo {i}");
        // SAFETY: `fd` is open until the close below.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        assert_eq!(p.drv.fd_kind(borrowed).unwrap(), FdKind::DmaBuf);
        // SAFETY: lseek on an fd we own.
        let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        assert_eq!(end as u64, b.size, "dma-buf size via lseek");
        close(fd);
    }
    unpause(&criu, p.kfd.as_fd()).unwrap();
    assert_eq!(sim.accounting().dmabuf_fds, 0);
}

// §6.5 UNPAUSE.

#[test]
fn item5_unpause_needs_a_pause_and_releases_one_level() {
    let sim = sim(1);
    let mut w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    assert_eq!(unpause(&criu, w.kfd_fd().unwrap()), Err(libc::EINVAL));
    process_info(&criu, w.kfd_fd().unwrap()).unwrap();
    assert!(w.step().is_err());
    unpause(&criu, w.kfd_fd().unwrap()).unwrap();
    w.step().unwrap();
    assert_eq!(
        unpause(&criu, w.kfd_fd().unwrap()),
        Err(libc::EINVAL),
        "UNPAUSE twice"
    );
}

// §6.7 RESUME.

#[test]
fn item7_resume_esrch_and_einval_rules() {
    let sim = sim(1);
    let w = Workload::launch(&sim, &Profile::Basic).unwrap();
    let criu = criu_for(&sim, w.pid());
    assert_eq!(
        resume(&criu, kfd_sim::Pid(99_999)),
        Err(libc::ESRCH),
        "unknown pid"
    );
    let plain = sim.spawn_process().unwrap();
    assert_eq!(resume(&criu, plain), Err(libc::ESRCH), "not a KFD process");
    assert_eq!(
        resume(&criu, w.pid()),
        Err(libc::EINVAL),
        "no RESTORE before it"
    );
    let d = dump(&criu, w.kfd_fd().unwrap());
    w.exit().unwrap();
    let pid = sim.spawn_process().unwrap();
    let _r = restore(&sim, pid, &d);
    resume(&criu, pid).unwrap();
    assert_eq!(resume(&criu, pid), Err(libc::EINVAL), "RESUME twice");
    // RESUME needs the capability too.
    sim.set_checkpoint_restore_capable(criu.pid(), false)
        .unwrap();
    assert_eq!(resume(&criu, pid), Err(libc::EACCES));
}

// §6.8 user/actual gpu id translation.

#[test]
fn item8_restore_onto_other_gpu_ids_translates_and_leaks_actual_ids() {
    let src = sim(2);
    let mut other = kfd_sim::synthetic_system(2);
    for (i, n) in other
        .nodes
        .iter_mut()
        .filter(|n| n.gpu_id != Some(0))
        .enumerate()
    {
        n.gpu_id = Some(0x7000 + i as u32);
    }
    let dst = Sim::new(other, SimConfig::default()).unwrap();
    // No USERPTR BOs: CPU memory does not move between two simulators.
    let mut w = Workload::launch(&src, &Profile::TensorFlowLike { bo_bytes: 64 * KIB }).unwrap();
    w.step().unwrap();
    let criu = criu_for(&src, w.pid());
    let d = dump(&criu, w.kfd_fd().unwrap());
    let desc = w.describe().unwrap();
    let old: Vec<u32> = d.devices.iter().map(|b| b.user_gpu_id).collect();
    let new: Vec<u32> = dst.gpus().iter().map(|g| g.gpu_id).collect();
    let pid = dst.spawn_process().unwrap();
    let (r, restored) = restore_with(&dst, pid, &d, &new, &d.priv_data);
    r.unwrap();
    let dcriu = criu_for(&dst, pid);
    resume(&dcriu, pid).unwrap();
    Workload::verify(&dst, pid, &desc).unwrap();
    let drv = dst.driver(pid);
    let kfd = restored.kfd.as_fd();
    // Doorbell/MMIO restored offsets embed the new actual id.
    for b in &restored.bos {
        let i = old.iter().position(|&o| o == b.gpu_id).unwrap();
        if b.alloc_flags & KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL != 0 {
            assert_eq!(
                b.restored_offset,
                KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(new[i])
            );
        }
    }
    // The application keeps using its old ids...
    let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: 0x30_0000_0000,
        size: 4 * KIB,
        gpu_id: old[0],
        flags: GTT_W,
        ..Default::default()
    };
    ioctl(&drv, kfd, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a).unwrap();
    assert_eq!((a.handle >> 32) as u32, old[0]);
    // ... and the new actual ids are not user ids.
    let mut bad = kfd_ioctl_alloc_memory_of_gpu_args {
        gpu_id: new[0],
        ..a
    };
    assert_eq!(
        ioctl(&drv, kfd, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut bad),
        Err(libc::EINVAL)
    );
    // Apertures leak the actual ids.
    assert_eq!(
        apertures(&drv, kfd)
            .iter()
            .map(|x| x.gpu_id)
            .collect::<Vec<_>>(),
        new
    );
    // EXPORT_DMABUF resolves the handle's gpu against the topology: a user-id
    // handle fails, an actual-id handle works.
    let mut e = kfd_ioctl_export_dmabuf_args {
        handle: a.handle,
        flags: libc::O_CLOEXEC as u32,
        dmabuf_fd: 0,
    };
    assert_eq!(
        ioctl(&drv, kfd, AMDKFD_IOC_EXPORT_DMABUF, &mut e),
        Err(libc::EINVAL)
    );
    e.handle = (u64::from(new[0]) << 32) | (a.handle & 0xFFFF_FFFF);
    ioctl(&drv, kfd, AMDKFD_IOC_EXPORT_DMABUF, &mut e).unwrap();
    // GET_DMABUF_INFO reports the exporter's actual id.
    let mut info = kfd_ioctl_get_dmabuf_info_args {
        dmabuf_fd: e.dmabuf_fd,
        ..Default::default()
    };
    ioctl(&drv, kfd, AMDKFD_IOC_GET_DMABUF_INFO, &mut info).unwrap();
    assert_eq!(
        (info.gpu_id, info.size, info.flags),
        (new[0], 4 * KIB, KFD_IOC_ALLOC_MEM_FLAGS_GTT)
    );
    close(e.dmabuf_fd as i32);
    // A second checkpoint reports user (old) != actual (new).
    let d2 = dump(&dcriu, kfd);
    let pairs: Vec<(u32, u32)> = d2
        .devices
        .iter()
        .map(|b| (b.user_gpu_id, b.actual_gpu_id))
        .collect();
    assert_eq!(
        pairs,
        old.iter()
            .copied()
            .zip(new.iter().copied())
            .collect::<Vec<_>>()
    );
    unpause(&dcriu, kfd).unwrap();
}

// §6.10 (KFD part): mmap of a KFD BO only through the VM-owning render fd.

#[test]
fn item10_kfd_bo_mmap_only_through_the_vm_owning_render_fd() {
    let sim = sim(1);
    let p = Proc::new(&sim);
    let bo = p
        .alloc(
            p.gpu_ids[0],
            0x10_0000_0000,
            64 * KIB,
            VRAM_W | KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC,
            0,
        )
        .unwrap();
    Workload::attach(&sim, p.pid)
        .write_bo(bo.handle, 4096, b"through the vm")
        .unwrap();
    let other_render = open(
        &p.drv,
        sim.render_path(p.gpu_ids[0]).unwrap().to_str().unwrap(),
    );
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: no MAP_FIXED; the mapping is released below.
    let r = unsafe {
        p.drv.mmap(
            std::ptr::null_mut(),
            64 * 1024,
            prot,
            libc::MAP_SHARED,
            other_render.as_fd(),
            bo.mmap_offset,
        )
    };
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EACCES));
    // SAFETY: as above.
    let m = unsafe {
        p.drv.mmap(
            std::ptr::null_mut(),
            64 * 1024,
            prot,
            libc::MAP_SHARED,
            p.renders[0].as_fd(),
            bo.mmap_offset,
        )
    }
    .unwrap();
    // SAFETY: the mapping is 64 KiB long and readable.
    let seen =
        unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<u8>().add(4096), 14) }.to_vec();
    assert_eq!(seen, b"through the vm");
    assert_eq!(sim.accounting().cpu_mappings, 1);
    // SAFETY: unmapping the mapping made above, no references remain.
    unsafe { p.drv.munmap(m, 64 * 1024) }.unwrap();
    assert_eq!(sim.accounting().cpu_mappings, 0);
    // Doorbell and MMIO pages map through /dev/kfd at their KFD offsets.
    let g = p.gpu_ids[0];
    let db = p
        .alloc(
            g,
            0x10_0100_0000,
            8 * KIB,
            KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL,
            0,
        )
        .unwrap();
    assert!(db.mmap_offset >= 0x1_0000_0000);
    // SAFETY: no MAP_FIXED; released below.
    let m = unsafe {
        p.drv.mmap(
            std::ptr::null_mut(),
            8192,
            prot,
            libc::MAP_SHARED,
            p.kfd.as_fd(),
            KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(g),
        )
    }
    .unwrap();
    // SAFETY: unmapping the mapping made above.
    unsafe { p.drv.munmap(m, 8192) }.unwrap();
    // SAFETY: no MAP_FIXED; a wrong size is refused before anything is mapped.
    let r = unsafe {
        p.drv.mmap(
            std::ptr::null_mut(),
            8192,
            prot,
            libc::MAP_SHARED,
            p.kfd.as_fd(),
            KFD_MMAP_TYPE_MMIO | KFD_MMAP_GPU_ID(g),
        )
    };
    assert_eq!(
        r.unwrap_err().raw_os_error(),
        Some(libc::EINVAL),
        "MMIO mmap must be one page"
    );
    // SAFETY: as above; an unknown gpu id is refused.
    let r = unsafe {
        p.drv.mmap(
            std::ptr::null_mut(),
            8192,
            prot,
            libc::MAP_SHARED,
            p.kfd.as_fd(),
            KFD_MMAP_TYPE_DOORBELL | KFD_MMAP_GPU_ID(0xBEEF),
        )
    };
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENODEV));
}

// §6.11 topology.

#[test]
fn item11_sysfs_tree_has_cpu_nodes_first_unique_ids_and_openable_minors() {
    let sim = sim(3);
    let parsed = amdgpu_topology::parse(&sim.sysfs_root()).unwrap();
    assert_eq!(
        &parsed.system,
        sim.topology(),
        "the written tree reads back as the model"
    );
    let nodes = &parsed.system.nodes;
    assert_eq!(nodes[0].gpu_id, Some(0));
    let first_gpu = nodes.iter().position(|n| n.is_gpu()).unwrap();
    assert!(nodes[..first_gpu].iter().all(|n| !n.is_gpu()));
    assert!(
        nodes[first_gpu..].iter().all(|n| n.is_gpu()),
        "CPU nodes first"
    );
    let mut ids: Vec<u32> = nodes
        .iter()
        .filter(|n| n.is_gpu())
        .map(|n| n.gpu_id.unwrap())
        .collect();
    assert!(ids.iter().all(|&i| i != 0 && i <= 0xFFFF));
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    let drv = sim.driver(sim.spawn_process().unwrap());
    for n in nodes.iter().filter(|n| n.is_gpu()) {
        let minor = n.render_minor().unwrap();
        assert!(minor >= 128);
        open(&drv, &format!("/dev/dri/renderD{minor}"));
    }
    // Key order of a GPU node follows the kernel (spec §5.2).
    let keys: Vec<&str> = nodes[first_gpu].properties.iter().map(|(k, _)| k).collect();
    let pos = |k: &str| keys.iter().position(|&x| x == k).unwrap();
    assert!(
        pos("cpu_cores_count") < pos("simd_count") && pos("simd_count") < pos("drm_render_minor")
    );
    assert!(pos("num_cp_queues") < pos("max_engine_clk_fcompute"));
    assert_eq!(*keys.last().unwrap(), "max_engine_clk_ccompute");
}

#[test]
fn item11_fixture_topologies_build_simulators() {
    let Some(shared) = shared_dir() else {
        test_env::skip("../shared (fixtures) not found next to the workspace");
        return;
    };
    let mut names: Vec<String> = std::fs::read_dir(shared.join("fixtures/topology"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for name in &names {
        let root = shared.join("fixtures/topology").join(name);
        let sim = Sim::from_sysfs(&root, SimConfig::default()).unwrap();
        let fixture = amdgpu_topology::parse(&root).unwrap().system;
        assert_eq!(sim.gpus().len(), fixture.gpus().count(), "{name}");
        // Recorded gpu_ids are kept; missing ones are synthesized, non-zero and unique.
        for (g, n) in sim.gpus().iter().zip(fixture.gpus()) {
            if let Some(id) = n.gpu_id {
                assert_eq!(g.gpu_id, id, "{name}: the fixture's gpu_id");
            }
            assert!(g.gpu_id != 0 && g.gpu_id <= 0xFFFF);
        }
        let w = Workload::launch(&sim, &Profile::Basic).unwrap();
        let (pid, desc, _r) = checkpoint_restore(&sim, w);
        Workload::verify(&sim, pid, &desc).unwrap();
    }
}

#[test]
fn item11_builtin_topologies_build_simulators() {
    for name in amdgpu_topology::builtin_names() {
        let sim = Sim::builtin(name, SimConfig::default()).unwrap();
        let w = Workload::launch(&sim, &Profile::Basic).unwrap();
        let (pid, desc, _r) = checkpoint_restore(&sim, w);
        Workload::verify(&sim, pid, &desc).unwrap();
    }
    assert!(matches!(
        Sim::builtin("no-such-machine", SimConfig::default()),
        Err(kfd_sim::SimError::UnknownBuiltin(_))
    ));
}

fn shared_dir() -> Option<std::path::PathBuf> {
    let mut dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        if dir.join("Cargo.toml").exists()
            && std::fs::read_to_string(dir.join("Cargo.toml"))
                .ok()?
                .contains("[workspace]")
        {
            let shared = dir.join("../shared");
            return shared.exists().then_some(shared);
        }
        if !dir.pop() {
            return None;
        }
    }
}
