//! Times a restore of one simulated process with parallel restore and with
//! the in-task restore, through the plugin's hooks in CRIU's order and roles
//! (the `kfd-sim` machine, a real images directory).
//!
//! ```sh
//! cargo run --release -p criu-host-emulator --example parallel_timing -- [GPUS] [MIB_PER_GPU] [parallel-first]
//! ```
//!
//! Reports, per mode, how long the task spends in `RESTORE_EXT_FILE` (what
//! parallel restore takes off the task's critical path), how long
//! `RESUME_DEVICES_LATE` waits for the worker, and the whole restore. Both
//! runs restore the same images and are verified against the checkpoint.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use amdgpu_checkpoint::options::Options;
use amdgpu_checkpoint::parallel::ParallelFacts;
use amdgpu_checkpoint::restore::Restored;
use criu_host_emulator::{CriuEmulator, EmulatedHost, EmulatorConfig, TaskFile};
use criu_plugin_amdgpu::abi::Stage;
use criu_plugin_amdgpu::hooks::{Plugin, PluginConfig};
use criu_plugin_amdgpu::log::Capture;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{ProcessConfig, Sim, SimConfig};

struct Timing {
    ext_file: Duration,
    resume: Duration,
    total: Duration,
    bytes: u64,
}

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpus = arg(1, 2) as usize;
    let mib = arg(2, 256);
    let sim = Sim::synthetic(gpus, SimConfig::default())?;
    // Six VRAM BOs of this size per GPU, plus 4 MiB of GTT and small BOs.
    let bo_bytes = (mib.saturating_sub(4) << 20) / 6;
    let mut app = Workload::launch(&sim, &Profile::TensorFlowLike { bo_bytes })?;
    app.step()?;
    let expected = app.describe()?;
    let images = tempfile::tempdir()?;
    let shm = tempfile::tempdir()?;
    let quiet = Capture::start();

    let mut files = vec![TaskFile {
        fd: app.kfd_fd().ok_or("no kfd fd")?,
        id: 1,
    }];
    for (i, fd) in app.render_fds().into_iter().enumerate() {
        files.push(TaskFile {
            fd,
            id: 2 + i as u32,
        });
    }
    let ids: Vec<u32> = files.iter().map(|f| f.id).collect();
    let mut vmas = vec![criu_host_emulator::DeviceVma {
        path: "/dev/kfd".into(),
        addr: 0,
        pgoff: 0,
    }];
    for gpu in sim.gpus() {
        vmas.push(criu_host_emulator::DeviceVma {
            path: sim.render_path(gpu.gpu_id).ok_or("render path")?,
            addr: 0,
            pgoff: 0,
        });
    }
    let emulator = CriuEmulator::new(sim.clone(), images.path(), EmulatorConfig::new(shm.path()));
    let started = Instant::now();
    emulator.dump(app.pid(), &files, &vmas)?;
    let dump = started.elapsed();
    drop(files);
    let pid = app.pid();
    app.exit()?;

    let mut results = Vec::new();
    // Third argument `parallel-first` swaps the order (page-cache effects).
    let order = if std::env::args().nth(3).as_deref() == Some("parallel-first") {
        [true, false]
    } else {
        [false, true]
    };
    for parallel in order {
        let task = sim.spawn_process_with(ProcessConfig {
            pid: Some(pid),
            ..ProcessConfig::default()
        })?;
        let main = sim.spawn_process()?;
        let host = EmulatedHost::new(images.path(), Some(200)).restoring(
            ParallelFacts {
                calls_post_forking: parallel,
                single_process: Some(true),
                streaming: false,
                run_id: None,
                turned_off: false,
            },
            sim.driver(main),
        );
        let config = PluginConfig {
            topology_root: sim.sysfs_root(),
            shm_dir: shm.path().to_path_buf(),
            has_dump_devices_late: true,
            has_restore_retry: true,
        };
        let started = Instant::now();
        let mut main_plugin = Plugin::init(
            sim.driver(main),
            host.clone(),
            Stage::Restore,
            config,
            Options::default(),
        );
        main_plugin.restore_init();
        let mut task_plugin = main_plugin.forked_task(sim.driver(task), host);
        if parallel && main_plugin.post_forking() != 0 {
            return Err("POST_FORKING failed".into());
        }
        let in_task = Instant::now();
        let mut opened: Vec<OwnedFd> = Vec::new();
        let mut waiting = ids.clone();
        while !waiting.is_empty() {
            let mut still = Vec::new();
            for &id in &waiting {
                match task_plugin.restore_file(id as i32) {
                    Ok(Restored::File(fd)) => opened.push(fd),
                    Ok(Restored::WaitForKfd | Restored::WaitForBuffer) => still.push(id),
                    other => return Err(format!("RESTORE_EXT_FILE {id}: {other:?}").into()),
                }
            }
            if still.len() == waiting.len() {
                return Err("no progress".into());
            }
            waiting = still;
        }
        let ext_file = in_task.elapsed();
        let resuming = Instant::now();
        let answer = main_plugin.resume_devices_late(pid.0 as i32);
        let resume = resuming.elapsed();
        let total = started.elapsed();
        if answer != 0 {
            return Err(format!("RESUME_DEVICES_LATE answered {answer}").into());
        }
        let bytes = task_plugin
            .restorer()
            .map(|r| r.restored().iter().map(|k| k.content_bytes).sum())
            .unwrap_or(0);
        main_plugin.exit(0);
        Workload::verify(&sim, pid, &expected)?;
        drop(opened);
        drop(task_plugin);
        sim.exit_process(task)?;
        sim.exit_process(main)?;
        results.push((
            parallel,
            Timing {
                ext_file,
                resume,
                total,
                bytes,
            },
        ));
    }
    drop(quiet);
    println!(
        "{gpus} GPUs x {mib} MiB (dump {:.1} ms)",
        dump.as_secs_f64() * 1e3
    );
    for (parallel, t) in results {
        println!(
            "{:<9} {:>6.1} MiB  RESTORE_EXT_FILE (task) {:>8.1} ms  RESUME_DEVICES_LATE {:>8.1} ms  total {:>8.1} ms",
            if parallel { "parallel" } else { "in-task" },
            t.bytes as f64 / (1 << 20) as f64,
            t.ext_file.as_secs_f64() * 1e3,
            t.resume.as_secs_f64() * 1e3,
            t.total.as_secs_f64() * 1e3,
        );
    }
    Ok(())
}
