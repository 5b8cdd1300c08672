//! KFD interface version gates through the emulated CRIU: the dump host's
//! version recorded in the image, a restore refused on a kernel that lacks
//! what the image needs (naming both versions), and a dump refused, with the
//! process left running, when a process holds a second `/dev/kfd` file on
//! KFD 1.19 or later (a possible second KFD context).

mod common;

use std::path::Path;

use common::{checkpoint, device_vmas, gpu_files, hook_errno, vmas_of, Checkpointed, Dirs};
use criu_host_emulator::TaskFile;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd::Driver;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

fn sim_at(minor: u32) -> Sim {
    Sim::synthetic(
        1,
        SimConfig {
            kfd_minor_version: minor,
            ..SimConfig::default()
        },
    )
    .expect("machine")
}

#[test]
fn an_image_of_kfd_1_23_needs_1_23_at_restore_and_says_so() {
    let sim = sim_at(23);
    let Checkpointed {
        dirs,
        pid,
        ids,
        expected,
        image,
    } = checkpoint(&sim, &Profile::Basic);
    let emulator = dirs.emulator(&sim, |_| {});
    assert_eq!(
        (
            image.kfd_major_version,
            image.kfd_minor_version,
            image.kfd_required_minor
        ),
        (Some(1), Some(23), Some(23))
    );
    let vmas = vmas_of(&image);

    // The kernel goes back to 1.18: refused, both versions named.
    sim.set_kfd_minor_version(18);
    let capture = Capture::start();
    let err = emulator.restore(pid, &ids, &vmas).unwrap_err();
    assert_eq!(hook_errno(&err).1, -libc::EPROTONOSUPPORT, "{err}");
    assert!(
        capture.contains(
            Level::Error,
            "the images need KFD interface 1.23 or later (dumped on 1.23); this kernel has 1.18"
        ),
        "{:#?}",
        capture.lines()
    );
    drop(capture);

    // On 1.23 again the same images restore.
    sim.set_kfd_minor_version(23);
    emulator.restore(pid, &ids, &vmas).expect("restore on 1.23");
    Workload::verify(&sim, pid, &expected).expect("state restored");
}

#[test]
fn an_image_of_kfd_1_18_restores_on_newer_kernels() {
    let sim = sim_at(18);
    let Checkpointed {
        dirs,
        pid,
        ids,
        expected,
        image,
    } = checkpoint(&sim, &Profile::Basic);
    let emulator = dirs.emulator(&sim, |_| {});
    assert_eq!(
        (image.kfd_minor_version, image.kfd_required_minor),
        (Some(18), Some(8))
    );
    sim.set_kfd_minor_version(22);
    emulator
        .restore(pid, &ids, &vmas_of(&image))
        .expect("restore on 1.22");
    Workload::verify(&sim, pid, &expected).expect("state restored");
}

#[test]
fn a_second_kfd_file_on_kfd_1_19_is_refused_and_the_process_runs_on() {
    let sim = sim_at(19);
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch");
    app.step().expect("step");
    let second = sim
        .driver(app.pid())
        .open(Path::new("/dev/kfd"), libc::O_RDWR | libc::O_CLOEXEC)
        .expect("a second /dev/kfd file");
    let dirs = Dirs::new();
    let emulator = dirs.emulator(&sim, |_| {});
    let (mut files, _) = gpu_files(&app);
    let last = files.iter().map(|f| f.id).max().unwrap();
    files.insert(
        1,
        TaskFile {
            fd: std::os::fd::AsFd::as_fd(&second),
            id: last + 1,
        },
    );
    let capture = Capture::start();
    let err = emulator
        .dump(app.pid(), &files, &device_vmas(&sim))
        .unwrap_err();
    assert_eq!(hook_errno(&err).0, "DUMP_EXT_FILE", "{err}");
    assert!(
        capture.contains(Level::Error, "holds a second /dev/kfd file")
            && capture.contains(Level::Error, "AMDKFD_IOC_CREATE_PROCESS"),
        "{:#?}",
        capture.lines()
    );
    assert!(
        !capture
            .lines()
            .iter()
            .any(|(_, l)| l.contains("file 3: pid") && l.contains("paused")),
        "the second file's process was never paused again: {:#?}",
        capture.lines()
    );
    drop(capture);
    // Not paused: the application goes on.
    app.step().expect("the process runs after the refused dump");
}
