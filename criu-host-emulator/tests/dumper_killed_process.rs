//! The dumper as its own OS process, SIGKILLed at each stage of a dump and
//! of a restore.
//!
//! This test process owns the simulated machine (kfd-sim and the simulated
//! application) and serves it with `kfd_sim::remote::Server`; CRIU's side
//! (the plugin's hooks, as `faults_common::dump_hooks`/`restore_hooks` run
//! them) runs in a child process, this same executable started again with
//! `KFD_SIM_REMOTE_ROLE` set, whose `kfd::Driver` is a
//! `kfd_sim::remote::RemoteDriver`: its device fds are the simulator's
//! open files passed over the socket, the simulator reads and writes the
//! user pointers inside its ioctl arguments and its userptr staging memory
//! in the child's address space, it maps BOs itself, and it takes the
//! application's fds with `pidfd_getfd` as its tracer. The server watches
//! the child's calls and, at the chosen one, sends it a real `SIGKILL`
//! before the call reaches the simulator; the child's death (its socket
//! closing) is the kernel's handling of a dead process: its simulated
//! process exits (its tracee detached, its KFD process torn down) and its
//! fds and mappings are gone with it.
//!
//! Dump stages: right after `PROCESS_INFO`, during the BO drain of each GPU
//! (its second SDMA submission, `AMDGPU_CS` on its render node) and at
//! `DUMP_DEVICES_LATE` (its `UNPAUSE`, never issued). The child arms the
//! real dump guardian (`amdgpu_checkpoint::guardian`), whose driver
//! factory connects the guardian process to the served machine on its own
//! connection, as a simulated process made for it; this process adopts the
//! orphaned guardian (`PR_SET_CHILD_SUBREAPER`), reaps it and checks its
//! exit status. After each kill the guardian, and nothing else, brings the
//! queues back: the test only accepts its connection and watches the
//! application's state. Then the guardian's log names the dead dumper and
//! the unpause, the dumper's temporary image files (`.part`) are gone but
//! for the unfinished-dump marks (each removal logged), the application's
//! next steps match a run never dumped, no simulator object is leaked and
//! the images directory never verifies as complete. A dump that is not
//! killed leaves its guardian to exit at once, with no log and no
//! connection. The time from the kill to the queues running again is
//! printed per stage; the only limit on it is the hang guard below.
//!
//! Restore stages: right after `RESTORE`, during each GPU's BO fill and at
//! `RESUME`: the half-restored task is gone and the simulator holds what
//! it held before.
//!
//! The child is this executable (no test harness: `main` picks the role),
//! so the test needs nothing built outside `cargo test`. The in-process
//! model of the same kills is tests/dumper_killed.rs.

use std::ffi::c_void;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amdgpu_checkpoint::guardian::{log_name, GuardianDriver};
use criu_host_emulator::{DeviceVma, EmulatedHost, TaskFile};
use criu_plugin_amdgpu::hooks::PluginConfig;
use kfd_sim::remote::{Connection, RemoteCall, RemoteDriver, RemoteOp, Server, Verdict};
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Pid, ProcessConfig, Sim, SimConfig, DRM_MAJOR};

mod common;
mod faults_common;

use common::{device_vmas, gpu_files};
use faults_common::{
    dump_hooks, dump_kill_stages, empty_dir, fault_name, restore_hooks, restore_kill_stages,
    set_looks_complete, Call, HostShape, Snapshot,
};

const GPUS: usize = 2;
/// The label `dump_kill_stages` gives the last dump stage.
const NEXT_STEPS: usize = 3;
/// The environment variable that makes this executable a CRIU child.
const ROLE: &str = "KFD_SIM_REMOTE_ROLE";
/// Generous limit on a child's run and on waiting for its connections;
/// only a hang reaches it.
const HANG_GUARD: Duration = Duration::from_secs(300);

