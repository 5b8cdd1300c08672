//! Checkpoint what AMD's code built: the thunk allocates VRAM (GPU-only
//! and CPU-visible), GTT and a userptr, creates a compute and an SDMA
//! queue (with its doorbell page, EOP and context-save buffers) and two
//! events (with the events page); CRIU (the host emulator with this
//! project's plugin) dumps that process, restores it as a new simulated
//! process on a renumbered copy of the machine, and dumps the restored
//! process again.
//!
//! The two checkpoints hold the same kernel objects (every BO at the same
//! address with the same size, flags and user gpu_id; the same queues,
//! events and private data size), the BO contents are bit-identical (and
//! are what the thunk's process wrote through its CPU mappings), and the
//! thunk's shared memory and semaphore exist again on the restore host as
//! the C plugin recreates them (size and magic from the image, the
//! semaphore by `sem_open(O_CREAT)`).

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use amdgpu_image::{CriuKfd, DirStore, ImageName, ImageStore, PagesFile, ReadLimits, ValidatedKfd};
use common::{num, records, Scratch};

/// The CRIU file id the checkpoint gives the process's /dev/kfd.
const KFD_ID: u32 = 1;

fn kfd_image(dir: &Path) -> CriuKfd {
    DirStore::open_dir(dir)
        .unwrap()
        .read_message(&ImageName::Kfd { id: KFD_ID }, ReadLimits::default())
        .unwrap()
        .unwrap_or_else(|| panic!("no KFD image in {}", dir.display()))
}

/// Every BO's bytes in a checkpoint, by address.
fn contents(dir: &Path, image: &CriuKfd) -> Vec<(u64, Vec<u8>)> {
    let validated = ValidatedKfd::new(KFD_ID, image.clone()).expect("a valid KFD image");
    let mut out = Vec::new();
    for (name, layout) in validated.pages_files() {
        let path = dir.join(name.to_string());
        let pages = PagesFile::open(
            std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            &name.to_string(),
            layout.clone(),
        )
        .unwrap();
        for (i, bo) in layout.bos().iter().enumerate() {
            out.push((
                image.bo_entries[bo.entry].addr,
                pages.bo_bytes(i).unwrap().to_vec(),
            ));
        }
    }
    out.sort();
    out
}

