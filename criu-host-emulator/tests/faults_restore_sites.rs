//! Every device call of the restore path, made to fail in turn.
//!
//! A simulated ROCm process is dumped cleanly and killed; a clean restore
//! records every call the plugin makes into the (simulated) kernel as
//! `(operation, occurrence)` sites (see `faults_common`). Then, for each
//! site, the same dump and restore run on a fresh machine with kfd-sim's
//! fault injection armed at exactly that call. Each failure must:
//!
//! * fail a hook with a negative errno that is neither `-ENOTSUP` nor the
//!   panic errno (`RESUME_DEVICES_LATE`, whose answer CRIU only logs, must
//!   answer such an errno too);
//! * log an error line naming the operation;
//! * leak nothing once CRIU killed the failed task: the simulator's
//!   accounting equals the one before the restore, and no thread outlives
//!   the run.
//!
//! The kernel-internal points `DMABUF_EXPORT`, `EVICT` and `SDMA_SHORT` are
//! walked by occurrence until one no longer fires. Every case runs under
//! both host shapes (`HostShape::ALL`): CRIU after v4.2, with
//! `RESTORE_INIT` and the `RESTORE_EXT_FILE` retry, and CRIU v4.2 and older
//! without them. One test per binary: the thread count must not see other
//! tests.

use std::path::Path;

use criu_host_emulator::{DeviceVma, EmulatedHost};
use criu_plugin_amdgpu::abi::PANIC_ERRNO;
use criu_plugin_amdgpu::hooks::NOT_MINE;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::{Errno, FaultSpec, Sim, SimConfig};

mod common;
mod faults_common;

use common::{add_drm_bo, kfd_image, vmas_of};
use faults_common::{
    check_clean_sites, dump_and_kill, empty_dir, log_names_op, site_errno, sweep_configs,
    thread_count, thread_count_settled, Config, FaultDriver, MiniCriu, Site, Snapshot,
};

enum Fault {
    None,
    Site(Site, Errno),
    Internal(FaultSpec),
}

struct Outcome {
    /// The failing hook and its answer; `None` when everything succeeded.
    failure: Option<(&'static str, i32)>,
    sites: Vec<Site>,
    fired: bool,
    lines: Vec<(Level, String)>,
    before: Snapshot,
    after: Snapshot,
}

fn run(config: Config, images: &Path, shm: &Path, fault: &Fault) -> Outcome {
    let (gpus, drm_bo, shape) = config;
    empty_dir(images);
    let threads_before = thread_count();
    let mut out = {
        let sim = Sim::synthetic(gpus, SimConfig::default()).expect("simulated machine");
        let (pid, ids, drm) =
            dump_and_kill(&sim, images, shm, |app| drm_bo.then(|| add_drm_bo(app)));
        let criu = MiniCriu::of_shape(&sim, shm, shape);
        let mut vmas = vmas_of(&kfd_image(images));
        if let Some(bo) = drm {
            vmas.push(DeviceVma {
                path: sim.render_path(sim.gpus()[0].gpu_id).expect("render path"),
                addr: bo.va,
                pgoff: bo.offset,
            });
        }

        let before = Snapshot::take(&sim);
        let base = FaultDriver::new(sim.driver(pid));
        match fault {
            Fault::None => {}
            Fault::Site(site, errno) => base.fail_at(site.clone(), *errno),
            Fault::Internal(spec) => sim.inject(spec.clone()),
        }
        let capture = Capture::start();
        let result = criu.restore(
            |p| base.for_pid(p),
            EmulatedHost::new(images, Some(200)),
            pid,
            &ids,
            &vmas,
        );
        let lines = capture.lines();
        drop(capture);
        let fired = match fault {
            Fault::None => true,
            Fault::Site(..) => base.fired() == Some(true),
            Fault::Internal(_) => sim.pending_faults().is_empty(),
        };
        sim.clear_faults();
        let failure = match result {
            Err(f) => Some((f.hook, f.errno)),
            Ok(task) => {
                let answer = task.resume_answer;
                // CRIU kills or releases the task; either way its files go.
                drop(task);
                sim.exit_process(pid).expect("the restored task exits");
                (answer != 0).then_some(("RESUME_DEVICES_LATE", answer))
            }
        };
        Outcome {
            failure,
            sites: base.sites(),
            fired,
            lines,
            before,
            after: Snapshot::take(&sim),
        }
    };
    out.before.threads = threads_before;
    out.after.threads = thread_count_settled(threads_before);
    out
}

fn problems(what: &str, op: Option<&str>, out: &Outcome) -> Vec<String> {
    let mut bad = Vec::new();
    match out.failure {
        None => bad.push(format!("{what}: the restore succeeded")),
        Some((hook, errno)) => {
            if errno >= 0 || errno == NOT_MINE || errno == PANIC_ERRNO {
                bad.push(format!("{what}: {hook} answered {errno}"));
            }
        }
    }
    if !out.fired {
        bad.push(format!("{what}: the injected fault never fired"));
    }
    let named = match op {
        Some(op) => log_names_op(&out.lines, op),
        None => out.lines.iter().any(|(l, _)| *l == Level::Error),
    };
    if !named {
        bad.push(format!(
            "{what}: no error line names {op:?}: {:?}",
            out.lines
        ));
    }
    // Accounting only: the threads of the run are compared after the
    // machine is gone.
    if out.before != out.after {
        bad.push(format!(
            "{what}: leak: before {:?}, after {:?}",
            out.before, out.after
        ));
    }
    bad
}

#[test]
fn every_restore_call_site_fails_cleanly() {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let mut bad = Vec::new();
    let mut checked = 0;
    for (config, label) in sweep_configs() {
        let clean = run(config, images.path(), shm.path(), &Fault::None);
        assert_eq!(clean.failure, None, "clean restore: {:?}", clean.lines);
        assert_eq!(clean.before, clean.after, "the clean restore leaked");
        check_clean_sites(
            &clean.sites,
            "restore",
            &["CRIU_OP:RESTORE", "CRIU_OP:RESUME", "OPEN"],
            &label,
        );
        for site in &clean.sites {
            let errno = site_errno(site);
            let out = run(
                config,
                images.path(),
                shm.path(),
                &Fault::Site(site.clone(), errno),
            );
            bad.extend(problems(
                &format!("{label}: {site}={errno}"),
                Some(&site.op),
                &out,
            ));
            checked += 1;
        }
        for (op, errno) in [
            ("DMABUF_EXPORT", libc::ENOMEM),
            ("EVICT", libc::ENOMEM),
            ("SDMA_SHORT", libc::EIO),
        ] {
            for nth in 1.. {
                let spec = FaultSpec::new(op, nth, Errno(errno));
                let out = run(config, images.path(), shm.path(), &Fault::Internal(spec));
                if !out.fired {
                    break;
                }
                bad.extend(problems(
                    &format!("{label}: internal {op}:{nth}"),
                    None,
                    &out,
                ));
                checked += 1;
                assert!(nth < 500, "{op} fires more than 500 times in one restore");
            }
        }
    }
    println!("{checked} failing restores checked");
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
