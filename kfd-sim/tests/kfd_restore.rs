//! RESTORE (spec §1.3, checklist §6 item 6) and the "good negative tests" of
//! §1.6: preconditions, version, device rules, single shot, identical ids,
//! size rules, exact consumption, no rollback, fds installed anyway.

mod kfd_support;

use std::os::fd::{AsFd, AsRawFd};

use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Pid, ProcessConfig, Sim, SimConfig};
use kfd_support::*;
use kfd_sys::*;

const VRAM_W: u32 = KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
const GTT_W: u32 = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;

fn sim(n: usize) -> Sim {
    Sim::synthetic(n, SimConfig::default()).unwrap()
}

/// A checkpointed process with BOs of every type (slots with a gap), two
/// compute queues, one SDMA queue and three events (ids with a gap).
fn rich_dump(sim: &Sim) -> (Dump, Workload) {
    let p = Proc::new(sim);
    let g = p.gpu_ids[0];
    let a = p.alloc(g, 0x10_0000_0000, 64 * KIB, VRAM_W, 0).unwrap();
    let gap = p.alloc(g, 0x10_0010_0000, 4 * KIB, GTT_W, 0).unwrap();
    let page = p.alloc(g, 0x10_0020_0000, 64 * KIB, GTT_W, 0).unwrap();
    p.alloc(
        g,
        0x10_0030_0000,
        8 * KIB,
        KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL,
        0,
    )
    .unwrap();
    p.alloc(
        g,
        0x10_0040_0000,
        4 * KIB,
        KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP,
        0,
    )
    .unwrap();
    let host = sim.alloc_host_memory(8 * KIB as usize).unwrap();
    p.alloc(
        g,
        host,
        8 * KIB,
        KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
        host,
    )
    .unwrap();
    p.free(gap.handle).unwrap();
    assert_eq!(p.map(a.handle, &[g], 0), (Ok(0), 1));
    let q0 = p.create_queue(g, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL).unwrap();
    p.create_queue(g, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL).unwrap();
    p.create_queue(g, KFD_IOC_QUEUE_TYPE_SDMA).unwrap();
    p.create_queue(g, KFD_IOC_QUEUE_TYPE_SDMA).unwrap();
    let mut d = kfd_ioctl_destroy_queue_args {
        queue_id: q0.queue_id,
        pad: 0,
    };
    p.ioctl(AMDKFD_IOC_DESTROY_QUEUE, &mut d).unwrap();
    p.create_event(page.handle).unwrap();
    let e1 = p.create_event(0).unwrap();
    p.create_event(0).unwrap();
    let mut de = kfd_ioctl_destroy_event_args {
        event_id: e1.event_id,
        pad: 0,
    };
    p.ioctl(AMDKFD_IOC_DESTROY_EVENT, &mut de).unwrap();
    let mut se = kfd_ioctl_set_event_args {
        event_id: e1.event_id + 1,
        pad: 0,
    };
    p.ioctl(AMDKFD_IOC_SET_EVENT, &mut se).unwrap();
    let w = Workload::attach(sim, p.pid);
    w.write_bo(a.handle, 0, b"payload").unwrap();
    let criu = criu_for(sim, p.pid);
    let dump = dump(&criu, p.kfd.as_fd());
    std::mem::forget(p); // keep the fds open: the dumped process lives on
    (dump, w)
}

fn actual_of(d: &Dump) -> Vec<u32> {
    d.devices.iter().map(|b| b.actual_gpu_id).collect()
}

fn objects_offset(d: &Dump) -> usize {
    8 + 8 * d.devices.len() + 272 * d.bos.len()
}

