//! Incremental dumps (CRIU's `--prev-images-dir`: a `parent` link in the
//! images directory) and deduplicated dumps (`KFD_DEDUP`) through the
//! emulated CRIU: each writes only the chunks it must, restores bit for
//! bit through the chain, and the restored workload continues to the same
//! result as a twin that was never interrupted. A damaged parent is
//! refused before the task runs; a parent of another process tree only
//! contributes what matches; `--stream` (no parent) writes a full dump and
//! says so; `flatten` makes a standalone set that restores.

mod chain_common;
mod common;

use amdgpu_image::chain::flatten;
use amdgpu_image::{
    verify_set, CriuKfd, DirStore, ImageName, ImageStore, ReadLimits, ValidatedKfd,
};
use chain_common::{
    bytes_of, clean, continues_like, dump, logged, restore_one, restore_tree_like_twins, Root,
};
use common::{image_message, vmas_of, KFD_ID};
use criu_host_emulator::ImageStreamer;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

/// Dense VRAM BOs of 16 MiB (eight 2 MiB chunks each), as TensorFlow's
/// pool. A step changes two words of every BO (its first chunk and one
/// other), so one step between dumps leaves most chunks unchanged.
const TF: Profile = Profile::TensorFlowLike { bo_bytes: 16 << 20 };

#[test]
fn incremental_dumps_after_steps_restore_from_a_chain_of_three() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &TF).unwrap();
    let mut twin = Workload::launch(&sim, &TF).unwrap();
    let root = Root::new();
    let mut described = Vec::new();
    for (n, parent) in [("1", None), ("2", Some("1")), ("3", Some("2"))] {
        app.step().unwrap();
        twin.step().unwrap();
        let dir = root.dir(n, parent);
        let capture = Capture::start();
        dump(&root.emulator(&sim, &dir, |_| {}), &sim, &app);
        let lines = capture.lines();
        drop(capture);
        described.push(app.describe().unwrap());
        let (content, stored) = bytes_of(&dir);
        clean(&dir);
        if parent.is_none() {
            assert!(logged(&lines, "no parent images"), "{lines:#?}");
            assert_eq!(stored, content);
        } else {
            assert!(logged(&lines, "incremental dump"), "{lines:#?}");
            // A step changes at most two chunks of each BO.
            assert!(stored * 2 <= content, "{stored} of {content} bytes written");
            assert!(stored > 0);
        }
    }
    // The third set reads chunks from both parents.
    let third = clean(&root.dir("3", None));
    assert_eq!(third.chain_depth, 3);
    assert!(third.references_verified > 0);

    let pid = app.pid();
    app.exit().unwrap();
    let dir = root.dir("3", None);
    let capture = Capture::start();
    restore_one(&root.emulator(&sim, &dir, |_| {}), &dir, pid);
    let lines = capture.lines();
    drop(capture);
    assert!(
        logged(&lines, "contents restored in the task"),
        "the chained set is read in the task: {lines:#?}"
    );
    Workload::verify(&sim, pid, &described[2]).expect("restored bit for bit");
    continues_like(&sim, pid, &mut twin, 4);
}

