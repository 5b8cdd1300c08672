//! Parallel restore: the restored task hands its BO contents to CRIU's main
//! process, which copies them in the background while the task restores the
//! rest of its state.
//!
//! Roles and order (a single-process tree, CRIU with `POST_FORKING`):
//!
//! 1. `init(RESTORE)`, main process: [`ParallelRestore::plan`] decides and
//!    binds a listening `AF_UNIX` stream socket under the abstract name
//!    `\0/criu-amdgpu-parallel-<run id>` (CRIU's `criu_run_id`, or a random
//!    UUID-like string when CRIU has none).
//! 2. `POST_FORKING`, main process: [`ParallelRestore::start`] starts the
//!    worker thread (asynchronous signals blocked, so CRIU's `SIGCHLD`
//!    handling stays on CRIU's thread). It accepts one connection per KFD
//!    file and copies each command's BOs from the pages files into the
//!    dma-bufs that came with it, one copy engine per GPU, all GPUs in
//!    parallel, through the same pipeline as the in-task restore
//!    ([`crate::transfer::restore_pages`], checksums verified).
//! 3. `RESTORE_EXT_FILE`, restored task: after `CRIU_OP RESTORE`,
//!    [`hand_off`] connects and sends the [`Command`] and the BOs' dma-bufs
//!    (`SCM_RIGHTS`), then returns without waiting for the copy.
//! 4. `RESUME_DEVICES_LATE`, main process: [`ParallelRestore::finish`] sends
//!    the quit command (an all-zero header), joins the worker and reports
//!    every failed copy; the caller resumes the process only when there was
//!    none.
//!
//! Fixed compared with the C plugin (plugins/amdgpu, HEAD):
//! - offsets in a command are 64-bit and restart at 0 for every GPU's pages
//!   file (the C plugin sums them across GPUs, so every GPU after the first
//!   read the wrong bytes), and the worker checks each one against the pages
//!   layout before copying;
//! - every send and receive loops until complete (`write_all`/`read_exact`,
//!   fds in batches of at most [`FDS_PER_MESSAGE`]);
//! - a command without BOs is served like any other: only the explicit quit
//!   header ends the worker (the C worker stopped at the first command with
//!   no fds), and a failed command does not stop the worker either;
//! - a failed copy is never silent: [`ParallelRestore::finish`] returns it and
//!   the process is not resumed;
//! - a connection from another user id is refused (`SO_PEERCRED`), and a
//!   connection that stalls times out instead of hanging the restore.
//!
//! Caveat: the name is abstract, so it lives in CRIU's network namespace. A
//! task restored into a new network namespace (a container's) cannot reach
//! it: its connect fails and it restores its BO contents itself, logging
//! why (`restore::kfd`). The worker is a thread of CRIU's main process,
//! which joins the restored tree's mount namespace while it runs; the
//! thread therefore takes a filesystem context of its own first
//! (`worker::spawn_worker`), as the kernel lets a process join a mount
//! namespace only when no other thread shares its context.
//!
//! This module never decides whether the images are compatible or how BOs
//! are re-created: the task has done that before it hands off. It never
//! reads a stream (a stream cannot be read by two processes), and never
//! touches CRIU's symbols (the host passes what CRIU says).
//!
//! Inside: `protocol` is the wire format (header, arrays, the order of an
//! exchange), `fdpass` moves fds across the socket, `worker` is the thread
//! in the main process; this module decides, names the socket, hands a
//! task's BOs off and drives the worker's life. Everything public is
//! re-exported here.

mod fdpass;
mod protocol;
mod worker;

use std::io::{self, Read};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::sync::Arc;
use std::thread::JoinHandle;

use amdgpu_image::{DirStore, ValidatedKfd};
use kfd::{Driver, RestoredBo};

pub use self::fdpass::{recv_fds, send_fds, FDS_PER_MESSAGE};
pub use self::protocol::{
    build_command, connect, send_command, send_command_on, Command, CommandError, Entry, GpuRoute,
    MAX_ENTRIES, MAX_GPUS,
};
pub use self::worker::{copy_command, CommandOutcome, WorkerReport, COMMAND_TIMEOUT};

use crate::error::Error;
use crate::options::Options;
use crate::transfer::GpuTarget;

