//! The only test of this binary (it counts this process's fds, which a
//! concurrent test would disturb): a parallel restore leaves CRIU's main
//! process with the fds it had — no render fd of the copy worker leaks
//! (flagged in criu#3000's review, never fixed upstream).

mod common;

use common::{checkpoint, vmas_of, Checkpointed};
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig};

/// This process's fds as `N -> target`, without the memfds that back the
/// simulated kernel's buffer memory (`kfd-sim-vram`, `-gtt`, ...: in a real
/// kernel that memory is no fd of anyone's). Device files the plugin opens
/// (`kfd-sim-kfd`, `kfd-sim-renderD*`), sockets, pipes and files count.
fn open_fds() -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let target = std::fs::read_link(e.path()).map(|t| t.display().to_string());
            let target = target.unwrap_or_default();
            let kernel_memory = target.starts_with("/memfd:kfd-sim-")
                && !target.starts_with("/memfd:kfd-sim-kfd")
                && !target.starts_with("/memfd:kfd-sim-renderD");
            (!kernel_memory).then(|| format!("{} -> {target}", e.file_name().to_string_lossy()))
        })
        .collect();
    fds.sort();
    fds
}

#[test]
fn a_parallel_restore_leaks_no_fd_of_the_restorer() {
    let sim = Sim::builtin("pcie-2gpu", SimConfig::default()).unwrap();
    let Checkpointed {
        dirs,
        pid,
        ids,
        expected,
        image,
    } = checkpoint(&sim, &Profile::Basic);
    let emulator = dirs.emulator(&sim, |_| {});
    let vmas = vmas_of(&image);

    for round in 0..3 {
        let before = open_fds();
        let capture = Capture::start();
        let task = emulator.restore(pid, &ids, &vmas).expect("restore");
        assert!(
            capture.contains(Level::Info, "parallel restore: "),
            "round {round}: the restore was parallel: {:#?}",
            capture.lines()
        );
        drop(capture);
        Workload::verify(&sim, pid, &expected).unwrap();
        // The count sees the render files while they are open...
        assert!(
            open_fds().iter().any(|f| f.contains("kfd-sim-renderD")),
            "round {round}: {:?}",
            open_fds()
        );
        // ...and what the restored task holds goes with it.
        drop(task);
        sim.exit_process(pid).unwrap();
        let after = open_fds();
        assert_eq!(
            before, after,
            "round {round}: fds before and after the restore"
        );
    }
}
