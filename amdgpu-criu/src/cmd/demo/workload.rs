//! The simulated application: which processes `--workload` launches, how
//! `--size` sizes their BOs over the machine's GPUs (or why it cannot), and
//! launching them.
//!
//! `--size` is the total of the VRAM and GTT BOs, the bytes the plugin
//! moves through its pages files. Part of every workload is fixed per GPU
//! whatever the size (queue rings, the event page, TensorFlow's GTT
//! buffers); the rest is spread over the GPUs in the workload's data BOs.
//! A size below the fixed part cannot be honoured and is refused, and so is
//! `--size` for `basic`, whose BOs are a fixed handful.

use kfd_sim::workload::{CpuMemory, Profile, Workload, WorkloadDescription};
use kfd_sim::{Pid, Sim};

use super::{Stop, KIB, MIB, STEPS_BEFORE};

/// The simulated application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadKind {
    /// A few small BOs of every type per GPU.
    Basic,
    /// PyTorch-like: many BOs of mixed sizes.
    Pytorch,
    /// TensorFlow-like: few large VRAM BOs.
    Tensorflow,
    /// Three processes (pytorch, tensorflow and basic) in one checkpoint.
    Multi,
    /// AMD's own thunk (libhsakmt) builds the process: memory of every
    /// kind, queues, events (needs libhsakmt-dev and kfd-sim-preload).
    Hsakmt,
    /// One process per GPU, identical weights, own activations (DDP).
    DataParallel,
    /// AMD's ROCr copies between host, VRAM and GPUs and is checkpointed
    /// with the copies in flight (needs libhsa-runtime-dev and
    /// kfd-sim-preload).
    RocrCopy,
}

