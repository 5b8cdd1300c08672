//! The round trip itself: stage the machines, the workload and its
//! shared buffer, checkpoint the process tree through the emulated CRIU,
//! check the restore machine, restore the tree and hand the restored
//! processes to verification, writing every outcome into the [`Report`].

use std::os::fd::AsFd;
use std::time::Instant;

use amdgpu_checkpoint::options::Options;
use amdgpu_image::flags;
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::renumbered;
use criu_host_emulator::{
    CriuEmulator, DeviceVma, EmulatorConfig, TaskFile, TaskToDump, TaskToRestore,
};
use indicatif::ProgressBar;

use super::args::Args;
use super::budget;
use super::exchange::exchange_buffer;
use super::images::{images_dir, read_kfd_images};
use super::machine::{resolve, simulate, Machine};
use super::progress::{bytes_read, pages_bytes, stage, with_progress};
use super::report::{checkpoint_phase, phase_line, restore_phase, Report};
use super::verification::{checkpoint_failed, image_set, resume_problems, run_after_restore};
use super::workload::{launch, WorkloadKind, DEFAULT_SIZE};
use super::{Stop, STEPS_AFTER, STEPS_BEFORE};
use crate::cmd::{check, map};

/// Builds the simulated `machine`, its temporary sysfs tree (the directory
/// above its `sys/class/kfd/kfd/topology`) registered for removal if a
/// signal stops the run.
fn simulate_removed_on_signal(machine: &Machine) -> Result<kfd_sim::Sim, Stop> {
    super::cleanup::removed_on_signal(
        || simulate(machine),
        |sim| {
            let root = sim.sysfs_root().ancestors().nth(5)?.to_owned();
            root.file_name()?
                .to_string_lossy()
                .starts_with("kfd-sim-sysfs")
                .then_some(root)
        },
    )
}

/// The tasks of one `criu dump` of the whole tree, the first process the
/// root, each with its GPU files and the dma-bufs it holds.
fn dump_tree<'a>(
    processes: &'a [super::workload::Process],
    exchange: Option<&'a super::exchange::Exchange>,
    sim: &kfd_sim::Sim,
) -> Result<Vec<TaskToDump<'a>>, Stop> {
    let mut tree = Vec::new();
    for p in processes {
        let Some(app) = &p.app else { continue };
        let Some(kfd) = app.kfd_fd() else {
            return Err(Stop::Failed("the workload has no /dev/kfd fd".into()));
        };
        let mut files = vec![TaskFile {
            fd: kfd,
            id: p.file_ids[0],
        }];
        for (fd, &id) in app.render_fds().into_iter().zip(&p.file_ids[1..]) {
            files.push(TaskFile { fd, id });
        }
        if let Some(exchange) = exchange {
            for (_, fd, id) in exchange.held.iter().filter(|(pid, ..)| *pid == p.pid) {
                files.push(TaskFile {
                    fd: fd.as_fd(),
                    id: *id,
                });
            }
        }
        tree.push(TaskToDump {
            pid: p.pid,
            files,
            vmas: DeviceVma::offered_at_dump(sim),
        });
    }
    Ok(tree)
}

/// Stops with every reason when `target` cannot restore a process that
/// uses every GPU of `origin` (the checks the plugin's restore makes, with
/// the `KFD_*_CHECK` switches of the environment).
fn refuse_early(
    origin: &kfd_sim::Sim,
    origin_label: &str,
    target: &kfd_sim::Sim,
    target_label: &str,
    checks: &amdgpu_topology::options::CheckOptions,
    report: &mut Report,
) -> Result<(), Stop> {
    let from = DeviceTopology::from_system(origin.topology())
        .map_err(|e| Stop::Usage(format!("{origin_label}: {e}")))?;
    let to = DeviceTopology::from_system(target.topology())
        .map_err(|e| Stop::Usage(format!("{target_label}: {e}")))?;
    let result = map::map_with(&from, &to, checks, &Default::default()).map_err(Stop::Usage)?;
    if result.compatible {
        return Ok(());
    }
    report.topologies = Some(super::report::Topologies {
        checkpoint: origin_label.to_owned(),
        restore: target_label.to_owned(),
    });
    report.reasons = map::reason_lines(&result.reasons);
    report.reason_details = result.reasons;
    report.images.clear();
    Err(Stop::Refused(format!(
        "{target_label} cannot restore a checkpoint taken on {origin_label} ({}), so nothing \
         ran; give another --restore-topology (`amdgpu-criu map --from {origin_label} --to \
         {target_label}` shows the same answer)",
        crate::out::plural(report.reasons.len() as u64, "reason")
    )))
}

