//! Buffers shared between files and processes, through the emulated CRIU:
//! a process tree whose children hold dma-bufs of the parent's KFD buffer,
//! a DDP-like group (one process per GPU, each exporting a DRM BO that the
//! others import and hold as a dma-buf fd), imports restored before their
//! exporter's task ran (retry across tasks), GPU mapping flags kept through
//! the page-table-bit translation, and the handle table `RESTORE_INIT` sizes
//! from the image set.

mod common;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use amdgpu_image::{DirStore, ImageName, ImageStore, ReadLimits};
use common::{
    device_vmas, gpu_files_from, image_message, kfd_image_of, render_image, restored_file, vmas_of,
    Dirs,
};
use criu_host_emulator::{
    DeviceVma, EmulatedHost, TaskFile, TaskToDump, TaskToRestore, VmaOutcome,
};
use criu_plugin_amdgpu::abi::Stage;
use criu_plugin_amdgpu::hooks::{Plugin, PluginConfig};
use kfd::{GemCreate, GemHandle, Kfd, MemHandle, RenderNode};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};
use kfd_sys::{
    AMDGPU_GEM_DOMAIN_VRAM, AMDGPU_VM_PAGE_EXECUTABLE, AMDGPU_VM_PAGE_READABLE,
    AMDGPU_VM_PAGE_WRITEABLE, DRM_CLOEXEC, DRM_RDWR, KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
};

fn identity(fd: BorrowedFd<'_>) -> (u64, u64) {
    let file = std::fs::File::from(fd.try_clone_to_owned().unwrap());
    let meta = file.metadata().unwrap();
    (meta.dev(), meta.ino())
}

/// A parent shares its first VRAM BO with two children (KFD import), and
/// each child also keeps a dma-buf fd of that buffer. Restored, every task's
/// KFD state matches, and each child's dma-buf is the parent's restored
/// buffer (the same dma-buf file the parent's KFD exports), fetched through
/// the fd store: the children are restored first, so their dma-bufs wait
/// (retry) until the parent re-created the buffer.
#[test]
fn children_keep_dma_bufs_of_the_parent_buffer() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut apps = Workload::launch_sharing(&sim, 3, &Profile::Basic).expect("launch");
    for app in &mut apps {
        app.step().unwrap();
    }
    let expected: Vec<_> = apps.iter().map(|a| a.describe().unwrap()).collect();
    let shared = expected[0]
        .bos
        .iter()
        .find(|b| b.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0)
        .unwrap()
        .clone();
    let parent_kfd = Kfd::from_fd(apps[0].driver().clone(), apps[0].kfd_fd().unwrap());
    // The children hold dma-bufs of the parent's buffer (as if passed over
    // a socket), the first one at a lower fd number than its /dev/kfd.
    let child_bufs: Vec<OwnedFd> = (0..2)
        .map(|_| parent_kfd.export_dmabuf(MemHandle(shared.handle)).unwrap())
        .collect();

    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let first_ids = [1u32, 11, 21];
    let mut tree = Vec::new();
    let mut restore = Vec::new();
    for (i, app) in apps.iter().enumerate() {
        let (mut files, mut ids) = gpu_files_from(app, first_ids[i]);
        if i > 0 {
            let id = first_ids[i] + 9;
            files.insert(
                0,
                TaskFile {
                    fd: child_bufs[i - 1].as_fd(),
                    id,
                },
            );
            ids.insert(0, id);
        }
        tree.push(TaskToDump {
            pid: app.pid(),
            files,
            vmas: device_vmas(&sim),
        });
        restore.push((app.pid(), ids));
    }
    let report = emulator.dump_tree(&tree).expect("dump of the tree");
    assert_eq!(report.late_answer, Some(0));
    let images: Vec<_> = first_ids
        .iter()
        .map(|id| kfd_image_of(dirs.images.path(), *id))
        .collect();
    let parent_entry = images[0]
        .bo_entries
        .iter()
        .find(|b| b.addr == shared.va)
        .unwrap();
    for (i, image) in images.iter().enumerate().skip(1) {
        let id = first_ids[i] + 9;
        let node: amdgpu_image::CriuDmabufNode =
            image_message(dirs.images.path(), &ImageName::Dmabuf { id });
        assert_eq!(
            node.gem_handle, parent_entry.handle,
            "names the parent's buffer"
        );
        // The child's own import of the buffer is re-created as a copy by
        // KFD and carries no handle: the buffer's files resolve to the
        // parent's (the first dumped holder).
        assert!(!image
            .bo_entries
            .iter()
            .any(|b| b.handle == parent_entry.handle));
    }

    drop(tree);
    drop(child_bufs);
    drop(parent_kfd);
    for app in apps {
        app.exit().unwrap();
    }
    // Children first: their dma-bufs wait for the parent's KFD restore.
    let order = [2usize, 1, 0];
    let tasks = emulator
        .restore_tree(
            &order
                .iter()
                .map(|&i| TaskToRestore {
                    pid: restore[i].0,
                    file_ids: restore[i].1.clone(),
                    vmas: vmas_of(&images[i]),
                })
                .collect::<Vec<_>>(),
        )
        .expect("restore of the tree");
    for (task, &i) in tasks.iter().zip(&order) {
        assert_eq!(task.resume_answer, 0);
        Workload::verify(&sim, restore[i].0, &expected[i]).expect("restored state matches");
    }
    let parent = &tasks[2];
    let parent_kfd = Kfd::from_fd(sim.driver(parent.pid), restored_file(parent, 1));
    let exported = parent_kfd.export_dmabuf(MemHandle(shared.handle)).unwrap();
    for (task, &i) in tasks.iter().zip(&order).take(2) {
        let dmabuf = restored_file(task, first_ids[i] + 9);
        assert_eq!(
            identity(dmabuf),
            identity(exported.as_fd()),
            "the child's dma-buf is the parent's restored buffer"
        );
    }
    for (pid, _) in &restore {
        Workload::attach(&sim, *pid).step().expect("runs again");
    }
}

