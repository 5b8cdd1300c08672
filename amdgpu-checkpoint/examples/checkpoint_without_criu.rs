//! A checkpoint tool that is not CRIU: it saves the GPU state of a running
//! process into a directory, verifies the images, and restores them into a
//! new process that goes on where the first one stopped.
//!
//! The process here is a simulated ROCm application on a simulated
//! two-GPU machine (`kfd-sim`); against the real kernel the same calls take
//! `kfd::HostDriver`, the process's fds (through `pidfd_getfd` after a
//! ptrace attach) and `/sys/class/kfd/kfd/topology`.
//!
//! ```sh
//! cargo run -p amdgpu-checkpoint --example checkpoint_without_criu [IMAGES_DIR]
//! ```
//!
//! Without `IMAGES_DIR` the images go to a temporary directory that is
//! removed at the end. `cargo test` runs this example too (its `#[test]`).

use std::error::Error;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use amdgpu_checkpoint::dump::{DumpConfig, Dumper};
use amdgpu_checkpoint::identify::{Devices, DrainedFile, FdClass};
use amdgpu_checkpoint::restore::{
    resume, RestoreConfig, Restored, Restorer, Resume, Sharing, TaskIdentity,
};
use amdgpu_checkpoint::Options;
use amdgpu_image::{verify_set, DirStore, ReadLimits};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{ProcessConfig, Sim, SimConfig};

fn main() -> Result<(), Box<dyn Error>> {
    checkpoint_and_restore(std::env::args_os().nth(1).as_deref())
}

#[test]
fn the_example_checkpoints_verifies_and_restores() {
    checkpoint_and_restore(None).unwrap();
}

fn checkpoint_and_restore(keep: Option<&std::ffi::OsStr>) -> Result<(), Box<dyn Error>> {
    let scratch = tempfile::tempdir()?;
    let images = match keep {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Path::new(&dir).to_path_buf()
        }
        None => scratch.path().join("images"),
    };
    std::fs::create_dir_all(&images)?;
    let shm = scratch.path().join("shm");
    std::fs::create_dir_all(&shm)?;

    // The machine and the application: two GPUs, a few steps of work.
    let sim = Sim::synthetic(2, SimConfig::default())?;
    let mut app = Workload::launch(&sim, &Profile::Basic)?;
    for _ in 0..3 {
        app.step()?;
    }
    let expected = app.describe()?;
    let pid = app.pid();

    // The tool runs as a process of its own and ptrace-attaches the
    // application: the kernel accepts CRIU ops only from the ptrace parent.
    let tool = sim.spawn_process()?;
    sim.ptrace_attach(tool, pid)?;
    let driver = sim.driver(tool);
    let devices = Devices::probe(&driver)?.ok_or("no /dev/kfd on this machine")?;

    // The application's GPU files, as the tool would take them from the
    // process (CRIU drains them through its parasite; pidfd_getfd works too).
    let mut files: Vec<OwnedFd> = Vec::new();
    files.extend(app.kfd_fd().map(|fd| fd.try_clone_to_owned()).transpose()?);
    for fd in app.render_fds() {
        files.push(fd.try_clone_to_owned()?);
    }

    let store = DirStore::open_dir(&images)?;
    let options = Options::default();
    let mut dumper = Dumper::new(
        driver.clone(),
        DumpConfig {
            topology_root: sim.sysfs_root(),
            options: options.clone(),
            unpause_early: false,
            shm_dir: shm.clone(),
            // The simulated process is not a host process to guard.
            guardian_log_dir: None,
            guardian_driver: Default::default(),
        },
    );
    // File ids are the tool's to choose; they name the image files.
    let mut ids = Vec::new();
    let dumped = (|| -> Result<(), Box<dyn Error>> {
        for (i, fd) in files.iter().enumerate() {
            let id = i as u32 + 1;
            match devices.classify_fd(&driver, fd.as_fd())? {
                FdClass::Kfd => {
                    let file = DrainedFile::identify(&driver, fd.as_fd());
                    let dump = dumper.dump_kfd(&store, file, id)?;
                    println!(
                        "dumped /dev/kfd of pid {}: {} GPUs, {} BOs, {} content bytes",
                        dump.pid, dump.gpus, dump.bos, dump.content_bytes
                    );
                }
                FdClass::Render { minor } => {
                    dumper.dump_render_node(&store, fd.as_fd(), minor, id)?;
                    println!("dumped renderD{minor}");
                }
                FdClass::DmaBuf | FdClass::Foreign => continue,
            }
            ids.push(id);
        }
        dumper.finish_render_only(&store)?;
        Ok(())
    })();
    // Whatever happened, the application's GPU queues run again.
    dumper.unpause_all()?;
    sim.ptrace_detach(pid)?;
    dumped?;
    drop(files);

    // The images are complete and every checksum holds.
    let report = verify_set(&store, ReadLimits::default())?;
    if !report.is_clean() {
        return Err(format!("the images do not verify: {:?}", report.problems).into());
    }
    println!(
        "verified {} files, {} checksums, {} bytes",
        report.files, report.checksums_verified, report.bytes_read
    );

    // The application goes away; a new process under its pid gets its GPU
    // state back, restoring its own files.
    app.exit()?;
    let restored = sim.spawn_process_with(ProcessConfig {
        pid: Some(pid),
        ..ProcessConfig::default()
    })?;
    let mut restorer = Restorer::new(
        sim.driver(restored),
        RestoreConfig {
            topology_root: sim.sysfs_root(),
            options,
            shm_dir: shm.clone(),
        },
    );
    let task = TaskIdentity {
        pid: Some(pid.0),
        find_unused_fd: &|_| None,
    };
    let mut restored_files = Vec::new();
    let mut waiting = ids.clone();
    while !waiting.is_empty() {
        let mut later = Vec::new();
        for &id in &waiting {
            match restorer.restore_file(&store, id, &task, &Sharing::within_process())? {
                Restored::File(fd) => restored_files.push(fd),
                Restored::WaitForKfd | Restored::WaitForBuffer => later.push(id),
                Restored::NotOurs => return Err(format!("file {id} is not a GPU file").into()),
            }
        }
        if later.len() == waiting.len() {
            return Err(format!("files {later:?} wait for a /dev/kfd that never comes").into());
        }
        waiting = later;
    }
    // Once the process's memory is back (CRIU restores it; here the
    // simulator kept it), its GPU queues restart.
    match resume(sim.driver(tool), pid.0)? {
        Resume::Resumed => println!("pid {pid}: restored and resumed"),
        Resume::NotOurs => return Err("the restored process has no KFD state".into()),
    }

    // Same BOs, handles, addresses and contents as at the checkpoint, and
    // the work goes on.
    Workload::verify(&sim, pid, &expected)?;
    let mut again = Workload::attach(&sim, pid);
    again.step()?;
    println!("the restored process took another step");
    Ok(())
}
