//! The dump guardian: a small process that unpauses a dumped process if the
//! dumper (CRIU) dies between `PROCESS_INFO` and `UNPAUSE`.
//!
//! [`Guardian::arm`] is called right after a process was paused. It starts
//! a process outside the dumper's process tree (a double fork whose
//! intermediate is reaped at once, a new session, `/dev/null` for its
//! standard streams, every other inherited fd closed so the dumper's pipes
//! and sockets behave as before) that waits on a pidfd of the dumper and on
//! a pipe from it:
//!
//! * the dump ends (the [`Guardian`] is dropped, after `UNPAUSE` or a
//!   failure the engine handled): a byte on the pipe, the guardian exits
//!   without a trace;
//! * the dumper dies first: its death detached the paused process, so the
//!   guardian makes its own driver ([`GuardianDriver`]: the host's, or a
//!   new connection of its own to a served simulated machine), seizes the
//!   process, takes its KFD fd and issues `UNPAUSE` exactly as
//!   `amdgpu-criu unpause` does ([`crate::recover`]), through a pidfd of
//!   the process opened when it was armed ([`Guardian::arm_pinned`]): a
//!   process that got the pid after the paused one exited is never
//!   touched; it removes the dead
//!   dumper's temporary image files ([`Leftovers`]) but keeps the
//!   unfinished-dump marks, so the image set still reads as incomplete; and
//!   it appends what it did to `amdgpu-guardian-<pid>.log` in the dump
//!   log's directory.
//!
//! It never acts while the dumper lives, never thaws a frozen cgroup (the
//! log says how) and never writes anything when the dump ends normally.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amdgpu_image::ImageName;
use kfd::{Driver, HostDriver};

use crate::recover::{unpause_process, unpause_process_pinned, RecoverError};
use crate::sys;

/// The file name the guardian of process `pid` logs to.
pub fn log_name(pid: u32) -> String {
    format!("amdgpu-guardian-{pid}.log")
}

/// How long the guardian waits for the dead dumper's tracee to be released
/// (the kernel detaches it as the dumper exits; its threads may lag).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Makes the driver the guardian process works through.
type Connect = dyn Fn() -> io::Result<Box<dyn Driver>> + Send + Sync;

/// How the guardian process reaches the machine: a factory it calls in its
/// own process, after the fork and only once the dumper has died, so it
/// never shares the dumper's driver state (a connection, a lock another
/// thread of the dumper held at the fork). [`GuardianDriver::host`], the
/// default, is the real kernel.
///
/// The factory runs in the forked copy of a possibly multi-threaded
/// process: it must not take a lock another thread of the dumper could
/// hold (stdio, `log`, the dumper's mutexes); allocating is fine (glibc
/// leaves `malloc` usable after fork), so are locks of objects it creates.
#[derive(Clone)]
pub struct GuardianDriver {
    connect: Arc<Connect>,
    what: &'static str,
}

impl GuardianDriver {
    /// The host's kernel ([`HostDriver`]).
    pub fn host() -> GuardianDriver {
        GuardianDriver {
            connect: Arc::new(|| Ok(Box::new(HostDriver))),
            what: "host",
        }
    }

    /// The driver `connect` makes (see the contract on [`GuardianDriver`]);
    /// `what` names it in `Debug`.
    pub fn new(
        what: &'static str,
        connect: impl Fn() -> io::Result<Box<dyn Driver>> + Send + Sync + 'static,
    ) -> GuardianDriver {
        GuardianDriver {
            connect: Arc::new(connect),
            what,
        }
    }

    /// Makes the driver (in the guardian process).
    pub fn connect(&self) -> io::Result<Box<dyn Driver>> {
        (self.connect)()
    }
}

impl Default for GuardianDriver {
    fn default() -> Self {
        GuardianDriver::host()
    }
}

impl std::fmt::Debug for GuardianDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GuardianDriver({})", self.what)
    }
}

/// The paused process, as the dumper's driver names processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracee {
    /// Its pid.
    pub pid: u32,
    /// Its tracer: the dumper (whose death releases it).
    pub tracer: u32,
}

