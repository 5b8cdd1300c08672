//! Real CRIU dumps a ROCm process holding simulated GPU state and restores
//! it, with this project's plugin doing the GPU half, on every vendored
//! CRIU release.
//!
//! The test serves simulated machines to host processes
//! ([`kfd_sim::remote::Server::serve_host_processes`]). In private mount
//! namespaces, `/dev/kfd` and the render nodes are stand-in nodes with
//! `/dev/fuse`'s numbers (see `real_criu_guardian.rs`); the application
//! (AMD's thunk, `libhsakmt`, in `real_criu_restore/app.c`) and CRIU run
//! with the interposer in its `KFD_SIM_REMOTE` mode. CRIU's plugin
//! directory holds the shipped plugin and a small test plugin
//! (`real_criu_restore/remote_sk_plugin.c`) that carries the
//! application's connection to the served machine through the dump and
//! the restore (`DUMP_UNIX_SK`, `RESTORE_UNIX_SK`).
//!
//! Each case dumps the application without `--leave-running` (CRIU kills
//! it), restores it with `criu restore -d`, and checks what a user relies
//! on: the heartbeat goes on; every BO holds the bytes it held, as the
//! simulator reads them and as the process reads them through its own
//! mappings; those mappings are the simulator's memory again (a write by
//! the process is seen by the simulator and one by the simulator by the
//! process); its queues resume where the checkpoint stopped them: the SDMA
//! and AQL work the application queued before the dump, held at gates the
//! test opens only after the restore, completes without running again what
//! ran before the dump, a wait on a KFD event that only that work signals
//! ends (CRIU issue 2663's shape), and new SDMA copies and AQL and PM4
//! packets the restored process submits run, their bytes checked by the
//! process (`driver::check_queues`, bounded); and once it is killed the
//! simulator holds nothing of it. A restore that fails half-way leaves no
//! process behind either.
//!
//! What real CRIU does not exercise here: this kernel cannot make a device
//! mapping (no CUSE, DRM, udmabuf or modules), so the application maps its
//! BOs as the simulator's memfds, which CRIU dumps as shared memory, and
//! CRIU never calls `HANDLE_DEVICE_VMA` or `UPDATE_VMA_MAP`; those stay
//! covered by the CRIU host emulator's tests.
//!
//! Needs root, `unshare`, the CRIU builds of `../shared/vendor/criu/build.sh`
//! (`$CRIU_BUILDS`, else `~/.cache/criu-builds`), the plugin `.so`
//! (`$AMDGPU_PLUGIN_SO`, else the newer of `<target>/release` and
//! `<target>/debug`, refused when older than its sources), `cc`,
//! libhsakmt-dev and `/dev/fuse`. Without them it says why and skips; with
//! `CI` set a skip is a failure.

mod common;
#[path = "real_criu_restore/driver.rs"]
mod driver;
use real_criu_harness as harness;

use std::fs;
use std::path::Path;
use std::sync::PoisonError;
use std::time::Duration;

use driver::*;
use kfd_sim::Pid;

/// The setup of a test, or `None` after saying why it cannot run (a
/// failure under `CI`).
fn setup(releases: &[harness::Release], with_c_plugin: bool) -> Option<Setup> {
    match driver::setup(releases, with_c_plugin, common::preload_lib()) {
        Ok(setup) => Some(setup),
        Err(why) => {
            common::skip(&why);
            None
        }
    }
}

/// Dumps as `step` says (CRIU kills the application): the application's
/// processes are gone and the served machine holds nothing of them.
fn dumped(step: &Step<'_>, served: &Served, what: &str) -> App {
    let app = dump(step);
    assert!(
        wait_for(Duration::from_secs(10), || app.all_gone()),
        "{what}: CRIU left the dumped application running"
    );
    served.assert_empty(&format!("{what}, after the dump"));
    app
}