#[test]
fn a_damaged_parent_is_refused_before_the_task_runs() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &TF).unwrap();
    let root = Root::new();
    let first = root.dir("1", None);
    dump(&root.emulator(&sim, &first, |_| {}), &sim, &app);
    app.step().unwrap();
    let second = root.dir("2", Some("1"));
    dump(&root.emulator(&sim, &second, |_| {}), &sim, &app);
    assert!(bytes_of(&second).1 < bytes_of(&second).0);
    // Change one byte of the parent's pages file, in a chunk the child
    // references.
    let child = ValidatedKfd::new(
        KFD_ID,
        image_message(&second, &ImageName::Kfd { id: KFD_ID }),
    )
    .unwrap();
    let image: CriuKfd = image_message(&first, &ImageName::Kfd { id: KFD_ID });
    let gpu = image
        .device_entries
        .iter()
        .find(|d| d.gpu_id != 0)
        .unwrap()
        .gpu_id;
    let pages = first.join(
        ImageName::Pages {
            id: KFD_ID,
            gpu_id: gpu,
        }
        .to_string(),
    );
    let (bo, chunk) = child
        .bo_chunks(gpu)
        .iter()
        .enumerate()
        .find_map(|(k, c)| {
            c.sources
                .iter()
                .position(|s| *s == amdgpu_image::ChunkSource::Parent)
                .map(|i| (k, i as u64))
        })
        .expect("a chunk from the parent");
    let layout = ValidatedKfd::new(KFD_ID, image.clone())
        .unwrap()
        .pages_layout(gpu);
    let at = 8 + layout.offset_of(bo).unwrap() + chunk * (2 << 20) + 100;
    let mut bytes = std::fs::read(&pages).unwrap();
    bytes[at as usize] ^= 0x80;
    std::fs::write(&pages, &bytes).unwrap();

    let report = verify_set(&DirStore::open_dir(&second).unwrap(), ReadLimits::default()).unwrap();
    let text: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("parent -> ../1/amdgpu-pages-")),
        "{text:#?}"
    );

    let pid = app.pid();
    app.exit().unwrap();
    let image: CriuKfd = image_message(&second, &ImageName::Kfd { id: KFD_ID });
    let err = root
        .emulator(&sim, &second, |_| {})
        .restore(pid, &[KFD_ID, KFD_ID + 1], &vmas_of(&image))
        .expect_err("a changed parent chunk is never restored");
    assert!(err.to_string().contains("RESTORE_EXT_FILE"), "{err}");
    // The process never ran again.
    assert!(Workload::attach(&sim, pid).steps().is_err());

    // A missing parent: refused too, naming the link.
    std::fs::remove_dir_all(&first).unwrap();
    let report = verify_set(&DirStore::open_dir(&second).unwrap(), ReadLimits::default()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.to_string().contains("parent -> ../1")),
        "{:?}",
        report.problems
    );
}

#[test]
fn a_parent_of_another_process_tree_contributes_only_what_matches() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let other = Workload::launch(&sim, &Profile::Basic).unwrap();
    let mut app = Workload::launch(&sim, &TF).unwrap();
    let mut twin = Workload::launch(&sim, &TF).unwrap();
    let root = Root::new();
    let first = root.dir("other", None);
    dump(&root.emulator(&sim, &first, |_| {}), &sim, &other);
    app.step().unwrap();
    twin.step().unwrap();
    let second = root.dir("app", Some("other"));
    dump(&root.emulator(&sim, &second, |_| {}), &sim, &app);
    let expected = app.describe().unwrap();
    let (content, stored) = bytes_of(&second);
    // Nothing of a Basic process's BOs is in the TensorFlow pool but the
    // signal page: it holds only what the kernel put there (every slot
    // unsignaled, as kfd_event_page_set leaves it; SET_EVENT writes no
    // slot), the same 64 KiB in both processes.
    let image: CriuKfd = image_message(&second, &ImageName::Kfd { id: KFD_ID });
    let shared: Vec<_> = image
        .bo_entries
        .iter()
        .filter(|b| b.chunk_sources.is_some())
        .map(|b| (b.addr, b.size))
        .collect();
    let signal_page = image.bo_entries[0].addr;
    assert_eq!(shared, [(signal_page, 64 << 10)], "only the signal page");
    assert_eq!(stored, content - (64 << 10));
    clean(&second);
    let pid = app.pid();
    app.exit().unwrap();
    restore_one(&root.emulator(&sim, &second, |_| {}), &second, pid);
    Workload::verify(&sim, pid, &expected).unwrap();
    continues_like(&sim, pid, &mut twin, 2);
}

#[test]
fn a_streamed_dump_has_no_parent_and_says_it_is_full() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &TF).unwrap();
    let root = Root::new();
    let first = root.dir("1", None);
    dump(&root.emulator(&sim, &first, |_| {}), &sim, &app);
    app.step().unwrap();
    // Even with a parent link in the directory, a stream cannot use it.
    let second = root.dir("2", Some("1"));
    let capture = ImageStreamer::capture();
    let log = Capture::start();
    dump(
        &root.emulator(&sim, &second, |c| {
            c.streamer = Some(capture.clone());
            c.options = c.options.clone().with_dedup(true);
        }),
        &sim,
        &app,
    );
    let lines = log.lines();
    drop(log);
    assert!(
        lines.iter().any(|(l, t)| *l == Level::Info
            && t.contains("images are streamed: no parent images")
            && t.contains("full dump")
            && t.contains("KFD_DEDUP needs an image directory")),
        "{lines:#?}"
    );
    let expected = app.describe().unwrap();
    let pid = app.pid();
    app.exit().unwrap();
    // Served back from the stream, the set restores on its own.
    let extracted = root.dir("extracted", None);
    capture.extract(&extracted).unwrap();
    let image: CriuKfd = image_message(&extracted, &ImageName::Kfd { id: KFD_ID });
    assert_eq!(bytes_of(&extracted).0, bytes_of(&extracted).1);
    assert!(image.parent_dump_id.is_none());
    assert!(image.bo_entries.iter().all(|b| b.chunk_sources.is_none()));
    root.emulator(&sim, &second, |c| c.streamer = Some(capture.serve()))
        .restore(pid, &[KFD_ID, KFD_ID + 1], &vmas_of(&image))
        .expect("restore from the stream");
    Workload::verify(&sim, pid, &expected).unwrap();
}