/// What CRIU says about a restore, for the choice of parallel restore
/// (asked once, in the main process at `init(RESTORE)`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParallelFacts {
    /// CRIU calls `POST_FORKING` (`max_hooks >= 13`, CRIU v4.2 and later).
    pub calls_post_forking: bool,
    /// Whether the process tree is a single process (the pstree root has
    /// no children); `None` when CRIU does not say.
    pub single_process: Option<bool>,
    /// The images come from CRIU's image streamer (`--stream`).
    pub streaming: bool,
    /// CRIU's `criu_run_id`, when it has one.
    pub run_id: Option<String>,
    /// The user turned parallel restore off
    /// ([`Options::parallel_restore`]: `amdgpu.parallel-restore=no` or
    /// `AMDGPU_PLUGIN_PARALLEL_RESTORE=0`).
    pub turned_off: bool,
}

impl ParallelFacts {
    /// Why parallel restore cannot be used, or `None` when it can.
    pub fn refusal(&self) -> Option<&'static str> {
        if self.turned_off {
            Some("turned off (amdgpu.parallel-restore=no or AMDGPU_PLUGIN_PARALLEL_RESTORE=0)")
        } else if !self.calls_post_forking {
            Some("this CRIU has no POST_FORKING hook (needs CRIU v4.2 or later)")
        } else if self.single_process != Some(true) {
            Some(match self.single_process {
                Some(_) => "the process tree has more than one process",
                None => "CRIU does not say whether the process tree is a single process",
            })
        } else if self.streaming {
            Some("the images come from the image streamer, which one process reads in order")
        } else {
            None
        }
    }
}

/// What the worker copies with: its own driver (in CRIU's main process)
/// and the images directory.
pub struct Copier {
    /// The main process's driver, shared with the worker thread (which
    /// outlives the hook that starts it); the worker opens private render
    /// nodes through it.
    pub driver: Arc<dyn Driver>,
    /// The images directory (never a stream).
    pub images: DirStore,
}

impl std::fmt::Debug for Copier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Copier")
            .field("images", &self.images)
            .finish_non_exhaustive()
    }
}

/// The abstract socket name of one restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketName(String);

impl SocketName {
    /// `/criu-amdgpu-parallel-<run id>` (the leading NUL of the abstract
    /// namespace is implied); a random UUID-like id when CRIU gives none or
    /// one with characters other than letters, digits and `-`.
    pub fn for_run(run_id: Option<&str>) -> SocketName {
        let id = match run_id {
            Some(id)
                if !id.is_empty()
                    && id.len() <= 64
                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
            {
                id.to_owned()
            }
            _ => random_run_id(),
        };
        SocketName(format!("/criu-amdgpu-parallel-{id}"))
    }

    /// The name without the leading NUL.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn addr(&self) -> io::Result<SocketAddr> {
        SocketAddr::from_abstract_name(self.0.as_bytes())
    }
}

impl std::fmt::Display for SocketName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "@{}", self.0)
    }
}