fn main() {
    match std::env::var(ROLE).ok().as_deref() {
        Some("dump") => child_dump(),
        Some("restore") => child_restore(),
        Some(other) => {
            eprintln!("{ROLE}={other}: not a role of this test (dump, restore)");
            std::process::exit(2);
        }
        None => test_env::harness::run(TESTS),
    }
}

const TESTS: &[test_env::harness::Test] = &[
    (
        "a_dumper_process_killed_at_any_stage_leaves_the_app_recoverable_and_nothing_leaked",
        a_dumper_process_killed_at_any_stage_leaves_the_app_recoverable_and_nothing_leaked,
    ),
    (
        "a_restorer_process_killed_at_any_stage_leaves_no_half_restored_task_and_nothing_leaked",
        a_restorer_process_killed_at_any_stage_leaves_no_half_restored_task_and_nothing_leaked,
    ),
];

/// What every test here needs first: this process may reach its
/// children's memory (the simulator reaches its clients' memory as the
/// kernel reaches a caller's; where this process may not, nothing here can
/// run), and it adopts the guardians the killed dumpers orphan. `false`
/// after saying why (a skip) when it cannot run.
fn served_machine_can_run() -> bool {
    if let Err(why) = kfd_sim::remote::child_memory_reachable() {
        test_env::skip(format!(
            "the served machine cannot reach a child's memory: {why}"
        ));
        return false;
    }
    adopt_orphans();
    true
}

// ---- the child: CRIU's side ----

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} is not set for the {ROLE} child"))
}

fn env_u32(key: &str) -> u32 {
    env(key)
        .parse()
        .unwrap_or_else(|e| panic!("{key}={}: {e}", env(key)))
}

fn child_config() -> PluginConfig {
    PluginConfig {
        topology_root: PathBuf::from(env("TOPOLOGY")),
        shm_dir: PathBuf::from(env("SHM")),
        has_dump_devices_late: true,
        has_restore_retry: true,
    }
}

/// `VMAS`: one `addr pgoff path` per line.
fn encode_vmas(vmas: &[DeviceVma]) -> String {
    vmas.iter()
        .map(|v| format!("{} {} {}\n", v.addr, v.pgoff, v.path.display()))
        .collect()
}

fn decode_vmas(text: &str) -> Vec<DeviceVma> {
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(3, ' ');
            let mut next = || parts.next().unwrap_or_else(|| panic!("VMAS line {line:?}"));
            let addr = next().parse().expect("VMAS address");
            let pgoff = next().parse().expect("VMAS offset");
            DeviceVma {
                path: PathBuf::from(next()),
                addr,
                pgoff,
            }
        })
        .collect()
}

/// The dumper: takes the target's GPU fds as its tracer (`pidfd_getfd`)
/// and runs CRIU's dump hooks; prints its outcome.
fn child_dump() {
    let driver = RemoteDriver::connect(&env("ADDRESS"), Pid(env_u32("PID"))).expect("connect");
    let target = Pid(env_u32("TARGET"));
    let pidfd = kfd::Driver::pidfd_open(&driver, target.0).expect("pidfd of the target");
    let owned: Vec<(OwnedFd, u32)> = env("FILES")
        .split(',')
        .map(|pair| {
            let (fd, id) = pair.split_once(':').expect("FILES fd:id");
            let fd = kfd::Driver::pidfd_getfd(&driver, pidfd.as_fd(), fd.parse().expect("fd"))
                .expect("take the target's fd");
            (fd, id.parse().expect("file id"))
        })
        .collect();
    let files: Vec<TaskFile<'_>> = owned
        .iter()
        .map(|(fd, id)| TaskFile {
            fd: fd.as_fd(),
            id: *id,
        })
        .collect();
    // The guardian of each paused process, should this process die,
    // connects as the simulated process the machine made for it: its own
    // connection, opened in the guardian after its fork.
    let address = env("ADDRESS");
    let guardian = Pid(env_u32("GUARDIAN"));
    let guardian_driver = GuardianDriver::new("served simulated machine", move || {
        let driver: Box<dyn kfd::Driver> = Box::new(RemoteDriver::connect(&address, guardian)?);
        Ok(driver)
    });
    let host = EmulatedHost::new(Path::new(&env("IMAGES")), None)
        .with_guardian(Path::new(&env("LOGS")), guardian_driver);
    let quiet = criu_plugin_amdgpu::log::Capture::start();
    let result = dump_hooks(
        driver,
        host,
        child_config(),
        target,
        &files,
        &decode_vmas(&env("VMAS")),
    );
    // The guardians armed (the engine's debug line names each one).
    let guardians: Vec<String> = quiet
        .lines()
        .iter()
        .filter_map(|(_, line)| Some(line.split_once("guarded by pid ")?.1.trim().to_owned()))
        .collect();
    drop(quiet);
    println!("GUARDIANS {}", guardians.join(" "));
    match result {
        Ok(()) => println!("RESULT ok"),
        Err(f) => println!("RESULT failed {} {}", f.hook, f.errno),
    }
}

