//! Whether the host can afford a run before anything is allocated: the
//! memory the run needs against `MemAvailable` and the cgroup's limit, and
//! the space its images need against the image directory's file system.
//! A run that does not fit is refused with the numbers, never started: a
//! large `--size` must not push the host into the OOM killer.
//!
//! What a run holds at its peak (see `round_trip`): the application's BOs
//! (memfds as large as the BOs), the plugin's staging buffers (at most
//! 64 MiB per GPU, `KFD_MAX_BUFFER_SIZE` unset), the images when they are on
//! a memory file system, and a fixed allowance for the simulators. The
//! checkpointed process ends, and its machine is dropped, before the
//! restore re-creates its BOs on another machine, so the two copies never
//! coexist; restoring on the very machine it was checkpointed on, the
//! simulated kernel keeps the exported BOs, and the run holds both. The
//! readers of `/proc` and `/sys` are at the edge; [`judge`] is a pure
//! function of the numbers.

use std::path::Path;

use super::workload::bytes;
use super::MIB;

/// What a run needs and what the host offers, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Budget {
    /// Logical bytes of the workload's BOs.
    pub(super) bos: u64,
    /// GPUs of the checkpointing machine.
    pub(super) gpus: u64,
    /// Whether the image directory is on a memory file system (tmpfs).
    pub(super) images_in_memory: bool,
    /// Whether the restore is on the checkpointing machine itself.
    pub(super) same_machine: bool,
    /// `MemAvailable` of `/proc/meminfo`.
    pub(super) mem_available: Option<u64>,
    /// What the cgroup still allows (its limit less its usage), if limited.
    pub(super) cgroup_room: Option<u64>,
    /// Free bytes of the image directory's file system.
    pub(super) disk_free: Option<u64>,
}

/// Staging per GPU: the plugin's default ring.
const STAGING_PER_GPU: u64 = amdgpu_checkpoint::options::DEFAULT_STAGING_BUFFER
    * amdgpu_checkpoint::options::DEFAULT_STAGING_BUFFERS as u64;
/// The simulators' own memory (topologies, tables, the host process).
const OVERHEAD: u64 = 128 * MIB;

impl Budget {
    /// Peak memory of the run.
    pub(super) fn memory_needed(&self) -> u64 {
        let staging = (STAGING_PER_GPU * self.gpus).min(self.bos.saturating_mul(2));
        let images = if self.images_in_memory { self.bos } else { 0 };
        let copies = if self.same_machine { 2 } else { 1 };
        self.bos.saturating_mul(copies) + staging + images + OVERHEAD
    }
}

/// `Ok` when the run fits, else why not, with the numbers.
pub(super) fn judge(budget: &Budget) -> Result<(), String> {
    let needed = budget.memory_needed();
    let limits = [
        ("MemAvailable", budget.mem_available),
        ("the cgroup's memory limit leaves", budget.cgroup_room),
    ];
    for (what, room) in limits {
        if let Some(room) = room {
            if needed > room {
                return Err(format!(
                    "not enough memory: this run needs about {} ({} of BOs{}, {} of staging{}, \
                     {} for the simulators) and {what} {}; give a smaller --size",
                    bytes(needed),
                    bytes(budget.bos),
                    if budget.same_machine {
                        " twice (restored on the machine that still holds them)"
                    } else {
                        ""
                    },
                    bytes((STAGING_PER_GPU * budget.gpus).min(budget.bos.saturating_mul(2))),
                    if budget.images_in_memory {
                        format!(", {} for the images on tmpfs", bytes(budget.bos))
                    } else {
                        String::new()
                    },
                    bytes(OVERHEAD),
                    bytes(room)
                ));
            }
        }
    }
    if !budget.images_in_memory {
        if let Some(free) = budget.disk_free {
            // Zero pages are elided, but the share is the workload's: count
            // every byte, with room to spare for the file system.
            let needed = budget.bos + budget.bos / 16 + 16 * MIB;
            if needed > free {
                return Err(format!(
                    "not enough disk space for the images: up to {} and the image \
                     directory's file system has {} free; give a smaller --size or \
                     --dir on a larger file system",
                    bytes(needed),
                    bytes(free)
                ));
            }
        }
    }
    Ok(())
}

