//! The dump's end (`DUMP_DEVICES_LATE`): the background transfers
//! finished, every paused process unpaused (all of them, even when one
//! fails), and the files the dump could not resolve reported; and the
//! teardown that unpauses whatever a failed dump left paused, or leaves it
//! to its guardian.

use ::kfd::Driver;

use super::Dumper;
use crate::error::Error;

impl<D: Driver + Clone> Dumper<D> {
    /// Unpauses every paused process (`DUMP_DEVICES_LATE`), all of them even
    /// when one fails, once the background transfers are finished (their
    /// failure fails this, the processes unpaused all the same); returns
    /// how many were unpaused, or the first error.
    pub fn unpause_all(&mut self) -> Result<usize, Error> {
        let transferred = self.finish_transfers();
        let mut first_error = None;
        let mut unpaused = 0;
        // A process whose unpause failed stays listed: `exit` (and drop)
        // try again, so a transient failure does not leave it frozen.
        let mut still_paused = Vec::new();
        for paused in std::mem::take(&mut self.paused) {
            match paused.kfd.unpause() {
                Ok(()) => {
                    unpaused += 1;
                    log::info!("file {}: pid {} unpaused", paused.id, paused.pid);
                }
                Err(e) => {
                    log::error!("file {}: cannot unpause pid {}: {e}", paused.id, paused.pid);
                    first_error.get_or_insert(Error::Kfd {
                        step: "unpausing a dumped process (CRIU_OP UNPAUSE)",
                        source: e,
                    });
                    still_paused.push(paused);
                }
            }
        }
        self.paused = still_paused;
        // A file whose contents were not copied fails the dump first: its
        // image was never written.
        if let Err(e) = transferred {
            first_error = Some(e);
        }
        if first_error.is_none() && !self.pending_dmabufs.is_empty() {
            let files = self.pending_dmabufs.drain(..).map(|(_, id)| id).collect();
            first_error = Some(Error::OrphanDmabufs { files });
        }
        let orphans: Vec<(u32, u32)> = self
            .imported
            .iter()
            .filter(|(key, ..)| !self.created.contains(key))
            .map(|&(_, id, handle)| (id, handle))
            .collect();
        if first_error.is_none() && !orphans.is_empty() {
            first_error = Some(Error::ImportsFromOutside { bos: orphans });
        }
        if first_error.is_none() && !self.pending_renders.is_empty() {
            let files = self
                .pending_renders
                .drain(..)
                .map(|r| (r.id, r.minor))
                .collect();
            first_error = Some(Error::RenderNodesUnwritten { files });
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(unpaused),
        }
    }
}

impl<D: Driver + Clone> Drop for Dumper<D> {
    fn drop(&mut self) {
        // Transfers still running at teardown belong to a dump that never
        // reached its unpause (DUMP_DEVICES_LATE): it failed.
        self.abandon();
        if !self.paused.is_empty() {
            log::warn!(
                "{} dumped process(es) still paused at teardown; unpausing",
                self.paused.len()
            );
            let _ = self.unpause_all();
        }
        // Those this process cannot unpause are left to their guardians,
        // which recover them once it has ended.
        for paused in self.paused.drain(..) {
            match paused.guardian {
                Some(guardian) => {
                    log::error!(
                        "file {}: pid {} is still paused; its guardian (pid {}) unpauses it when \
                         this process ends",
                        paused.id,
                        paused.pid,
                        guardian.pid()
                    );
                    guardian.keep_watching();
                }
                None => log::error!(
                    "file {}: pid {} is still paused and has no guardian; run \
                     `amdgpu-criu unpause --pid PID` on it",
                    paused.id,
                    paused.pid
                ),
            }
        }
    }
}