/// The main restorer and the restored task in one process (CRIU's restore
/// run, killed together): CRIU's restore hooks; prints the outcome.
fn child_restore() {
    let address = env("ADDRESS");
    let main = RemoteDriver::connect(&address, Pid(env_u32("MAIN"))).expect("connect main");
    let task_pid = Pid(env_u32("TASK"));
    let task = RemoteDriver::connect(&address, task_pid).expect("connect task");
    let ids: Vec<u32> = env("IDS")
        .split(',')
        .map(|id| id.parse().expect("file id"))
        .collect();
    let quiet = criu_plugin_amdgpu::log::Capture::start();
    let result = restore_hooks(
        main,
        task,
        EmulatedHost::new(Path::new(&env("IMAGES")), None),
        child_config(),
        HostShape::AFTER_V4_2,
        task_pid,
        &ids,
        &decode_vmas(&env("VMAS")),
    );
    drop(quiet);
    match result {
        Ok(restored) => println!("RESULT ok {}", restored.resume_answer),
        Err(f) => println!("RESULT failed {} {}", f.hook, f.errno),
    }
}

// ---- the test process: the machine's side ----

/// Where to kill: before the `nth` (1-based) call named `call.name` on
/// `call.minor`'s device. Stages are found in a clean run's calls; naming a
/// call by its occurrence (not its index) keeps the kill at the same call
/// when concurrent drains interleave differently.
#[derive(Debug, Clone)]
struct KillAt {
    call: Call,
    nth: usize,
}

impl KillAt {
    /// The call at index `at` of a clean run's `calls`.
    fn of(calls: &[Call], at: usize) -> KillAt {
        let call = calls[at].clone();
        let nth = calls[..=at].iter().filter(|c| **c == call).count();
        KillAt { call, nth }
    }
}

#[derive(Default)]
struct Record {
    calls: Vec<Call>,
    kill: Option<KillAt>,
    killed_at: Option<Instant>,
}

/// Records every call of the child; kills it at the chosen one.
fn observer(rec: &Arc<Mutex<Record>>) -> kfd_sim::remote::Observer {
    let rec = rec.clone();
    Arc::new(move |call: &RemoteCall<'_>| {
        let name = match call.op {
            RemoteOp::Open => "OPEN".to_owned(),
            RemoteOp::Ioctl(request) => {
                let arg = if call.arg.is_empty() {
                    std::ptr::null_mut()
                } else {
                    call.arg.as_ptr() as *mut c_void
                };
                fault_name(request, arg)
            }
            RemoteOp::Mmap => "MMAP".to_owned(),
            _ => "OTHER".to_owned(),
        };
        let minor = call
            .device
            .filter(|d| d.major == DRM_MAJOR)
            .map(|d| d.minor);
        let mut rec = rec.lock().unwrap();
        let call = Call { name, minor };
        let seen = rec.calls.iter().filter(|c| **c == call).count() + 1;
        let kill = rec
            .kill
            .as_ref()
            .is_some_and(|k| k.call == call && k.nth == seen);
        rec.calls.push(call);
        if kill {
            rec.killed_at = Some(Instant::now());
            Verdict::Kill
        } else {
            Verdict::Run
        }
    })
}