/// `MemAvailable` in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A cgroup number file: `max` (or a v1 limit near `u64::MAX`) is none.
fn cgroup_number(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 60).then_some(value)
}

/// What the memory cgroup of this process still allows: cgroup v2's
/// `memory.max - memory.current`, or v1's `memory.limit_in_bytes -
/// memory.usage_in_bytes`; `None` when unlimited or unknown.
fn cgroup_room() -> Option<u64> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in membership.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let path = path.trim_start_matches('/');
        let (dir, limit, usage) = if controllers.is_empty() {
            (
                Path::new("/sys/fs/cgroup").join(path),
                "memory.max",
                "memory.current",
            )
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                Path::new("/sys/fs/cgroup/memory").join(path),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        // Inside a container the path may not exist in its own mount of
        // the hierarchy: its root is then the cgroup.
        let dir = if dir.join(limit).exists() {
            dir
        } else {
            dir.ancestors()
                .find(|d| d.join(limit).exists())?
                .to_path_buf()
        };
        if let (Some(limit), Some(usage)) = (
            cgroup_number(&dir.join(limit)),
            cgroup_number(&dir.join(usage)),
        ) {
            return Some(limit.saturating_sub(usage));
        }
    }
    None
}

/// Measures the host for a run of `bos` bytes on `gpus` GPUs writing its
/// images into `images`.
pub(super) fn measure(bos: u64, gpus: u64, same_machine: bool, images: &Path) -> Budget {
    // TMPFS_MAGIC and RAMFS_MAGIC from linux/magic.h.
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    // `f_type` is i64 here but narrower on other architectures.
    #[allow(clippy::unnecessary_cast)]
    let fs_type = rustix::fs::statfs(images).ok().map(|s| s.f_type as i64);
    let disk_free = rustix::fs::statvfs(images)
        .ok()
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize));
    Budget {
        bos,
        gpus,
        images_in_memory: matches!(fs_type, Some(TMPFS_MAGIC | RAMFS_MAGIC)),
        same_machine,
        mem_available: mem_available(),
        cgroup_room: cgroup_room(),
        disk_free,
    }
}

#[cfg(test)]
mod tests {
    use super::super::GIB;
    use super::*;

    fn budget(bos: u64) -> Budget {
        Budget {
            bos,
            gpus: 8,
            images_in_memory: false,
            same_machine: false,
            mem_available: Some(20 * GIB),
            cgroup_room: None,
            disk_free: Some(100 * GIB),
        }
    }

    #[test]
    fn a_run_that_fits_is_allowed() {
        assert_eq!(judge(&budget(GIB)), Ok(()));
        // At most 1.25x the BOs once the BOs are large.
        let b = budget(8 * GIB);
        assert!(
            b.memory_needed() <= 8 * GIB + 2 * GIB,
            "{}",
            b.memory_needed()
        );
    }

    #[test]
    fn a_run_that_does_not_fit_is_refused_with_the_numbers() {
        let err = judge(&budget(30 * GIB)).unwrap_err();
        assert!(
            err.contains("not enough memory") && err.contains("MemAvailable 20.0 GiB"),
            "{err}"
        );
        let mut b = budget(2 * GIB);
        b.cgroup_room = Some(GIB);
        let err = judge(&b).unwrap_err();
        assert!(err.contains("cgroup"), "{err}");
        let mut b = budget(2 * GIB);
        b.images_in_memory = true;
        b.mem_available = Some(4 * GIB);
        let err = judge(&b).unwrap_err();
        assert!(err.contains("for the images on tmpfs"), "{err}");
        let mut b = budget(12 * GIB);
        b.same_machine = true;
        let err = judge(&b).unwrap_err();
        assert!(err.contains("twice"), "{err}");
        let mut b = budget(2 * GIB);
        b.disk_free = Some(GIB);
        let err = judge(&b).unwrap_err();
        assert!(err.contains("not enough disk space"), "{err}");
    }

    #[test]
    fn this_host_can_be_measured() {
        let dir = tempfile::tempdir().unwrap();
        let b = measure(MIB, 1, false, dir.path());
        assert!(b.mem_available.is_some_and(|m| m > 0), "{b:?}");
        assert!(b.disk_free.is_some(), "{b:?}");
    }
}
