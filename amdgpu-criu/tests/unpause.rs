//! `amdgpu-criu unpause` against real processes of this machine, which has
//! no GPU: each refusal is clear and leaves the process as it was. (The
//! unpause itself, over the simulated kernel, is in criu-host-emulator's
//! tests/unpause_recovery.rs.)

use std::process::{Child, Command, Output};

use kfd::{Driver, HostDriver};

fn unpause(pid: u32) -> Output {
    Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args(["unpause", "--pid", &pid.to_string()])
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tracer_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn no_such_process() {
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let out = unpause(pid);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("no process {pid}")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_process_without_kfd_is_named_and_left_untraced() {
    let sleep = Reaped(Command::new("sleep").arg("600").spawn().unwrap());
    let pid = sleep.0.id();
    let out = unpause(pid);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    if err.contains("was refused") {
        // Not root and no ptrace access here: that refusal is the answer.
        assert!(err.contains("PTRACE_SEIZE"), "{err}");
        return;
    }
    assert!(
        err.contains(&format!("process {pid} (sleep) has no /dev/kfd open")),
        "{err}"
    );
    assert_eq!(tracer_of(pid), 0, "detached again");
}

#[test]
fn another_tracer_is_named() {
    let sleep = Reaped(Command::new("sleep").arg("600").spawn().unwrap());
    let pid = sleep.0.id();
    HostDriver.ptrace_seize(pid).unwrap();
    let tracer = tracer_of(pid);
    let name = std::fs::read_to_string(format!("/proc/{tracer}/comm")).unwrap();
    let out = unpause(pid);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("traced by {tracer} ({})", name.trim())),
        "{err}"
    );
    assert_eq!(tracer_of(pid), tracer, "left with its tracer");
}
