//! `RESUME_DEVICES_LATE`: restarting a restored process's GPU queues once
//! its memory is back.
//!
//! This module never restores anything: it only tells the kernel to let a
//! process that `CRIU_OP RESTORE` re-created run again.

use kfd::{Driver, Kfd};

use crate::error::Error;

/// What `RESUME_DEVICES_LATE(pid)` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The process's queues run again.
    Resumed,
    /// No KFD state for this pid (or no KFD here): not ours.
    NotOurs,
}

/// `RESUME_DEVICES_LATE(pid)` in CRIU's main process: `CRIU_OP RESUME` on a
/// freshly opened `/dev/kfd`.
pub fn resume<D: Driver>(driver: D, pid: u32) -> Result<Resume, Error> {
    let kfd = match Kfd::open(driver) {
        Ok(kfd) => kfd,
        Err(e) if e.errno() == libc::ENOENT => return Ok(Resume::NotOurs),
        Err(e) => {
            return Err(Error::Kfd {
                step: "opening /dev/kfd to resume",
                source: e,
            })
        }
    };
    match kfd.resume(pid) {
        Ok(()) => Ok(Resume::Resumed),
        Err(e) if e.errno() == libc::ESRCH => {
            log::debug!("pid {pid} has no KFD state");
            Ok(Resume::NotOurs)
        }
        Err(e) => Err(Error::Kfd {
            step: "resuming the process (CRIU_OP RESUME)",
            source: e,
        }),
    }
}