#[test]
fn restore_recreates_identical_ids_and_contents() {
    let sim = sim(1);
    let (d, w) = rich_dump(&sim);
    let desc = w.describe().unwrap();
    let pid = sim.spawn_process().unwrap();
    let r = restore(&sim, pid, &d);
    let criu = criu_for(&sim, pid);
    // USERPTR pages are looked up only at RESUME.
    let pinned_before = sim.accounting().pinned_userptr_pages;
    resume(&criu, pid).unwrap();
    assert_eq!(sim.accounting().pinned_userptr_pages, pinned_before + 2);
    Workload::verify(&sim, pid, &desc).unwrap();
    // Same IDR slots (with the gap), q_ids, doorbell ids, event ids.
    let got = Workload::attach(&sim, pid).describe().unwrap();
    assert_eq!(
        got.bos.iter().map(|b| b.handle).collect::<Vec<_>>(),
        desc.bos.iter().map(|b| b.handle).collect::<Vec<_>>()
    );
    assert_eq!(got.queues, desc.queues);
    assert_eq!(got.events, desc.events);
    assert!(
        desc.bos.iter().all(|b| b.handle as u32 != 1),
        "slot 1 stays a gap"
    );
    // Restored VRAM/GTT offsets are DRM offsets that map through the drm_fd.
    let vram = r.bos.iter().find(|b| b.alloc_flags == VRAM_W).unwrap();
    assert!(vram.restored_offset >= 0x1_0000_0000);
    let drv = sim.driver(pid);
    // SAFETY: no MAP_FIXED; unmapped below.
    let m = unsafe {
        ::kfd::Driver::mmap(
            &drv,
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            r.renders[0].as_fd(),
            vram.restored_offset,
        )
    }
    .unwrap();
    // SAFETY: the mapping is 4096 bytes long and readable.
    let seen = unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<u8>(), 7) }.to_vec();
    assert_eq!(seen, b"payload");
    // SAFETY: unmapping the mapping made above.
    unsafe { ::kfd::Driver::munmap(&drv, m, 4096) }.unwrap();
}

#[test]
fn restore_preconditions_are_einval() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let pid = sim.spawn_process().unwrap();
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    let mut devices = d.devices.clone();
    let mut bos = d.bos.clone();
    let mut priv_data = d.priv_data.clone();
    let base = kfd_ioctl_criu_args {
        devices: devices.as_mut_ptr() as u64,
        bos: bos.as_mut_ptr() as u64,
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: priv_data.len() as u64,
        num_devices: 1,
        num_bos: bos.len() as u32,
        num_objects: d.info.num_objects,
        op: KFD_CRIU_OP_RESTORE,
        ..Default::default()
    };
    for case in 0..5 {
        let mut a = base;
        match case {
            0 => a.bos = 0,
            1 => a.devices = 0,
            2 => a.priv_data = 0,
            3 => a.priv_data_size = 0,
            _ => a.num_devices = 0,
        }
        assert_eq!(
            criu_op(&drv, kfd.as_fd(), &mut a),
            Err(libc::EINVAL),
            "case {case}"
        );
    }
    // Unknown op.
    let mut a = kfd_ioctl_criu_args { op: 5, ..base };
    assert_eq!(criu_op(&drv, kfd.as_fd(), &mut a), Err(libc::EINVAL));
}

fn restore_patched(
    sim: &Sim,
    d: &Dump,
    pid: Pid,
    patch: impl FnOnce(&mut Dump, &mut Vec<u8>),
) -> (Result<i32, i32>, Restored) {
    let mut d = d.clone();
    let mut priv_data = d.priv_data.clone();
    patch(&mut d, &mut priv_data);
    let actual = actual_of(&d);
    restore_with(sim, pid, &d, &actual, &priv_data)
}

#[test]
fn restore_rejects_a_wrong_version() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let pid = sim.spawn_process().unwrap();
    let (r, _) = restore_patched(&sim, &d, pid, |_, p| p[0] = 2);
    assert_eq!(r, Err(libc::EINVAL));
}

