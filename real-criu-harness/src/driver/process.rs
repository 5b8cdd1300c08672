//! The application's processes as the tests see them: gates, shared buffers, the started application and the processes it left.

use super::*;

/// A gate the application's queue work waits at before the dump (see
/// `app.c`): writing `value` (`size` bytes, little endian) at GPU VA `va`
/// opens it.
#[derive(Debug, Clone, Copy)]
pub struct Gate {
    /// Where the gate's word is, a GPU virtual address.
    pub va: u64,
    /// Its size in bytes (4 or 8).
    pub size: usize,
    /// The value that opens it.
    pub value: u64,
}

/// A buffer two processes share through a dma-buf (the `share` mode): its
/// GEM handle in this process's render-node file.
#[derive(Debug, Clone, Copy)]
pub struct SharedBo {
    /// The render node's minor.
    pub minor: u32,
    /// The GEM handle.
    pub handle: u32,
    /// Its size in bytes.
    pub size: u64,
}

/// One process of the application as its `ready` file lists it.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Its records' directory (ready, heartbeat).
    pub dir: PathBuf,
    /// Its pid.
    pub pid: u32,
    /// How many queues it created.
    pub queues: usize,
    /// How many events it created.
    pub events: usize,
    /// The BOs it filled.
    pub bos: Vec<FilledBo>,
    /// The GPU VA of its 4 KiB GTT mailbox (beat count, the test's words).
    pub mailbox: u64,
    /// The buffer it shares with another process, in the `share` mode.
    pub shared: Option<SharedBo>,
    /// The gates its queue work waits at (none without queues).
    pub gates: Vec<Gate>,
    /// The read pointers its SDMA and AQL queues stood at, at the gates.
    pub held: Option<(u64, u64)>,
}

impl Proc {
    /// The process its records' directory `dir` describes (`ready`);
    /// panics on a `ready` file that does not say what a process must.
    pub fn parse(dir: &Path) -> Proc {
        let ready = fs::read_to_string(dir.join("ready")).unwrap_or_default();
        let line = |prefix: &str| ready.lines().find(|l| l.starts_with(prefix));
        let state = line("state ").unwrap_or_else(|| panic!("no state in {ready:?}"));
        let shared = line("shared ");
        Proc {
            dir: dir.to_path_buf(),
            pid: field(line("pid=").unwrap_or("pid=0"), "pid")
                .and_then(|p| p.parse().ok())
                .expect("the process's pid"),
            queues: field(state, "queues").unwrap().parse().unwrap(),
            events: field(state, "events").unwrap().parse().unwrap(),
            bos: ready
                .lines()
                .filter(|l| l.starts_with("bo "))
                .map(|l| FilledBo {
                    kind: field(l, "kind").unwrap().to_owned(),
                    node: field(l, "node").unwrap().parse().unwrap(),
                    va: hex(field(l, "va").unwrap()),
                    size: field(l, "size").unwrap().parse().unwrap(),
                    seed: hex(field(l, "seed").unwrap()),
                })
                .collect(),
            mailbox: line("mailbox ")
                .and_then(|l| field(l, "va"))
                .map(hex)
                .expect("the mailbox's address"),
            shared: shared.map(|l| SharedBo {
                minor: field(l, "minor").unwrap().parse().unwrap(),
                handle: field(l, "handle").unwrap().parse().unwrap(),
                size: field(l, "size").unwrap().parse().unwrap(),
            }),
            gates: ready
                .lines()
                .filter(|l| l.starts_with("gate "))
                .map(|l| Gate {
                    va: hex(field(l, "va").unwrap()),
                    size: field(l, "size").unwrap().parse().unwrap(),
                    value: field(l, "value").unwrap().parse().unwrap(),
                })
                .collect(),
            held: line("held ").map(|l| {
                (
                    field(l, "sdma").unwrap().parse().unwrap(),
                    field(l, "aql").unwrap().parse().unwrap(),
                )
            }),
        }
    }

    /// The lines of its heartbeat file, one per beat.
    pub fn heartbeat(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("heartbeat"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Waits until the heartbeat grows by three beats.
    pub fn assert_beats_on(&self, what: &str) {
        let before = self.heartbeat().len();
        let grew = wait_for(Duration::from_secs(10), || {
            self.heartbeat().len() > before + 2
        });
        assert!(
            grew,
            "{what}: the heartbeat of pid {} stopped at {before} beats\n{}",
            self.pid,
            fs::read_to_string(self.dir.join("app.out")).unwrap_or_default()
        );
    }
}

/// One application's life: its scratch directory (images, logs) and its
/// processes (the root first). Whatever of them is still there when it
/// goes, this process's descendants by those pids (a tree a failed restore
/// left half-restored among them), is killed.
pub struct App {
    /// Its images and logs.
    pub scratch: tempfile::TempDir,
    /// Its processes, the root first.
    pub procs: Vec<Proc>,
}

impl App {
    /// `name` in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// The text of `name` in the scratch directory (empty when absent).
    pub fn read(&self, name: &str) -> String {
        fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// The root process's pid.
    pub fn pid(&self) -> u32 {
        self.procs[0].pid
    }

    /// Whether none of its processes is alive.
    pub fn all_gone(&self) -> bool {
        self.procs.iter().all(|p| !alive(p.pid))
    }
}

impl Drop for App {
    fn drop(&mut self) {
        for p in &self.procs {
            kill(p.pid);
        }
        if !wait_for(Duration::from_secs(10), || self.all_gone()) {
            eprintln!(
                "processes of the application outlive it: {:?}",
                self.procs.iter().map(|p| p.pid).collect::<Vec<_>>()
            );
        }
    }
}

/// Kills `pid` when it is this process's descendant: one the test started
/// or CRIU restored under it (this process adopts CRIU's orphans), never a
/// stranger that took the number of one gone.
pub fn kill(pid: u32) {
    if !descends_from_us(pid) {
        return;
    }
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) sends a signal; no memory involved. The pid is a
        // live descendant of this process, which has not reaped it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Whether `pid` is a live descendant of this process (its parents, read
/// from `/proc/PID/stat`, lead here).
pub fn descends_from_us(pid: u32) -> bool {
    let me = std::process::id();
    let mut at = pid;
    // Bounded: a chain of parents is short, and one that changes under the
    // walk must not keep it going.
    for _ in 0..64 {
        if at <= 1 {
            return false;
        }
        let Ok(stat) = fs::read_to_string(format!("/proc/{at}/stat")) else {
            return false;
        };
        // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        match parent {
            Some(p) if p == me => return true,
            Some(p) => at = p,
            None => return false,
        }
    }
    false
}

/// Whether `pid` still exists; a zombie child of this process is reaped
/// first (CRIU's tasks end up children of this process, a subreaper, and a
/// restore needs their pids free).
pub fn alive(pid: u32) -> bool {
    if let Ok(p) = libc::pid_t::try_from(pid) {
        // SAFETY: waitpid(2) with a null status pointer writes no memory;
        // WNOHANG never blocks. A pid that is not our child fails with
        // ECHILD and changes nothing.
        unsafe { libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG) };
    }
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Makes this process the subreaper of everything it starts: the tasks CRIU
/// restores with `-d` (and the dumped application, once its script is
/// gone) become its children, which [`alive`] reaps.
pub fn adopt_orphans() {
    // SAFETY: prctl(2) PR_SET_CHILD_SUBREAPER takes an integer; no memory.
    let ret = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(ret, 0, "PR_SET_CHILD_SUBREAPER");
}

/// Waits for `what` at most `limit`.
pub fn wait_for(limit: Duration, mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if what() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
