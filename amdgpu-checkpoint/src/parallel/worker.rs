//! The parallel restore worker: a thread in CRIU's main process that accepts
//! the restored tasks' connections and copies each command's BOs from the
//! pages files into the dma-bufs that came with it.
//!
//! Each connection is checked (same user id, `SO_PEERCRED`) and bounded in
//! time ([`COMMAND_TIMEOUT`]); each command is copied one copy engine per
//! GPU, all GPUs in parallel, through the in-task restore's pipeline
//! ([`crate::transfer::restore_pages`], checksums verified). Every outcome is
//! kept for [`WorkerReport`]; only the quit command ends the worker. The
//! thread starts with asynchronous signals blocked, so CRIU handles them
//! (above all the restored tasks' `SIGCHLD`) on its own thread, and with a
//! filesystem context of its own, so CRIU's main process can still join
//! the restored mount namespace while it runs.
//!
//! This module never decides whether parallel restore is used and never
//! resumes a process: [`super::ParallelRestore`] reports, the caller
//! decides.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::thread::JoinHandle;
use std::time::Duration;

use amdgpu_image::ImageName;

use super::fdpass::peer_uid;
use super::protocol::{read_command, Command, CommandError};
use super::Copier;
use crate::error::Error;
use crate::options::Options;
use crate::sys;
use crate::transfer;

/// How long the worker waits for the rest of a command once connected.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// What one served command did.
#[derive(Debug)]
pub struct CommandOutcome {
    /// The KFD file id, when the header could be read.
    pub id: Option<u32>,
    /// Bytes copied, or why the command failed.
    pub result: Result<u64, Error>,
}

/// Everything the worker did.
#[derive(Debug, Default)]
pub struct WorkerReport {
    /// One outcome per command received, in arrival order.
    pub commands: Vec<CommandOutcome>,
}

impl WorkerReport {
    /// Bytes copied by the successful commands.
    pub fn bytes(&self) -> u64 {
        self.commands
            .iter()
            .filter_map(|c| c.result.as_ref().ok())
            .sum()
    }

    /// The failed commands.
    pub fn failures(&self) -> impl Iterator<Item = (Option<u32>, &Error)> {
        self.commands
            .iter()
            .filter_map(|c| c.result.as_ref().err().map(|e| (c.id, e)))
    }
}

/// What serving one connection came to.
enum Served {
    Quit,
    Outcome(CommandOutcome),
}

fn serve(stream: &mut UnixStream, copier: &Copier, options: &Options) -> Served {
    match read_command(stream) {
        Ok(None) => Served::Quit,
        Ok(Some((command, fds))) => {
            let id = command.id;
            let result = copy_command(copier, &command, &fds, options);
            match &result {
                Ok(bytes) => log::info!(
                    "parallel restore: file {id}: {bytes} bytes of {} BOs copied",
                    command.entries.len()
                ),
                Err(e) => log::error!("parallel restore: file {id}: {e}"),
            }
            Served::Outcome(CommandOutcome {
                id: Some(id),
                result,
            })
        }
        Err((id, e)) => {
            log::error!("parallel restore: {e}");
            Served::Outcome(CommandOutcome { id, result: Err(e) })
        }
    }
}