#[test]
fn restore_device_rules() {
    let sim = sim(3);
    // The dumped process sees GPUs 0 and 1.
    let ids: Vec<u32> = sim.gpus().iter().map(|g| g.gpu_id).collect();
    let src = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![ids[0], ids[1]]),
            ..ProcessConfig::default()
        })
        .unwrap();
    let p = Proc::in_pid(&sim, src);
    p.alloc(ids[0], 0x10_0000_0000, 4 * KIB, GTT_W, 0).unwrap();
    let criu = criu_for(&sim, src);
    let d = dump(&criu, p.kfd.as_fd());
    let spawn = |visible: Vec<u32>| {
        sim.spawn_process_with(ProcessConfig {
            visible_gpus: Some(visible),
            ..ProcessConfig::default()
        })
        .unwrap()
    };
    // num_devices must equal the restoring process's GPU count.
    let (r, _) = restore_with(
        &sim,
        spawn(vec![ids[0]]),
        &d,
        &[ids[0], ids[1]],
        &d.priv_data,
    );
    assert_eq!(r, Err(libc::EINVAL), "fewer visible GPUs");
    let (r, _) = restore_with(
        &sim,
        spawn(ids.clone()),
        &d,
        &[ids[0], ids[1]],
        &d.priv_data,
    );
    assert_eq!(r, Err(libc::EINVAL), "more visible GPUs");
    // Actual id visible to the system but hidden from the process.
    let (r, _) = restore_with(
        &sim,
        spawn(vec![ids[0], ids[2]]),
        &d,
        &[ids[0], ids[1]],
        &d.priv_data,
    );
    assert_eq!(r, Err(libc::EINVAL), "actual id hidden by cgroup");
    // Actual id not in the topology.
    let (r, _) = restore_with(
        &sim,
        spawn(vec![ids[0], ids[1]]),
        &d,
        &[ids[0], 0xBEEF],
        &d.priv_data,
    );
    assert_eq!(r, Err(libc::EINVAL), "unknown actual id");
    // user_gpu_id 0.
    let mut zero = d.clone();
    zero.devices[1].user_gpu_id = 0;
    let (r, _) = restore_with(
        &sim,
        spawn(vec![ids[0], ids[1]]),
        &zero,
        &[ids[0], ids[1]],
        &d.priv_data,
    );
    assert_eq!(r, Err(libc::EINVAL), "user id 0");
    // The restoring process may map the devices onto each other (swap).
    let (r, _) = restore_with(
        &sim,
        spawn(vec![ids[0], ids[1]]),
        &d,
        &[ids[1], ids[0]],
        &d.priv_data,
    );
    r.unwrap();
}

/// RESTORE with hand-made device buckets pointing at `drm_fd`.
fn restore_with_drm_fd(sim: &Sim, pid: Pid, d: &Dump, drm_fd: u32) -> Result<i32, i32> {
    let drv = sim.driver(pid);
    let kfd = open(&drv, "/dev/kfd");
    let mut devices = d.devices.clone();
    devices[0].drm_fd = drm_fd;
    let mut bos = d.bos.clone();
    let mut priv_data = d.priv_data.clone();
    let mut a = kfd_ioctl_criu_args {
        devices: devices.as_mut_ptr() as u64,
        bos: bos.as_mut_ptr() as u64,
        priv_data: priv_data.as_mut_ptr() as u64,
        priv_data_size: priv_data.len() as u64,
        num_devices: 1,
        num_bos: bos.len() as u32,
        num_objects: d.info.num_objects,
        op: KFD_CRIU_OP_RESTORE,
        ..Default::default()
    };
    criu_op(&drv, kfd.as_fd(), &mut a)
}