/// The dumper's temporary image files the guardian removes after the
/// dumper's death: in the images directory `dir`, the files a writer of
/// process `writer` (the dumper's host pid) started and never committed,
/// `.<image>.part-<writer>-<n>` ([`amdgpu_image::DirStore`] names them so),
/// but the unfinished-dump marks.
///
/// A mark ([`amdgpu_image::DirStore::mark_unfinished`]) is named like its
/// KFD image's temporary file, `.amdgpu-kfd-<id>.img.part-<pid>-<n>`, so
/// the name alone cannot tell them apart. The guardian knows its own
/// file's `mark` by its exact name: it keeps it and removes the other
/// temporary KFD images of the same file id. Those of other file ids may
/// be the marks of other processes the dumper paused, and are kept (the
/// safe side: a kept one only says the set is incomplete, and a KFD image
/// is small). Pages files, render-node and the other images go.
#[derive(Debug)]
pub struct Leftovers {
    /// The images directory (a handle of its own, so a rename or a
    /// `/proc/self/fd` path of the dumper does not matter).
    pub dir: OwnedFd,
    /// The dumper's host pid, as its temporary files name it.
    pub writer: u32,
    /// The guardian's own file's unfinished-dump mark (its file name), when
    /// the dumper made one.
    pub mark: Option<String>,
}

/// What a temporary file's name says: (the image it was for, the writer's
/// pid), or `None` for a name that is not one.
fn temporary_file(name: &str) -> Option<(ImageName, u32)> {
    let (image, rest) = name.strip_prefix('.')?.rsplit_once(".part-")?;
    let (pid, n) = rest.split_once('-')?;
    n.parse::<u64>().ok()?;
    Some((ImageName::parse(image).ok()?, pid.parse().ok()?))
}

impl Leftovers {
    /// Why the temporary file `name` of the writer stays, `None` when it
    /// goes.
    fn keeps(&self, name: &str) -> Option<&'static str> {
        let Some((ImageName::Kfd { id }, _)) = temporary_file(name) else {
            return None;
        };
        if self.mark.as_deref() == Some(name) {
            return Some("the unfinished-dump mark: the set stays incomplete");
        }
        let own = self
            .mark
            .as_deref()
            .and_then(temporary_file)
            .is_some_and(|(image, _)| image == ImageName::Kfd { id });
        (!own).then_some(
            "the mark of another process of the dump, or its KFD image: \
             by name they cannot be told apart",
        )
    }

    /// Removes the writer's temporary files but the ones it keeps; what
    /// was removed and what was kept, as log lines.
    fn clear(&self) -> String {
        let base = format!("/proc/self/fd/{}", self.dir.as_raw_fd());
        let entries = match std::fs::read_dir(&base) {
            Ok(entries) => entries,
            Err(e) => {
                return format!(
                    "amdgpu guardian: cannot list the images directory ({e}); the dead dumper's \
                     temporary files (.*.part-{}-*) are left there\n",
                    self.writer
                )
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| temporary_file(n).is_some_and(|(_, pid)| pid == self.writer))
            .collect();
        names.sort();
        let mut text = String::new();
        for name in names {
            if let Some(why) = self.keeps(&name) {
                text += &format!("amdgpu guardian: kept {name} ({why})\n");
                continue;
            }
            match std::fs::remove_file(format!("{base}/{name}")) {
                Ok(()) => text += &format!("amdgpu guardian: removed {name}\n"),
                // Another guardian of the same dumper was first.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => text += &format!("amdgpu guardian: cannot remove {name}: {e}\n"),
            }
        }
        text
    }
}

/// An armed guardian. Dropping it tells the guardian the dump ended.
#[derive(Debug)]
pub struct Guardian {
    done: Option<OwnedFd>,
    pid: u32,
    target: u32,
}

/// Why a guardian could not start (the dump goes on; recovery after a
/// dumper's death is then manual).
#[derive(Debug, thiserror::Error)]
#[error("cannot start the dump guardian for pid {target} ({step}: {source}); if this dump is killed, run `amdgpu-criu unpause --pid {target}`")]
pub struct GuardianError {
    /// The paused process.
    pub target: u32,
    /// The failed step.
    pub step: &'static str,
    /// The system's answer.
    pub source: io::Error,
}

impl Guardian {
    /// Starts the guardian of paused process `target`, watching the calling
    /// process (the dumper, the target's tracer); if the dumper dies first
    /// it recovers the target through `driver` (made in the guardian),
    /// removes the dumper's `leftovers` and logs to `log_dir`. It knows the
    /// target by its pid alone: [`arm_pinned`](Self::arm_pinned) is the
    /// safer form.
    pub fn arm(
        target: Tracee,
        log_dir: &Path,
        driver: &GuardianDriver,
        leftovers: Option<Leftovers>,
    ) -> Result<Guardian, GuardianError> {
        Self::start(target, None, log_dir, driver, leftovers)
    }