#[test]
fn dedup_of_a_data_parallel_tree_writes_the_weights_once() {
    const GPUS: usize = 4;
    let weights = 16 << 20;
    let activations = 2 << 20;
    let profile = Profile::DataParallel {
        weights_bytes: weights,
        activations_bytes: activations,
    };
    let sim = Sim::synthetic(GPUS, SimConfig::default()).unwrap();
    let mut apps = Workload::launch_data_parallel(&sim, &profile).unwrap();
    let mut twins = Workload::launch_data_parallel(&sim, &profile).unwrap();
    for (a, t) in apps.iter_mut().zip(&mut twins) {
        a.step().unwrap();
        t.step().unwrap();
    }
    let root = Root::new();
    let dir = root.dir("dedup", None);
    let tasks = common::tree_tasks(&sim, &apps);
    let emulator = root.emulator(&sim, &dir, |c| {
        c.options = c.options.clone().with_dedup(true)
    });
    emulator.dump_tree(&tasks).expect("dump of the tree");
    let (content, stored) = bytes_of(&dir);
    // Each process's step changed one or two chunks of its weights; the
    // other chunks of the weights are written once for all four.
    let dense = GPUS as u64 * (weights + activations);
    assert!(content >= dense);
    // A step changes a few chunks of each replica's weights; the rest of
    // the weights is written once for all four processes.
    assert!(stored >= weights, "the weights are written once");
    assert!(
        stored * 10 <= content * 6,
        "{stored} of {content} bytes written"
    );
    clean(&dir);
    drop(tasks);
    restore_tree_like_twins(&emulator, &sim, &dir, apps, &mut twins, GPUS);
}

#[test]
fn flatten_makes_a_standalone_set_that_restores() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &TF).unwrap();
    let mut twin = Workload::launch(&sim, &TF).unwrap();
    let root = Root::new();
    let first = root.dir("1", None);
    dump(&root.emulator(&sim, &first, |_| {}), &sim, &app);
    app.step().unwrap();
    twin.step().unwrap();
    let second = root.dir("2", Some("1"));
    dump(&root.emulator(&sim, &second, |_| {}), &sim, &app);
    let expected = app.describe().unwrap();
    let flat = root.dir("flat", None);
    flatten(
        &DirStore::open_dir(&second).unwrap(),
        &DirStore::open_dir(&flat).unwrap(),
        ReadLimits::default(),
    )
    .unwrap();
    // CRIU's own images of the emulator are full in every dump: copied.
    for entry in std::fs::read_dir(&second).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("amdgpu-") && name != "parent" {
            std::fs::copy(entry.path(), flat.join(&name)).unwrap();
        }
    }
    let (content, stored) = bytes_of(&flat);
    assert_eq!(stored, content);
    let report = clean(&flat);
    assert_eq!(report.references_verified, 0);
    // The parent can go: the flat set needs nothing of it.
    std::fs::remove_dir_all(&first).unwrap();
    let pid = app.pid();
    app.exit().unwrap();
    restore_one(&root.emulator(&sim, &flat, |_| {}), &flat, pid);
    Workload::verify(&sim, pid, &expected).unwrap();
    continues_like(&sim, pid, &mut twin, 3);
}