impl WorkloadKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            WorkloadKind::Basic => "basic",
            WorkloadKind::Pytorch => "pytorch",
            WorkloadKind::Tensorflow => "tensorflow",
            WorkloadKind::Multi => "multi",
            WorkloadKind::Hsakmt => "hsakmt",
            WorkloadKind::DataParallel => "data-parallel",
            WorkloadKind::RocrCopy => "rocr-copy",
        }
    }

    /// VRAM and GTT bytes the workload allocates on `gpus` GPUs whatever
    /// `--size` says, plus the smallest data BOs it can have.
    pub(super) fn minimum_bytes(self, gpus: u64) -> u64 {
        match self {
            WorkloadKind::Basic => fixed_bytes(Fixed::Basic, gpus),
            WorkloadKind::Pytorch => fixed_bytes(Fixed::Pytorch, gpus) + gpus * 4 * KIB,
            WorkloadKind::Tensorflow => fixed_bytes(Fixed::Tensorflow, gpus) + gpus * 6 * 4 * KIB,
            WorkloadKind::Multi => {
                fixed_bytes(Fixed::Basic, gpus)
                    + WorkloadKind::Pytorch.minimum_bytes(gpus)
                    + WorkloadKind::Tensorflow.minimum_bytes(gpus)
            }
            // Run by `demo::hsakmt`, which allocates what the thunk does.
            WorkloadKind::Hsakmt | WorkloadKind::RocrCopy => 0,
            WorkloadKind::DataParallel => {
                fixed_bytes(Fixed::DataParallel, gpus) + gpus * 2 * 4 * KIB
            }
        }
    }

    /// The processes to launch so their VRAM and GTT BOs add up to `size`
    /// bytes (`None`: the workload's own fixed size) over `gpus` GPUs, or
    /// why that cannot be.
    pub(super) fn profiles(self, size: Option<u64>, gpus: u64) -> Result<Vec<Profile>, String> {
        let gpus = gpus.max(1);
        let Some(size) = size else {
            return match self {
                WorkloadKind::Basic => Ok(vec![Profile::Basic]),
                _ => self.profiles(Some(DEFAULT_SIZE), gpus),
            };
        };
        let minimum = self.minimum_bytes(gpus);
        if self == WorkloadKind::Basic {
            return Err(format!(
                "--size does not apply to the basic workload: it allocates a fixed \
                 {} of BOs on this machine ({gpus} GPUs, a few small BOs of every type \
                 each); size a run with --workload pytorch, tensorflow or multi",
                bytes(minimum)
            ));
        }
        if size < minimum {
            return Err(format!(
                "--size {} is below the {} that {} allocates on this machine's {gpus} \
                 GPUs whatever the size (queue rings, the event page{}, and the smallest \
                 data BOs); give --size {}M or more",
                bytes(size),
                bytes(minimum),
                self.name(),
                if matches!(self, WorkloadKind::Tensorflow | WorkloadKind::Multi) {
                    ", 4 MiB of GTT buffers per GPU"
                } else {
                    ""
                },
                minimum.div_ceil(MIB)
            ));
        }
        Ok(match self {
            WorkloadKind::Basic => vec![Profile::Basic],
            WorkloadKind::Pytorch => vec![pytorch(size - fixed_bytes(Fixed::Pytorch, gpus), gpus)],
            WorkloadKind::Tensorflow => {
                vec![tensorflow(
                    size - fixed_bytes(Fixed::Tensorflow, gpus),
                    gpus,
                )]
            }
            WorkloadKind::DataParallel => {
                // Per process (one per GPU): a sixteenth activations, the
                // rest weights, identical in every process.
                let share = (size - fixed_bytes(Fixed::DataParallel, gpus)) / gpus;
                let activations = (share / 16 / (4 * KIB)).max(1) * (4 * KIB);
                let weights = (share.saturating_sub(activations) / (4 * KIB)).max(1) * (4 * KIB);
                vec![Profile::DataParallel {
                    weights_bytes: weights,
                    activations_bytes: activations,
                }]
            }
            WorkloadKind::Multi => {
                // Half each for the pytorch and the tensorflow process, or
                // what tensorflow needs at least when half is less.
                let rest = size - fixed_bytes(Fixed::Basic, gpus);
                let tensorflow_share = (rest / 2)
                    .max(WorkloadKind::Tensorflow.minimum_bytes(gpus))
                    .min(rest - WorkloadKind::Pytorch.minimum_bytes(gpus));
                vec![
                    pytorch(
                        rest - tensorflow_share - fixed_bytes(Fixed::Pytorch, gpus),
                        gpus,
                    ),
                    tensorflow(
                        tensorflow_share - fixed_bytes(Fixed::Tensorflow, gpus),
                        gpus,
                    ),
                    Profile::Basic,
                ]
            }
            WorkloadKind::Hsakmt => {
                return Err("the hsakmt workload is AMD's thunk, not a simulated profile".into())
            }
            WorkloadKind::RocrCopy => {
                return Err("the rocr-copy workload is AMD's ROCr, not a simulated profile".into())
            }
        })
    }
}

/// `--size` when none is given.
pub(super) const DEFAULT_SIZE: u64 = 256 * MIB;

/// `256.0 MiB`, `4.0 KiB`.
pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The workloads' parts whose VRAM and GTT BOs do not depend on `--size`.
#[derive(Clone, Copy)]
enum Fixed {
    Basic,
    Pytorch,
    Tensorflow,
    DataParallel,
}

/// VRAM and GTT bytes a profile allocates on `gpus` GPUs independently of
/// its size, as `kfd_sim::workload` builds it: per GPU a 64 KiB ring per
/// queue (basic 1 queue, pytorch 8 compute + 2 SDMA, tensorflow 2 + 4),
/// basic's 64 KiB VRAM and 16 KiB GTT BOs, tensorflow's two 2 MiB GTT
/// BOs; the 64 KiB event page on the first GPU. Doorbell and MMIO BOs are
/// not memory, and USERPTR memory is the process's own (CRIU's pages).
/// A data-parallel job has one process per GPU, each with its event page
/// and two 64 KiB rings.
fn fixed_bytes(profile: Fixed, gpus: u64) -> u64 {
    let per_gpu = match profile {
        Fixed::Basic => 64 * KIB + 64 * KIB + 16 * KIB,
        Fixed::Pytorch => 10 * 64 * KIB,
        Fixed::Tensorflow => 6 * 64 * KIB + 2 * 2 * MIB,
        Fixed::DataParallel => return gpus * (64 * KIB + 2 * 64 * KIB),
    };
    64 * KIB + gpus * per_gpu
}

