//! Render-node (DRM) buffers in incremental and deduplicated dumps, through
//! the emulated CRIU: a second dump of a process whose DRM buffers changed
//! in one chunk writes that chunk only and restores bit for bit through the
//! chain; the render-node image that references chunks names its GPU so
//! that the C plugin refuses it; `verify` reads the referenced chunks in
//! the parent and names a changed one; `flatten` makes standalone
//! drm-pages files. With `KFD_DEDUP`, identical DRM buffers of two
//! render-only processes, or of two KFD processes, are written once.

mod chain_common;
mod common;

use std::path::Path;

use amdgpu_image::chain::flatten;
use amdgpu_image::{
    verify_set, ChunkSource, CriuKfd, CriuRenderNode, DirStore, Error, ImageName, ImageStore,
    ReadLimits, ValidatedRenderNode,
};
use chain_common::{clean, drm_bytes_of, dump, logged, Root};
use common::{add_drm_bo_at, image_message, read_drm_bo, restored_file, vmas_of, DrmBo, KFD_ID};
use criu_host_emulator::{TaskFile, TaskToDump, TaskToRestore};
use criu_plugin_amdgpu::log::Capture;
use kfd_sim::workload::render_only::RenderOnly;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Pid, Sim, SimConfig};

/// Chunk size of the images.
const CHUNK: usize = 2 << 20;
/// Each DRM buffer holds this many chunks.
const CHUNKS_PER_BO: usize = 2;
/// DRM buffers per process.
const BOS: usize = 3;
/// CRIU's file id of the render node (the KFD file is [`KFD_ID`]).
const RENDER_ID: u32 = KFD_ID + 1;

/// Adds [`BOS`] DRM buffers of [`CHUNKS_PER_BO`] chunks, each with its own
/// bytes, to `app`'s render node.
fn add_drm_bos(app: &Workload) -> Vec<DrmBo> {
    (0..BOS)
        .map(|i| {
            add_drm_bo_at(
                app,
                CHUNK * CHUNKS_PER_BO,
                (4 << 40) + ((i as u64) << 30),
                i,
            )
        })
        .collect()
}

fn render_message(dir: &Path) -> CriuRenderNode {
    image_message(dir, &ImageName::RenderNode { id: RENDER_ID })
}