const BO_SIZE: usize = 64 << 10;

/// One process per GPU (DDP-like): process `i` creates a DRM BO on GPU
/// `i`'s render node, fills it, maps it with read/write/exec permissions and
/// hands a dma-buf of it to every other process, which imports it on its
/// own render node of GPU `i` and keeps the dma-buf fd. After restore every
/// import is the exporter's buffer (a write through one is read through the
/// other), keeps its handle, GPU address and mapping flags, and every
/// dma-buf fd is the buffer's. The processes are restored in reverse, so
/// the imports wait (retry) for the task that re-creates the buffers.
#[test]
fn ddp_like_group_exchanges_drm_buffers_by_dma_buf() {
    const N: usize = 3;
    let sim = Sim::synthetic(N, SimConfig::default()).unwrap();
    let gpus = sim.gpus();
    let mut apps: Vec<Workload> = (0..N)
        .map(|_| Workload::launch(&sim, &Profile::Basic).expect("launch"))
        .collect();
    for app in &mut apps {
        app.step().unwrap();
    }
    let expected: Vec<_> = apps.iter().map(|a| a.describe().unwrap()).collect();
    let flags = AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE | AMDGPU_VM_PAGE_EXECUTABLE;
    let va = |i: usize| (5u64 << 40) + (i as u64) * (1 << 30);

    // Exports: process i, GPU i.
    let mut exports = Vec::new(); // (handle, dmabuf, pattern, mmap offset)
    for (i, app) in apps.iter().enumerate() {
        let node = RenderNode::from_fd(app.driver().clone(), app.render_fds()[i]);
        let handle = node
            .gem_create(&GemCreate {
                size: BO_SIZE as u64,
                alignment: 64 << 10,
                domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
                flags: 0,
            })
            .unwrap();
        node.gem_va_map(handle, va(i), 0, BO_SIZE as u64, flags)
            .unwrap();
        let offset = node.gem_mmap_offset(handle).unwrap();
        let pattern: Vec<u8> = (0..BO_SIZE).map(|b| (b * (i + 3) % 253) as u8).collect();
        let mut map = node
            .mmap(offset, BO_SIZE, libc::PROT_READ | libc::PROT_WRITE)
            .unwrap();
        map.write(0, &pattern).unwrap();
        drop(map);
        let dmabuf = node
            .prime_handle_to_fd(handle, DRM_RDWR | DRM_CLOEXEC)
            .unwrap();
        exports.push((handle, dmabuf, pattern, offset));
    }
    // Imports: process j imports every other process's buffer on GPU i.
    let mut imports = Vec::new(); // (importer, exporter, handle, va)
    for (j, app) in apps.iter().enumerate() {
        for (i, (_, dmabuf, _, _)) in exports.iter().enumerate() {
            if i == j {
                continue;
            }
            let node = RenderNode::from_fd(app.driver().clone(), app.render_fds()[i]);
            let handle = node.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
            let at = va(i) + (1 << 28) + (j as u64) * (1 << 24);
            node.gem_va_map(handle, at, 0, BO_SIZE as u64, AMDGPU_VM_PAGE_READABLE)
                .unwrap();
            imports.push((j, i, handle, at));
        }
    }
    let before_flags: Vec<u64> = imports
        .iter()
        .map(|&(j, i, handle, _)| {
            let node = RenderNode::from_fd(apps[j].driver().clone(), apps[j].render_fds()[i]);
            node.gem_mapping_info(handle).unwrap()[0].flags
        })
        .collect();
    let export_flags: Vec<u64> = exports
        .iter()
        .enumerate()
        .map(|(i, (handle, ..))| {
            let node = RenderNode::from_fd(apps[i].driver().clone(), apps[i].render_fds()[i]);
            node.gem_mapping_info(*handle).unwrap()[0].flags
        })
        .collect();
    // Each process also holds the dma-buf of the next process's buffer.
    let held: Vec<OwnedFd> = (0..N)
        .map(|j| exports[(j + 1) % N].1.try_clone().unwrap())
        .collect();

    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let base = |j: usize| 1 + 100 * j as u32;
    let dmabuf_id = |j: usize| base(j) + 50;
    let mut tree = Vec::new();
    let mut ids = Vec::new();
    for (j, app) in apps.iter().enumerate() {
        let (mut files, mut file_ids) = gpu_files_from(app, base(j));
        files.push(TaskFile {
            fd: held[j].as_fd(),
            id: dmabuf_id(j),
        });
        file_ids.push(dmabuf_id(j));
        tree.push(TaskToDump {
            pid: app.pid(),
            files,
            vmas: device_vmas(&sim),
        });
        ids.push(file_ids);
    }
    emulator.dump_tree(&tree).expect("dump of the group");
    // Every holder of a buffer names it by one share handle, and exactly
    // one of them (the first dumped) re-creates it: the others import it.
    for (i, (handle, ..)) in exports.iter().enumerate() {
        let holders: Vec<(usize, u32)> = std::iter::once((i, handle.0))
            .chain(
                imports
                    .iter()
                    .filter(|imp| imp.1 == i)
                    .map(|&(j, _, h, _)| (j, h.0)),
            )
            .collect();
        let entries: Vec<_> = holders
            .iter()
            .map(|&(j, h)| {
                render_image(&dirs, base(j) + 1 + i as u32)
                    .bo_entries
                    .into_iter()
                    .find(|b| b.handle == h)
                    .expect("the BO is listed")
            })
            .collect();
        assert!(entries[0].share_handle.is_some());
        assert!(entries
            .iter()
            .all(|e| e.share_handle == entries[0].share_handle));
        let creators: Vec<usize> = holders
            .iter()
            .zip(&entries)
            .filter(|(_, e)| e.is_import == 0)
            .map(|((j, _), _)| *j)
            .collect();
        assert_eq!(
            creators,
            vec![0],
            "buffer {i}: the first dumped holder creates it"
        );
    }

    let pids: Vec<_> = apps.iter().map(|a| a.pid()).collect();
    let images: Vec<_> = (0..N)
        .map(|j| kfd_image_of(dirs.images.path(), base(j)))
        .collect();
    drop(tree);
    drop(held);
    let exports: Vec<_> = exports
        .into_iter()
        .map(|(handle, _, pattern, offset)| (handle, pattern, offset))
        .collect();
    for app in apps {
        app.exit().unwrap();
    }
    // The exporter's mapping of its DRM BO is offered to UPDATE_VMA_MAP.
    let restore: Vec<TaskToRestore> = (0..N)
        .map(|j| {
            let mut vmas = vmas_of(&images[j]);
            vmas.push(DeviceVma {
                path: sim.render_path(gpus[j].gpu_id).unwrap(),
                addr: va(j),
                pgoff: exports[j].2,
            });
            TaskToRestore {
                pid: pids[j],
                file_ids: ids[j].clone(),
                vmas,
            }
        })
        .collect();
    // Last process first: the first dumped (which re-creates every buffer)
    // is restored last, so every import waits for it (retry across tasks).
    let mut restore = restore;
    restore.reverse();
    let mut tasks = emulator
        .restore_tree(&restore)
        .expect("restore of the group");
    tasks.reverse();
    for (j, task) in tasks.iter().enumerate() {
        assert_eq!(task.resume_answer, 0);
        Workload::verify(&sim, pids[j], &expected[j]).expect("KFD state matches");
    }
    let render_of = |j: usize, i: usize| {
        RenderNode::from_fd(
            sim.driver(pids[j]),
            restored_file(&tasks[j], base(j) + 1 + i as u32),
        )
    };
    for (i, (handle, pattern, _)) in exports.iter().enumerate() {
        let node = render_of(i, i);
        let listed = node.gem_list_handles().unwrap();
        let entry = listed.iter().find(|h| h.gem_handle == handle.0).unwrap();
        assert_eq!(
            (entry.size, entry.alignment, entry.preferred_domains),
            (BO_SIZE as u64, 16, u64::from(AMDGPU_GEM_DOMAIN_VRAM)),
            "re-created with its size, alignment (in pages) and domains"
        );
        let vms = node.gem_mapping_info(*handle).unwrap();
        assert_eq!(vms.len(), 1);
        assert_eq!(vms[0].addr, va(i), "GPU address kept");
        assert_eq!(vms[0].flags, export_flags[i], "mapping permissions kept");
        let (_, outcome) = tasks[i].vmas.iter().find(|(v, _)| v.addr == va(i)).unwrap();
        let VmaOutcome::Translated { pgoff, .. } = outcome else {
            panic!("the DRM BO mapping is translated: {outcome:?}");
        };
        let map = node.mmap(*pgoff, BO_SIZE, libc::PROT_READ).unwrap();
        let mut back = vec![0u8; BO_SIZE];
        map.read(0, &mut back).unwrap();
        assert!(back == *pattern, "exporter {i}'s contents restored");
    }
    for (k, &(j, i, handle, at)) in imports.iter().enumerate() {
        let node = render_of(j, i);
        let vms = node.gem_mapping_info(handle).unwrap();
        assert_eq!(vms.len(), 1, "import {j}<-{i} mapped once");
        assert_eq!(vms[0].addr, at);
        assert_eq!(vms[0].flags, before_flags[k], "import permissions kept");
        // A write through the exporter is read through the import.
        let stamp = [0xA5u8, j as u8, i as u8, 0x5A];
        let exporter = render_of(i, i);
        let offset = exporter.gem_mmap_offset(exports[i].0).unwrap();
        let mut map = exporter
            .mmap(offset, BO_SIZE, libc::PROT_READ | libc::PROT_WRITE)
            .unwrap();
        map.write(4096 * (k + 1), &stamp).unwrap();
        let import_offset = node.gem_mmap_offset(handle).unwrap();
        let seen = node.mmap(import_offset, BO_SIZE, libc::PROT_READ).unwrap();
        let mut back = [0u8; 4];
        seen.read(4096 * (k + 1), &mut back).unwrap();
        assert_eq!(back, stamp, "import {j}<-{i} shares the exporter's buffer");
    }
    for (j, task) in tasks.iter().enumerate() {
        let held = restored_file(task, dmabuf_id(j));
        let exporter = (j + 1) % N;
        let again = render_of(exporter, exporter)
            .prime_handle_to_fd(exports[exporter].0, DRM_CLOEXEC)
            .unwrap();
        assert_eq!(
            identity(held),
            identity(again.as_fd()),
            "process {j}'s dma-buf is process {exporter}'s buffer"
        );
    }
}

