//! The dump guardian against real processes: a dumper process (this test
//! binary, re-executed) seizes a target the way CRIU does and arms a
//! guardian for it; then it is SIGKILLed, or it ends the dump normally.
//!
//! * killed: the guardian notices through its pidfd, waits until the kernel
//!   has detached the target, seizes it, looks for its KFD fd (a `sleep`
//!   has none, so the recovery reports exactly that), detaches, removes the
//!   dead dumper's temporary image file but keeps its unfinished-dump mark,
//!   logs to the log directory and exits; the target runs on, untraced;
//! * killed, with a guardian whose driver factory fails (a machine it
//!   cannot reach): the log says so and that recovery is manual
//!   (`amdgpu-criu unpause`); the leftovers are cleared all the same;
//! * normal end: the guardian exits and writes nothing (the dumper's own
//!   drops clear its images directory);
//! * in both: the guardian is not the dumper's child and holds no fd of the
//!   dumper's but the two it watches (so the dumper's pipes and sockets see
//!   EOF as before).
//!
//! `harness = false`: `main` dispatches on `GUARDIAN_TEST_ROLE`, and runs
//! the tests with libtest's command line (`test_env::harness`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use amdgpu_checkpoint::guardian::{locate_target, log_name, Guardian, GuardianDriver, Leftovers};
use amdgpu_image::{DirStore, ImageName, ImageStore};
use kfd::{Driver, HostDriver};

const ROLE: &str = "GUARDIAN_TEST_ROLE";
const BOUND: Duration = Duration::from_secs(20);

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        dumper_role(&role);
        return;
    }
    adopt_orphans();
    test_env::harness::run(&[
        ("killed_dumper_is_replaced_by_the_guardian", killed),
        (
            "a_guardian_that_cannot_reach_the_machine_says_recovery_is_manual",
            killed_unreachable,
        ),
        ("normal_end_leaves_no_trace", normal_end),
    ]);
}

/// The dumper: seize the target, mark its images directory unfinished and
/// start a pages file there, arm its guardian, report the guardian's pid,
/// its parent and its fds; then end normally or wait to be killed.
fn dumper_role(role: &str) {
    let mut parts = role.split(';');
    let target: u32 = parts.next().unwrap().parse().unwrap();
    let dir = Path::new(parts.next().unwrap());
    let images = DirStore::open_dir(parts.next().unwrap()).expect("the images dir");
    let end = parts.next().unwrap();
    HostDriver.ptrace_seize(target).expect("seize the target");
    let mark = images
        .mark_unfinished(&ImageName::Kfd { id: 1 })
        .expect("the unfinished mark");
    let mut pages = images
        .create(&ImageName::Pages {
            id: 1,
            gpu_id: 0xc0de,
        })
        .expect("a pages file");
    std::io::Write::write_all(&mut pages, &[7; 4096]).expect("write pages");
    let leftovers = Leftovers {
        dir: images.dir().try_clone().expect("a dir handle").into(),
        writer: std::process::id(),
        mark: Some(mark.file_name().to_owned()),
    };
    // The target as the dump finds it: the process this one traces.
    let tracee = locate_target(&HostDriver, target).expect("the seized target is found");
    assert_eq!((tracee.pid, tracee.tracer), (target, std::process::id()));
    let driver = if end == "unreachable" {
        // A factory that fails in the guardian (a machine it cannot reach).
        GuardianDriver::new("unreachable", || {
            Err(std::io::Error::from_raw_os_error(libc::ECONNREFUSED))
        })
    } else {
        GuardianDriver::host()
    };
    let guardian = Guardian::arm(tracee, dir, &driver, Some(leftovers)).expect("arm the guardian");
    let status = std::fs::read_to_string(format!("/proc/{}/status", guardian.pid())).unwrap();
    let ppid = field(&status, "PPid:");
    println!("guardian {} ppid {ppid}", guardian.pid());
    if end == "normal" {
        drop(guardian);
        drop(pages);
        drop(mark);
        return;
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn field(status: &str, name: &str) -> u32 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or_else(|| panic!("no {name} in {status}"))
}

/// A child killed and reaped when dropped (also when a test panics; the
/// dumper before the target, which it traces).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fds the guardian holds once it has closed the dumper's.
fn guardian_fds(pid: u32) -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| {
                let link = std::fs::read_link(e.ok()?.path()).ok()?;
                Some(link.display().to_string())
            })
            .collect()
        })
        .unwrap_or_default();
    fds.sort();
    fds
}