#[test]
fn restore_drm_fd_rules() {
    let sim = sim(2);
    let ids: Vec<u32> = sim.gpus().iter().map(|g| g.gpu_id).collect();
    let src = sim
        .spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![ids[0]]),
            ..ProcessConfig::default()
        })
        .unwrap();
    let p = Proc::in_pid(&sim, src);
    p.alloc(ids[0], 0x10_0000_0000, 4 * KIB, GTT_W, 0).unwrap();
    let criu = criu_for(&sim, src);
    let d = dump(&criu, p.kfd.as_fd());
    let one = || {
        sim.spawn_process_with(ProcessConfig {
            visible_gpus: Some(vec![ids[0]]),
            ..ProcessConfig::default()
        })
        .unwrap()
    };
    // Not an open fd.
    assert_eq!(
        restore_with_drm_fd(&sim, one(), &d, 9999),
        Err(libc::EINVAL)
    );
    // Not a render node: a /dev/kfd fd, a pipe.
    let pid = one();
    let k = open(&sim.driver(pid), "/dev/kfd");
    assert_eq!(
        restore_with_drm_fd(&sim, pid, &d, k.as_raw_fd() as u32),
        Err(libc::EINVAL)
    );
    let (pr, _pw) = std::io::pipe().unwrap();
    assert_eq!(
        restore_with_drm_fd(&sim, one(), &d, pr.as_raw_fd() as u32),
        Err(libc::EINVAL)
    );
    // A render node of another GPU.
    let pid = one();
    let all_seeing = sim.driver(sim.spawn_process().unwrap());
    let wrong = open(
        &all_seeing,
        sim.render_path(ids[1]).unwrap().to_str().unwrap(),
    );
    assert_eq!(
        restore_with_drm_fd(&sim, pid, &d, wrong.as_raw_fd() as u32),
        Err(libc::EINVAL)
    );
    // A render fd whose VM already belongs to a KFD process (the dumpee's).
    assert_eq!(
        restore_with_drm_fd(&sim, one(), &d, p.renders[0].as_raw_fd() as u32),
        Err(libc::EINVAL)
    );
    // The right one works.
    let pid = one();
    let good = open(
        &sim.driver(pid),
        sim.render_path(ids[0]).unwrap().to_str().unwrap(),
    );
    restore_with_drm_fd(&sim, pid, &d, good.as_raw_fd() as u32).unwrap();
}

#[test]
fn restore_is_single_shot() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let pid = sim.spawn_process().unwrap();
    let _first = restore(&sim, pid, &d);
    let (r, _) = restore_with(&sim, pid, &d, &actual_of(&d), &d.priv_data);
    assert_eq!(
        r,
        Err(libc::EINVAL),
        "RESTORE twice fails at the device stage"
    );
    // A process that acquired a VM itself cannot RESTORE either.
    let q = Proc::new(&sim);
    let (r, _) = restore_with(&sim, q.pid, &d, &actual_of(&d), &d.priv_data);
    assert_eq!(r, Err(libc::EINVAL));
}

#[test]
fn restore_doorbell_and_mmio_size_rules() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    for (flag, name) in [
        (KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, "doorbell"),
        (KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP, "mmio"),
    ] {
        let pid = sim.spawn_process().unwrap();
        let (r, _) = restore_patched(&sim, &d, pid, |d, _| {
            let b = d
                .bos
                .iter_mut()
                .find(|b| b.alloc_flags & flag != 0)
                .unwrap();
            b.size += 4096;
        });
        assert_eq!(r, Err(libc::EINVAL), "{name} size");
    }
    // A bucket naming an unknown (user) gpu id: ENODEV.
    let pid = sim.spawn_process().unwrap();
    let (r, _) = restore_patched(&sim, &d, pid, |d, _| d.bos[0].gpu_id = 0x4321);
    assert_eq!(r, Err(libc::ENODEV));
}

#[test]
fn restore_needs_the_same_idr_slot() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let pid = sim.spawn_process().unwrap();
    let (r, _) = restore_patched(&sim, &d, pid, |d, p| {
        // Give BO 1 the slot of BO 0.
        let rec0 = 8 + 8 * d.devices.len();
        let rec1 = rec0 + 272;
        let slot0: [u8; 4] = p[rec0 + 8..rec0 + 12].try_into().unwrap();
        p[rec1 + 8..rec1 + 12].copy_from_slice(&slot0);
    });
    assert_eq!(r, Err(libc::ENOMEM));
}