/// One process on `machine`'s first `gpus` GPUs, dumped and restored on the
/// same machine by every release.
fn dump_and_restore(machine: &str, gpus: u32) {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&harness::RELEASES, false) else {
        return;
    };
    for (release, criu) in &setup.criu {
        let what = format!("CRIU {} on {machine}", release.name);
        println!("{what}:");
        let served = Served::builtin(machine);
        let step = Step {
            setup: &setup,
            plugins: setup.plugins.path(),
            criu,
            served: &served,
            gpus,
            mib: 4,
            env: "",
            parent: false,
            netns: false,
            mode: AppMode::Plain,
            args: &[],
        };
        let mut app = dumped(&step, &served, &what);
        let pid = app.pid();
        let restored =
            restore(&mut app, "restore", &step).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(restored, pid, "{what}: CRIU restores the pid");
        let log = app.read("restore.log");
        for line in log.lines().filter(|l| l.contains("amdgpu_plugin: ")) {
            println!("  {line}");
        }
        check_restored(&served, &app, &what);
        finish(&served, &mut app, &what);
        println!("  dumped, restored, verified, nothing left");
    }
}

#[test]
fn one_gpu_process_restores_on_every_release() {
    dump_and_restore("single-gpu", 1);
}

/// Upstream's C plugin beside ours under CRIU criu-dev, on the same
/// simulated process: the C plugin's dump restored by ours, and ours
/// restored by the C plugin, each checked as any restore.
#[test]
fn the_c_plugins_images_restore_with_ours_and_ours_with_the_c_plugin() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[harness::HEAD], true) else {
        return;
    };
    let (_, criu) = &setup.criu[0];
    let c_plugins = setup.c_plugins.as_ref().expect("the C plugin").path();
    for (dumper, restorer, what) in [
        (
            c_plugins,
            setup.plugins.path(),
            "C plugin's dump, our restore",
        ),
        (
            setup.plugins.path(),
            c_plugins,
            "our dump, the C plugin's restore",
        ),
    ] {
        println!("{what}:");
        let served = Served::builtin("single-gpu");
        let mut step = Step {
            setup: &setup,
            plugins: dumper,
            criu,
            served: &served,
            gpus: 1,
            mib: 4,
            env: "",
            parent: false,
            netns: false,
            mode: AppMode::Plain,
            args: &[],
        };
        let mut app = dumped(&step, &served, what);
        if dumper == c_plugins {
            list_c_plugin_in_inventory(&app);
        }
        step.plugins = restorer;
        restore(&mut app, "restore", &step).unwrap_or_else(|e| panic!("{what}: {e}"));
        check_restored(&served, &app, what);
        finish(&served, &mut app, what);
        println!("  dumped, restored, verified, nothing left");
    }

    // An incremental dump of ours leaves unchanged chunks in its parent,
    // which the C plugin cannot read: it refuses the set (its pages file's
    // length header is below its BOs' sizes), as our README says, and the
    // simulator is left with nothing of the attempt.
    let what = "our incremental dump, the C plugin's restore";
    println!("{what}:");
    let served = Served::builtin("single-gpu");
    let mut step = Step {
        setup: &setup,
        plugins: setup.plugins.path(),
        criu,
        served: &served,
        gpus: 1,
        mib: 4,
        env: "",
        parent: true,
        netns: false,
        mode: AppMode::Plain,
        args: &[],
    };
    let mut app = dumped(&step, &served, what);
    step.plugins = c_plugins;
    let restored = restore(&mut app, "restore", &step);
    let log = app.read("restore.log");
    let reason = log
        .lines()
        .find(|l| l.contains("amdgpu_plugin: ") && l.contains("size mismatch"))
        .unwrap_or_else(|| panic!("{what}: the C plugin did not refuse the chain:\n{log}"))
        .to_owned();
    match restored {
        // Copying in the task, the C plugin fails the restore.
        Err(_) => {
            assert!(app.all_gone(), "{what}: no half-restored process is left");
        }
        // Its parallel restore (one process) fails RESUME_DEVICES_LATE,
        // which CRIU only logs: the process runs, its GPU queues stopped.
        Ok(pid) => {
            let state = served.sim.kfd_state(Pid(pid));
            assert!(
                state.as_ref().is_some_and(|s| s.resumed == 0),
                "{what}: the process's GPU queues were resumed on BOs without their bytes: \
                 {state:?}"
            );
            finish(&served, &mut app, what);
        }
    }
    served.assert_empty(&format!("{what}, after the refused restore"));
    println!("  refused: {reason}");
}

