//! A forked child of a process whose simulated machine runs in the process
//! (the interposer's in-process mode) holds a copy of that machine, made
//! while the parent's other threads, its own and the simulator's (queue
//! engines, the doorbell watcher, SDMA workers), may be inside it holding
//! its locks. None of those threads exists in the child, so a lock one of
//! them held at the fork would stay taken there for good and the child's
//! first call into the machine would wait forever. `tests/fork_probe.c`
//! forks many times while its threads keep the machine busy, and each
//! child opens the KFD, runs an SDMA queue of its own and exits: every
//! child must end well (the probe reports one that is still running long
//! after its fork as stuck).

mod common;

use std::ffi::OsStr;

use common::{hsakmt_program, run_preloaded, Scratch};

/// Forks of the probe: each is a chance for a fork to land while another
/// thread holds one of the machine's locks.
const FORKS: &str = "200";

#[test]
fn forked_children_never_find_the_machine_locked() {
    let scratch = Scratch::new();
    let Some(probe) = hsakmt_program(&scratch, "tests/fork_probe.c") else {
        return;
    };
    let out = run_preloaded(&scratch, OsStr::new("single-gpu"), &probe, &[FORKS]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(&format!("forks={FORKS} ok")),
        "{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}