/// `RESTORE_INIT` makes the table only for image sets that share buffers,
/// sized by the buffers of the KFD and render-node images it reads through
/// the image store (whatever the working directory).
#[test]
fn restore_init_sizes_the_table_from_the_image_set() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = Workload::launch(&sim, &Profile::Basic).unwrap();
    let node = RenderNode::from_fd(app.driver().clone(), app.render_fds()[0]);
    for _ in 0..2 {
        node.gem_create(&GemCreate {
            size: 4096,
            alignment: 4096,
            domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
            flags: 0,
        })
        .unwrap();
    }
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let (files, _) = gpu_files_from(&app, 1);
    let kfd_only = [files[0]];
    let main = sim.spawn_process().unwrap();
    let init = |images: &std::path::Path| {
        let mut plugin = Plugin::init(
            sim.driver(main),
            EmulatedHost::new(images, None),
            Stage::Restore,
            PluginConfig {
                topology_root: sim.sysfs_root(),
                shm_dir: dirs.shm.path().to_path_buf(),
                has_dump_devices_late: true,
                has_restore_retry: true,
            },
            Default::default(),
        );
        let answer = plugin.restore_init();
        (answer, plugin.handle_table().map(|t| t.capacity()))
    };

    emulator
        .dump(app.pid(), &kfd_only, &device_vmas(&sim))
        .unwrap();
    let (answer, table) = init(dirs.images.path());
    assert_eq!(
        (answer, table),
        (-libc::ENOTSUP, None),
        "KFD files alone share nothing"
    );

    let dirs2 = Dirs::new();
    dirs2
        .emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .unwrap();
    let kfd = kfd_image_of(dirs2.images.path(), 1);
    let handles = kfd
        .bo_entries
        .iter()
        .filter(|b| b.handle != amdgpu_image::flags::NO_HANDLE)
        .count();
    let drm: usize = (2..2 + sim.gpus().len() as u32)
        .map(|id| render_image(&dirs2, id).bo_entries.len())
        .sum();
    assert_eq!(drm, 2);
    let cwd = std::env::current_dir().unwrap();
    assert_ne!(cwd, dirs2.images.path(), "the images are not in the cwd");
    let (answer, table) = init(dirs2.images.path());
    assert_eq!(answer, 0);
    assert_eq!(table, Some(handles + drm));
    sim.exit_process(main).unwrap();
    drop(files);
    drop(node);
    app.exit().unwrap();
}

