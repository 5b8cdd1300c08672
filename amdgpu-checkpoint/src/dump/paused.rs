//! The processes a dump paused: each one's record until the dump's end
//! unpauses it, the guardian that recovers it should the dumper die first,
//! and the unfinished-dump mark in the images directory while it is paused.

use ::kfd::{Driver, Kfd, ProcessInfo};
use amdgpu_image::{ImageName, ImageStore};

use super::Dumper;
use crate::guardian::{Guardian, Leftovers};

pub(super) struct Paused<D: Driver> {
    pub(super) kfd: Kfd<D>,
    pub(super) pid: u32,
    pub(super) id: u32,
    /// Dropped once the process is unpaused (the guardian then exits), or
    /// left watching ([`Guardian::keep_watching`]) when the dumper gives up
    /// on it.
    pub(super) guardian: Option<Guardian>,
    /// An unfinished file in the images directory while the process is
    /// paused (see `mark_in_progress`); dropped, and so removed,
    /// once it is unpaused.
    pub(super) _in_progress: Option<amdgpu_image::UnfinishedMark>,
}

impl<D: Driver + Clone> Dumper<D> {
    /// Keeps a process whose UNPAUSE failed on record, its guardian armed:
    /// [`unpause_all`](Self::unpause_all) (the dump's end) tries again, and
    /// should that fail too the guardian recovers it once the dumper ends.
    pub(super) fn still_paused(&mut self, paused: Paused<D>, error: &kfd::Error) {
        log::error!(
            "file {}: pid {} stays paused for now ({error}); tried again at the end of the dump",
            paused.id,
            paused.pid
        );
        self.paused.push(paused);
    }
    /// Starts the guardian of a process just paused, when configured; a
    /// guardian that cannot start leaves recovery manual, said in the log.
    /// With the images directory `images`, a guardian that recovers the
    /// process also removes the dead dumper's temporary files there but
    /// the unfinished-dump marks (its file's is `mark`).
    pub(super) fn arm_guardian(
        &self,
        info: &ProcessInfo,
        id: u32,
        images: Option<&amdgpu_image::DirStore>,
        mark: Option<String>,
    ) -> Option<Guardian> {
        let dir = self.config.guardian_log_dir.as_deref()?;
        let Some(target) = crate::guardian::locate_target(&self.driver, info.pid) else {
            log::warn!(
                "file {id}: pid {}: no traced process holds this KFD file, no guardian; \
                 if this dump is killed, run `amdgpu-criu unpause --pid PID` on the process",
                info.pid
            );
            return None;
        };
        let leftovers = images.and_then(|images| match images.dir().try_clone() {
            Ok(handle) => Some(Leftovers {
                dir: handle.into(),
                writer: std::process::id(),
                mark,
            }),
            Err(e) => {
                log::warn!(
                    "file {id}: the guardian gets no handle on the images directory ({e}); \
                     if this dump is killed, its temporary files (.*.part-*) stay there"
                );
                None
            }
        });
        // A pidfd of the paused process itself, through the dumper's
        // driver (which names processes as the guardian's does): should it
        // exit and its pid be reused, the guardian leaves the new process
        // alone.
        let armed = match self.driver.pidfd_open(target.pid) {
            Ok(pidfd) => {
                Guardian::arm_pinned(target, pidfd, dir, &self.config.guardian_driver, leftovers)
            }
            Err(e) => {
                log::info!(
                    "file {id}: no pidfd of pid {} ({e}): its guardian knows it by pid",
                    target.pid
                );
                Guardian::arm(target, dir, &self.config.guardian_driver, leftovers)
            }
        };
        match armed {
            Ok(guardian) => {
                log::debug!(
                    "file {id}: pid {} guarded by pid {}",
                    target.pid,
                    guardian.pid()
                );
                Some(guardian)
            }
            Err(e) => {
                log::warn!("file {id}: {e}");
                None
            }
        }
    }
}