/// A PyTorch-like process whose data BOs take `size` bytes over `gpus`
/// GPUs: BO sizes cycle through the powers of two from 4 KiB up to a
/// sixteenth of the per-GPU share (at most 16 MiB), and the count is the
/// one whose total comes closest to the share (within half the largest BO,
/// so within 1/32 of the share).
fn pytorch(size: u64, gpus: u64) -> Profile {
    let share = (size / gpus.max(1)).max(4 * KIB);
    let max_bo_bytes = (share / 16).clamp(4 * KIB, 16 * MIB);
    let max_bo_bytes = 1u64 << max_bo_bytes.ilog2();
    let levels = (max_bo_bytes / (4 * KIB)).ilog2() + 1;
    let mut total = 0u64;
    let mut count = 0u64;
    loop {
        let next = (4 * KIB) << (count % u64::from(levels));
        if total + next > share {
            // Take one more BO when that lands nearer the share.
            if share - total > total + next - share {
                count += 1;
            }
            break;
        }
        total += next;
        count += 1;
    }
    Profile::PyTorchLike {
        bos_per_gpu: usize::try_from(count.max(1)).unwrap_or(usize::MAX),
        max_bo_bytes,
    }
}

/// A TensorFlow-like process whose six large VRAM BOs per GPU take `size`
/// bytes over `gpus` GPUs.
fn tensorflow(size: u64, gpus: u64) -> Profile {
    let share = size / gpus.max(1);
    let bo_bytes = (share / 6) / (4 * KIB) * (4 * KIB);
    Profile::TensorFlowLike {
        bo_bytes: bo_bytes.max(4 * KIB),
    }
}

/// One simulated application process.
pub(super) struct Process {
    /// The running application, until it ends after its checkpoint.
    pub(super) app: Option<Workload>,
    /// Its fingerprint after it ran on for [`super::STEPS_AFTER`] steps
    /// past the checkpoint (as `criu dump --leave-running` lets it): where
    /// the restored process must arrive. Holding that instead of an
    /// uninterrupted twin keeps one copy of the BOs in memory, not two.
    pub(super) expected_after: Option<u64>,
    pub(super) pid: Pid,
    /// CRIU file ids of its GPU files: /dev/kfd first, then render nodes.
    pub(super) file_ids: Vec<u32>,
    pub(super) expected: WorkloadDescription,
}

/// Launches one process per profile and makes it step.
pub(super) fn launch(sim: &Sim, profiles: &[Profile]) -> Result<Vec<Process>, Stop> {
    let mut next_id = 1u32;
    let mut processes = Vec::new();
    let failed = |e: kfd_sim::workload::WorkloadError| {
        Stop::Usage(format!(
            "cannot run the workload on this machine: {e} (the profile needs more \
             of the GPUs than they offer, or --size is too large)"
        ))
    };
    let mut apps = Vec::new();
    for profile in profiles {
        if matches!(profile, Profile::DataParallel { .. }) {
            // One process per GPU (it has no CPU memory of its own to move).
            apps.extend(Workload::launch_data_parallel(sim, profile).map_err(failed)?);
        } else {
            // The application's CPU memory is its own, carried by CRIU's
            // pages dump like any process's.
            apps.push(
                Workload::launch_with_memory(sim, profile, CpuMemory::Process).map_err(failed)?,
            );
        }
    }
    for mut app in apps {
        for _ in 0..STEPS_BEFORE {
            app.step().map_err(failed)?;
        }
        let expected = app.describe().map_err(failed)?;
        let files = 1 + app.render_fds().len() as u32;
        let file_ids = (next_id..next_id + files).collect();
        next_id += files;
        processes.push(Process {
            pid: app.pid(),
            app: Some(app),
            expected_after: None,
            file_ids,
            expected,
        });
    }
    Ok(processes)
}