/// A process on four GPUs of an XGMI hive whose VRAM BOs are unmapped
/// from the CPU once filled (the `gpu-only` mode of the benches'
/// `real_criu_peer`, as a compute job's device memory is), dumped and
/// restored by each plugin under criu-dev, every byte of every BO
/// compared. Ours restores them all. The C plugin's parallel restore
/// (criu-dev 2cf8f13) reads every GPU's pages file at an offset that
/// counts the BOs of the GPUs before it in its image, runs past the end
/// of the files and drops the read errors: CRIU reports success, the
/// process runs, and the BOs of those GPUs are left as the restore
/// allocated them, zero (benches/README.md, `real_criu_peer`). The test
/// says so when that changes.
#[test]
fn gpu_only_process_on_four_gpus_restores_every_byte() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[harness::HEAD], true) else {
        return;
    };
    let (_, criu) = &setup.criu[0];
    let c_plugins = setup.c_plugins.as_ref().expect("the C plugin").path();
    for (plugins, what) in [(setup.plugins.path(), "ours"), (c_plugins, "the C plugin")] {
        println!("{what}:");
        let served = Served::builtin("mi210-8gpu-2hive");
        let step = Step {
            setup: &setup,
            plugins,
            criu,
            served: &served,
            gpus: 4,
            mib: 4,
            env: "",
            parent: false,
            netns: false,
            mode: AppMode::GpuOnly,
            args: &[],
        };
        let mut app = dumped(&step, &served, what);
        if plugins == c_plugins {
            list_c_plugin_in_inventory(&app);
        }
        restore(&mut app, "restore", &step).unwrap_or_else(|e| panic!("{what}: {e}"));
        let vram = app.procs[0].bos.iter().filter(|b| b.kind == "vram").count();
        assert_eq!(vram, 4, "{what}: a VRAM BO on each GPU");
        if plugins == c_plugins {
            let wrong = bo_mismatches(&served, &app.procs[0]).expect("the restored process");
            assert!(
                !wrong.is_empty()
                    && wrong.iter().all(|w| matches!(
                        w.found,
                        Found::Differs { first: 0, words, zero } if words == w.size / 8 && zero == words
                    )),
                "{what}: the BOs it leaves without their bytes, all zero: {wrong:?}"
            );
            let log = app.read("restore.log");
            assert!(
                log.contains("Unable to read file (read:0"),
                "{what}: it read past the end of a pages file"
            );
            println!("  {} BOs left zero:", wrong.len());
            for w in &wrong {
                println!("    {w}");
            }
        } else {
            check_restored(&served, &app, what);
            println!("  every byte restored");
        }
        finish(&served, &mut app, what);
    }
}

