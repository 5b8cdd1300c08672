//! A tree's BO contents copy in the background: with `DUMP_DEVICES_LATE`
//! in the host, each process's transfer runs on while CRIU dumps the next
//! process and is finished before any process is unpaused. Each GPU still
//! serves one transfer at a time (staging memory within
//! `KFD_MAX_BUFFER_SIZE`), a failed transfer fails the dump at
//! `DUMP_DEVICES_LATE` with every process running again and no image left,
//! and the sets restore bit-identically.

mod chain_common;
mod common;

use chain_common::{clean, logged, restore_tree_like_twins, Root};
use common::{amdgpu_files, hook_errno};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{FaultSpec, Sim, SimConfig};

const GPUS: usize = 2;
/// Two data-parallel replicas per GPU: two processes share each GPU.
const REPLICAS: usize = 2;
const WEIGHTS: u64 = 12 << 20;
const LIMIT: u64 = 8 << 20;

fn profile() -> Profile {
    Profile::DataParallel {
        weights_bytes: WEIGHTS,
        activations_bytes: 2 << 20,
    }
}

/// `REPLICAS` data-parallel groups over the sim's GPUs, each stepped once.
fn launch(sim: &Sim) -> Vec<Workload> {
    let mut apps = Vec::new();
    for _ in 0..REPLICAS {
        apps.extend(Workload::launch_data_parallel(sim, &profile()).unwrap());
    }
    for app in &mut apps {
        app.step().unwrap();
    }
    apps
}

/// After a failed dump: every process runs again, and no amdgpu file of
/// the dump is left in `dir`.
fn runs_on_and_left_nothing(apps: &mut [Workload], dir: &std::path::Path) {
    for app in apps {
        app.step()
            .expect("every process was unpaused after the failed dump");
    }
    let left = amdgpu_files(dir);
    assert!(left.is_empty(), "{left:?} left behind");
}

#[test]
fn a_tree_copies_in_the_background_one_transfer_per_gpu_within_the_staging_limit() {
    let sim = Sim::synthetic(GPUS, SimConfig::default()).unwrap();
    let apps = launch(&sim);
    let mut twins = launch(&sim);
    let root = Root::new();
    let dir = root.dir("tree", None);
    let tasks = common::tree_tasks(&sim, &apps);
    let emulator = root.emulator(&sim, &dir, |c| {
        c.options = c.options.clone().with_max_buffer_size(LIMIT);
    });
    let capture = Capture::start();
    emulator.dump_tree(&tasks).expect("dump of the tree");
    let lines = capture.lines();
    drop(capture);
    let copying = lines
        .iter()
        .filter(|(_, t)| t.contains("copying until DUMP_DEVICES_LATE"))
        .count();
    assert_eq!(
        copying,
        apps.len(),
        "every KFD file copies in the background: {lines:?}"
    );
    for i in 0..apps.len() {
        let id = 10 * i + 1;
        let finished = format!("file {id}: pid ");
        assert!(
            lines
                .iter()
                .any(|(_, t)| t.contains(&finished) && t.contains("content bytes copied")),
            "file {id}'s transfer finished in the log"
        );
    }
    // Two processes per GPU copied, each GPU one at a time: no GPU's
    // staging memory ever exceeded what one transfer may use.
    for gpu in sim.gpus() {
        let peak = sim.gem_userptr_peak_bytes(gpu.gpu_id).unwrap();
        assert!(
            peak > 0 && peak <= LIMIT,
            "GPU {:#x}: {peak} bytes of staging pinned at once (limit {LIMIT})",
            gpu.gpu_id
        );
    }
    clean(&dir);
    drop(tasks);
    restore_tree_like_twins(&emulator, &sim, &dir, apps, &mut twins, GPUS);
}

/// Dumps a fresh tree (directory `name`) with the fault `fault(processes)`
/// injected, expecting the dump to fail; checks that every process runs on
/// and no amdgpu file is left, and returns the failed hook, its errno and
/// the plugin's log.
fn failed_dump(
    name: &str,
    fault: impl FnOnce(usize) -> String,
) -> (&'static str, i32, Vec<(Level, String)>) {
    let sim = Sim::synthetic(GPUS, SimConfig::default()).unwrap();
    let mut apps = launch(&sim);
    let root = Root::new();
    let dir = root.dir(name, None);
    let tasks = common::tree_tasks(&sim, &apps);
    let emulator = root.emulator(&sim, &dir, |_| {});
    sim.inject(fault(apps.len()).parse::<FaultSpec>().unwrap());
    let capture = Capture::start();
    let err = emulator
        .dump_tree(&tasks)
        .expect_err("the injected fault fails the dump");
    let lines = capture.lines();
    drop(capture);
    let (hook, errno) = hook_errno(&err);
    drop(tasks);
    runs_on_and_left_nothing(&mut apps, &dir);
    (hook, errno, lines)
}

#[test]
fn a_failed_background_transfer_fails_the_dump_late_and_leaves_every_process_running() {
    // A short copy some way into the tree's transfers.
    let (hook, errno, lines) = failed_dump("failed", |_| "SDMA_SHORT:5".into());
    assert_eq!(hook, "DUMP_DEVICES_LATE", "{lines:?}");
    assert!(errno < 0 && errno != -libc::ENOTSUP, "errno {errno}");
    assert!(
        logged(&lines, "contents not copied"),
        "the failed file is named: {lines:?}"
    );
}

#[test]
fn a_later_process_failing_stops_the_earlier_transfers_and_removes_their_images() {
    // The last process's CHECKPOINT fails: CRIU ends the dump there, with
    // the earlier processes' contents still copying.
    let (hook, errno, lines) = failed_dump("abandoned", |processes| {
        format!("CRIU_OP:CHECKPOINT:{processes}=EIO")
    });
    assert_eq!((hook, errno), ("DUMP_EXT_FILE", -libc::EIO));
    assert!(
        logged(&lines, "background transfer(s)"),
        "the exit stops the transfers still running: {lines:?}"
    );
}