/// 36 characters in the form of a UUID, from `/dev/urandom` (or the clock
/// and pid when it cannot be read).
fn random_run_id() -> String {
    let mut bytes = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes[..12].copy_from_slice(&nanos.to_le_bytes()[..12]);
        bytes[12..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// In the restored task: sends the command for a restored KFD file and the
/// BOs' dma-bufs to the main process over `stream` (from [`connect`]);
/// returns the bytes it will copy. The task does not wait for the copy
/// (`RESUME_DEVICES_LATE` does).
pub fn hand_off(
    stream: std::os::unix::net::UnixStream,
    socket: &SocketName,
    image: &ValidatedKfd,
    gpus: &[GpuTarget],
    restored: &[RestoredBo],
) -> Result<u64, Error> {
    let (command, fds) = build_command(image, gpus, restored)?;
    let bytes: u64 = command.entries.iter().map(|e| e.size).sum();
    send_command_on(stream, &command, &fds)?;
    log::info!(
        "file {}: {} BOs ({bytes} bytes) on {} GPUs handed to CRIU's main process ({socket})",
        command.id,
        command.entries.len(),
        command.gpus.len()
    );
    Ok(bytes)
}

/// Parallel restore in CRIU's main process: the socket from `init`, then
/// the worker from `POST_FORKING` to `RESUME_DEVICES_LATE`. Dropping it
/// stops the worker.
#[derive(Debug)]
pub struct ParallelRestore {
    socket: SocketName,
    listener: Option<UnixListener>,
    worker: Option<JoinHandle<WorkerReport>>,
}

impl ParallelRestore {
    /// At `init(RESTORE)`: parallel restore when `facts` allow it and the
    /// socket can be bound; otherwise `None` (the tasks restore their BO
    /// contents themselves). The choice is logged.
    pub fn plan(facts: &ParallelFacts) -> Option<ParallelRestore> {
        if let Some(reason) = facts.refusal() {
            log::info!("parallel restore disabled: {reason}");
            return None;
        }
        let socket = SocketName::for_run(facts.run_id.as_deref());
        let bound = socket
            .addr()
            .and_then(|addr| UnixListener::bind_addr(&addr));
        match bound {
            Ok(listener) => {
                log::info!("parallel restore enabled: BO contents are copied by CRIU's main process (socket {socket})");
                Some(ParallelRestore {
                    socket,
                    listener: Some(listener),
                    worker: None,
                })
            }
            Err(e) => {
                log::warn!(
                    "parallel restore disabled: cannot listen on {socket}: {e}; the tasks restore their BO contents"
                );
                None
            }
        }
    }

    /// What a restored task's copy of this state is after CRIU forked it
    /// from the main process: the socket's name, no listener (CRIU closes
    /// every inherited fd in a new task) and no worker (threads do not
    /// survive a fork).
    pub fn inherited(&self) -> ParallelRestore {
        ParallelRestore {
            socket: self.socket.clone(),
            listener: None,
            worker: None,
        }
    }

    /// The socket the tasks send to.
    pub fn socket(&self) -> &SocketName {
        &self.socket
    }

    /// Whether the worker runs.
    pub fn running(&self) -> bool {
        self.worker.is_some()
    }

    /// At `POST_FORKING`: starts the worker.
    pub fn start(&mut self, copier: Copier, options: Options) -> Result<(), Error> {
        let listener = self.listener.take().ok_or(Error::WorkerStarted)?;
        let worker = worker::spawn_worker(listener, copier, options)
            .map_err(Error::io("starting the parallel restore worker"))?;
        self.worker = Some(worker);
        log::debug!("parallel restore worker started on {}", self.socket);
        Ok(())
    }

    /// Stops the worker (the quit command, then a join) and returns what it
    /// did; `None` when it was not running.
    pub fn finish(&mut self) -> Option<Result<WorkerReport, Error>> {
        let worker = self.worker.take()?;
        // Commands already sent are queued before this connection, so the
        // worker serves them first. A worker that already ended (its accept
        // failed) refuses the connection; the join below reports why.
        let quit = protocol::send_quit(&self.socket);
        if let Err(e) = quit {
            log::debug!("parallel restore: quit command not delivered: {e}");
            if !worker.is_finished() {
                // Without the quit command the worker would wait forever.
                return Some(Err(Error::io(format!(
                    "telling the parallel restore worker on {} to quit",
                    self.socket
                ))(e)));
            }
        }
        Some(worker.join().map_err(|_| Error::Transfer {
            gpu_id: 0,
            step: "parallel restore worker",
            reason: "the worker thread panicked".into(),
        }))
    }
}

impl Drop for ParallelRestore {
    fn drop(&mut self) {
        match self.finish() {
            None | Some(Ok(_)) => {}
            Some(Err(e)) => log::error!("parallel restore: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_restore_needs_every_fact() {
        let ok = ParallelFacts {
            calls_post_forking: true,
            single_process: Some(true),
            streaming: false,
            run_id: None,
            turned_off: false,
        };
        assert_eq!(ok.refusal(), None);
        let refused = [
            ParallelFacts {
                calls_post_forking: false,
                ..ok.clone()
            },
            ParallelFacts {
                single_process: Some(false),
                ..ok.clone()
            },
            ParallelFacts {
                single_process: None,
                ..ok.clone()
            },
            ParallelFacts {
                streaming: true,
                ..ok.clone()
            },
            ParallelFacts {
                turned_off: true,
                ..ok.clone()
            },
        ];
        for facts in refused {
            assert!(facts.refusal().is_some(), "{facts:?}");
        }
        assert!(ParallelRestore::plan(&ParallelFacts::default()).is_none());
    }

    #[test]
    fn socket_names_use_the_run_id_or_a_random_one() {
        let id = "0f6a3c1e-1b2c-4d5e-8f90-123456789abc";
        let name = SocketName::for_run(Some(id));
        assert_eq!(name.as_str(), format!("/criu-amdgpu-parallel-{id}"));
        assert_eq!(name.as_str().len(), 22 + 36);
        let a = SocketName::for_run(None);
        let b = SocketName::for_run(Some("bad id/../x"));
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 22 + 36);
    }
}