#[test]
fn restore_consumes_private_data_exactly() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let pid = sim.spawn_process().unwrap();
    let mut longer = d.priv_data.clone();
    longer.extend_from_slice(&[0; 8]);
    let (r, _) = restore_with(&sim, pid, &d, &actual_of(&d), &longer);
    assert_eq!(r, Err(libc::EINVAL), "trailing bytes");
    let pid = sim.spawn_process().unwrap();
    let shorter = &d.priv_data[..d.priv_data.len() - 8];
    let (r, _) = restore_with(&sim, pid, &d, &actual_of(&d), shorter);
    assert_eq!(r, Err(libc::EINVAL), "truncated");
    // A blob from a MAX_GPU_INSTANCE=16 kernel does not restore on a 64 one.
    let old = Sim::synthetic(
        1,
        SimConfig {
            max_gpu_instance: 16,
            ..SimConfig::default()
        },
    )
    .unwrap();
    let p = Proc::new(&old);
    p.alloc(p.gpu_ids[0], 0x10_0000_0000, 4 * KIB, GTT_W, 0)
        .unwrap();
    let d16 = dump(&p.drv, p.kfd.as_fd());
    let mut other = kfd_sim::synthetic_system(1);
    other.nodes[1].gpu_id = Some(d16.devices[0].actual_gpu_id);
    let new = Sim::new(other, SimConfig::default()).unwrap();
    let pid = new.spawn_process().unwrap();
    let (r, _) = restore_with(&new, pid, &d16, &actual_of(&d16), &d16.priv_data);
    assert_eq!(r, Err(libc::EINVAL));
}

#[test]
fn restore_has_no_rollback_and_installs_fds_before_a_later_failure() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let pid = sim.spawn_process().unwrap();
    let objs = objects_offset(&d);
    // Break the first queue record's MQD size: the object stage fails.
    let (r, restored) = restore_patched(&sim, &d, pid, |_, p| {
        p[objs + 112..objs + 116].copy_from_slice(&100u32.to_le_bytes());
    });
    assert_eq!(r, Err(libc::EINVAL));
    // The BOs stay, with their fds installed read-write and the buckets updated.
    let desc = Workload::attach(&sim, pid).describe().unwrap();
    assert_eq!(desc.bos.len(), d.bos.len());
    let mut installed = 0;
    for b in &restored.bos {
        if b.alloc_flags & (KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_GTT) == 0 {
            assert_eq!(b.dmabuf_fd, KFD_INVALID_FD);
            continue;
        }
        // SAFETY: fcntl queries on fds RESTORE installed for this process.
        let (fl, fdfl) = unsafe {
            (
                libc::fcntl(b.dmabuf_fd as i32, libc::F_GETFL),
                libc::fcntl(b.dmabuf_fd as i32, libc::F_GETFD),
            )
        };
        assert_eq!(
            fl & libc::O_ACCMODE,
            libc::O_RDWR,
            "RESTORE fds are always read-write"
        );
        assert_eq!(fdfl & libc::FD_CLOEXEC, 0);
        assert!(b.restored_offset >= 0x1_0000_0000);
        installed += 1;
        close(b.dmabuf_fd as i32);
    }
    assert_eq!(installed, 2);
    assert!(Workload::attach(&sim, pid)
        .describe()
        .unwrap()
        .queues
        .is_empty());
    // A failure inside the BO stage releases the fds it made.
    let pid = sim.spawn_process().unwrap();
    let before = sim.accounting().dmabuf_fds;
    let (r, _) = restore_patched(&sim, &d, pid, |d, _| {
        let last = d.bos.len() - 1;
        d.bos[last].gpu_id = 0x4321;
    });
    assert_eq!(r, Err(libc::ENODEV));
    assert_eq!(sim.accounting().dmabuf_fds, before);
}

