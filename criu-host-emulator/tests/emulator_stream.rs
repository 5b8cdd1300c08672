//! CRIU's `--stream` through the emulated CRIU and its image streamer: every
//! image file goes through a pipe (no seek, so no holes), the capture holds
//! each file once, and the serving streamer hands each file out once. A
//! streamed dump carries the same bytes as a dump into a directory, and a
//! streamed restore brings the workload back, also when a render node comes
//! before `/dev/kfd` and must be retried, and for a process whose only GPU
//! file is a render node.

mod common;

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::Path;

use amdgpu_image::{verify_set, CriuRenderNode, DirStore, ImageName, ImageStore, ReadLimits};
use common::{device_vmas, gpu_files, kfd_image, vmas_of, Dirs};
use criu_host_emulator::{ImageStreamer, TaskFile};
use kfd_sim::workload::render_only::RenderOnly;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

/// The plugin's files in a directory, by name.
fn plugin_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("amdgpu-"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Dumps `files` of `pid` with `dirs`' emulated CRIU under `--stream`;
/// returns the streamer that captured the images.
fn dump_streamed(
    dirs: &Dirs,
    sim: &Sim,
    pid: kfd_sim::Pid,
    files: &[TaskFile<'_>],
) -> ImageStreamer {
    let capture = ImageStreamer::capture();
    dirs.emulator(sim, |c| c.streamer = Some(capture.clone()))
        .dump(pid, files, &device_vmas(sim))
        .expect("dump into the streamer");
    capture
}

fn no_repeats(names: &[String]) {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        assert!(seen.insert(n), "{n} opened twice: {names:?}");
    }
}

#[test]
fn a_streamed_dump_equals_a_directory_dump_and_restores() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let mut app = Workload::launch(
        &sim,
        &Profile::PyTorchLike {
            bos_per_gpu: 24,
            max_bo_bytes: 256 << 10,
        },
    )
    .expect("launch");
    app.step().unwrap();
    let expected = app.describe().unwrap();
    let pid = app.pid();
    let (files, ids) = gpu_files(&app);

    let in_dir = Dirs::new();
    in_dir
        .emulator(&sim, |_| {})
        .dump(pid, &files, &device_vmas(&sim))
        .expect("dump into a directory");
    let streamed = Dirs::new();
    let capture = dump_streamed(&streamed, &sim, pid, &files);
    drop(files);
    assert_eq!(
        app.describe().unwrap(),
        expected,
        "the dumps changed nothing"
    );
    app.exit().unwrap();

    // Nothing of the plugin's went to the directory; the stream holds each
    // file once, byte for byte what the directory dump wrote (holes there
    // read as zeros).
    assert!(plugin_files(streamed.images.path()).is_empty());
    no_repeats(&capture.opened());
    let want = plugin_files(in_dir.images.path());
    let extracted = tempfile::tempdir().unwrap();
    capture.extract(extracted.path()).unwrap();
    let got = plugin_files(extracted.path());
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "the same files"
    );
    for (name, bytes) in &want {
        if name.starts_with("amdgpu-kfd-") {
            // Each dump names itself (dump_id): the rest is the same.
            let decode = |b: &[u8]| {
                let mut m: amdgpu_image::CriuKfd =
                    amdgpu_image::decode_message(name, &b[amdgpu_image::HEADER_LEN..]).unwrap();
                let id = m.dump_id.take();
                assert_eq!(id.map(|i| i.len()), Some(16), "{name} names its dump");
                m
            };
            assert_eq!(decode(&got[name]), decode(bytes), "{name} differs");
            continue;
        }
        if name.starts_with("amdgpu-renderD-") {
            let decode = |b: &[u8]| {
                let mut m: amdgpu_image::CriuRenderNode =
                    amdgpu_image::decode_message(name, &b[amdgpu_image::HEADER_LEN..]).unwrap();
                let id = m.dump_id.take();
                assert_eq!(id.map(|i| i.len()), Some(16), "{name} names its dump");
                m
            };
            assert_eq!(decode(&got[name]), decode(bytes), "{name} differs");
            continue;
        }
        assert!(
            got[name] == *bytes,
            "{name} differs between stream and directory"
        );
    }
    assert!(want.keys().any(|n| n.starts_with("amdgpu-pages-")));
    let report = verify_set(
        &DirStore::open_dir(extracted.path()).unwrap(),
        ReadLimits::default(),
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // Restore from the stream: every file served once, all of them used.
    let serve = capture.serve();
    let image = kfd_image(in_dir.images.path());
    streamed
        .emulator(&sim, |c| c.streamer = Some(serve.clone()))
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore from the streamer");
    Workload::verify(&sim, pid, &expected).expect("state matches after a streamed restore");
    no_repeats(&serve.opened());
    assert_eq!(
        serve.files(),
        BTreeMap::new(),
        "every file of the stream was read"
    );
}

/// A render node numbered below `/dev/kfd` waits at dump and is retried at
/// restore; under the streamer its image can be read only once, so the
/// retry must not read it again.
#[test]
fn a_render_node_before_dev_kfd_restores_from_a_stream() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch");
    app.step().unwrap();
    let expected = app.describe().unwrap();
    let pid = app.pid();
    let (mut files, mut ids) = gpu_files(&app);
    files.reverse();
    ids.reverse();
    let dirs = Dirs::new();
    let capture = dump_streamed(&dirs, &sim, pid, &files);
    drop(files);
    app.exit().unwrap();
    let extracted = tempfile::tempdir().unwrap();
    capture.extract(extracted.path()).unwrap();
    let image = kfd_image(extracted.path());

    let serve = capture.serve();
    dirs.emulator(&sim, |c| c.streamer = Some(serve.clone()))
        .restore(pid, &ids, &vmas_of(&image))
        .expect("the render node is retried without reading its image again");
    Workload::verify(&sim, pid, &expected).expect("state matches");
    no_repeats(&serve.opened());
}

