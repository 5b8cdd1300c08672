//! The simulated application: which processes `--workload` launches, how
//! `--size` sizes their BOs over the machine's GPUs, and launching each
//! process next to its uninterrupted twin.

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
}

impl WorkloadKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            WorkloadKind::Basic => "basic",
            WorkloadKind::Pytorch => "pytorch",
            WorkloadKind::Tensorflow => "tensorflow",
            WorkloadKind::Multi => "multi",
        }
    }

    /// The processes to launch, sized so their BOs add up to about `size`
    /// bytes over `gpus` GPUs.
    pub(super) fn profiles(self, size: u64, gpus: u64) -> Vec<Profile> {
        match self {
            WorkloadKind::Basic => vec![Profile::Basic],
            WorkloadKind::Pytorch => vec![pytorch(size, gpus)],
            WorkloadKind::Tensorflow => vec![tensorflow(size, gpus)],
            WorkloadKind::Multi => vec![
                pytorch(size / 2, gpus),
                tensorflow(size / 2, gpus),
                Profile::Basic,
            ],
        }
    }
}

/// A PyTorch-like process: BO sizes cycle through the powers of two from
/// 4 KiB up to a sixteenth of the per-GPU share (at most 16 MiB), as many
/// BOs as fill the share.
fn pytorch(size: u64, gpus: u64) -> Profile {
    let share = (size / gpus.max(1)).max(4 * KIB);
    let max_bo_bytes = (share / 16).clamp(4 * KIB, 16 * MIB);
    let max_bo_bytes = 1u64 << max_bo_bytes.ilog2();
    let levels = u64::from((max_bo_bytes / (4 * KIB)).ilog2()) + 1;
    let cycle_bytes = 4 * KIB * ((1u64 << levels) - 1);
    let bos_per_gpu = (share * levels / cycle_bytes).max(1);
    Profile::PyTorchLike {
        bos_per_gpu: usize::try_from(bos_per_gpu).unwrap_or(usize::MAX),
        max_bo_bytes,
    }
}

/// A TensorFlow-like process: per GPU six equal VRAM BOs take the share
/// left after its two 2 MiB GTT BOs.
fn tensorflow(size: u64, gpus: u64) -> Profile {
    let share = size / gpus.max(1);
    let bo_bytes = (share.saturating_sub(4 * MIB) / 6) / (4 * KIB) * (4 * KIB);
    Profile::TensorFlowLike {
        bo_bytes: bo_bytes.max(4 * KIB),
    }
}

/// One simulated application process and its uninterrupted twin.
pub(super) struct Process {
    pub(super) app: Option<Workload>,
    pub(super) twin: Workload,
    pub(super) pid: Pid,
    /// CRIU file ids of its GPU files: /dev/kfd first, then render nodes.
    pub(super) file_ids: Vec<u32>,
    pub(super) expected: WorkloadDescription,
}

/// Launches one process (and its twin) per profile and makes them step.
pub(super) fn launch(sim: &Sim, profiles: &[Profile]) -> Result<Vec<Process>, Stop> {
    let mut next_id = 1u32;
    let mut processes = Vec::new();
    for profile in profiles {
        let failed = |e: kfd_sim::workload::WorkloadError| {
            Stop::Usage(format!(
                "cannot run the workload on this machine: {e} (the profile needs more \
                 of the GPUs than they offer, or --size is too large)"
            ))
        };
        // The application's CPU memory is its own, carried by CRIU's pages
        // dump like any process's.
        let mut app =
            Workload::launch_with_memory(sim, profile, CpuMemory::Process).map_err(failed)?;
        let mut twin =
            Workload::launch_with_memory(sim, profile, CpuMemory::Process).map_err(failed)?;
        for _ in 0..STEPS_BEFORE {
            app.step().map_err(failed)?;
            twin.step().map_err(failed)?;
        }
        let expected = app.describe().map_err(failed)?;
        let files = 1 + app.render_fds().len() as u32;
        let file_ids = (next_id..next_id + files).collect();
        next_id += files;
        processes.push(Process {
            pid: app.pid(),
            app: Some(app),
            twin,
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

    /// Bytes the profile's sized BOs take per GPU (what `--size` spreads).
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
            Profile::TensorFlowLike { bo_bytes } => 6 * bo_bytes + 4 * MIB,
            _ => 0,
        }
    }

    #[test]
    fn profiles_spread_the_size_over_the_gpus() {
        for (size, gpus) in [(256 * MIB, 8), (8 * MIB, 2), (GIB, 64), (64 * MIB, 1)] {
            for kind in [WorkloadKind::Pytorch, WorkloadKind::Tensorflow] {
                let profiles = kind.profiles(size, gpus);
                let per_gpu = sized_bytes(&profiles[0]);
                let share = size / gpus;
                assert!(
                    per_gpu <= share + share / 4 && per_gpu + share / 4 >= share,
                    "{kind:?} {size} on {gpus}: {per_gpu} per GPU for a share of {share}"
                );
            }
        }
        assert_eq!(WorkloadKind::Multi.profiles(8 * MIB, 2).len(), 3);
        assert_eq!(WorkloadKind::Basic.profiles(GIB, 8), vec![Profile::Basic]);
    }
}