#[test]
fn restore_queue_and_event_id_rules() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let objs = objects_offset(&d);
    let q1 = objs; // first queue record (compute)
    let q1_len = 120 + 2048 + 4096;
    let q2 = objs + q1_len; // second queue record (SDMA)
    let rd = |p: &[u8], o: usize| u32::from_le_bytes(p[o..o + 4].try_into().unwrap());
    assert_eq!(rd(&d.priv_data, q2 + 68), 1, "second queue is SDMA");
    type Patch = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, i32, Patch)> = vec![
        (
            "q_id >= 1024",
            libc::EINVAL,
            Box::new(move |p| p[q1 + 76..q1 + 80].copy_from_slice(&1024u32.to_le_bytes())),
        ),
        (
            "q_id reused",
            libc::ENOSPC,
            Box::new(move |p| {
                let id: [u8; 4] = p[q1 + 76..q1 + 80].try_into().unwrap();
                p[q2 + 76..q2 + 80].copy_from_slice(&id);
            }),
        ),
        (
            "sdma doorbell not dictated by the sdma id",
            libc::EINVAL,
            Box::new(move |p| p[q2 + 88..q2 + 92].copy_from_slice(&7u32.to_le_bytes())),
        ),
        (
            "sdma id out of range",
            libc::EINVAL,
            Box::new(move |p| p[q2 + 96..q2 + 100].copy_from_slice(&999u32.to_le_bytes())),
        ),
        (
            "compute doorbell out of range",
            libc::EINVAL,
            Box::new(move |p| p[q1 + 88..q1 + 92].copy_from_slice(&1024u32.to_le_bytes())),
        ),
        (
            "queue type past the max",
            libc::EINVAL,
            Box::new(move |p| p[q1 + 68..q1 + 72].copy_from_slice(&9u32.to_le_bytes())),
        ),
        (
            "queue gpu unknown",
            libc::EINVAL,
            Box::new(move |p| p[q1 + 64..q1 + 68].copy_from_slice(&0x4321u32.to_le_bytes())),
        ),
        (
            "unknown object tag",
            libc::EINVAL,
            Box::new(move |p| p[q1..q1 + 4].copy_from_slice(&7u32.to_le_bytes())),
        ),
    ];
    for (name, errno, patch) in cases {
        let pid = sim.spawn_process().unwrap();
        let (r, _) = restore_patched(&sim, &d, pid, |_, p| patch(p));
        assert_eq!(r, Err(errno), "{name}");
    }
    // Two SDMA queues claiming the same SDMA slot (and so the same doorbell).
    let q3 = q2 + 120 + 512;
    assert_eq!(rd(&d.priv_data, q3 + 68), 1, "third queue is SDMA");
    let pid = sim.spawn_process().unwrap();
    let (r, _) = restore_patched(&sim, &d, pid, |_, p| {
        let ids: Vec<u8> = p[q2 + 88..q2 + 100].to_vec();
        p[q3 + 88..q3 + 100].copy_from_slice(&ids);
    });
    assert_eq!(r, Err(libc::EBUSY), "sdma id in use");
    // Events: the second event record reuses the first one's id.
    let ev = q3 + 120 + 512;
    assert_eq!(rd(&d.priv_data, ev), 1, "event record");
    assert_ne!(
        rd(&d.priv_data, ev + 8),
        0,
        "the first event carries the event page handle"
    );
    let pid = sim.spawn_process().unwrap();
    let (r, _) = restore_patched(&sim, &d, pid, |_, p| {
        let id: [u8; 4] = p[ev + 16..ev + 20].try_into().unwrap();
        p[ev + 64 + 16..ev + 64 + 20].copy_from_slice(&id);
    });
    assert_eq!(r, Err(libc::ENOSPC), "event id taken");
    // An event page handle whose BO was not restored.
    let pid = sim.spawn_process().unwrap();
    let (r, _) = restore_patched(&sim, &d, pid, |_, p| {
        let h = u64::from_le_bytes(p[ev + 8..ev + 16].try_into().unwrap());
        p[ev + 8..ev + 16].copy_from_slice(&(h | 0x7777).to_le_bytes());
    });
    assert_eq!(r, Err(libc::EINVAL), "event page BO missing");
}

#[test]
fn restore_of_a_workload_with_svm_ranges_replays_them_at_resume() {
    let sim = sim(1);
    let w = Workload::launch(
        &sim,
        &Profile::PyTorchLike {
            bos_per_gpu: 10,
            max_bo_bytes: 64 * KIB,
        },
    )
    .unwrap();
    let criu = criu_for(&sim, w.pid());
    let d = dump(&criu, w.kfd_fd().unwrap());
    let desc = w.describe().unwrap();
    assert_eq!(desc.svm_ranges.len(), 1);
    w.exit().unwrap();
    let pid = sim.spawn_process().unwrap();
    let _r = restore(&sim, pid, &d);
    assert!(
        Workload::attach(&sim, pid)
            .describe()
            .unwrap()
            .svm_ranges
            .is_empty(),
        "SVM ranges wait for RESUME"
    );
    resume(&criu, pid).unwrap();
    Workload::verify(&sim, pid, &desc).unwrap();
}