fn checkpoint_on(scratch: &Scratch, probe: &Path, machine: &str) {
    let root = scratch
        .dir
        .path()
        .join(machine.rsplit('/').next().expect("a machine name"));
    let (first, second, restore_shm) = (root.join("first"), root.join("second"), root.join("shm"));
    for d in [&first, &second, &restore_shm] {
        std::fs::create_dir_all(d).unwrap();
    }
    let run = common::run_preloaded(
        scratch,
        machine.as_ref(),
        probe,
        &[
            "checkpoint",
            first.to_str().unwrap(),
            second.to_str().unwrap(),
            restore_shm.to_str().unwrap(),
        ],
    );
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && out.contains("\ndone\n"),
        "{machine}: the checkpoint run failed ({}):\n{out}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let steps: Vec<_> = records(&out, "checkpoint");
    let state = |what: &str| {
        steps
            .iter()
            .find(|r| r.get("state").map(String::as_str) == Some(what))
            .unwrap_or_else(|| panic!("{machine}: no {what} state in {steps:?}"))
            .clone()
    };
    let (before, restored) = (state("before"), state("restored"));
    for key in ["bos", "queues", "events"] {
        assert_eq!(
            before[key], restored[key],
            "{machine}: {key} before and after"
        );
    }
    assert_eq!(num(&before, "queues"), 2, "{machine}: compute + SDMA");
    assert_eq!(
        num(&restored, "paused"),
        0,
        "{machine}: the restored queues run"
    );
    // The restored process keeps the gpu_ids the thunk knows, on GPUs
    // whose actual ids differ.
    for pair in restored["gpu_ids"].split(',') {
        let (user, actual) = pair.split_once(':').unwrap();
        assert_ne!(user, actual, "{machine}: {pair} was renumbered");
    }
    let restore = steps
        .iter()
        .find(|r| r.get("step").map(String::as_str) == Some("restore"));
    assert_eq!(num(restore.expect("a restore step"), "resume"), 0);

    // The same objects in both checkpoints.
    let (a, b) = (kfd_image(&first), kfd_image(&second));
    let key = |img: &CriuKfd| {
        let mut bos: Vec<_> = img
            .bo_entries
            .iter()
            .map(|bo| (bo.addr, bo.size, bo.alloc_flags, bo.gpu_id))
            .collect();
        bos.sort();
        bos
    };
    assert_eq!(
        key(&a),
        key(&b),
        "{machine}: BOs of the thunk's process and of the restored one"
    );
    assert_eq!(a.bo_entries.len() as u64, num(&before, "bos"));
    // The same user gpu_ids; their order is the process's devices in the
    // topology order of the machine it runs on (the kernel creates a
    // process's per-device data walking its own topology), which the
    // renumbering permutes.
    let ids = |img: &CriuKfd| {
        let mut ids: Vec<u32> = img.device_entries.iter().map(|d| d.gpu_id).collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(ids(&a), ids(&b), "{machine}: user gpu_ids");
    assert_eq!(
        a.num_of_objects, b.num_of_objects,
        "{machine}: queues + events"
    );
    assert_eq!(
        a.priv_data.len(),
        b.priv_data.len(),
        "{machine}: private data"
    );

    // Bit-identical contents, and what the thunk's process wrote.
    let (ca, cb) = (contents(&first, &a), contents(&second, &b));
    assert_eq!(ca.len(), cb.len());
    for ((addr, x), (_, y)) in ca.iter().zip(&cb) {
        assert!(x == y, "{machine}: BO at {addr:#x} differs after restore");
    }
    for object in records(&out, "object") {
        if object["kind"] == "userptr" {
            // Process memory: CRIU's own pages, not the plugin's.
            continue;
        }
        let addr = num(&object, "addr");
        let fill = num(&object, "fill") as u8;
        let (_, bytes) = ca
            .iter()
            .find(|(a, _)| *a == addr)
            .unwrap_or_else(|| panic!("{machine}: no contents for the thunk's {object:?}"));
        assert_eq!(bytes.len() as u64, num(&object, "size"));
        assert!(
            bytes.iter().all(|&v| v == fill),
            "{machine}: the {} BO holds what the process wrote",
            object["kind"]
        );
    }

    // The thunk's shared memory and semaphore, recreated on the restore
    // host as the C plugin does.
    let shm = &records(&out, "shm")[0];
    assert_eq!(
        a.shared_mem_size,
        num(shm, "size"),
        "{machine}: recorded shm size"
    );
    assert_eq!(u64::from(a.shared_mem_magic), num(shm, "magic"));
    let file = std::fs::File::open(restore_shm.join("hsakmt_shared_mem"))
        .expect("hsakmt_shared_mem recreated");
    assert_eq!(file.metadata().unwrap().len(), a.shared_mem_size);
    let mut magic = [0u8; 4];
    file.read_exact_at(&mut magic, 0).unwrap();
    assert_eq!(u32::from_ne_bytes(magic), a.shared_mem_magic);
    assert!(
        restore_shm.join("sem.hsakmt_semaphore").is_file(),
        "{machine}: the semaphore was recreated"
    );
    println!(
        "{machine}: {} BOs ({} with contents), {} objects checkpointed, restored on renumbered GPUs and checkpointed again",
        a.bo_entries.len(),
        ca.len(),
        a.num_of_objects
    );
}

#[test]
fn what_the_thunk_built_survives_checkpoint_and_restore_on_a_renumbered_machine() {
    let scratch = Scratch::new();
    let Some(probe) = common::hsakmt_probe(&scratch) else {
        return;
    };
    let host_shm = Path::new("/dev/shm/hsakmt_shared_mem").exists();
    for machine in ["single-gpu", "mi210-8gpu-2hive"] {
        checkpoint_on(&scratch, &probe, machine);
    }
    assert_eq!(
        Path::new("/dev/shm/hsakmt_shared_mem").exists(),
        host_shm,
        "the host's /dev/shm is untouched"
    );
}