fn spawn_child(role: &str, vars: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().expect("this test's executable");
    Command::new(exe)
        .env(ROLE, role)
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the CRIU child")
}

/// Accepts the child's connection as simulated process `pid`; a child that
/// died before connecting fails the test at once, with its output.
fn accept(server: &Server, child: &mut Child, pid: Pid, rec: &Arc<Mutex<Record>>) -> Connection {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        match server.accept(child.id(), pid, Duration::from_millis(100), observer(rec)) {
            Ok(connection) => return connection,
            Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) && Instant::now() < deadline => {
                if let Some(status) = child.try_wait().expect("wait for the child") {
                    panic!("the CRIU child ended ({status}) before connecting as {pid}");
                }
            }
            Err(e) => panic!("the CRIU child's connection as {pid}: {e}"),
        }
    }
}

/// Waits for the child (at most the hang guard) and its connections; its
/// `RESULT` line and its whole output, `None` when it was killed.
fn finish(mut child: Child, connections: Vec<Connection>) -> Option<(String, String)> {
    let deadline = Instant::now() + HANG_GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hang guard: the CRIU child ran for {HANG_GUARD:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    for connection in connections {
        connection.join();
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out)
        .expect("the child's output");
    use std::os::unix::process::ExitStatusExt;
    if status.signal() == Some(libc::SIGKILL) {
        return None;
    }
    assert!(status.success(), "the CRIU child failed: {status}\n{out}");
    let result = out
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT from the child: {out}"))
        .to_owned();
    Some((result, out))
}

/// Every image file of `dir`, by name, with its bytes.
fn image_files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read the images dir")
        .map(|entry| {
            let path = entry.expect("dir entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&path).expect("read an image");
            if name.starts_with("amdgpu-kfd-") {
                // Each dump names itself (dump_id): the rest is the same.
                let mut m: amdgpu_image::CriuKfd =
                    amdgpu_image::decode_message(&name, &bytes[amdgpu_image::HEADER_LEN..])
                        .expect("decode a KFD image");
                assert_eq!(m.dump_id.take().map(|i| i.len()), Some(16));
                // A userptr BO sits at the CPU address the application's
                // process mapped it at, which differs between two launches
                // of the workload in one test process, and so do the
                // addresses in it the private data records (queue rings and
                // pointers): each becomes its offset in the BO. The rest is
                // the same.
                let mut ranges = Vec::new();
                for bo in &mut m.bo_entries {
                    if bo.alloc_flags & kfd_sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
                        ranges.push((ranges.len() as u64, bo.addr, bo.size));
                        bo.addr = 0;
                    }
                }
                let mut at = 0;
                while at + 8 <= m.priv_data.len() {
                    let v = u64::from_le_bytes(m.priv_data[at..at + 8].try_into().unwrap());
                    if let Some((i, base, _)) = ranges
                        .iter()
                        .find(|(_, base, size)| (*base..*base + *size).contains(&v))
                    {
                        let relative = (i << 56) | (v - base);
                        m.priv_data[at..at + 8].copy_from_slice(&relative.to_le_bytes());
                        at += 8;
                    } else {
                        at += 4;
                    }
                }
                return (name, format!("{m:?}").into_bytes());
            }
            if name.starts_with("amdgpu-renderD-") {
                let mut m: amdgpu_image::CriuRenderNode =
                    amdgpu_image::decode_message(&name, &bytes[amdgpu_image::HEADER_LEN..])
                        .expect("decode a render-node image");
                assert_eq!(m.dump_id.take().map(|i| i.len()), Some(16));
                return (name, format!("{m:?}").into_bytes());
            }
            (name, bytes)
        })
        .collect()
}