pub(super) fn execute(args: &Args, bar: &ProgressBar, report: &mut Report) -> Result<(), Stop> {
    // As the plugin reads them: a bad KFD_DEVICE_MAP or KFD_DEDUP stops.
    let (options, invalid) = Options::default()
        .read(|name| std::env::var(name).ok(), &[])
        .map_err(|e| Stop::Usage(e.to_string()))?;
    for warning in &invalid {
        eprintln!("amdgpu-criu demo: warning: {warning}");
    }
    report.workload = args.workload.name().to_owned();
    let origin = resolve(&args.topology)?;
    let same_machine = args.restore_topology.as_deref() == Some(args.topology.as_str());
    let target = match &args.restore_topology {
        Some(spec) if !same_machine => Some(resolve(spec)?),
        Some(_) => None,
        None => Some(Machine {
            label: format!("{} renumbered (seed {})", origin.label, args.seed),
            system: renumbered(&origin.system, args.seed),
        }),
    };
    let images = images_dir(args)?;
    report.images = images.describe();
    report.image_dir = images.kept().map(|p| p.display().to_string());
    let shm = super::cleanup::temporary_dir(".tmp").map_err(Stop::Usage)?;

    bar.set_message("building the simulated machines");
    let origin_sim = simulate_removed_on_signal(&origin)?;
    let gpus = origin_sim.gpus().len() as u64;
    let profiles = args
        .workload
        .profiles(args.size, gpus)
        .map_err(|reason| Stop::Usage(format!("{}: {reason}", origin.label)))?;
    let planned = match args.size {
        Some(size) => size,
        None if args.workload == WorkloadKind::Basic => args.workload.minimum_bytes(gpus),
        None => DEFAULT_SIZE,
    };
    budget::judge(&budget::measure(planned, gpus, same_machine, images.path()))
        .map_err(Stop::Usage)?;

    let target_sim = match &target {
        Some(machine) => Some(simulate_removed_on_signal(machine)?),
        None => None,
    };
    if let (Some(sim), Some(machine)) = (&target_sim, &target) {
        // The workload's processes see every GPU, so their images record
        // the whole machine: whether the restore machine can take them is
        // known now, before anything runs.
        refuse_early(
            &origin_sim,
            &origin.label,
            sim,
            &machine.label,
            options.checks(),
            report,
        )?;
    }

    stage(bar, "launching the workload");
    let mut processes = launch(&origin_sim, &profiles)?;
    // Several processes exchange a DRM buffer by dma-buf, as a DDP group
    // does: the root's render-node BO, imported and held by the others.
    let exchange = if processes.len() > 1 {
        Some(exchange_buffer(&mut processes)?)
    } else {
        None
    };
    let restore_sim = &target_sim.clone().unwrap_or_else(|| origin_sim.clone());
    let restore_label = target.as_ref().map_or_else(
        || format!("{} (the same machine)", origin.label),
        |m| m.label.clone(),
    );
    report.lines.push(format!(
        "checkpoint on {} ({}), restore on {} ({})",
        origin.label,
        crate::out::plural(gpus, "GPU"),
        restore_label,
        crate::out::plural(restore_sim.gpus().len() as u64, "GPU")
    ));
    report.topologies = Some(super::report::Topologies {
        checkpoint: origin.label.clone(),
        restore: restore_label.clone(),
    });
    report.lines.push(format!(
        "workload: {}, {} process{}, {STEPS_BEFORE} steps before the checkpoint, \
         {STEPS_AFTER} after the restore",
        args.workload.name(),
        processes.len(),
        if processes.len() == 1 { "" } else { "es" }
    ));

    // Faults fire once, at their first occurrence on the way from dump to
    // restore: armed on the checkpointing machine, moved to the restoring
    // one when the dump did not trigger them.
    for spec in &args.inject {
        origin_sim.inject(spec.clone());
    }

    stage(bar, "checkpointing");
    let config = {
        let mut c = EmulatorConfig::new(shm.path());
        c.options = options;
        c
    };
    let dumper = CriuEmulator::new(origin_sim.clone(), images.path(), config.clone());
    // One `criu dump` of the whole tree: the first process is the root.
    let tree = dump_tree(&processes, exchange.as_ref(), &origin_sim)?;
    let total: u64 = processes
        .iter()
        .flat_map(|p| &p.expected.bos)
        .filter(|b| b.flags & (flags::KFD_VRAM | flags::KFD_GTT) != 0)
        .map(|b| b.size)
        .sum();
    let started = Instant::now();
    let dumped = with_progress(
        bar,
        "checkpointing, pages files",
        total,
        || pages_bytes(images.path()),
        || dumper.dump_tree(&tree),
    );
    let dump_time = started.elapsed();
    drop(tree);
    // CRIU's dump process ends with the dump: whatever the plugin held
    // (render files, dma-bufs of the BOs) goes with it, so the application's
    // BOs are freed when it ends too.
    drop(dumper);
    if let Err(e) = dumped {
        let error = e.to_string();
        let fired = super::verification::fired(&args.inject, &origin_sim.pending_faults());
        return Err(checkpoint_failed(
            &error,
            &mut processes,
            images.path(),
            report,
            &fired,
        ));
    }
    let mut kfd_images = read_kfd_images(images.path())?;
    let phase = checkpoint_phase(&kfd_images, images.path(), dump_time);
    report.lines.push(phase_line("checkpoint:", &phase));
    report.checkpoint = Some(phase);

    // `--incremental STEPS`: the processes run on, and a second checkpoint
    // into `incremental/` (its `parent` link naming the first, as `criu dump
    // --prev-images-dir ..` makes) writes only the chunks that changed; the
    // restore comes from that chain.
    let mut restore_dir = images.path().to_path_buf();
    if let Some(steps) = args.incremental {
        stage(bar, "running on for the incremental checkpoint");
        for p in &mut processes {
            if let Some(app) = p.app.as_mut() {
                let ran = (0..steps)
                    .try_for_each(|_| app.step())
                    .and_then(|()| app.describe());
                p.expected = ran.map_err(|e| {
                    Stop::Failed(format!(
                        "pid {} cannot run on after its checkpoint: {e}",
                        p.pid
                    ))
                })?;
            }
        }
        let dir = images.path().join("incremental");
        std::fs::create_dir(&dir)
            .and_then(|()| std::os::unix::fs::symlink("..", dir.join("parent")))
            .map_err(|e| Stop::Failed(format!("{}: {e}", dir.display())))?;
        stage(bar, "incremental checkpoint");
        let dumper = CriuEmulator::new(origin_sim.clone(), &dir, config.clone());
        let tree = dump_tree(&processes, exchange.as_ref(), &origin_sim)?;
        let started = Instant::now();
        let dumped = dumper.dump_tree(&tree);
        let time = started.elapsed();
        drop(tree);
        drop(dumper);
        if let Err(e) = dumped {
            let error = format!("incremental checkpoint: {e}");
            let fired = super::verification::fired(&args.inject, &origin_sim.pending_faults());
            return Err(checkpoint_failed(
                &error,
                &mut processes,
                &dir,
                report,
                &fired,
            ));
        }
        kfd_images = read_kfd_images(&dir)?;
        let phase = checkpoint_phase(&kfd_images, &dir, time);
        report.lines.push(format!(
            "incremental checkpoint after {steps} more steps, the first as its parent: {}",
            phase.written_share()
        ));
        report.lines.push(phase_line("incremental:", &phase));
        report.incremental = Some(phase);
        restore_dir = dir;
    }

    if let Some(sim) = &target_sim {
        for spec in origin_sim.pending_faults() {
            sim.inject(spec);
        }
        origin_sim.clear_faults();
    }

    stage(bar, "checking the restore machine");
    let local = DeviceTopology::from_system(restore_sim.topology())
        .map_err(|e| Stop::Usage(format!("{restore_label}: {e}")))?;
    let checkpointed = check::read_checkpointed(&restore_dir).map_err(Stop::Failed)?;
    let verdicts =
        check::check(&checkpointed, &local, config.options.checks()).map_err(Stop::Failed)?;
    for v in verdicts.iter().filter(|v| !v.result.compatible) {
        report.reasons.extend(map::reason_lines(&v.result.reasons));
        report
            .reason_details
            .extend(v.result.reasons.iter().cloned());
    }

    stage(bar, "restoring");
    let restorer = CriuEmulator::new(restore_sim.clone(), &restore_dir, config);
    // One `criu restore` of the whole tree.
    let tree: Vec<TaskToRestore> = processes
        .iter()
        .map(|p| TaskToRestore {
            pid: p.pid,
            file_ids: p.file_ids.clone(),
            vmas: kfd_images
                .iter()
                .filter(|(id, _)| p.file_ids.contains(id))
                .flat_map(|(_, image)| DeviceVma::of_kfd_image(image))
                .collect(),
        })
        .collect();
    // The checkpointed processes run on for a few steps (as with `criu dump
    // --leave-running`), which says where a restored process must arrive,
    // then end, their memory with them (kfd-sim keeps its addresses
    // reserved, out of this host process's other threads' hands, until the
    // restore maps it back at the same addresses).
    for p in &mut processes {
        if let Some(mut app) = p.app.take() {
            let ran_on = (0..STEPS_AFTER)
                .try_for_each(|_| app.step())
                .and_then(|()| app.fingerprint());
            p.expected_after = Some(ran_on.map_err(|e| {
                Stop::Failed(format!(
                    "pid {} cannot run on after its checkpoint: {e}",
                    p.pid
                ))
            })?);
            app.exit()
                .map_err(|e| Stop::Failed(format!("ending the checkpointed process: {e}")))?;
        }
    }
    // The checkpointing machine's simulated kernel keeps a BO once exported
    // (the dump's dma-bufs) for as long as it lives, as amdgpu keeps a GEM
    // object a dma-buf refers to. Restoring on another machine, it is no
    // longer needed: dropping it frees the application's BOs before the
    // restore creates its own, so the run holds one copy, not two.
    if target_sim.is_some() {
        drop(origin_sim);
    }
    let started = Instant::now();
    let read_before = bytes_read();
    let restored = with_progress(
        bar,
        "restoring, read from the images",
        total,
        || bytes_read().saturating_sub(read_before),
        || restorer.restore_tree(&tree),
    );
    let restore_time = started.elapsed();
    let tasks = match restored {
        Ok(tasks) => tasks,
        Err(e) => {
            let incompatible = if report.reasons.is_empty() {
                String::new()
            } else {
                format!(
                    " ({restore_label} cannot take this checkpoint: {})",
                    crate::out::plural(report.reasons.len() as u64, "reason")
                )
            };
            let left: Vec<String> = processes
                .iter()
                .filter(|p| restore_sim.process_alive(p.pid))
                .map(|p| p.pid.to_string())
                .collect();
            let left = if left.is_empty() {
                format!("no process was left behind on {restore_label}")
            } else {
                format!(
                    "pids {} are left half-restored on {restore_label}",
                    left.join(", ")
                )
            };
            let e = super::verification::named_errnos(&e.to_string());
            report
                .lines
                .push(format!("restore failed: {e}{incompatible}; {left}"));
            let pending = restore_sim.pending_faults();
            for spec in args.inject.iter().filter(|s| !pending.contains(s)) {
                report.lines.push(format!(
                    "injected fault {spec} fired: that call failed with {}, as rehearsed",
                    spec.errno
                ));
            }
            return Err(Stop::Failed(format!("restore failed: {e}")));
        }
    };
    let phase = restore_phase(&tasks, restore_time);
    report.lines.push(phase_line("restore:   ", &phase));
    report.restore = Some(phase);
    for task in &tasks {
        if let Some(restorer) = task.plugin.restorer() {
            for kfd in restorer.restored() {
                report
                    .gpu_map
                    .extend(kfd.gpu_map.iter().map(|(k, v)| (*k, *v)));
            }
        }
    }
    let map = super::report::gpu_map_text(&report.gpu_map);
    report.lines.push(map);

    stage(bar, "resuming");
    let mut problems = resume_problems(&tasks);
    stage(bar, "running after the restore");
    problems.extend(run_after_restore(restore_sim, &mut processes));
    if let Some(exchange) = &exchange {
        problems.extend(exchange.problems(restore_sim, &processes, &tasks));
    }
    stage(bar, "verifying the image set");
    let read_before = bytes_read();
    let written = super::report::pages_on_disk(&restore_dir);
    let set_line = match with_progress(
        bar,
        "verifying, checksums read",
        written,
        || bytes_read().saturating_sub(read_before),
        || image_set(&restore_dir),
    ) {
        Ok(line) => line,
        Err(set_problems) => {
            problems.extend(set_problems);
            String::new()
        }
    };
    // A rehearsal whose fault never fired rehearsed nothing: the operation
    // is not called on this path (or not N times), so it is a failure.
    for spec in restore_sim.pending_faults() {
        problems.push(format!(
            "injected fault {spec} never fired: the demo's checkpoint and restore do not \
             call {} {} time{} after the workload started",
            spec.op,
            spec.nth,
            if spec.nth == 1 { "" } else { "s" }
        ));
    }
    drop(tasks);

    if !problems.is_empty() {
        report
            .lines
            .extend(problems.iter().map(|p| format!("problem: {p}")));
        let message = format!(
            "not verified: {} problem{}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
        report.problems = problems;
        return Err(Stop::Failed(message));
    }
    report.verified = true;
    report.lines.push(std::mem::take(&mut report.images));
    let shared = match &exchange {
        Some(exchange) => format!(
            "; a DRM buffer shared by {} processes (imports and dma-buf fds) is one buffer again",
            exchange.imports.len() + 1
        ),
        None => String::new(),
    };
    report.lines.push(format!(
        "verified: same BOs, handles, addresses and contents; {STEPS_AFTER} steps after the \
         restore match an uninterrupted run{shared}; {set_line}"
    ));
    Ok(())
}
