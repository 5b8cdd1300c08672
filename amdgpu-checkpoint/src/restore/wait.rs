//! Waiting for a buffer another task re-creates, and waking the tasks that
//! wait: [`BufferWait`] says how the host lets a task wait, and
//! [`Restorer::restore_file`] waits that way when a file imports a buffer
//! nobody published yet ([`Restored::WaitForBuffer`]), and wakes the
//! waiting tasks (the handle table's waiter list, `Sharing::wake_task`)
//! when a file is restored, since what it re-created may be what they wait
//! for.
//!
//! Under CRIU's retry protocol a task whose file asked for a retry sleeps
//! until another task sends it a file, which a task publishing a buffer
//! never does: the waiter records itself in the shared table, and the
//! publisher wakes it. This module never re-creates or looks up a buffer
//! itself (`sharing` does) and never talks to CRIU (the host's wake-up
//! comes as a function).

use std::time::{Duration, Instant};

use ::kfd::Driver;
use amdgpu_image::ImageStore;

use super::{Restored, Restorer, Sharing, TaskIdentity};
use crate::error::Error;

/// How long a task polls between looks for a buffer without the retry
/// protocol.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// How a restored task may wait for a buffer another task re-creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferWait {
    /// The host asks again later and lets the task sleep until woken
    /// (CRIU's `retry_needed`, CRIU after 4.2): the task records itself as
    /// a waiter in the shared table and looks once more (a creator that
    /// published in between has woken it already), then answers
    /// [`Restored::WaitForBuffer`].
    Retry,
    /// No retry protocol, but the tasks are restored at the same time
    /// (CRIU before 4.3): the task looks again every few milliseconds for
    /// at most this long, then answers [`Restored::WaitForBuffer`].
    Poll(Duration),
    /// Neither: [`Restored::WaitForBuffer`] is answered at once.
    Never,
}

impl<D: Driver + Clone> Restorer<D> {
    /// `RESTORE_EXT_FILE(id)`. `task` names the restored task and carries
    /// CRIU's `find_unused_fd_pid` (a pid in, a free fd number above all
    /// that task's fds out); `sharing` is what buffers shared between tasks
    /// go through, how this task waits for one ([`BufferWait`]) and how it
    /// wakes the tasks waiting for what it re-creates.
    pub fn restore_file<S: ImageStore + Sync>(
        &mut self,
        store: &S,
        id: u32,
        task: &TaskIdentity<'_>,
        sharing: &Sharing<'_>,
    ) -> Result<Restored, Error> {
        let mut result = self.restore_once(store, id, task, sharing);
        if matches!(result, Ok(Restored::WaitForBuffer)) {
            match sharing.wait {
                BufferWait::Retry => {
                    if let (Some(table), Some(pid)) = (sharing.table, task.pid) {
                        if !table.add_waiter(pid) {
                            log::warn!(
                                "file {id}: no room to wait for its buffer's creator; CRIU \
                                 wakes the task with its next file"
                            );
                        }
                        result = self.restore_once(store, id, task, sharing);
                    }
                }
                BufferWait::Poll(limit) => {
                    let deadline = Instant::now() + limit;
                    while matches!(result, Ok(Restored::WaitForBuffer)) && Instant::now() < deadline
                    {
                        std::thread::sleep(POLL_INTERVAL);
                        result = self.restore_once(store, id, task, sharing);
                    }
                }
                BufferWait::Never => {}
            }
        }
        if matches!(result, Ok(Restored::File(_))) {
            if let Some(table) = sharing.table {
                for waiter in table.waiters() {
                    if Some(waiter) != task.pid {
                        (sharing.wake_task)(waiter);
                    }
                }
            }
        }
        result
    }
}