/// The handle is the same however often the buffer was exported: a child's
/// second dma-buf of the same BO resolves to it too (file identity), while
/// a different BO gets a different handle.
#[test]
fn dma_bufs_of_different_buffers_get_different_handles() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let app = Workload::launch(&sim, &Profile::Basic).unwrap();
    let node = RenderNode::from_fd(app.driver().clone(), app.render_fds()[0]);
    let bos: Vec<GemHandle> = (0..2)
        .map(|_| {
            node.gem_create(&GemCreate {
                size: 4096,
                alignment: 4096,
                domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
                flags: 0,
            })
            .unwrap()
        })
        .collect();
    let bufs: Vec<OwnedFd> = [bos[0], bos[1], bos[0]]
        .iter()
        .map(|h| node.prime_handle_to_fd(*h, DRM_CLOEXEC).unwrap())
        .collect();
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let (mut files, _) = gpu_files_from(&app, 1);
    // Dma-bufs before and after the render node.
    for (k, buf) in bufs.iter().enumerate() {
        let file = TaskFile {
            fd: buf.as_fd(),
            id: 40 + k as u32,
        };
        if k == 0 {
            files.insert(0, file);
        } else {
            files.push(file);
        }
    }
    emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .unwrap();
    let read = |id| -> u32 {
        DirStore::open_dir(dirs.images.path())
            .unwrap()
            .read_message::<amdgpu_image::CriuDmabufNode>(
                &ImageName::Dmabuf { id },
                ReadLimits::default(),
            )
            .unwrap()
            .expect("dma-buf image")
            .gem_handle
    };
    let (a, b, c) = (read(40), read(41), read(42));
    assert_eq!(a, c);
    assert_ne!(a, b);
    let render = render_image(&dirs, 2);
    let key = |h: GemHandle| {
        render
            .bo_entries
            .iter()
            .find(|e| e.handle == h.0)
            .and_then(|e| e.share_handle)
    };
    assert_eq!(key(bos[0]), Some(a));
    assert_eq!(key(bos[1]), Some(b));
    drop(files);
    drop(bufs);
    drop(node);
    app.exit().unwrap();
}