/// Marks the dump of KFD file `id` as in progress in a directory store: an
/// unfinished file (`.amdgpu-kfd-ID.img.part-PID-N`) that stays while
/// the process is paused and goes when it is unpaused (or the dump fails).
/// A dumper killed in between (SIGKILL: nothing of it runs) leaves the file,
/// and [`verify_set`](amdgpu_image::verify_set) reports the set as
/// unfinished even when every image had been committed: CRIU writes its
/// `inventory.img` only after `DUMP_DEVICES_LATE`, so until then the dump is
/// not done. A streamed dump has no such file (the streamer's capture is
/// incomplete by itself); a marker that cannot be made is logged and the
/// dump goes on.
pub(super) fn mark_in_progress<S: ImageStore>(
    store: &S,
    id: u32,
) -> Option<amdgpu_image::UnfinishedMark> {
    let dir = store.as_dir()?;
    match dir.mark_unfinished(&ImageName::Kfd { id }) {
        Ok(mark) => Some(mark),
        Err(e) => {
            log::warn!(
                "file {id}: cannot mark the dump as in progress ({e}); if this dump is killed, \
                 its images may look complete"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, OwnedFd};

    use super::*;
    use crate::dump::DumpConfig;
    use crate::guardian::GuardianDriver;
    use crate::options::Options;
    use kfd_sim::workload::{Profile, Workload};

    /// A dumper (a simulated process tracing the app, as CRIU does) that
    /// unpauses each process right after its image (CRIU 4.2 and older) and
    /// arms a guardian, and its copy of the app's KFD fd.
    fn early_unpausing_dumper(
        sim: &kfd_sim::Sim,
        app: &Workload,
        dirs: &tempfile::TempDir,
    ) -> (Dumper<kfd_sim::SimDriver>, OwnedFd) {
        let criu = sim.spawn_process().unwrap();
        let driver = sim.driver(criu);
        driver.ptrace_seize(app.pid().0).unwrap();
        let pidfd = driver.pidfd_open(app.pid().0).unwrap();
        let fd = driver
            .pidfd_getfd(
                pidfd.as_fd(),
                std::os::fd::AsRawFd::as_raw_fd(&app.kfd_fd().unwrap()),
            )
            .unwrap();
        let config = DumpConfig {
            topology_root: sim.sysfs_root(),
            options: Options::default(),
            unpause_early: true,
            shm_dir: dirs.path().join("shm"),
            guardian_log_dir: Some(dirs.path().to_path_buf()),
            // Never reached: the test process (the dumper's host process)
            // outlives the guardian, which is killed at the end.
            guardian_driver: GuardianDriver::new("none", || {
                Err(std::io::Error::from_raw_os_error(libc::ECONNREFUSED))
            }),
        };
        (Dumper::new(driver, config), fd)
    }

    /// Whether host process `pid` exists and has not exited.
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| !s.trim_start().starts_with('Z'))
        })
    }

    #[test]
    fn a_failed_early_unpause_keeps_the_process_paused_on_record_and_its_guardian_armed() {
        let sim = kfd_sim::Sim::synthetic(1, kfd_sim::SimConfig::default()).unwrap();
        let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
        app.step().unwrap();
        let dirs = tempfile::tempdir().unwrap();
        std::fs::create_dir(dirs.path().join("shm")).unwrap();
        let images = tempfile::tempdir().unwrap();
        let store = amdgpu_image::DirStore::open_dir(images.path()).unwrap();
        let (mut dumper, fd) = early_unpausing_dumper(&sim, &app, &dirs);
        // Every UNPAUSE from here on fails.
        for nth in 1..=4 {
            sim.inject(kfd_sim::FaultSpec {
                op: "CRIU_OP:UNPAUSE".into(),
                nth,
                errno: kfd_sim::Errno(libc::EIO),
            });
        }
        let file = crate::identify::DrainedFile::identify(&dumper.driver, fd.as_fd());
        let err = dumper.dump_kfd(&store, file, 1).unwrap_err();
        assert!(err.to_string().contains("unpausing"), "{err}");
        // Recorded, so the dump's end tries again; still guarded.
        assert_eq!(dumper.paused(), 1);
        let guardian = dumper.paused[0]
            .guardian
            .as_ref()
            .map(Guardian::pid)
            .expect("a guardian");
        assert!(running(guardian));
        assert!(dumper.unpause_all().is_err());
        assert_eq!(dumper.paused(), 1);
        // The dumper's teardown fails to unpause too: the guardian is left
        // watching (it recovers the process when the dumper's process
        // ends), not told that the dump ended.
        drop(dumper);
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(running(guardian), "the guardian stood down");
        assert!(sim.kfd_state(app.pid()).unwrap().queues_paused);
        // The guardian this test started, by its pid.
        let pid = rustix::process::Pid::from_raw(guardian as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    }
}