    /// [`arm`](Self::arm) with `target_pidfd`, a pidfd of the paused
    /// process opened through the dumper's driver while it is paused (so it
    /// names that very process): the guardian recovers it through that
    /// pidfd, and a process that holds its pid after it exited is never
    /// seized nor unpaused.
    pub fn arm_pinned(
        target: Tracee,
        target_pidfd: OwnedFd,
        log_dir: &Path,
        driver: &GuardianDriver,
        leftovers: Option<Leftovers>,
    ) -> Result<Guardian, GuardianError> {
        Self::start(target, Some(target_pidfd), log_dir, driver, leftovers)
    }

    fn start(
        target: Tracee,
        target_fd: Option<OwnedFd>,
        log_dir: &Path,
        driver: &GuardianDriver,
        leftovers: Option<Leftovers>,
    ) -> Result<Guardian, GuardianError> {
        let fail = |step| {
            move |source| GuardianError {
                target: target.pid,
                step,
                source,
            }
        };
        let dumper = std::process::id();
        // The dumper is a host process whatever the driver: watched by a
        // real pidfd.
        let dumper_fd = HostDriver
            .pidfd_open(dumper)
            .map_err(fail("pidfd_open of the dumper"))?;
        let (done_r, done_w) = sys::pipe().map_err(fail("pipe"))?;
        let log = log_dir.join(log_name(target.pid));
        let mut keep = vec![dumper_fd.as_raw_fd(), done_r.as_raw_fd()];
        keep.extend(leftovers.as_ref().map(|l| l.dir.as_raw_fd()));
        keep.extend(target_fd.as_ref().map(AsRawFd::as_raw_fd));
        let driver = driver.clone();
        // The crate's one unsafe call outside `sys` and `handles`: whether
        // the forked body is sound is this caller's to prove.
        #[allow(unsafe_code)]
        // SAFETY: the guardian's body takes no lock of the dumper: it polls
        // and reads its kept fds, formats its log (allocation only), writes
        // files it opens itself and reaches the machine through the
        // driver factory, whose contract ([`GuardianDriver`]) forbids
        // taking the dumper's locks; it uses no fd but those in `keep`.
        let pid = unsafe {
            sys::spawn_orphan(&keep, move || {
                let watch = Watch {
                    dumper,
                    target,
                    target_fd,
                    driver,
                    leftovers,
                };
                watch.run(dumper_fd, done_r, &log)
            })
        }
        .map_err(fail("fork"))?;
        Ok(Guardian {
            done: Some(done_w),
            pid,
            target: target.pid,
        })
    }

    /// The guardian process's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process it guards.
    pub fn target(&self) -> u32 {
        self.target
    }

    /// Lets the guardian go on watching without telling it the dump ended:
    /// the dumper gives up on a process it could not unpause, and the
    /// guardian recovers it once the dumper has ended.
    pub fn keep_watching(mut self) {
        // Closed without a word: the guardian waits for the dumper's end.
        drop(self.done.take());
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        if let Some(fd) = self.done.take() {
            // A full pipe or a dead guardian: nothing more to tell it.
            let _ = std::fs::File::from(fd).write_all(b"d");
        }
    }
}

/// What the guardian process knows.
struct Watch {
    /// The dumper's host pid.
    dumper: u32,
    target: Tracee,
    /// A pidfd of the target from the time it was armed.
    target_fd: Option<OwnedFd>,
    driver: GuardianDriver,
    leftovers: Option<Leftovers>,
}

impl Watch {
    /// The guardian process's body: returns its exit status.
    fn run(self, dumper_fd: OwnedFd, done: OwnedFd, log: &Path) -> i32 {
        let mut done = std::fs::File::from(done);
        let mut pipe_open = true;
        loop {
            let ready = if pipe_open {
                sys::poll_readable(&[dumper_fd.as_fd(), done.as_fd()])
            } else {
                sys::poll_readable(&[dumper_fd.as_fd()])
            };
            let Ok(ready) = ready else { return 2 };
            if pipe_open && ready[1] {
                let mut byte = [0u8; 1];
                match done.read(&mut byte) {
                    Ok(1) => return 0,
                    // The dumper closed the pipe without a word (it cannot
                    // have exec'd: the pipe is close-on-exec); the pidfd
                    // decides.
                    _ => pipe_open = false,
                }
            }
            if ready[0] {
                break;
            }
        }
        // The dumper is gone. Did it end the dump just before?
        if pipe_open && nonblocking_byte(&done) {
            return 0;
        }
        self.recover(log)
    }