/// GET_MAPPING_INFO reports page-table bits (exec 1<<4, read 1<<5, write
/// 1<<6, PRT 1<<51, NOALLOC 1<<58); GEM_VA takes `AMDGPU_VM_PAGE_*`.
#[test]
fn mapping_flags_are_translated_to_gem_va_flags() {
    use amdgpu_checkpoint::restore::gem_va_flags;
    use kfd_sys::{AMDGPU_VM_PAGE_NOALLOC, AMDGPU_VM_PAGE_PRT};
    assert_eq!(gem_va_flags(0), 0);
    assert_eq!(gem_va_flags(1 << 5), AMDGPU_VM_PAGE_READABLE);
    assert_eq!(
        gem_va_flags((1 << 4) | (1 << 5) | (1 << 6)),
        AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE | AMDGPU_VM_PAGE_EXECUTABLE
    );
    assert_eq!(gem_va_flags(1 << 51), AMDGPU_VM_PAGE_PRT);
    assert_eq!(gem_va_flags(1 << 58), AMDGPU_VM_PAGE_NOALLOC);
    // Valid, system, snooped, memory-type and fragment bits are the kernel's.
    assert_eq!(
        gem_va_flags(0b111 | (3 << 48) | (0x1f << 7) | (1 << 5)),
        AMDGPU_VM_PAGE_READABLE
    );
}

