//! Every device call of the dump path, made to fail in turn.
//!
//! A clean dump of a simulated ROCm process records every call the plugin
//! makes into the (simulated) kernel — opens, ioctls (CRIU ops by
//! sub-operation), mmaps — as `(operation, occurrence)` sites. Then, for each
//! site, a fresh machine and process are dumped again with kfd-sim's fault
//! injection armed at exactly that call. Each failure must:
//!
//! * fail a hook with a negative errno that is neither `-ENOTSUP` ("not
//!   mine") nor the panic errno;
//! * log an error line naming the operation;
//! * leave the application running (no eviction level left);
//! * leak nothing: the simulator's accounting (fds, BOs, mappings, pinned
//!   pages, processes, queues, events) equals the one before the dump, and no
//!   thread outlives the run;
//! * leave no image set that `amdgpu-criu verify` would call complete.
//!
//! The kernel-internal fault points (`EVICT`, `DMABUF_EXPORT`,
//! `SDMA_SHORT`) are walked the same way by occurrence until one no longer
//! fires. Every case runs under both host shapes (`HostShape::ALL`): CRIU
//! after v4.2, whose `DUMP_DEVICES_LATE` unpauses, and CRIU v4.2 and older,
//! where the plugin unpauses inside `DUMP_EXT_FILE`. One test per binary:
//! the thread count must not see other tests.

use std::path::Path;

use criu_host_emulator::EmulatedHost;
use criu_plugin_amdgpu::abi::PANIC_ERRNO;
use criu_plugin_amdgpu::hooks::NOT_MINE;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Errno, FaultSpec, Sim, SimConfig};

mod common;
mod faults_common;

use common::{add_drm_bo, device_vmas, gpu_files};
use faults_common::{
    check_clean_sites, empty_dir, log_names_op, set_looks_complete, site_errno, sweep_configs,
    thread_count, thread_count_settled, Config, FaultDriver, HookFailure, MiniCriu, Site, Snapshot,
};

/// How one run is made to fail.
enum Fault {
    /// Nothing: the recording run.
    None,
    /// One call of the plugin, through the recording driver.
    Site(Site, Errno),
    /// A kernel-internal fault point, armed in the simulator before the dump.
    Internal(FaultSpec),
}

struct Outcome {
    result: Result<(), HookFailure>,
    sites: Vec<Site>,
    fired: bool,
    lines: Vec<(Level, String)>,
    before: Snapshot,
    after: Snapshot,
    running: bool,
    complete: bool,
}

/// One dump of a fresh machine running the basic workload.
fn run(config: Config, images: &Path, shm: &Path, fault: &Fault) -> Outcome {
    let (gpus, drm_bo, shape) = config;
    empty_dir(images);
    let threads_before = thread_count();
    let outcome = {
        let sim = Sim::synthetic(gpus, SimConfig::default()).expect("simulated machine");
        let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
        app.step().expect("app step");
        if drm_bo {
            add_drm_bo(&app);
        }
        let before = Snapshot::take(&sim);
        let criu = MiniCriu::of_shape(&sim, shm, shape);
        let base = FaultDriver::new(sim.driver(app.pid()));
        match fault {
            Fault::None => {}
            Fault::Site(site, errno) => base.fail_at(site.clone(), *errno),
            Fault::Internal(spec) => sim.inject(spec.clone()),
        }
        let capture = Capture::start();
        let (files, _) = gpu_files(&app);
        let result = criu.dump(
            |pid| base.for_pid(pid),
            EmulatedHost::new(images, None),
            app.pid(),
            &files,
            &device_vmas(&sim),
        );
        let lines = capture.lines();
        drop(capture);
        let fired = match fault {
            Fault::None => true,
            Fault::Site(..) => base.fired() == Some(true),
            Fault::Internal(_) => sim.pending_faults().is_empty(),
        };
        sim.clear_faults();
        let state = sim
            .kfd_state(app.pid())
            .expect("the app still has its KFD state");
        let running = state.queues_running() && !state.queues_paused;
        let after = Snapshot::take(&sim);
        // The app goes on after the dump.
        let app_steps = app.step();
        assert!(
            app_steps.is_ok() || !running,
            "queues run but the app cannot step: {app_steps:?}"
        );
        Outcome {
            result,
            sites: base.sites(),
            fired,
            lines,
            before,
            after,
            running,
            complete: set_looks_complete(images),
        }
    };
    // Every thread of the run (the plugin's, the simulator's SDMA workers,
    // dropped with the machine) is gone.
    let threads_after = thread_count_settled(threads_before);
    Outcome {
        before: Snapshot {
            threads: threads_before,
            ..outcome.before
        },
        after: Snapshot {
            threads: threads_after,
            ..outcome.after
        },
        ..outcome
    }
}