#[test]
fn a_parent_chain_that_loops_is_refused_at_restore() {
    // Two real dumps, the second against the first; then the first is
    // made to take a chunk the second references from *its* parent, the
    // second: 2 -> 1 -> 2 -> ... Restore must name the loop and stop.
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &TF).unwrap();
    let root = Root::new();
    let first = root.dir("1", None);
    dump(&root.emulator(&sim, &first, |_| {}), &sim, &app);
    app.step().unwrap();
    let second = root.dir("2", Some("1"));
    dump(&root.emulator(&sim, &second, |_| {}), &sim, &app);
    let child: CriuKfd = image_message(&second, &ImageName::Kfd { id: KFD_ID });
    let child = ValidatedKfd::new(KFD_ID, child).unwrap();
    let gpu = child.gpus().next().unwrap().gpu_id;
    let (digest, len) = child
        .bo_chunks(gpu)
        .iter()
        .find_map(|c| {
            let i = c
                .sources
                .iter()
                .position(|s| *s == amdgpu_image::ChunkSource::Parent)?;
            Some((c.digests[i], c.chunk_len(i)))
        })
        .expect("a chunk from the parent");
    // In the first set: the same chunk, now "in the parent" (the second
    // set), cut out of its pages file.
    let mut parent: CriuKfd = image_message(&first, &ImageName::Kfd { id: KFD_ID });
    let image = ValidatedKfd::new(KFD_ID, parent.clone()).unwrap();
    let layout = image.pages_layout(gpu);
    let (k, bo, i) = image
        .bo_chunks(gpu)
        .into_iter()
        .enumerate()
        .find_map(|(k, c)| {
            let i = c.digests.iter().position(|d| *d == digest)?;
            Some((k, c, i))
        })
        .expect("the first set holds the chunk");
    let mut sources = vec![amdgpu_image::ChunkSource::Here as u8; bo.digests.len()];
    sources[i] = amdgpu_image::ChunkSource::Parent as u8;
    parent.bo_entries[bo.entry].chunk_sources = Some(sources);
    parent.parent_dump_id = child.message().dump_id.clone();
    DirStore::open_dir(&first)
        .unwrap()
        .write_message(&ImageName::Kfd { id: KFD_ID }, &parent)
        .unwrap();
    let pages = first.join(
        ImageName::Pages {
            id: KFD_ID,
            gpu_id: gpu,
        }
        .to_string(),
    );
    let mut bytes = std::fs::read(&pages).unwrap();
    let at = 8 + (layout.offset_of(k).unwrap() + i as u64 * bo.chunk_size) as usize;
    bytes.drain(at..at + len as usize);
    let stored = u64::from_le_bytes(bytes[..8].try_into().unwrap()) - len;
    bytes[..8].copy_from_slice(&stored.to_le_bytes());
    std::fs::write(&pages, &bytes).unwrap();
    std::os::unix::fs::symlink("../2", first.join("parent")).unwrap();

    let report = verify_set(&DirStore::open_dir(&second).unwrap(), ReadLimits::default()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.to_string().contains("the parent chain loops")),
        "{:?}",
        report.problems
    );
    let pid = app.pid();
    app.exit().unwrap();
    let image: CriuKfd = image_message(&second, &ImageName::Kfd { id: KFD_ID });
    let (tx, rx) = std::sync::mpsc::channel();
    let emulator = root.emulator(&sim, &second, |_| {});
    let capture = Capture::start();
    std::thread::spawn(move || {
        let _ = tx.send(
            emulator
                .restore(pid, &[KFD_ID, KFD_ID + 1], &vmas_of(&image))
                .map(drop),
        );
    });
    let restored = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("restore returns instead of following the chain forever");
    let lines = capture.lines();
    drop(capture);
    let err = restored.expect_err("a looping chain is never restored");
    assert!(err.to_string().contains("RESTORE_EXT_FILE"), "{err}");
    assert!(
        lines
            .iter()
            .any(|(level, t)| *level == Level::Error && t.contains("the parent chain loops")),
        "{lines:#?}"
    );
    assert!(Workload::attach(&sim, pid).steps().is_err());
}

#[test]
fn a_dump_whose_parent_link_is_its_own_directory_is_a_full_dump() {
    // `--prev-images-dir .`: the "parent" is the set this dump replaces.
    // Referencing its chunks would leave a set that names itself as its
    // parent; the dump writes every chunk instead, and restores.
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &TF).unwrap();
    let root = Root::new();
    let dir = root.dir("1", None);
    dump(&root.emulator(&sim, &dir, |_| {}), &sim, &app);
    app.step().unwrap();
    std::os::unix::fs::symlink(".", dir.join("parent")).unwrap();
    let capture = Capture::start();
    dump(&root.emulator(&sim, &dir, |_| {}), &sim, &app);
    let lines = capture.lines();
    drop(capture);
    assert!(
        logged(&lines, "is this images directory itself"),
        "{lines:#?}"
    );
    let (content, stored) = bytes_of(&dir);
    assert_eq!(stored, content, "every chunk written");
    clean(&dir);
    let expected = app.describe().unwrap();
    let pid = app.pid();
    app.exit().unwrap();
    restore_one(&root.emulator(&sim, &dir, |_| {}), &dir, pid);
    Workload::verify(&sim, pid, &expected).unwrap();
}