/// A buffer of another GPU imported from a process outside the dump cannot
/// be restored (nothing re-creates it): the dump fails at
/// `DUMP_DEVICES_LATE` and the process is unpaused. (A buffer of the same
/// GPU shared with an outsider is one GEM object the dump re-creates as the
/// process's own.)
#[test]
fn an_import_from_a_process_outside_the_dump_fails_the_dump() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let app = Workload::launch(&sim, &Profile::Basic).unwrap();
    let outsider = Workload::launch(&sim, &Profile::Basic).unwrap();
    let theirs = RenderNode::from_fd(outsider.driver().clone(), outsider.render_fds()[1]);
    let handle = theirs
        .gem_create(&GemCreate {
            size: 4096,
            alignment: 4096,
            domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
            flags: 0,
        })
        .unwrap();
    let dmabuf = theirs.prime_handle_to_fd(handle, DRM_CLOEXEC).unwrap();
    let ours = RenderNode::from_fd(app.driver().clone(), app.render_fds()[0]);
    let imported = ours.prime_fd_to_handle(dmabuf.as_fd()).unwrap();
    let flagged = ours
        .gem_list_handles()
        .unwrap()
        .iter()
        .any(|h| h.gem_handle == imported.0 && h.flags & 1 != 0);
    assert!(flagged, "an import from another GPU is flagged IS_IMPORT");
    let dirs = Dirs::new();
    let (files, _) = gpu_files_from(&app, 1);
    let err = dirs
        .emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect_err("the import has no exporter in the dump");
    assert!(
        err.to_string().contains("DUMP_DEVICES_LATE"),
        "failed late: {err}"
    );
    drop(files);
    drop(ours);
    let mut app = app;
    app.step().expect("the process was unpaused");
    drop(theirs);
    drop(dmabuf);
    app.exit().unwrap();
    outsider.exit().unwrap();
}

