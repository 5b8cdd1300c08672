//! Parallel restore through the emulated CRIU: a single-process tree on a
//! CRIU with `POST_FORKING` has its BO contents copied by the worker in the
//! main restorer (one GPU and several: each GPU's offsets restart in its own
//! pages file), the contents match the checkpoint and the workload runs on;
//! a failed copy in the worker makes `RESUME_DEVICES_LATE` answer an error
//! (logged at error level) and leaves the queues stopped; multi-process
//! trees and CRIU without `POST_FORKING` keep the in-task restore (where the
//! same failed copy fails `RESTORE_EXT_FILE` instead). The worker itself is
//! also driven directly: commands without BOs do not stop it, the C
//! plugin's cross-GPU offsets and malformed commands are refused without
//! stopping it either.

mod common;

use std::io::Write;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};

use amdgpu_checkpoint::options::Options;
use amdgpu_checkpoint::parallel::{
    send_command, Command, Copier, Entry, GpuRoute, ParallelFacts, ParallelRestore,
};
use common::{device_vmas, gpu_files, gpu_files_from, kfd_image, kfd_image_of, vmas_of, Dirs};
use criu_host_emulator::{CriuEmulator, EmulatorError, RestoredTask, TaskToDump, TaskToRestore};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload, WorkloadDescription};
use kfd_sim::{FaultSpec, Pid, Sim, SimConfig};

const TF: Profile = Profile::TensorFlowLike {
    bo_bytes: 192 << 10,
};

fn launch(sim: &Sim, profile: &Profile, steps: usize) -> Workload {
    let mut app = Workload::launch(sim, profile).expect("launch");
    for _ in 0..steps {
        app.step().expect("step");
    }
    app
}

/// Dumps `app` and kills it; returns its pid, its description at dump, and
/// the emulator (configured by `tweak`) that restores it.
fn checkpoint(
    sim: &Sim,
    app: Workload,
    dirs: &Dirs,
    tweak: impl FnOnce(&mut criu_host_emulator::EmulatorConfig),
) -> (Pid, WorkloadDescription, CriuEmulator) {
    let emulator = dirs.emulator(sim, tweak);
    let expected = app.describe().unwrap();
    let (files, _) = gpu_files(&app);
    emulator
        .dump(app.pid(), &files, &device_vmas(sim))
        .expect("dump");
    drop(files);
    let pid = app.pid();
    app.exit().unwrap();
    (pid, expected, emulator)
}

fn restore(emulator: &CriuEmulator, dirs: &Dirs, pid: Pid) -> Result<RestoredTask, EmulatorError> {
    let image = kfd_image(dirs.images.path());
    let ids: Vec<u32> = (0..=image.num_of_gpus)
        .map(|i| common::KFD_ID + i)
        .collect();
    emulator.restore(pid, &ids, &vmas_of(&image))
}

fn logged(lines: &[(Level, String)], level: Level, needle: &str) -> bool {
    lines.iter().any(|(l, t)| *l == level && t.contains(needle))
}

/// A parallel round trip on `gpus` GPUs: the task hands off, the worker
/// copies every GPU, the process resumes with its checkpointed contents.
fn parallel_round_trip(gpus: usize) {
    let sim = Sim::synthetic(gpus, SimConfig::default()).unwrap();
    let app = launch(&sim, &TF, 2);
    let dirs = Dirs::new();
    let (pid, expected, emulator) = checkpoint(&sim, app, &dirs, |_| {});
    let capture = Capture::start();
    let task = restore(&emulator, &dirs, pid).expect("restore");
    let lines = capture.lines();
    drop(capture);
    assert!(
        logged(&lines, Level::Info, "parallel restore enabled"),
        "{lines:#?}"
    );
    assert!(
        logged(&lines, Level::Info, "handed to CRIU's main process"),
        "{lines:#?}"
    );
    let copied = lines
        .iter()
        .find(|(_, t)| t.contains("parallel restore: file 1:") && t.contains("bytes of"))
        .unwrap_or_else(|| panic!("the worker copied nothing: {lines:#?}"));
    let restored = task.plugin.restorer().expect("restorer").restored();
    assert_eq!(restored.len(), 1);
    assert!(restored[0].content_bytes > 0);
    assert!(
        copied
            .1
            .contains(&format!("{} bytes", restored[0].content_bytes)),
        "the worker copied every byte the task handed off: {}",
        copied.1
    );
    assert!(!lines.iter().any(|(l, _)| *l == Level::Error), "{lines:#?}");
    assert_eq!(task.resume_answer, 0);
    Workload::verify(&sim, pid, &expected).expect("restored contents match the checkpoint");
    Workload::attach(&sim, pid)
        .step()
        .expect("restored process runs");
}

#[test]
fn one_gpu_is_restored_by_the_main_process() {
    parallel_round_trip(1);
}

#[test]
fn several_gpus_are_restored_with_per_gpu_offsets() {
    // With the C plugin's running offset the second and third GPUs would
    // start inside (or past) their pages files.
    parallel_round_trip(3);
}