struct Run {
    calls: Vec<Call>,
    /// The child's outcome (`None`: killed).
    result: Option<String>,
    /// From the kill to the queues running again.
    recovery: Option<Duration>,
    /// Whether the images directory verifies as complete.
    complete: bool,
    /// Temporary files of the killed dumper the guardian removed.
    removed: usize,
    /// The guardian's log (empty when the dump was not killed).
    log: String,
}

/// The temporary files (`.<image>.part-<pid>-<n>`) in `dir`, sorted.
fn part_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read the images dir")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.starts_with('.') && n.contains(".part-"))
        .collect();
    names.sort();
    names
}

/// The parent pid of host process `pid` (`None` once it is gone).
fn parent_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Makes this process the child subreaper of its descendants: a guardian
/// (a grandchild of the CRIU child, orphaned at once by design) is adopted
/// by this process, so the test knows it as its own (`PPid`), reaps it and
/// reads its exit status, and may reach its memory where Yama allows only
/// descendants.
fn adopt_orphans() {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes integers only and
    // changes only which process adopts this one's orphaned descendants.
    let ret = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) };
    assert_eq!(
        ret,
        0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
}

/// The exit code of the adopted guardian `pid` once it has exited (reaped
/// then), `None` while it runs.
fn try_reap(pid: u32) -> Option<i32> {
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    let mut status = 0;
    // SAFETY: `status` is a writable int for the call; WNOHANG never
    // blocks, and `pid` is a process this one adopted.
    let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if ret == 0 {
        return None;
    }
    assert_eq!(
        ret,
        pid,
        "waitpid of guardian {pid}: {}",
        std::io::Error::last_os_error()
    );
    assert!(
        libc::WIFEXITED(status),
        "guardian {pid}: wait status {status:#x}"
    );
    Some(libc::WEXITSTATUS(status))
}

