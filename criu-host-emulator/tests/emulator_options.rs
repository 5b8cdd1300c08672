//! Plugin options from an emulated CRIU that exports
//! `criu_plugin_get_options` (criu#3138): the command line over the
//! environment, the log naming each value's source, unknown names and bad
//! values failing the run, and device maps pinning GPUs at restore
//! (followed, and refused with the reason).

mod common;

use amdgpu_checkpoint::Options;
use common::{device_vmas, gpu_files, hook_errno, kfd_image, vmas_of, Dirs};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

fn entries(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|e| (*e).to_owned()).collect())
}

/// A Basic workload on both GPUs of a two-GPU PCIe machine, dumped: the
/// machine, the workload's expected state, its pid, its file ids, the
/// images and the gpu_ids in machine order.
struct Dumped {
    sim: Sim,
    expected: kfd_sim::workload::WorkloadDescription,
    pid: kfd_sim::Pid,
    ids: Vec<u32>,
    dirs: Dirs,
    gpus: Vec<u32>,
}

fn dumped() -> Dumped {
    let sim = Sim::builtin("pcie-2gpu", SimConfig::default()).expect("machine");
    let gpus: Vec<u32> = sim.gpus().iter().map(|g| g.gpu_id).collect();
    assert_eq!(gpus.len(), 2);
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch");
    app.step().expect("step");
    let expected = app.describe().expect("describe");
    let dirs = Dirs::new();
    let (files, ids) = gpu_files(&app);
    dirs.emulator(&sim, |_| {})
        .dump(app.pid(), &files, &device_vmas(&sim))
        .expect("dump");
    let pid = app.pid();
    app.exit().expect("exit");
    Dumped {
        sim,
        expected,
        pid,
        ids,
        dirs,
        gpus,
    }
}

#[test]
fn a_device_map_from_the_command_line_swaps_the_gpus_and_the_log_says_where_options_came_from() {
    let d = dumped();
    let vmas = vmas_of(&kfd_image(d.dirs.images.path()));
    let env = |name: &str| match name {
        "KFD_NUMA_CHECK" => Some("NO".to_owned()),
        "KFD_FW_VER_CHECK" => Some("NO".to_owned()),
        _ => None,
    };
    let (env, _) = Options::default().read(env, &[]).unwrap();
    let map = format!(
        "{:#x}={},{}={:#x}",
        d.gpus[0], d.gpus[1], d.gpus[1], d.gpus[0]
    );
    let emulator = d.dirs.emulator(&d.sim, |c| {
        c.options = env;
        c.plugin_options = entries(&[
            "cuda.device-map=0=1",
            "amdgpu.numa-check=yes",
            &format!("amdgpu.device-map={map}"),
        ]);
    });
    let capture = Capture::start();
    let task = emulator.restore(d.pid, &d.ids, &vmas).expect("restore");
    assert_eq!(task.resume_answer, 0);
    Workload::verify(&d.sim, d.pid, &d.expected).expect("state restored");
    for expected in [
        "param: amdgpu.numa-check (KFD_NUMA_CHECK) = YES (command line)".to_owned(),
        "param: amdgpu.fw-ver-check (KFD_FW_VER_CHECK) = NO (environment)".to_owned(),
        "param: amdgpu.vram-size-check (KFD_VRAM_SIZE_CHECK) = YES (default)".to_owned(),
        format!(
            "GPU {:#x} restored on local GPU {:#x}",
            d.gpus[0], d.gpus[1]
        ),
        format!(
            "GPU {:#x} restored on local GPU {:#x}",
            d.gpus[1], d.gpus[0]
        ),
    ] {
        assert!(
            capture.contains(Level::Info, &expected),
            "{expected}: {:#?}",
            capture.lines()
        );
    }
}

#[test]
fn without_criu_plugin_get_options_the_environment_alone_counts() {
    let d = dumped();
    let vmas = vmas_of(&kfd_image(d.dirs.images.path()));
    let env =
        |name: &str| (name == "KFD_DEVICE_MAP").then(|| format!("{}={}", d.gpus[0], d.gpus[1]));
    let (env, _) = Options::default().read(env, &[]).unwrap();
    let emulator = d.dirs.emulator(&d.sim, |c| c.options = env);
    let capture = Capture::start();
    emulator.restore(d.pid, &d.ids, &vmas).expect("restore");
    Workload::verify(&d.sim, d.pid, &d.expected).expect("state restored");
    assert!(capture.contains(
        Level::Info,
        &format!(
            "GPU {:#x} restored on local GPU {:#x}",
            d.gpus[0], d.gpus[1]
        )
    ));
    assert!(capture.contains(Level::Info, "(KFD_DEVICE_MAP) = "));
    assert!(capture.contains(Level::Info, "(environment)"));
}

#[test]
fn unknown_options_and_bad_values_fail_the_restore_naming_the_option() {
    let d = dumped();
    let vmas = vmas_of(&kfd_image(d.dirs.images.path()));
    for (entry, expected) in [
        (
            "amdgpu.device-mapp=1=2",
            "unknown plugin option \"amdgpu.device-mapp\"",
        ),
        ("amdgpu.vram-size-check=perhaps", "expecting YES/NO or 1/0"),
        ("amdgpu.device-map=0x1=", "a pin needs a GPU on each side"),
    ] {
        let emulator = d
            .dirs
            .emulator(&d.sim, |c| c.plugin_options = entries(&[entry]));
        let capture = Capture::start();
        let err = emulator.restore(d.pid, &d.ids, &vmas).unwrap_err();
        assert_eq!(hook_errno(&err).0, "init", "{entry}");
        assert!(
            capture.contains(Level::Error, expected),
            "{entry}: {:#?}",
            capture.lines()
        );
    }
    // The images are intact: a restore with good options still works.
    d.dirs
        .emulator(&d.sim, |c| {
            c.plugin_options = entries(&["amdgpu.numa-check=0"])
        })
        .restore(d.pid, &d.ids, &vmas)
        .expect("restore");
    Workload::verify(&d.sim, d.pid, &d.expected).expect("state restored");
}

#[test]
fn a_device_map_that_cannot_hold_is_refused_with_the_reason() {
    let d = dumped();
    let vmas = vmas_of(&kfd_image(d.dirs.images.path()));
    let twice = format!(
        "amdgpu.device-map={}={},{}={}",
        d.gpus[0], d.gpus[1], d.gpus[1], d.gpus[1]
    );
    let unknown = format!("amdgpu.device-map={}=0x9", d.gpus[0]);
    for (entry, expected) in [
        (twice.as_str(), "names local GPU"),
        (unknown.as_str(), "no local GPU is 0x0009"),
    ] {
        let emulator = d
            .dirs
            .emulator(&d.sim, |c| c.plugin_options = entries(&[entry]));
        let capture = Capture::start();
        emulator.restore(d.pid, &d.ids, &vmas).unwrap_err();
        assert!(
            capture.contains(Level::Error, expected),
            "{entry}: {:#?}",
            capture.lines()
        );
    }
}