#[test]
fn a_failed_copy_in_the_worker_fails_resume_and_keeps_queues_stopped() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let app = launch(&sim, &TF, 1);
    let dirs = Dirs::new();
    let (pid, _, emulator) = checkpoint(&sim, app, &dirs, |_| {});
    // The task copies nothing in parallel mode: the short copy hits the
    // worker.
    sim.inject("SDMA_SHORT".parse::<FaultSpec>().unwrap());
    let capture = Capture::start();
    let task = restore(&emulator, &dirs, pid).expect("the task itself restores");
    let lines = capture.lines();
    drop(capture);
    assert!(sim.pending_faults().is_empty(), "the fault fired");
    assert!(
        task.resume_answer < 0 && task.resume_answer != -libc::ENOTSUP,
        "resume answered {}",
        task.resume_answer
    );
    assert!(
        logged(&lines, Level::Error, "parallel restore of file 1 failed"),
        "{lines:#?}"
    );
    assert!(
        logged(&lines, Level::Error, "GPU queues are NOT resumed"),
        "{lines:#?}"
    );
    let state = sim
        .kfd_state(pid)
        .expect("the restored process has KFD state");
    assert_eq!(state.resumed, 0, "CRIU_OP RESUME must not run");
    assert!(!state.queues_running());
}

#[test]
fn criu_without_post_forking_restores_in_the_task() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let app = launch(&sim, &TF, 1);
    let dirs = Dirs::new();
    let (pid, expected, emulator) = checkpoint(&sim, app, &dirs, |c| c.max_hooks = 12);
    let capture = Capture::start();
    let task = restore(&emulator, &dirs, pid).expect("restore");
    let lines = capture.lines();
    drop(capture);
    assert!(
        logged(&lines, Level::Info, "no POST_FORKING hook"),
        "{lines:#?}"
    );
    assert!(!logged(
        &lines,
        Level::Info,
        "handed to CRIU's main process"
    ));
    assert_eq!(task.resume_answer, 0);
    Workload::verify(&sim, pid, &expected).expect("restored contents match");
    drop(task);
    sim.exit_process(pid).unwrap();

    // The same short copy now fails the task's own RESTORE_EXT_FILE.
    sim.inject("SDMA_SHORT".parse::<FaultSpec>().unwrap());
    match restore(&emulator, &dirs, pid) {
        Err(EmulatorError::Hook { hook, errno, .. }) => {
            assert_eq!(hook, "RESTORE_EXT_FILE");
            assert!(errno < 0 && errno != -libc::ENOTSUP, "errno {errno}");
        }
        other => panic!("expected RESTORE_EXT_FILE to fail, got {other:?}"),
    }
}

#[test]
fn a_tree_of_processes_restores_in_the_tasks() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let root = launch(&sim, &Profile::Basic, 1);
    let child = launch(&sim, &TF, 1);
    let expected = [root.describe().unwrap(), child.describe().unwrap()];
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let (root_files, root_ids) = gpu_files_from(&root, 1);
    let (child_files, child_ids) = gpu_files_from(&child, 11);
    emulator
        .dump_tree(&[
            TaskToDump {
                pid: root.pid(),
                files: root_files,
                vmas: device_vmas(&sim),
            },
            TaskToDump {
                pid: child.pid(),
                files: child_files,
                vmas: device_vmas(&sim),
            },
        ])
        .expect("dump of the tree");
    let pids = [root.pid(), child.pid()];
    root.exit().unwrap();
    child.exit().unwrap();
    let tasks = [
        TaskToRestore {
            pid: pids[0],
            file_ids: root_ids,
            vmas: vmas_of(&kfd_image_of(dirs.images.path(), 1)),
        },
        TaskToRestore {
            pid: pids[1],
            file_ids: child_ids,
            vmas: vmas_of(&kfd_image_of(dirs.images.path(), 11)),
        },
    ];
    let capture = Capture::start();
    let restored = emulator.restore_tree(&tasks).expect("restore of the tree");
    let lines = capture.lines();
    drop(capture);
    assert!(
        logged(&lines, Level::Info, "more than one process"),
        "{lines:#?}"
    );
    assert!(!logged(
        &lines,
        Level::Info,
        "handed to CRIU's main process"
    ));
    for (task, (pid, expected)) in restored.iter().zip(pids.iter().zip(&expected)) {
        assert_eq!(task.resume_answer, 0);
        Workload::verify(&sim, *pid, expected).expect("restored contents match");
    }
    drop(restored);
    for pid in pids {
        sim.exit_process(pid).unwrap();
    }

    sim.inject("SDMA_SHORT".parse::<FaultSpec>().unwrap());
    match emulator.restore_tree(&tasks) {
        Err(EmulatorError::Hook { hook, .. }) => assert_eq!(hook, "RESTORE_EXT_FILE"),
        other => panic!("expected RESTORE_EXT_FILE to fail, got {other:?}"),
    }
}