/// Waits for the adopted guardian `pid` to exit (at most the hang guard);
/// its exit code.
fn reap(pid: u32) -> i32 {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Some(code) = try_reap(pid) {
            return code;
        }
        assert!(
            Instant::now() < deadline,
            "hang guard: guardian {pid} runs on"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Accepts the connection of the guardian the killed dumper `dumper` armed
/// (a process this one adopted, not the dumper) as simulated process `pid`;
/// the connection and the guardian's host pid.
fn accept_guardian(server: &Server, dumper: u32, pid: Pid, logs: &Path) -> (Connection, u32) {
    let deadline = Instant::now() + HANG_GUARD;
    let me = std::process::id();
    let rec = Arc::new(Mutex::new(Record::default()));
    loop {
        let adopted = |peer: u32| peer != dumper && parent_of(peer) == Some(me);
        match server.accept_matching(adopted, pid, Duration::from_millis(100), observer(&rec)) {
            Ok(accepted) => return accepted,
            Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) && Instant::now() < deadline => {}
            Err(e) => panic!(
                "the guardian's connection as {pid}: {e}; its logs: {:?}",
                std::fs::read_dir(logs).map(|d| d.count())
            ),
        }
    }
}

/// One dump of a fresh machine by a child process with the guardian armed,
/// killed before call `kill_at`; checks that the guardian (not the test)
/// brought the queues back and cleared the dumper's temporary files, and
/// everything a killed dump must leave as it was.
fn dump_run(images: &Path, shm: &Path, kill: Option<KillAt>, expected: &[u64]) -> Run {
    empty_dir(images);
    let logs = tempfile::tempdir().unwrap();
    let sim = Sim::synthetic(GPUS, SimConfig::default()).expect("simulated machine");
    let mut app = Workload::launch(&sim, &Profile::Basic).expect("launch app");
    app.step().expect("app step");
    let before = Snapshot::take(&sim);
    let rec = Arc::new(Mutex::new(Record {
        kill,
        ..Record::default()
    }));
    let server = Server::new(&sim).expect("serve the machine");
    let dumper = sim.spawn_process().expect("the dumper's process");
    // The simulated process a guardian acts as (it connects only to
    // recover).
    let guardian = sim.spawn_process().expect("the guardian's process");
    sim.ptrace_attach(dumper, app.pid())
        .expect("CRIU seizes the target");
    let files = {
        use std::os::fd::AsRawFd;
        let (files, _) = gpu_files(&app);
        files
            .iter()
            .map(|f| format!("{}:{}", f.fd.as_raw_fd(), f.id))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut child = spawn_child(
        "dump",
        &[
            ("ADDRESS", server.address().to_owned()),
            ("PID", dumper.0.to_string()),
            ("GUARDIAN", guardian.0.to_string()),
            ("LOGS", logs.path().display().to_string()),
            ("TARGET", app.pid().0.to_string()),
            ("FILES", files),
            ("TOPOLOGY", sim.sysfs_root().display().to_string()),
            ("SHM", shm.display().to_string()),
            ("IMAGES", images.display().to_string()),
            ("VMAS", encode_vmas(&device_vmas(&sim))),
        ],
    );
    let child_pid = child.id();
    let connection = accept(&server, &mut child, dumper, &rec);
    let outcome = finish(child, vec![connection]);
    let (calls, killed_at) = {
        let rec = rec.lock().unwrap();
        (rec.calls.clone(), rec.killed_at)
    };
    assert!(!sim.process_alive(dumper), "the dumper's process ended");
    assert_eq!(
        sim.tracer_of(app.pid()),
        None,
        "the dumper's tracee is free"
    );
    let log = logs.path().join(log_name(app.pid().0));
    let mut recovery = None;
    let mut removed = 0;
    let mut log_text = String::new();
    let result = match (killed_at, outcome) {
        (Some(killed_at), None) => {
            // The dumper's leftovers, before the guardian can act (it
            // recovers through the connection accepted below).
            let parts = part_files(images);
            let tag = format!(".part-{child_pid}-");
            assert!(
                parts.iter().all(|p| p.contains(&tag)),
                "only the dumper's temporary files: {parts:?}"
            );
            let paused = sim.kfd_state(app.pid()).unwrap().queues_paused;
            let (connection, guardian_pid) =
                accept_guardian(&server, child_pid, guardian, logs.path());
            // The queues run again when the guardian's UNPAUSE lands.
            let deadline = Instant::now() + HANG_GUARD;
            let mut exit = None;
            loop {
                let state = sim.kfd_state(app.pid()).unwrap();
                if state.queues_running() && !state.queues_paused {
                    break;
                }
                assert!(
                    exit.is_none(),
                    "the guardian exited ({exit:?}) and the queues stay stopped: {state:?}; \
                     its log: {:?}",
                    std::fs::read_to_string(&log)
                );
                assert!(Instant::now() < deadline, "hang guard: {state:?}");
                std::thread::sleep(Duration::from_micros(200));
                // Read after the state: its exit comes after its UNPAUSE.
                exit = try_reap(guardian_pid);
            }
            recovery = Some(killed_at.elapsed());
            let exit = exit.unwrap_or_else(|| reap(guardian_pid));
            assert_eq!(exit, 0, "the guardian recovered the app");
            connection.join();
            assert!(!sim.process_alive(guardian), "the guardian's process ended");
            assert_eq!(sim.tracer_of(app.pid()), None, "the guardian detached");
            let text = std::fs::read_to_string(&log).expect("the guardian's log");
            let pid = app.pid().0;
            assert!(
                text.contains(&format!("the dumper (pid {child_pid}) ended")),
                "{text}"
            );
            let said = if paused {
                "GPU queues unpaused"
            } else {
                "GPU queues were not paused"
            };
            assert!(text.contains(&format!("pid {pid}: {said}\n")), "{text}");
            // Its temporary files are gone but for the unfinished-dump mark
            // of the paused process (one KFD file here), each one logged.
            let kept = part_files(images);
            assert!(
                kept.len() == 1 && kept[0].starts_with(".amdgpu-kfd-"),
                "the mark stays, alone: {kept:?} of {parts:?}\n{text}"
            );
            assert!(
                text.contains(&format!("kept {} (the unfinished-dump mark", kept[0])),
                "{text}"
            );
            let gone: Vec<&String> = parts.iter().filter(|p| !kept.contains(p)).collect();
            for p in &gone {
                assert!(text.contains(&format!("removed {p}\n")), "{p}: {text}");
            }
            removed = gone.len();
            log_text = text;
            None
        }
        (None, Some((result, out))) => {
            // The guardians of a dump that ended: each exits at once and
            // writes nothing; none connected.
            let pids: Vec<u32> = out
                .lines()
                .find_map(|l| l.strip_prefix("GUARDIANS"))
                .unwrap_or_else(|| panic!("no GUARDIANS from the child: {out}"))
                .split_whitespace()
                .map(|p| p.parse().expect("a guardian's pid"))
                .collect();
            assert_eq!(pids.len(), 1, "one guardian per paused process: {out}");
            for pid in pids {
                assert_ne!(parent_of(pid), Some(child_pid), "not the dumper's child");
                assert_eq!(reap(pid), 0, "the guardian of a finished dump");
            }
            assert_eq!(std::fs::read_dir(logs.path()).unwrap().count(), 0, "no log");
            assert_eq!(
                part_files(images),
                Vec::<String>::new(),
                "no temporary file"
            );
            sim.exit_process(guardian).unwrap();
            Some(result)
        }
        (killed, outcome) => panic!("killed at {killed:?}, but the child said {outcome:?}"),
    };
    let state = sim.kfd_state(app.pid()).unwrap();
    assert!(state.queues_running() && !state.queues_paused, "{state:?}");
    assert_eq!(
        common::steps_after(&mut app, NEXT_STEPS),
        expected,
        "the next steps"
    );
    let after = Snapshot::take(&sim);
    assert_eq!(after.accounting, before.accounting, "nothing leaked");
    Run {
        calls,
        result,
        recovery,
        complete: set_looks_complete(images),
        removed,
        log: log_text,
    }
}

fn a_dumper_process_killed_at_any_stage_leaves_the_app_recoverable_and_nothing_leaked() {
    if !served_machine_can_run() {
        return;
    }
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let expected = {
        let sim = Sim::synthetic(GPUS, SimConfig::default()).unwrap();
        let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
        app.step().unwrap();
        common::steps_after(&mut app, NEXT_STEPS)
    };
    let clean = dump_run(images.path(), shm.path(), None, &expected);
    assert_eq!(clean.result.as_deref(), Some("ok"), "the clean dump");
    assert!(clean.complete, "the clean dump is complete");
    // The child's dump copied every BO through its own staging memory (the
    // simulator's SDMA engine writing the child's pages): its images hold
    // what an in-process dump of the same machine holds.
    let local = tempfile::tempdir().unwrap();
    {
        let sim = Sim::synthetic(GPUS, SimConfig::default()).unwrap();
        let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
        app.step().unwrap();
        let (files, _) = gpu_files(&app);
        let quiet = criu_plugin_amdgpu::log::Capture::start();
        faults_common::MiniCriu::new(&sim, shm.path())
            .dump(
                |pid| sim.driver(pid),
                EmulatedHost::new(local.path(), None),
                app.pid(),
                &files,
                &device_vmas(&sim),
            )
            .expect("the in-process dump");
        drop(quiet);
    }
    assert_eq!(
        image_files(images.path()),
        image_files(local.path()),
        "the child's images are the in-process dump's"
    );
    let mut removed = 0;
    for (label, at) in dump_kill_stages(&clean.calls, GPUS) {
        let killed = dump_run(
            images.path(),
            shm.path(),
            Some(KillAt::of(&clean.calls, at)),
            &expected,
        );
        let took = killed.recovery.expect("the dumper was killed");
        // Also at DUMP_DEVICES_LATE, where every amdgpu image is committed:
        // the dumper keeps an uncommitted file per paused process until it
        // unpauses it, and a SIGKILL leaves it behind.
        assert!(
            !killed.complete,
            "{label}: a killed dump never verifies as complete"
        );
        println!(
            "SIGKILL {label} (call {at}): the guardian had the queues run again {took:?} after \
             the kill; it removed {} temporary files",
            killed.removed
        );
        for line in killed.log.lines() {
            println!("    {line}");
        }
        removed += killed.removed;
    }
    assert!(removed > 0, "some stage left temporary files to remove");
}

/// One restore of a clean dump's images on a fresh machine by a child
/// process (main restorer and restored task), killed before call
/// `kill_at`: the half-restored task is gone and the simulator holds what
/// it held before. Its calls and whether the restore failed.
fn restore_run(kill: Option<KillAt>) -> (Vec<Call>, bool) {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let sim = Sim::synthetic(GPUS, SimConfig::default()).expect("simulated machine");
    let (pid, ids, ()) = faults_common::dump_and_kill(&sim, images.path(), shm.path(), |_| ());
    let before = Snapshot::take(&sim);
    let rec = Arc::new(Mutex::new(Record {
        kill,
        ..Record::default()
    }));
    let server = Server::new(&sim).expect("serve the machine");
    let task = sim
        .spawn_process_with(ProcessConfig {
            pid: Some(pid),
            ..ProcessConfig::default()
        })
        .expect("recreate the task");
    let main = sim.spawn_process().expect("the main restorer's process");
    let mut child = spawn_child(
        "restore",
        &[
            ("ADDRESS", server.address().to_owned()),
            ("MAIN", main.0.to_string()),
            ("TASK", task.0.to_string()),
            (
                "IDS",
                ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            ),
            ("TOPOLOGY", sim.sysfs_root().display().to_string()),
            ("SHM", shm.path().display().to_string()),
            ("IMAGES", images.path().display().to_string()),
            ("VMAS", encode_vmas(&device_vmas(&sim))),
        ],
    );
    let connections = [main, task]
        .into_iter()
        .map(|p| accept(&server, &mut child, p, &rec))
        .collect();
    let result = finish(child, connections).map(|(result, _)| result);
    let killed = rec.lock().unwrap().killed_at.is_some();
    let failed = match result.as_deref() {
        None => {
            assert!(killed, "the child died only of the kill");
            true
        }
        Some("ok 0") => {
            assert!(!killed);
            false
        }
        Some(other) => {
            assert!(!killed, "a killed child answers nothing");
            eprintln!("restore: {other}");
            true
        }
    };
    assert!(!sim.process_alive(main), "the main restorer ended");
    assert!(
        sim.kfd_state(pid).is_none() && !sim.process_alive(pid),
        "the half-restored task is gone"
    );
    let after = Snapshot::take(&sim);
    assert_eq!(after.accounting, before.accounting, "nothing leaked");
    let calls = rec.lock().unwrap().calls.clone();
    (calls, failed)
}

fn a_restorer_process_killed_at_any_stage_leaves_no_half_restored_task_and_nothing_leaked() {
    if !served_machine_can_run() {
        return;
    }
    let (calls, failed) = restore_run(None);
    assert!(!failed, "the clean restore succeeds");
    for (label, at) in restore_kill_stages(&calls) {
        let started = Instant::now();
        let (_, failed) = restore_run(Some(KillAt::of(&calls, at)));
        assert!(failed, "{label}: the restore fails");
        println!(
            "SIGKILL {label} (call {at}): the half-restored task is gone, nothing leaked ({:?} for the run)",
            started.elapsed()
        );
    }
}