/// One process on both GPUs of a PCIe machine, restored by every release on
/// a machine whose GPUs are numbered differently (gpu_ids, render minors,
/// node order): as the plugin maps them, then pinned the other way round
/// with `KFD_DEVICE_MAP`; and refused by a machine with one GPU, which is
/// left with nothing of the process.
#[test]
fn two_gpu_process_restores_on_a_renumbered_machine() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&harness::RELEASES, false) else {
        return;
    };
    for (release, criu) in &setup.criu {
        let what = format!("CRIU {}", release.name);
        println!("{what}:");
        let here = Served::builtin("pcie-2gpu");
        let there = Served::renumbered("pcie-2gpu", 7);
        let ids = |s: &Served| {
            let mut v: Vec<u32> = s.sim.gpus().iter().map(|g| g.gpu_id).collect();
            v.sort_unstable();
            v
        };
        let minors = |s: &Served| {
            let mut v: Vec<u32> = s.sim.gpus().iter().map(|g| g.render_minor).collect();
            v.sort_unstable();
            v
        };
        assert!(
            ids(&here).iter().all(|id| !ids(&there).contains(id))
                && minors(&here).iter().all(|m| !minors(&there).contains(m)),
            "the renumbered machine has other gpu_ids and render minors"
        );
        fn step<'a>(
            setup: &'a Setup,
            criu: &'a Path,
            served: &'a Served,
            env: &'a str,
        ) -> Step<'a> {
            Step {
                setup,
                plugins: setup.plugins.path(),
                criu,
                served,
                gpus: 2,
                mib: 4,
                env,
                parent: false,
                netns: false,
                mode: AppMode::Plain,
                args: &[],
            }
        }
        let mut app = dump(&step(&setup, criu, &here, ""));
        assert!(
            wait_for(Duration::from_secs(10), || app.all_gone()),
            "{what}: CRIU left the dumped application running"
        );
        here.assert_empty(&format!("{what}, after the dump"));

        // As the plugin maps the GPUs.
        restore(&mut app, "restore", &step(&setup, criu, &there, ""))
            .unwrap_or_else(|e| panic!("{what}, renumbered: {e}"));
        check_restored(&there, &app, &format!("{what}, renumbered"));
        let mapped = gpu_map(&there, &app);
        assert_eq!(
            mapped.iter().map(|m| m.0).collect::<Vec<_>>(),
            ids(&here),
            "{what}: the process still sees its checkpointed gpu_ids"
        );
        let mut local: Vec<u32> = mapped.iter().map(|m| m.1).collect();
        local.sort_unstable();
        assert_eq!(local, ids(&there), "{what}: it runs on the local GPUs");
        println!(
            "  renumbered (minors {:?} -> {:?}): {mapped:x?}",
            minors(&here),
            minors(&there)
        );
        finish(&there, &mut app, &format!("{what}, renumbered"));

        // Pinned the other way round.
        let pinned: Vec<(u32, u32)> = vec![(mapped[0].0, mapped[1].1), (mapped[1].0, mapped[0].1)];
        let env = format!(
            "KFD_DEVICE_MAP={:#x}={:#x},{:#x}={:#x}",
            pinned[0].0, pinned[0].1, pinned[1].0, pinned[1].1
        );
        restore(
            &mut app,
            "restore-pinned",
            &step(&setup, criu, &there, &env),
        )
        .unwrap_or_else(|e| panic!("{what}, pinned: {e}"));
        check_restored(&there, &app, &format!("{what}, pinned"));
        assert_eq!(gpu_map(&there, &app), pinned, "{what}: {env} is followed");
        println!("  pinned with {env}");
        finish(&there, &mut app, &format!("{what}, pinned"));

        // A machine that cannot take both GPUs refuses, naming why.
        let small = Served::builtin("single-gpu");
        let refused = restore(&mut app, "restore-small", &step(&setup, criu, &small, ""));
        let Err(why) = refused else {
            panic!("{what}: a one-GPU machine restored a two-GPU process");
        };
        let log = app.read("restore-small.log");
        let reason = log
            .lines()
            .find(|l| l.contains("amdgpu_plugin: ") && l.contains("Error ("))
            .unwrap_or_else(|| panic!("{what}: the plugin named no reason:\n{why}"));
        assert!(
            reason.contains("GPU"),
            "{what}: the refusal names the GPUs: {reason}"
        );
        assert!(
            app.all_gone(),
            "{what}: a refused restore leaves no half-restored process"
        );
        small.assert_empty(&format!("{what}, after the refused restore"));
        println!("  refused on single-gpu: {reason}");
    }
}

/// An incremental dump (`--prev-images-dir` on a first dump that left the
/// process running) writes only the GPU memory that changed, and every
/// release restores the process from the chain.
#[test]
fn incremental_dump_restores_from_its_chain_on_every_release() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&harness::RELEASES, false) else {
        return;
    };
    for (release, criu) in &setup.criu {
        let what = format!("CRIU {}, incremental", release.name);
        println!("{what}:");
        let served = Served::builtin("single-gpu");
        let step = Step {
            setup: &setup,
            plugins: setup.plugins.path(),
            criu,
            served: &served,
            gpus: 1,
            mib: 8,
            env: "",
            parent: true,
            netns: false,
            mode: AppMode::Plain,
            args: &[],
        };
        let mut app = dump(&step);
        assert_eq!(
            app.read("parent.status").trim(),
            "0",
            "{what}: the first dump:\n{}",
            app.read("parent.log")
        );
        assert!(
            wait_for(Duration::from_secs(10), || app.all_gone()),
            "{what}: CRIU left the dumped application running"
        );
        served.assert_empty(&format!("{what}, after the dump"));
        let (parent, child) = (
            gpu_pages_bytes(&app.path("parent")),
            gpu_pages_bytes(&app.path("images")),
        );
        // The user pointer BO is the process's own memory, which CRIU dumps.
        let filled: u64 = app.procs[0]
            .bos
            .iter()
            .filter(|b| b.kind != "userptr")
            .map(|b| b.size)
            .sum();
        assert!(
            parent >= filled,
            "{what}: the parent holds every VRAM and GTT BO ({parent} bytes)"
        );
        assert!(
            child * 4 < parent,
            "{what}: the incremental dump writes what changed, not everything ({child} of {parent} bytes)"
        );
        restore(&mut app, "restore", &step).unwrap_or_else(|e| panic!("{what}: {e}"));
        check_restored(&served, &app, &what);
        finish(&served, &mut app, &what);
        println!(
            "  parent {parent} bytes, incremental {child} bytes; restored, verified, nothing left"
        );
    }
}