/// Copies the BOs of `command` from their pages files into `fds`: one copy
/// engine per GPU, all GPUs in parallel; returns the bytes copied.
pub fn copy_command(
    copier: &Copier,
    command: &Command,
    fds: &[OwnedFd],
    options: &Options,
) -> Result<u64, Error> {
    if fds.len() != command.fd_count as usize {
        return Err(CommandError::FdCount {
            received: fds.len(),
            announced: command.fd_count,
        }
        .into());
    }
    command.validate()?;
    let mut plans = Vec::with_capacity(command.gpus.len());
    for gpu in &command.gpus {
        let (layout, fd_of) = command.layout_of(gpu.user_gpu_id)?;
        plans.push((*gpu, layout, fd_of));
    }
    let results: Vec<Result<u64, Error>> = std::thread::scope(|scope| {
        let workers: Vec<_> = plans
            .into_iter()
            .map(|(gpu, layout, fd_of)| {
                scope.spawn(move || {
                    let name = ImageName::Pages {
                        id: command.id,
                        gpu_id: gpu.user_gpu_id,
                    };
                    let dmabuf_of = |entry: usize| {
                        fd_of
                            .get(&entry)
                            .and_then(|&i| fds.get(i as usize))
                            .map(|f| f.as_fd())
                    };
                    transfer::restore_pages(
                        &copier.driver,
                        &copier.images,
                        &name,
                        layout,
                        gpu.user_gpu_id,
                        gpu.render_minor,
                        options,
                        &dmabuf_of,
                    )
                })
            })
            .collect();
        workers
            .into_iter()
            .zip(&command.gpus)
            .map(|(worker, gpu)| {
                worker.join().unwrap_or_else(|_| {
                    Err(Error::Transfer {
                        gpu_id: gpu.user_gpu_id,
                        step: "parallel restore worker",
                        reason: "the copy thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let mut bytes = 0;
    for result in results {
        bytes += result?;
    }
    Ok(bytes)
}

fn worker_loop(listener: UnixListener, copier: Copier, options: Options) -> WorkerReport {
    let own_uid = rustix::process::geteuid().as_raw();
    let mut report = WorkerReport::default();
    loop {
        let mut stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::error!("parallel restore: accepting a connection failed: {e}");
                report.commands.push(CommandOutcome {
                    id: None,
                    result: Err(Error::io("accepting a parallel restore connection")(e)),
                });
                return report;
            }
        };
        match peer_uid(stream.as_fd()) {
            // Restored tasks run with CRIU's credentials until the restorer
            // blob switches them, long after RESTORE_EXT_FILE.
            Ok(uid) if uid == own_uid => {}
            Ok(uid) => {
                log::warn!("parallel restore: refused a connection from uid {uid}");
                continue;
            }
            Err(e) => {
                log::warn!("parallel restore: refused a connection without credentials: {e}");
                continue;
            }
        }
        if let Err(e) = stream.set_read_timeout(Some(COMMAND_TIMEOUT)) {
            log::warn!("parallel restore: cannot bound the wait for a command: {e}");
        }
        match serve(&mut stream, &copier, &options) {
            Served::Quit => {
                log::debug!("parallel restore: worker told to quit");
                return report;
            }
            Served::Outcome(outcome) => report.commands.push(outcome),
        }
    }
}

/// Starts the worker thread on `listener`, with the asynchronous signals
/// blocked (the calling thread's mask is restored once it is spawned).
///
/// Returns once the thread has a filesystem context of its own
/// (`unshare(CLONE_FS)`): while it runs, CRIU's main process joins the
/// restored tasks' mount namespace (`setns(CLONE_NEWNS)`, to clean up
/// link-remap files and its roots yard, as it does for every container),
/// which the kernel refuses (`EINVAL`) to a process whose threads share
/// one. A thread that cannot get its own is an error: CRIU would fail
/// later, at a step that does not name the plugin.
pub(super) fn spawn_worker(
    listener: UnixListener,
    copier: Copier,
    options: Options,
) -> io::Result<JoinHandle<WorkerReport>> {
    let (ready, own_context) = std::sync::mpsc::sync_channel(1);
    let blocked = sys::block_signals_except(&sys::SYNCHRONOUS_SIGNALS)?;
    let spawned = std::thread::Builder::new()
        .name("amdgpu-parallel".into())
        .spawn(move || {
            let unshared = sys::unshare_fs();
            let ok = unshared.is_ok();
            // The receiver waits for this message; it is gone only if
            // `spawn_worker` itself is, and then nobody needs the answer.
            let _ = ready.send(unshared);
            if !ok {
                return WorkerReport::default();
            }
            worker_loop(listener, copier, options)
        });
    drop(blocked);
    let worker = spawned?;
    match own_context.recv() {
        Ok(Ok(())) => Ok(worker),
        Ok(Err(e)) => {
            let _ = worker.join();
            Err(io::Error::new(
                e.kind(),
                format!(
                    "the worker thread cannot get a filesystem context of its own \
                     (unshare(CLONE_FS): {e}), without which CRIU's main process cannot join \
                     the restored mount namespace; restore with \
                     --plugin-option amdgpu.parallel-restore=no"
                ),
            ))
        }
        Err(_) => {
            let _ = worker.join();
            Err(io::Error::other(
                "the worker thread ended before it started serving",
            ))
        }
    }
}