#[cfg(test)]
mod tests {
    use super::super::GIB;
    use super::*;

    /// VRAM and GTT bytes of a profile's sized BOs per GPU.
    fn sized_bytes(profile: &Profile) -> u64 {
        match *profile {
            Profile::PyTorchLike {
                bos_per_gpu,
                max_bo_bytes,
            } => {
                let levels = (max_bo_bytes / (4 * KIB)).ilog2() as usize + 1;
                (0..bos_per_gpu)
                    .map(|i| ((4 * KIB) << (i % levels)).min(max_bo_bytes))
                    .sum()
            }
            Profile::TensorFlowLike { bo_bytes } => 6 * bo_bytes,
            _ => 0,
        }
    }

    fn total(kind: WorkloadKind, size: u64, gpus: u64) -> u64 {
        let profiles = kind.profiles(Some(size), gpus).unwrap();
        let fixed = match kind {
            WorkloadKind::Pytorch => fixed_bytes(Fixed::Pytorch, gpus),
            WorkloadKind::Tensorflow => fixed_bytes(Fixed::Tensorflow, gpus),
            _ => {
                fixed_bytes(Fixed::Pytorch, gpus)
                    + fixed_bytes(Fixed::Tensorflow, gpus)
                    + fixed_bytes(Fixed::Basic, gpus)
            }
        };
        fixed + gpus * profiles.iter().map(sized_bytes).sum::<u64>()
    }

    #[test]
    fn the_size_is_the_total_of_the_bos() {
        for (size, gpus) in [
            (256 * MIB, 8),
            (16 * MIB, 2),
            (GIB, 64),
            (64 * MIB, 1),
            (2 * GIB, 8),
            (700 * MIB, 63),
        ] {
            for kind in [
                WorkloadKind::Pytorch,
                WorkloadKind::Tensorflow,
                WorkloadKind::Multi,
            ] {
                let got = total(kind, size, gpus);
                assert!(
                    got.abs_diff(size) <= size / 32,
                    "{kind:?} --size {size} on {gpus} GPUs: {got} bytes of BOs"
                );
            }
        }
        assert_eq!(
            WorkloadKind::Multi
                .profiles(Some(16 * MIB), 2)
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            WorkloadKind::Basic.profiles(None, 8).unwrap(),
            vec![Profile::Basic]
        );
    }

    #[test]
    fn a_size_that_cannot_be_honoured_is_refused_with_the_reason() {
        let err = WorkloadKind::Basic.profiles(Some(GIB), 8).unwrap_err();
        assert!(
            err.contains("--size does not apply to the basic workload"),
            "{err}"
        );
        let err = WorkloadKind::Pytorch.profiles(Some(1), 8).unwrap_err();
        assert!(err.contains("--size 1 B is below the"), "{err}");
        // 63 GPUs each need their rings and GTT buffers: 64M cannot be.
        let err = WorkloadKind::Tensorflow
            .profiles(Some(64 * MIB), 63)
            .unwrap_err();
        assert!(err.contains("63 GPUs") && err.contains("or more"), "{err}");
        for kind in [
            WorkloadKind::Pytorch,
            WorkloadKind::Tensorflow,
            WorkloadKind::Multi,
        ] {
            let minimum = kind.minimum_bytes(63);
            assert!(kind.profiles(Some(minimum), 63).is_ok(), "{kind:?}");
            assert!(kind.profiles(Some(minimum - 1), 63).is_err(), "{kind:?}");
        }
    }
}