/// A process in a network namespace of its own (a container's usual case)
/// dumped and restored into another one by every release. On CRIU 4.2 and
/// later the plugin's parallel restore would have CRIU's main process copy
/// the BO contents, but the restored task cannot reach its abstract socket
/// from there: the task copies them itself, and says so.
#[test]
fn a_process_in_its_own_network_namespace_restores_on_every_release() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&harness::RELEASES, false) else {
        return;
    };
    for (release, criu) in &setup.criu {
        let what = format!("CRIU {}, own network namespace", release.name);
        println!("{what}:");
        let (served, _socket_dir) = Served::builtin_on_a_path("single-gpu");
        let step = Step {
            setup: &setup,
            plugins: setup.plugins.path(),
            criu,
            served: &served,
            gpus: 1,
            mib: 4,
            env: "",
            parent: false,
            netns: true,
            mode: AppMode::Plain,
            args: &[],
        };
        let mut app = dumped(&step, &served, &what);
        restore(&mut app, "restore", &step).unwrap_or_else(|e| panic!("{what}: {e}"));
        let netns = |pid: u32| fs::read_link(format!("/proc/{pid}/ns/net")).ok();
        assert_ne!(
            netns(app.pid()),
            netns(std::process::id()),
            "{what}: the restored task sits in a network namespace of its own"
        );
        let log = app.read("restore.log");
        if release.hooks >= 13 {
            assert!(
                log.contains("out of reach") && log.contains("contents restored in the task"),
                "{what}: the task restored its BO contents itself:\n{log}"
            );
        }
        check_restored(&served, &app, &what);
        finish(&served, &mut app, &what);
        println!("  restored in its own network namespace, verified, nothing left");
    }
}

/// A two-process tree sharing a buffer through a dma-buf (made on the
/// parent's render node with libdrm, imported on the child's, the dma-buf
/// closed), dumped and restored by every release: both processes run on,
/// both read the buffer's bytes through their own mappings, and their
/// handles are one buffer again.
#[test]
fn a_process_tree_sharing_a_buffer_restores_on_every_release() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&harness::RELEASES, false) else {
        return;
    };
    for (release, criu) in &setup.criu {
        let what = format!("CRIU {}, two processes sharing a buffer", release.name);
        println!("{what}:");
        let served = Served::builtin("single-gpu");
        let step = Step {
            setup: &setup,
            plugins: setup.plugins.path(),
            criu,
            served: &served,
            gpus: 1,
            mib: 4,
            env: "",
            parent: false,
            netns: false,
            mode: AppMode::Share,
            args: &[],
        };
        let mut app = dump(&step);
        assert_eq!(app.procs.len(), 2, "{what}: a parent and its child");
        assert!(
            wait_for(Duration::from_secs(10), || app.all_gone()),
            "{what}: CRIU left the dumped tree running"
        );
        served.assert_empty(&format!("{what}, after the dump"));
        restore(&mut app, "restore", &step).unwrap_or_else(|e| panic!("{what}: {e}"));
        check_restored(&served, &app, &what);
        finish(&served, &mut app, &what);
        println!("  both processes restored, one shared buffer, nothing left");
    }
}