    fn recover(&self, log: &Path) -> i32 {
        let (dumper, target) = (self.dumper, self.target.pid);
        let mut text = format!(
            "amdgpu guardian: the dumper (pid {dumper}) ended before the dump of pid {target} finished\n"
        );
        let code = match self.driver.connect() {
            Ok(driver) => self.unpause(&driver, &mut text),
            Err(e) => {
                text += &format!(
                    "amdgpu guardian: pid {target}: cannot reach the machine ({e}); recover it with `amdgpu-criu unpause --pid {target}`\n"
                );
                1
            }
        };
        if let Some(leftovers) = &self.leftovers {
            text += &leftovers.clear();
        }
        let _ = append(log, &text);
        code
    }

    fn unpause(&self, driver: &dyn Driver, text: &mut String) -> i32 {
        let target = self.target.pid;
        let started = Instant::now();
        let result = loop {
            let attempt = match &self.target_fd {
                Some(pidfd) => unpause_process_pinned(&driver, target, pidfd.as_fd()),
                None => unpause_process(&driver, target),
            };
            match attempt {
                // The kernel is still detaching the dead dumper's tracees.
                Err(RecoverError::Traced { tracer, .. })
                    if tracer == self.target.tracer && started.elapsed() < RELEASE_WAIT =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other,
            }
        };
        match &result {
            Ok(done) => {
                if done.was_paused {
                    *text += &format!("amdgpu guardian: pid {target}: GPU queues unpaused\n");
                } else {
                    *text +=
                        &format!("amdgpu guardian: pid {target}: GPU queues were not paused\n");
                }
                if let Some(frozen) = &done.frozen {
                    *text += &format!(
                        "amdgpu guardian: pid {target} is still frozen in {frozen}; thaw it with: {}\n",
                        frozen.thaw_command()
                    );
                }
                0
            }
            Err(e) => {
                *text += &format!(
                    "amdgpu guardian: pid {target}: {e}; recover it with `amdgpu-criu unpause --pid {target}`\n"
                );
                1
            }
        }
    }
}

fn nonblocking_byte(done: &std::fs::File) -> bool {
    matches!(sys::poll_ready_now(done.as_fd()), Ok(true))
        && matches!((&*done).read(&mut [0u8; 1]), Ok(1))
}

fn append(log: &Path, text: &str) -> io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?
        .write_all(text.as_bytes())
}