/// The checks every failed dump must pass; returns what is wrong as
/// `(kind, message)`.
fn problems(what: &str, op: &str, out: &Outcome) -> Vec<(&'static str, String)> {
    let mut bad = Vec::new();
    match &out.result {
        Ok(()) => bad.push(("succeeded", format!("{what}: the dump succeeded"))),
        Err(f) => {
            if f.errno >= 0 || f.errno == NOT_MINE || f.errno == PANIC_ERRNO {
                bad.push(("errno", format!("{what}: {} answered {}", f.hook, f.errno)));
            }
        }
    }
    if !out.fired {
        bad.push(("fired", format!("{what}: the injected fault never fired")));
    }
    if !log_names_op(&out.lines, op) {
        bad.push((
            "log",
            format!("{what}: no error line names {op:?}: {:?}", out.lines),
        ));
    }
    if !out.running {
        bad.push(("paused", format!("{what}: the application was left paused")));
    }
    if out.before != out.after {
        bad.push((
            "leak",
            format!(
                "{what}: leak: before {:?}, after {:?}",
                out.before, out.after
            ),
        ));
    }
    if out.complete {
        bad.push((
            "complete",
            format!("{what}: the images directory holds a set verify calls complete"),
        ));
    }
    bad
}

#[test]
fn every_dump_call_site_fails_cleanly() {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    let mut checked = 0;

    for (config, label) in sweep_configs() {
        let clean = run(config, images.path(), shm.path(), &Fault::None);
        assert!(clean.result.is_ok(), "{:?}", clean.result);
        assert!(clean.running && clean.complete);
        assert_eq!(clean.before, clean.after, "the clean dump leaked");
        check_clean_sites(
            &clean.sites,
            "dump",
            &[
                "CRIU_OP:PROCESS_INFO",
                "CRIU_OP:CHECKPOINT",
                "CRIU_OP:UNPAUSE",
            ],
            &label,
        );
        for site in &clean.sites {
            // GET_VERSION failing is "this kernel cannot checkpoint" only in
            // the sense of an errno: it must still be an error.
            let errno = site_errno(site);
            let out = run(
                config,
                images.path(),
                shm.path(),
                &Fault::Site(site.clone(), errno),
            );
            bad.extend(
                problems(&format!("{label}: {site}={errno}"), &site.op, &out)
                    .into_iter()
                    .map(|(_, msg)| msg),
            );
            checked += 1;
        }

        // Kernel-internal points: each occurrence until one no longer fires.
        for (op, errno, names) in [
            ("EVICT", libc::ENOMEM, "CRIU_OP PROCESS_INFO"),
            ("DMABUF_EXPORT", libc::ENOMEM, ""),
            ("SDMA_SHORT", libc::EIO, ""),
        ] {
            for nth in 1.. {
                let spec = FaultSpec::new(op, nth, Errno(errno));
                let out = run(config, images.path(), shm.path(), &Fault::Internal(spec));
                if !out.fired {
                    assert!(nth > 1 || op == "DMABUF_EXPORT", "{op} is never reached");
                    break;
                }
                let what = format!("{label}: internal {op}:{nth}");
                let mut found = problems(&what, names, &out);
                if names.is_empty() {
                    // Named by the ioctl that met it; any error line will do.
                    found.retain(|(kind, _)| *kind != "log");
                    if !out.lines.iter().any(|(l, _)| *l == Level::Error) {
                        found.push(("log", format!("{what}: no error line")));
                    }
                }
                bad.extend(found.into_iter().map(|(_, msg)| msg));
                checked += 1;
                assert!(nth < 500, "{op} fires more than 500 times in one dump");
            }
        }
    }
    println!("{checked} failing dumps checked");
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