/// CRIU's plugin hook changes of 2026 on a CRIU built with them
/// (`.ci/build-criu-2026-hooks.sh`), with another device plugin beside ours
/// (`criu-plugin-amdgpu/tests/c_host/sibling.c`, which batches: it acts
/// on the pid -1 call ending each per-task loop, and has global work in
/// the broadcast hooks). One GPU process is dumped and restored as on
/// every release; then:
/// * criu#3105: the other plugin hears `CHECKPOINT_DEVICES(-1)` (ours
///   registers no `CHECKPOINT_DEVICES`) and `RESUME_DEVICES_LATE(-1)`,
///   which CRIU's chain gives it only when every plugin before it answered
///   `-ENOTSUP`, ours included when ours comes first;
/// * 66fe7a1dd: `DUMP_DEVICES_LATE`, `RESTORE_INIT` and `POST_FORKING` run
///   both plugins whatever either answers;
/// * ours does its work once: the dumped process is unpaused once, its
///   queues resumed once, and no line of ours is an error.
#[test]
fn criu_2026_hooks_beside_another_plugin() {
    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[harness::HEAD_2026_HOOKS], false) else {
        return;
    };
    let (_, criu) = &setup.criu[0];
    let plugins = tempfile::Builder::new()
        .prefix("real-criu-sibling")
        .tempdir()
        .unwrap();
    for entry in fs::read_dir(setup.plugins.path()).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), plugins.path().join(entry.file_name())).unwrap();
    }
    compile(
        "../criu-plugin-amdgpu/tests/c_host/sibling.c",
        &plugins.path().join("sibling.so"),
        &["-shared", "-fPIC"],
    )
    .unwrap_or_else(|e| panic!("the sibling plugin: {e}"));
    let record = tempfile::NamedTempFile::new().unwrap();
    let env = format!("SIBLING_LOG={}", record.path().display());
    let what = "CRIU with the 2026 hook changes, another plugin beside ours";
    println!("{what}:");
    let served = Served::builtin("single-gpu");
    let step = Step {
        setup: &setup,
        plugins: plugins.path(),
        criu,
        served: &served,
        gpus: 1,
        mib: 4,
        env: &env,
        parent: false,
        netns: false,
        mode: AppMode::Plain,
        args: &[],
    };
    let mut app = dumped(&step, &served, what);
    let pid = app.pid();
    let restored = restore(&mut app, "restore", &step).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(restored, pid, "{what}: CRIU restores the pid");
    check_restored(&served, &app, what);
    finish(&served, &mut app, what);

    let heard = fs::read_to_string(record.path()).unwrap();
    let dump_log = app.read("dump.log");
    let restore_log = app.read("restore.log");
    for call in [
        "SIBLING 11 -1".to_owned(),
        format!("SIBLING 14 {pid}"),
        "SIBLING 13 0".to_owned(),
        "SIBLING 12 0".to_owned(),
        "SIBLING 9 -1".to_owned(),
    ] {
        assert!(
            heard.lines().any(|l| l == call),
            "{what}: the other plugin did not hear `{call}`:\n{heard}"
        );
    }
    // Which plugin CRIU's chain asks first (its readdir order): the first
    // of CRIU's "plugin: `NAME' hook 9" lines of the restore.
    let first_asked = restore_log
        .lines()
        .find_map(|l| {
            let name = l.split("plugin: `").nth(1)?.split('\'').next()?;
            let hook = l.split("' hook ").nth(1)?.split_whitespace().next()?;
            (hook == "9" && (name == "amdgpu_plugin" || name == "sibling")).then_some(name)
        })
        .unwrap_or_else(|| panic!("{what}: no RESUME_DEVICES_LATE in the log:\n{restore_log}"));
    println!("  RESUME_DEVICES_LATE asks {first_asked} first");
    let ours = |log: &str, needle: &str| {
        log.lines()
            .filter(|l| l.contains("amdgpu_plugin: ") && l.contains(needle))
            .count()
    };
    assert_eq!(
        ours(&dump_log, &format!("pid {pid} unpaused")),
        1,
        "{what}: the dumped process is unpaused once:\n{dump_log}"
    );
    assert_eq!(
        ours(&restore_log, &format!("pid {pid}: GPU queues resumed")),
        1,
        "{what}: the queues are resumed once:\n{restore_log}"
    );
    for (name, log) in [("dump", &dump_log), ("restore", &restore_log)] {
        assert!(
            !log.lines()
                .any(|l| l.starts_with("Error") && l.contains("amdgpu_plugin: ")),
            "{what}: our {name} logged an error:\n{log}"
        );
        assert!(
            !log.contains("external plugin failed"),
            "{what}: CRIU saw a plugin fail its late hook:\n{log}"
        );
    }
    println!("  the other plugin heard every pid -1 call and every broadcast; ours worked once");
}