/// (target, dumper, guardian pid); the dumper has armed the guardian.
fn start(end: &str, dir: &Path, images: &Path) -> (Reaped, Reaped, u32) {
    let target = Reaped(Command::new("sleep").arg("600").spawn().unwrap());
    let mut dumper = Reaped(
        Command::new(std::env::current_exe().unwrap())
            .env(
                ROLE,
                format!(
                    "{};{};{};{end}",
                    target.0.id(),
                    dir.display(),
                    images.display()
                ),
            )
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(dumper.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"guardian"), "dumper said {line:?}");
    let guardian: u32 = words[1].parse().unwrap();
    let ppid: u32 = words[3].parse().unwrap();
    assert_ne!(
        ppid,
        dumper.0.id(),
        "the guardian is not the dumper's child"
    );
    if end != "normal" {
        // Standard streams on /dev/null, the dumper's pidfd, the pipe, the
        // images directory; nothing else of the dumper's (closed right
        // after the fork).
        wait_for("the guardian to close the dumper's fds", || {
            guardian_fds(guardian).len() <= 6
        });
        let fds = guardian_fds(guardian);
        assert_eq!(fds.len(), 6, "{fds:?}");
        let images = images.canonicalize().unwrap().display().to_string();
        assert!(fds.contains(&images), "{fds:?}");
        assert_eq!(
            fds.iter().filter(|f| *f == "/dev/null").count(),
            3,
            "{fds:?}"
        );
        assert!(fds.iter().any(|f| f.contains("pidfd")), "{fds:?}");
        assert!(fds.iter().any(|f| f.starts_with("pipe:")), "{fds:?}");
    }
    (target, dumper, guardian)
}

/// Makes this process the child subreaper of its descendants, so each
/// guardian (orphaned at once by design) is adopted and reaped here rather
/// than left a zombie under an init that reaps nothing.
fn adopt_orphans() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes integers only and
    // changes only which process adopts this one's orphaned descendants.
    let ret = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) };
    assert_eq!(ret, 0, "{}", std::io::Error::last_os_error());
}

/// Waits (at most the bound) for the adopted guardian `pid` to exit and
/// reaps it; its exit code.
fn exit_code(pid: u32) -> i32 {
    let pid = libc::pid_t::try_from(pid).unwrap();
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: `status` is a writable int for the call; WNOHANG never
        // blocks, and `pid` is a process this one adopted.
        let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if ret == pid {
            assert!(libc::WIFEXITED(status), "guardian {pid}: {status:#x}");
            return libc::WEXITSTATUS(status);
        }
        assert_eq!(ret, 0, "waitpid: {}", std::io::Error::last_os_error());
        assert!(
            start.elapsed() < BOUND,
            "the guardian's exit within {BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie whose new parent (init) has not reaped it yet.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < BOUND, "{what} within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

fn tracer_of(pid: u32) -> u32 {
    field(
        &std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap(),
        "TracerPid:",
    )
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn killed() {
    killed_with("kill");
}

fn killed_unreachable() {
    killed_with("unreachable");
}

/// The dumper killed; its guardian made its driver with the host's
/// (`kill`) or a failing factory (`unreachable`).
fn killed_with(end: &str) {
    let dir = tempfile::tempdir().unwrap();
    let images = tempfile::tempdir().unwrap();
    let (target, mut dumper, guardian) = start(end, dir.path(), images.path());
    let pid = target.0.id();
    let dumper_pid = dumper.0.id();
    assert_eq!(tracer_of(pid), dumper_pid);
    // The mark and the pages file the dumper started.
    let before = names(images.path());
    assert_eq!(before.len(), 2, "{before:?}");
    dumper.0.kill().unwrap();
    dumper.0.wait().unwrap();
    let log = dir.path().join(log_name(pid));
    let took = wait_for("the guardian's log", || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("recover it with"))
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("the dumper (pid {dumper_pid}) ended")),
        "{text}"
    );
    let why = if end == "unreachable" {
        "cannot reach the machine (Connection refused"
    } else {
        "has no /dev/kfd open"
    };
    assert!(text.contains(why), "{text}");
    assert!(
        text.contains(&format!("amdgpu-criu unpause --pid {pid}")),
        "{text}"
    );
    let (mark, temp) = if before[0].starts_with(".amdgpu-kfd-1.img.part-") {
        (&before[0], &before[1])
    } else {
        (&before[1], &before[0])
    };
    assert!(
        temp.starts_with(&format!(".amdgpu-pages-1-c0de.img.part-{dumper_pid}-")),
        "{before:?}"
    );
    assert_eq!(
        names(images.path()),
        std::slice::from_ref(mark),
        "the mark alone stays"
    );
    assert!(text.contains(&format!("removed {temp}\n")), "{text}");
    assert!(
        text.contains(&format!("kept {mark} (the unfinished-dump mark")),
        "{text}"
    );
    let store = DirStore::open_dir(images.path()).unwrap();
    assert_eq!(
        store.unfinished().unwrap(),
        std::slice::from_ref(mark),
        "still unfinished"
    );
    // A `sleep` has no KFD fd to unpause: the recovery fails, exit 1.
    assert_eq!(exit_code(guardian), 1, "the guardian's exit");
    // Detached by the guardian, or (unreachable) left as the dumper's
    // death left it.
    assert_eq!(tracer_of(pid), 0, "the target is untraced");
    assert!(!gone(pid), "the target runs on");
    println!("guardian ({end}) acted {took:?} after the kill");
}

fn normal_end() {
    let dir = tempfile::tempdir().unwrap();
    let images = tempfile::tempdir().unwrap();
    let (target, mut dumper, guardian) = start("normal", dir.path(), images.path());
    assert!(dumper.0.wait().unwrap().success());
    assert_eq!(exit_code(guardian), 0, "the guardian's exit");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no log");
    assert_eq!(names(images.path()), Vec::<String>::new());
    assert_eq!(tracer_of(target.0.id()), 0);
}