/// The process the caller traces (CRIU seized the tree) that `PROCESS_INFO`
/// reported as `kfd_pid` (its pid in its own pid namespace), as `driver`
/// names processes, with the caller as its tracer. `None` when no such
/// process is found (then nothing can be guarded).
///
/// Through the driver's view of processes ([`Driver::process_status`],
/// [`Driver::caller_pid`], `/proc` listed with [`Driver::list_dir`]): on
/// the host the real `/proc` (`TracerPid`, `NSpid`), in a simulated
/// machine its modelled ptrace.
pub fn locate_target<D: Driver + ?Sized>(driver: &D, kfd_pid: u32) -> Option<Tracee> {
    let me = driver.caller_pid();
    let traced_by_me = |pid: u32| -> bool {
        driver.process_status(pid).is_ok_and(|status| {
            status.tracer == Some(me) && status.ns_pid.unwrap_or(pid) == kfd_pid
        })
    };
    let found = |pid| Tracee { pid, tracer: me };
    // The common case: one pid namespace.
    if traced_by_me(kfd_pid) {
        return Some(found(kfd_pid));
    }
    driver
        .list_dir(Path::new("/proc"))
        .ok()?
        .into_iter()
        .filter_map(|name| name.to_str()?.parse::<u32>().ok())
        .find(|&pid| traced_by_me(pid))
        .map(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_found_through_the_dumper_s_driver() {
        let sim = kfd_sim::Sim::synthetic(1, kfd_sim::SimConfig::default()).unwrap();
        let app = sim.spawn_process().unwrap();
        let dumper = sim.spawn_process().unwrap();
        let other = sim.spawn_process().unwrap();
        sim.ptrace_attach(dumper, app).unwrap();
        assert_eq!(
            locate_target(&sim.driver(dumper), app.0),
            Some(Tracee {
                pid: app.0,
                tracer: dumper.0
            })
        );
        // Traced, but not by the caller; not traced; no such process.
        assert_eq!(locate_target(&sim.driver(other), app.0), None);
        assert_eq!(locate_target(&sim.driver(dumper), other.0), None);
        assert_eq!(locate_target(&sim.driver(dumper), 999_999), None);
    }

    #[test]
    fn temporary_files_are_known_by_their_names() {
        assert_eq!(
            temporary_file(".amdgpu-kfd-7.img.part-123-4"),
            Some((ImageName::Kfd { id: 7 }, 123))
        );
        assert_eq!(
            temporary_file(".amdgpu-pages-7-c0de.img.part-99-0"),
            Some((
                ImageName::Pages {
                    id: 7,
                    gpu_id: 0xc0de
                },
                99
            ))
        );
        for not in [
            "amdgpu-kfd-7.img",
            ".amdgpu-kfd-7.img.part-12",
            ".amdgpu-kfd-7.img.part-x-1",
            ".amdgpu-kfd-7.img.part-1-x",
            ".core-1.img.part-1-1",
            ".amdgpu-kfd-7.img",
        ] {
            assert_eq!(temporary_file(not), None, "{not}");
        }
    }

    #[test]
    fn leftovers_of_the_writer_go_but_the_marks() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            // Its own mark, and its file's KFD image never committed.
            ".amdgpu-kfd-7.img.part-50-0",
            ".amdgpu-kfd-7.img.part-50-3",
            // Another paused process's mark (or its image).
            ".amdgpu-kfd-9.img.part-50-4",
            ".amdgpu-pages-7-c0de.img.part-50-1",
            ".amdgpu-renderD-8.img.part-50-2",
            // Another writer's; a committed image; not an amdgpu image.
            ".amdgpu-pages-7-c0de.img.part-51-1",
            "amdgpu-pages-7-beef.img",
            ".core-1.img.part-50-1",
        ];
        for f in files {
            std::fs::write(dir.path().join(f), b"x").unwrap();
        }
        let left = |leftovers: &Leftovers| {
            let text = leftovers.clear();
            let mut left: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            left.sort();
            (left, text)
        };
        let handle = || std::fs::File::open(dir.path()).unwrap().into();
        // Without its mark's name it removes no KFD image.
        let (kept, text) = left(&Leftovers {
            dir: handle(),
            writer: 50,
            mark: None,
        });
        assert_eq!(
            kept,
            [
                ".amdgpu-kfd-7.img.part-50-0",
                ".amdgpu-kfd-7.img.part-50-3",
                ".amdgpu-kfd-9.img.part-50-4",
                ".amdgpu-pages-7-c0de.img.part-51-1",
                ".core-1.img.part-50-1",
                "amdgpu-pages-7-beef.img",
            ]
        );
        assert!(
            text.contains("removed .amdgpu-pages-7-c0de.img.part-50-1\n")
                && text.contains("removed .amdgpu-renderD-8.img.part-50-2\n")
                && text.contains("kept .amdgpu-kfd-7.img.part-50-0 (the mark of another")
                && !text.contains("51-1"),
            "{text}"
        );
        let (kept, text) = left(&Leftovers {
            dir: handle(),
            writer: 50,
            mark: Some(".amdgpu-kfd-7.img.part-50-0".into()),
        });
        assert_eq!(
            kept,
            [
                ".amdgpu-kfd-7.img.part-50-0",
                ".amdgpu-kfd-9.img.part-50-4",
                ".amdgpu-pages-7-c0de.img.part-51-1",
                ".core-1.img.part-50-1",
                "amdgpu-pages-7-beef.img",
            ]
        );
        assert_eq!(
            text,
            "amdgpu guardian: kept .amdgpu-kfd-7.img.part-50-0 (the unfinished-dump mark: the \
             set stays incomplete)\n\
             amdgpu guardian: removed .amdgpu-kfd-7.img.part-50-3\n\
             amdgpu guardian: kept .amdgpu-kfd-9.img.part-50-4 (the mark of another process of \
             the dump, or its KFD image: by name they cannot be told apart)\n"
        );
    }
}