#[test]
fn an_incremental_dump_writes_only_the_changed_chunks_of_drm_buffers() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
    app.step().unwrap();
    let mut bos = add_drm_bos(&app);
    let root = Root::new();
    let first = root.dir("1", None);
    dump(&root.emulator(&sim, &first, |_| {}), &sim, &app);
    let total = (BOS * CHUNKS_PER_BO * CHUNK) as u64;
    assert_eq!(drm_bytes_of(&first), (total, total), "a full dump");
    let full = render_message(&first);
    assert!(full.referencing_gpu_id.is_none() && full.gpu_id != 0);

    // The application changes 64 bytes of the second chunk of buffer 1.
    let changed = CHUNK + 4096;
    let bytes = [0xa5u8; 64];
    RenderOnly::touch(
        &sim,
        app.pid(),
        app.render_fds()[0],
        bos[1].handle.0,
        changed,
        &bytes,
    )
    .unwrap();
    bos[1].pattern[changed..changed + bytes.len()].copy_from_slice(&bytes);

    let second = root.dir("2", Some("1"));
    let capture = Capture::start();
    dump(&root.emulator(&sim, &second, |_| {}), &sim, &app);
    let lines = capture.lines();
    drop(capture);
    println!(
        "DRM incremental: {total} bytes of DRM buffers, the full dump wrote {total}, the \
         incremental {}",
        drm_bytes_of(&second).1
    );
    assert_eq!(
        drm_bytes_of(&second),
        (total, CHUNK as u64),
        "one changed chunk is written"
    );
    assert!(
        logged(
            &lines,
            &format!(
                "file {RENDER_ID} (renderD128): {CHUNK} of {total} content bytes written, the \
                 rest referenced (incremental dump)"
            )
        ),
        "{lines:#?}"
    );

    // The C plugin reads gpu_id 0, which no GPU of the KFD image maps: it
    // refuses the file (-ENODEV) instead of restoring the buffers without
    // their referenced chunks. Ours reads the GPU from tag 152.
    let kfd: CriuKfd = image_message(&second, &ImageName::Kfd { id: KFD_ID });
    let raw = render_message(&second);
    assert_eq!(raw.gpu_id, 0);
    assert_eq!(raw.referencing_gpu_id, Some(full.gpu_id));
    assert!(kfd
        .device_entries
        .iter()
        .all(|d| d.gpu_id != 0 || !d.is_gpu()));
    assert_eq!(raw.parent_dump_id, full.dump_id);
    assert_eq!(raw.dump_id, kfd.dump_id);
    let image = ValidatedRenderNode::new(RENDER_ID, raw.clone()).unwrap();
    assert_eq!(image.message().gpu_id, full.gpu_id);
    // A reader that ignores the chunk fields expects whole buffers in the
    // drm-pages files and refuses them (their length headers differ).
    let store = DirStore::open_dir(&second).unwrap();
    let (pages, compat) = image.compat_drm_pages(0).unwrap();
    match store.open_pages(&pages, compat) {
        Err(Error::LengthMismatch { .. }) => {}
        other => panic!("a reader ignoring the chunk fields must refuse {pages}: {other:?}"),
    }

    let report = clean(&second);
    assert!(
        report.references_verified >= (BOS * CHUNKS_PER_BO - 1) as u64,
        "{report:?}"
    );

    // Restored through the chain, bit for bit.
    let expected = app.describe().unwrap();
    let pid = app.pid();
    app.exit().unwrap();
    restore_and_check(&root, &sim, &second, pid, &expected, &bos);

    // Flattened: standalone drm-pages files, the GPU in gpu_id again.
    let flat = root.dir("flat", None);
    let written = flatten(
        &store,
        &DirStore::open_dir(&flat).unwrap(),
        ReadLimits::default(),
    )
    .expect("flatten");
    assert!(written.chunks_resolved >= (BOS * CHUNKS_PER_BO - 1) as u64);
    assert_eq!(drm_bytes_of(&flat), (total, total));
    let standalone = render_message(&flat);
    assert_eq!(standalone.gpu_id, full.gpu_id);
    assert!(standalone.referencing_gpu_id.is_none() && standalone.parent_dump_id.is_none());
    assert!(standalone
        .bo_entries
        .iter()
        .all(|b| b.chunk_sources.is_none()));
    assert_eq!(clean(&flat).references_verified, 0);

    // A changed chunk in the parent's drm-pages file is named by verify.
    let referenced = image
        .bo_chunks(0)
        .unwrap()
        .sources
        .iter()
        .position(|s| *s == ChunkSource::Parent)
        .expect("buffer 0 comes from the parent");
    let parent_pages = first.join(image.drm_pages(0).unwrap().0.to_string());
    let mut bytes = std::fs::read(&parent_pages).unwrap();
    bytes[8 + referenced * CHUNK + 100] ^= 0x40;
    std::fs::write(&parent_pages, &bytes).unwrap();
    let report = verify_set(&store, ReadLimits::default()).unwrap();
    let text: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("parent -> ../1/amdgpu-drm-pages-")
                && t.contains("criu_render_node.bo_entries[0]")),
        "{text:#?}"
    );
}

/// Restores the one-GPU process `pid` from `dir` and checks its KFD state
/// and its DRM buffers.
fn restore_and_check(
    root: &Root,
    sim: &Sim,
    dir: &Path,
    pid: Pid,
    expected: &kfd_sim::workload::WorkloadDescription,
    bos: &[DrmBo],
) {
    let kfd: CriuKfd = image_message(dir, &ImageName::Kfd { id: KFD_ID });
    let task = root
        .emulator(sim, dir, |_| {})
        .restore(pid, &[KFD_ID, RENDER_ID], &vmas_of(&kfd))
        .expect("restore");
    assert_eq!(task.resume_answer, 0);
    Workload::verify(sim, pid, expected).expect("KFD state restored bit for bit");
    for bo in bos {
        assert!(
            read_drm_bo(sim, &task, RENDER_ID, bo.handle, bo.pattern.len()) == bo.pattern,
            "DRM buffer {} restored bit for bit",
            bo.handle.0
        );
    }
}