/// A worker over the images of `dirs`, started as POST_FORKING would.
fn started_worker(sim: &Sim, dirs: &Dirs) -> ParallelRestore {
    let mut parallel = ParallelRestore::plan(&ParallelFacts {
        calls_post_forking: true,
        single_process: Some(true),
        streaming: false,
        run_id: None,
        turned_off: false,
    })
    .expect("the socket can be bound");
    let main = sim.spawn_process().unwrap();
    parallel
        .start(
            Copier {
                driver: std::sync::Arc::new(sim.driver(main)),
                images: amdgpu_image::DirStore::open_dir(dirs.images.path()).unwrap(),
            },
            Options::default(),
        )
        .expect("worker starts");
    parallel
}

fn empty_command(id: u32) -> Command {
    Command {
        id,
        gpus: vec![],
        entries: vec![],
        fd_count: 0,
        chunk_size: 0,
    }
}

#[test]
fn commands_without_bos_do_not_stop_the_worker() {
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let dirs = Dirs::new();
    let mut parallel = started_worker(&sim, &dirs);
    for id in [3, 4, 5] {
        send_command(parallel.socket(), &empty_command(id), &[]).expect("sent");
    }
    let report = parallel.finish().expect("was running").expect("joined");
    let ids: Vec<Option<u32>> = report.commands.iter().map(|c| c.id).collect();
    assert_eq!(ids, [Some(3), Some(4), Some(5)]);
    assert_eq!(report.failures().count(), 0);
    assert!(parallel.finish().is_none(), "stopped once");
}

#[test]
fn cross_gpu_offsets_and_malformed_commands_are_refused_and_the_worker_goes_on() {
    let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
    let app = launch(&sim, &TF, 1);
    let dirs = Dirs::new();
    let (_, _, _) = checkpoint(&sim, app, &dirs, |_| {});
    let image = kfd_image(dirs.images.path());
    let gpus: Vec<_> = image
        .device_entries
        .iter()
        .filter(|d| d.gpu_id != 0)
        .collect();
    let quiet = Capture::start();
    let mut parallel = started_worker(&sim, &dirs);

    // The C plugin's command: offsets summed across GPUs. Each BO gets a
    // memfd standing in for its dma-buf (the copy never starts).
    let mut command = Command {
        id: common::KFD_ID,
        gpus: gpus
            .iter()
            .map(|d| GpuRoute {
                user_gpu_id: d.gpu_id,
                render_minor: d.drm_render_minor,
            })
            .collect(),
        entries: Vec::new(),
        fd_count: 0,
        chunk_size: image.chunk_size.unwrap_or(0),
    };
    let mut running = 0u64;
    for d in &gpus {
        for (i, bo) in image.bo_entries.iter().enumerate() {
            let content = bo.alloc_flags
                & (amdgpu_image::flags::KFD_VRAM | amdgpu_image::flags::KFD_GTT)
                != 0;
            if bo.gpu_id != d.gpu_id || !content {
                continue;
            }
            command.entries.push(Entry {
                gpu_id: d.gpu_id,
                fd_index: command.fd_count,
                bo_index: i as u32,
                offset: running,
                size: bo.size,
                checksum: None,
            });
            command.fd_count += 1;
            running += bo.size;
        }
    }
    let stand_ins: Vec<std::fs::File> = (0..command.fd_count)
        .map(|_| tempfile::tempfile().unwrap())
        .collect();
    let fds: Vec<_> = stand_ins.iter().map(|f| f.as_fd()).collect();
    send_command(parallel.socket(), &command, &fds).expect("sent");

    // A header that stops half-way, then garbage.
    let addr = SocketAddr::from_abstract_name(parallel.socket().as_str().as_bytes()).unwrap();
    let mut half = UnixStream::connect_addr(&addr).unwrap();
    half.write_all(&command.encode()[..20]).unwrap();
    drop(half);
    let mut garbage = UnixStream::connect_addr(&addr).unwrap();
    garbage.write_all(&[0xa5; 64]).unwrap();
    drop(garbage);
    // Still served afterwards.
    send_command(parallel.socket(), &empty_command(9), &[]).expect("sent");

    let report = parallel.finish().expect("was running").expect("joined");
    drop(quiet);
    assert_eq!(report.commands.len(), 4, "{report:#?}");
    let failures: Vec<String> = report.failures().map(|(_, e)| e.to_string()).collect();
    assert_eq!(failures.len(), 3, "{failures:#?}");
    assert!(
        failures[0].contains("of its pages file, which holds it at 0x0"),
        "the second GPU's first BO is refused: {}",
        failures[0]
    );
    assert!(failures[1].contains("header"), "{}", failures[1]);
    assert!(failures[2].contains("magic"), "{}", failures[2]);
    assert_eq!(report.commands[3].id, Some(9));
    assert!(report.commands[3].result.is_ok());
}