/// A process whose only GPU file is a render node, through the streamer:
/// its image is written render-only at `DUMP_DEVICES_LATE` and restores
/// without listing the set (which a stream cannot).
#[test]
fn a_render_only_process_restores_from_a_stream() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let gpu = sim.gpus()[0].gpu_id;
    let app = RenderOnly::launch(&sim, &[gpu], 3).expect("launch");
    let expected = app.describe().unwrap();
    let pid = app.pid();
    let files = vec![TaskFile {
        fd: app.render_fds()[0],
        id: 3,
    }];
    let dirs = Dirs::new();
    let capture = dump_streamed(&dirs, &sim, pid, &files);
    drop(files);
    app.exit().unwrap();
    assert!(capture.files().contains_key("amdgpu-renderD-3.img"));

    let serve = capture.serve();
    let task = dirs
        .emulator(&sim, |c| c.streamer = Some(serve.clone()))
        .restore(pid, &[3], &[])
        .expect("restore from the streamer");
    let fds: Vec<_> = task.files.iter().map(|(_, fd)| fd.as_fd()).collect();
    RenderOnly::verify(&sim, pid, &fds, &expected).expect("bit-identical BOs");
    no_repeats(&serve.opened());
    assert_eq!(serve.files(), BTreeMap::new(), "every file was read");
}

/// CRIU v4.2's hook table: no `DUMP_DEVICES_LATE`, so the dump is done
/// after the last `DUMP_EXT_FILE`.
const CRIU_V4_2_HOOKS: u32 = criu_plugin_amdgpu::abi::hook::POST_FORKING as u32 + 1;

/// On a CRIU without `DUMP_DEVICES_LATE`, a render-only node is streamed
/// at its own `DUMP_EXT_FILE`: a failed write fails the dump there,
/// instead of being logged at the plugin's exit after CRIU called the dump
/// a success.
#[test]
fn a_render_only_image_the_stream_refuses_fails_the_dump_without_dump_devices_late() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let gpu = sim.gpus()[0].gpu_id;
    let app = RenderOnly::launch(&sim, &[gpu], 3).expect("launch");
    let files = vec![TaskFile {
        fd: app.render_fds()[0],
        id: 3,
    }];
    let dirs = Dirs::new();
    let capture = ImageStreamer::capture();
    // The stream takes a file once: this name is taken already, so the
    // plugin's write of it fails.
    drop(
        capture
            .open("amdgpu-renderD-3.img", amdgpu_image::StreamMode::Dump)
            .unwrap(),
    );
    let result = dirs
        .emulator(&sim, |c| {
            c.max_hooks = CRIU_V4_2_HOOKS;
            c.streamer = Some(capture.clone());
        })
        .dump(app.pid(), &files, &device_vmas(&sim));
    match result {
        Err(criu_host_emulator::EmulatorError::Hook { hook, object, .. }) => {
            assert_eq!(hook, "DUMP_EXT_FILE");
            assert!(object.contains('3'), "{object}");
        }
        other => panic!("the dump must fail at the render node's DUMP_EXT_FILE: {other:?}"),
    }
    let _ = capture.finish();
    drop(files);
    app.exit().unwrap();
}

/// On a CRIU without `DUMP_DEVICES_LATE`, under `--stream`: a render node
/// offered before any KFD file names its GPU is streamed render-only; the
/// stream cannot take it again with the GPU named, so the KFD file's dump
/// fails, saying why, rather than leave an image that restores the node
/// apart from its KFD process's VM. Into a directory the same dump
/// renames the image and succeeds.
#[test]
fn a_kfd_file_after_its_streamed_render_node_fails_without_dump_devices_late() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch");
    app.step().unwrap();
    let pid = app.pid();
    let (mut files, _) = gpu_files(&app);
    files.reverse();
    let streamed = Dirs::new();
    let capture = ImageStreamer::capture();
    let result = streamed
        .emulator(&sim, |c| {
            c.max_hooks = CRIU_V4_2_HOOKS;
            c.streamer = Some(capture.clone());
        })
        .dump(pid, &files, &device_vmas(&sim));
    match result {
        Err(criu_host_emulator::EmulatorError::Hook { hook, errno, .. }) => {
            assert_eq!(hook, "DUMP_EXT_FILE");
            assert_eq!(errno, -libc::ESPIPE, "the KFD file's answer");
        }
        other => panic!("the KFD file's dump must fail: {other:?}"),
    }
    let _ = capture.finish();

    let in_dir = Dirs::new();
    in_dir
        .emulator(&sim, |c| c.max_hooks = CRIU_V4_2_HOOKS)
        .dump(pid, &files, &device_vmas(&sim))
        .expect("into a directory the render-only image is renamed");
    let store = DirStore::open_dir(in_dir.images.path()).unwrap();
    let nodes: Vec<_> = store
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| matches!(n, ImageName::RenderNode { .. }))
        .map(|n| {
            store
                .read_message::<CriuRenderNode>(&n, ReadLimits::default())
                .unwrap()
                .expect("the render-node image")
        })
        .collect();
    assert!(!nodes.is_empty());
    assert!(
        nodes.iter().all(|n| !n.is_render_only()),
        "the KFD file named the GPU of every render node: {nodes:?}"
    );
    drop(files);
    app.exit().unwrap();
}