#[test]
fn dedup_writes_identical_drm_buffers_of_two_processes_once() {
    const PER_FILE: usize = 4;
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let gpu = sim.gpus()[0].gpu_id;
    // Two render-only processes made alike: the same buffers, same bytes.
    let apps: Vec<RenderOnly> = (0..2)
        .map(|_| RenderOnly::launch(&sim, &[gpu], PER_FILE).unwrap())
        .collect();
    let expected: Vec<_> = apps.iter().map(|a| a.describe().unwrap()).collect();
    assert_eq!(expected[0], expected[1]);
    let ids = [3u32, 13];
    let tasks: Vec<TaskToDump<'_>> = apps
        .iter()
        .zip(ids)
        .map(|(a, id)| TaskToDump {
            pid: a.pid(),
            files: vec![TaskFile {
                fd: a.render_fds()[0],
                id,
            }],
            vmas: Vec::new(),
        })
        .collect();
    let root = Root::new();
    let dir = root.dir("dedup", None);
    let emulator = root.emulator(&sim, &dir, |c| {
        c.options = c.options.clone().with_dedup(true)
    });
    emulator.dump_tree(&tasks).expect("dump of the tree");
    let (content, stored) = drm_bytes_of(&dir);
    println!("DRM dedup: {content} bytes of DRM buffers in two processes, {stored} written");
    assert!(content > 0);
    assert_eq!(stored * 2, content, "each buffer is written once");
    let report = clean(&dir);
    assert!(report.references_verified >= PER_FILE as u64, "{report:?}");
    for id in ids {
        let msg: CriuRenderNode = image_message(&dir, &ImageName::RenderNode { id });
        // Render-only images name no GPU by id: the C plugin refuses them.
        assert_eq!(msg.gpu_id, 0);
        assert!(msg.referencing_gpu_id.is_none());
    }

    let pids: Vec<Pid> = apps.iter().map(RenderOnly::pid).collect();
    drop(tasks);
    for a in apps {
        a.exit().unwrap();
    }
    let restore: Vec<TaskToRestore> = pids
        .iter()
        .zip(ids)
        .map(|(&pid, id)| TaskToRestore {
            pid,
            file_ids: vec![id],
            vmas: Vec::new(),
        })
        .collect();
    let restored = emulator
        .restore_tree(&restore)
        .expect("restore of the tree");
    for ((task, id), expected) in restored.iter().zip(ids).zip(&expected) {
        RenderOnly::verify(&sim, task.pid, &[restored_file(task, id)], expected)
            .expect("bit-identical DRM buffers");
    }
}

/// Two KFD processes with the same DRM buffers, dumped with `KFD_DEDUP`:
/// the second process's render-node image references the first's chunks
/// (so it names its GPU in tag 152, gpu_id 0), and both restore bit for
/// bit through their KFD files' GPU mapping.
#[test]
fn dedup_references_drm_chunks_of_another_kfd_process() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let apps: Vec<Workload> = (0..2)
        .map(|_| {
            let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
            app.step().unwrap();
            app
        })
        .collect();
    let bos: Vec<Vec<DrmBo>> = apps.iter().map(add_drm_bos).collect();
    assert_eq!(bos[0][1].pattern, bos[1][1].pattern);
    let tasks = common::tree_tasks(&sim, &apps);
    let root = Root::new();
    let dir = root.dir("dedup", None);
    let emulator = root.emulator(&sim, &dir, |c| {
        c.options = c.options.clone().with_dedup(true)
    });
    emulator.dump_tree(&tasks).expect("dump of the tree");
    let total = 2 * (BOS * CHUNKS_PER_BO * CHUNK) as u64;
    assert_eq!(drm_bytes_of(&dir), (total, total / 2));
    let renders: Vec<CriuRenderNode> = [2u32, 12]
        .iter()
        .map(|&id| image_message(&dir, &ImageName::RenderNode { id }))
        .collect();
    // One of the two wrote the buffers, the other references them.
    let referencing: Vec<&CriuRenderNode> = renders
        .iter()
        .filter(|r| r.referencing_gpu_id.is_some())
        .collect();
    assert_eq!(referencing.len(), 1, "{renders:#?}");
    assert_eq!(referencing[0].gpu_id, 0);
    assert!(referencing[0].parent_dump_id.is_none());
    clean(&dir);

    let expected: Vec<_> = apps.iter().map(|a| a.describe().unwrap()).collect();
    let pids: Vec<Pid> = apps.iter().map(Workload::pid).collect();
    drop(tasks);
    for a in apps {
        a.exit().unwrap();
    }
    let restore: Vec<TaskToRestore> = pids
        .iter()
        .enumerate()
        .map(|(i, &pid)| {
            let id = 10 * i as u32 + 1;
            let image: CriuKfd = image_message(&dir, &ImageName::Kfd { id });
            TaskToRestore {
                pid,
                file_ids: vec![id, id + 1],
                vmas: vmas_of(&image),
            }
        })
        .collect();
    let restored = emulator
        .restore_tree(&restore)
        .expect("restore of the tree");
    for (i, task) in restored.iter().enumerate() {
        assert_eq!(task.resume_answer, 0);
        Workload::verify(&sim, task.pid, &expected[i]).expect("KFD state");
        for bo in &bos[i] {
            assert!(
                read_drm_bo(&sim, task, 10 * i as u32 + 2, bo.handle, bo.pattern.len())
                    == bo.pattern,
                "process {i}: DRM buffer {} restored bit for bit",
                bo.handle.0
            );
        }
    }
}