/// CRIU v4.2 has no `RESTORE_INIT` (and no retry): the task makes its own
/// table, so a process whose render node imports its own KFD buffer and
/// which holds a dma-buf of a DRM BO still restores (files in fd order:
/// /dev/kfd, render node, dma-buf), with the import being the KFD BO.
#[test]
fn without_restore_init_a_task_shares_buffers_between_its_own_files() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
    app.step().unwrap();
    let expected = app.describe().unwrap();
    let vram = expected
        .bos
        .iter()
        .find(|b| b.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0)
        .unwrap()
        .clone();
    let kfd = Kfd::from_fd(app.driver().clone(), app.kfd_fd().unwrap());
    let kfd_buf = kfd.export_dmabuf(MemHandle(vram.handle)).unwrap();
    let node = RenderNode::from_fd(app.driver().clone(), app.render_fds()[0]);
    let imported = node.prime_fd_to_handle(kfd_buf.as_fd()).unwrap();
    let own = node
        .gem_create(&GemCreate {
            size: 8192,
            alignment: 4096,
            domains: u64::from(AMDGPU_GEM_DOMAIN_VRAM),
            flags: 0,
        })
        .unwrap();
    let own_buf = node.prime_handle_to_fd(own, DRM_CLOEXEC).unwrap();
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |c| c.max_hooks = 13);
    let (mut files, mut ids) = gpu_files_from(&app, 1);
    files.push(TaskFile {
        fd: own_buf.as_fd(),
        id: 30,
    });
    ids.push(30);
    emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    let render = render_image(&dirs, 2);
    let import = render
        .bo_entries
        .iter()
        .find(|b| b.handle == imported.0)
        .unwrap();
    assert_eq!(
        import.is_import, 1,
        "the KFD BO's holder in the render node imports it"
    );
    let pid = app.pid();
    let image = kfd_image_of(dirs.images.path(), 1);
    drop(files);
    drop((kfd, kfd_buf, node, own_buf));
    app.exit().unwrap();
    let task = emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore without RESTORE_INIT");
    Workload::verify(&sim, pid, &expected).expect("restored state matches");
    let restored = RenderNode::from_fd(sim.driver(pid), restored_file(&task, 2));
    let kfd = Kfd::from_fd(sim.driver(pid), restored_file(&task, 1));
    let kfd_buf = kfd.export_dmabuf(MemHandle(vram.handle)).unwrap();
    assert_eq!(
        restored.prime_fd_to_handle(kfd_buf.as_fd()).unwrap(),
        imported,
        "the render node's handle is the restored KFD BO"
    );
    let again = restored.prime_handle_to_fd(own, DRM_CLOEXEC).unwrap();
    assert_eq!(
        identity(restored_file(&task, 30)),
        identity(again.as_fd()),
        "the dma-buf is the re-created DRM BO"
    );
}