/// Mutated private data and buckets never panic the simulator: every
/// RESTORE returns a result, and the simulator keeps serving.
#[test]
fn mutated_restore_input_never_panics() {
    let sim = sim(1);
    let (d, _w) = rich_dump(&sim);
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut outcomes = std::collections::BTreeMap::new();
    for _ in 0..150 {
        let mut dd = d.clone();
        let mut priv_data = d.priv_data.clone();
        for _ in 0..(1 + next() % 4) {
            let r = next();
            match r % 3 {
                0 => {
                    let i = (r >> 8) as usize % priv_data.len();
                    priv_data[i] = (r >> 40) as u8;
                }
                1 => {
                    let i = (r >> 8) as usize % priv_data.len();
                    let v = (r >> 32) as u32;
                    let end = (i + 4).min(priv_data.len());
                    priv_data[i..end].copy_from_slice(&v.to_le_bytes()[..end - i]);
                }
                _ => {
                    let b = (r >> 8) as usize % dd.bos.len();
                    match (r >> 16) % 4 {
                        0 => dd.bos[b].size = r >> 20,
                        1 => dd.bos[b].alloc_flags = (r >> 24) as u32,
                        2 => dd.bos[b].addr = r,
                        _ => dd.bos[b].gpu_id = (r >> 28) as u32,
                    }
                }
            }
        }
        let pid = sim.spawn_process().unwrap();
        let (r, restored) = restore_with(&sim, pid, &dd, &actual_of(&dd), &priv_data);
        *outcomes.entry(r.err().unwrap_or(0)).or_insert(0) += 1;
        for b in &restored.bos {
            if b.dmabuf_fd != KFD_INVALID_FD && b.dmabuf_fd != 0 && r.is_err() {
                close(b.dmabuf_fd as i32);
            }
        }
        drop(restored);
        sim.exit_process(pid).unwrap();
    }
    assert!(outcomes.contains_key(&libc::EINVAL), "{outcomes:?}");
    // Still serving: an unmodified restore works.
    let pid = sim.spawn_process().unwrap();
    let _ok = restore(&sim, pid, &d);
}

#[test]
fn restore_of_an_xnack_process_needs_xnack_capable_gpus() {
    // Dump a process running with XNACK on (gfx90a GPUs can).
    let src = sim(1);
    let p = Proc::new(&src);
    let mut x = kfd_ioctl_set_xnack_mode_args { xnack_enabled: 1 };
    p.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x).unwrap();
    p.alloc(p.gpu_ids[0], 0x10_0000_0000, 4 * KIB, GTT_W, 0)
        .unwrap();
    let d = dump(&p.drv, p.kfd.as_fd());
    assert_eq!(&d.priv_data[4..8], &[1, 0, 0, 0], "xnack_mode recorded");
    // A gfx803 (Polaris) GPU cannot: EPERM, and SET_XNACK_MODE refuses too.
    let mut old = kfd_sim::synthetic_system(1);
    old.nodes[1].properties.set("gfx_target_version", 80003);
    let dst = Sim::new(old, SimConfig::default()).unwrap();
    let pid = dst.spawn_process().unwrap();
    let (r, _) = restore_with(&dst, pid, &d, &[dst.gpus()[0].gpu_id], &d.priv_data);
    assert_eq!(r, Err(libc::EPERM));
    let q = Proc::new(&dst);
    let mut x = kfd_ioctl_set_xnack_mode_args { xnack_enabled: 1 };
    assert_eq!(q.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x), Err(libc::EPERM));
    // On a capable machine the mode comes back.
    let pid = src.spawn_process().unwrap();
    let restored = restore(&src, pid, &d);
    let mut x = kfd_ioctl_set_xnack_mode_args { xnack_enabled: -1 };
    ioctl(
        &src.driver(pid),
        restored.kfd.as_fd(),
        AMDKFD_IOC_SET_XNACK_MODE,
        &mut x,
    )
    .unwrap();
    assert_eq!(x.xnack_enabled, 1);
}