/// A restore whose CRIU is killed half-way, at `RESUME_DEVICES_LATE` (the
/// restored tree stopped at its last step, which goes on without CRIU),
/// leaves no process of the application behind once the test lets go of
/// it, and the simulator then holds nothing of it.
#[test]
fn a_restore_whose_criu_is_killed_half_way_leaves_no_process_behind() {
    use kfd_sim::remote::{RemoteCall, RemoteOp, Server, Verdict};
    use kfd_sim::{Sim, SimConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let _serial = harness::SERIAL
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[harness::HEAD], false) else {
        return;
    };
    let (_, criu) = &setup.criu[0];
    let what = "CRIU killed at RESUME_DEVICES_LATE";
    println!("{what}:");
    let killed = Arc::new(AtomicBool::new(false));
    let seen = killed.clone();
    let observer = Arc::new(move |call: &RemoteCall<'_>| {
        let at = std::mem::offset_of!(kfd_sys::kfd_ioctl_criu_args, op);
        let op = call
            .arg
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        let resume = matches!(call.op, RemoteOp::Ioctl(r) if r == u64::from(kfd_sys::AMDKFD_IOC_CRIU_OP))
            && op == Some(kfd_sys::KFD_CRIU_OP_RESUME);
        if resume && !seen.swap(true, Ordering::SeqCst) {
            return Verdict::Kill;
        }
        Verdict::Run
    });
    let sim = Sim::builtin("single-gpu", SimConfig::default()).expect("the simulated machine");
    let server = Server::new(&sim).expect("serve the machine");
    let served = Served::observed(sim, server, observer);
    let step = Step {
        setup: &setup,
        plugins: setup.plugins.path(),
        criu,
        served: &served,
        gpus: 1,
        mib: 4,
        env: "",
        parent: false,
        netns: false,
        mode: AppMode::Plain,
        args: &[],
    };
    let app = dump(&step);
    assert!(
        wait_for(Duration::from_secs(10), || app.all_gone()),
        "{what}: CRIU left the dumped application running"
    );
    served.assert_empty(&format!("{what}, after the dump"));
    let mut app = app;
    let restored = restore(&mut app, "restore", &step);
    assert!(
        killed.load(Ordering::SeqCst),
        "{what}: CRIU never resumed the process: {restored:?}"
    );
    assert!(restored.is_err(), "{what}: the restore succeeded");
    let pids: Vec<u32> = app.procs.iter().map(|p| p.pid).collect();
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    println!("  restore failed; left half-restored: {left:?}");
    drop(app);
    assert!(
        pids.iter().all(|&p| !alive(p)),
        "{what}: a half-restored process outlives the application: {:?}",
        pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
    );
    served.assert_empty(&format!("{what}, after the application's end"));
    println!("  nothing left");
}

/// Two processes sharing a buffer must both list it: a tree whose record
/// lacks it fails the check rather than passing it unchecked.
#[test]
fn the_sharing_check_fails_when_a_process_lists_no_shared_buffer() {
    let served = Served::builtin("single-gpu");
    let proc_ = |pid: u32, shared: Option<SharedBo>| Proc {
        dir: std::path::PathBuf::new(),
        pid,
        queues: 0,
        events: 0,
        bos: Vec::new(),
        mailbox: 0,
        shared,
        gates: Vec::new(),
        held: None,
    };
    let bo = SharedBo {
        minor: 128,
        handle: 1,
        size: 4096,
    };
    for (parent, child) in [(None, Some(bo)), (Some(bo), None), (None, None)] {
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check_sharing(&served, &proc_(1, parent), &proc_(2, child), "a tree");
        }));
        let message = checked
            .expect_err("the check passed a tree without its records")
            .downcast::<String>()
            .map(|m| *m)
            .unwrap_or_default();
        assert!(
            message.contains("lists no shared buffer"),
            "the check names what is missing: {message}"
        );
    }
}
