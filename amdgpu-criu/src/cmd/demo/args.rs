//! The command line of `demo`: its arguments, their defaults and the
//! parsers of `--size` and `--inject`. Parsing only: what the values mean
//! for the run is decided elsewhere.

use std::path::PathBuf;

use kfd_sim::FaultSpec;

use super::workload::WorkloadKind;
use super::{GIB, KIB, MIB};

/// The machine the demo checkpoints on unless told otherwise: eight GPUs in
/// two XGMI hives, so the GPU mapping has real work to do.
pub const DEFAULT_TOPOLOGY: &str = "builtin:mi210-8gpu-2hive";

/// Arguments of `demo`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu demo
  amdgpu-criu demo --workload pytorch --size 64M
  amdgpu-criu demo --workload rocr-copy
  amdgpu-criu demo --workload basic --topology builtin:mi300x-64 --restore-topology builtin:mi300x-64 --json
  amdgpu-criu demo --dir ./ckpt && amdgpu-criu verify ./ckpt
  amdgpu-criu demo --keep --workload basic
  amdgpu-criu demo --inject CRIU_OP:CHECKPOINT=EIO
  amdgpu-criu demo --incremental 2 --size 64M
  KFD_DEDUP=1 amdgpu-criu demo --workload data-parallel --topology builtin:mi210-8gpu-2hive

Exit status: 0 verified, 1 not verified (or the rehearsed failure), 2 usage errors (and a
--restore-topology that cannot take the checkpoint, refused before anything runs)")]
pub struct Args {
    /// The machine to checkpoint on: a built-in machine `builtin:NAME`, a
    /// sysfs tree (the directory holding `nodes/`; what a partial capture
    /// lacks is filled in as the simulator does) or a topology file
    /// (what `topology --export FILE` writes).
    #[arg(long, value_name = "DIR|FILE|builtin:NAME", default_value = DEFAULT_TOPOLOGY, value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub topology: String,
    /// The machine to restore on, same forms. Default: the same model as
    /// another host numbers it (new gpu_ids, node order, render minors and
    /// hive ids). The same value as --topology restores on the very machine
    /// the process was checkpointed on.
    #[arg(long, value_name = "DIR|FILE|builtin:NAME", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub restore_topology: Option<String>,
    /// The application: `basic` (a few small BOs of every type per GPU),
    /// `pytorch` (many BOs of mixed sizes, USERPTR staging, SVM),
    /// `tensorflow` (few large VRAM BOs), `multi` (three processes, one of
    /// each, checkpointed together), `data-parallel` (one process per GPU
    /// with identical weights and their own activations, as PyTorch DDP;
    /// `KFD_DEDUP=1` writes the weights once), `hsakmt` (AMD's own thunk
    /// builds the process; needs libhsakmt-dev and kfd-sim-preload) or
    /// `rocr-copy` (AMD's ROCr copies through the simulated GPUs and is
    /// checkpointed with copies in flight; needs libhsa-runtime-dev and
    /// kfd-sim-preload).
    #[arg(long, value_enum, default_value_t = WorkloadKind::Tensorflow)]
    pub workload: WorkloadKind,
    /// Total bytes of the VRAM and GTT BOs the workload allocates, spread
    /// over its GPUs (`256M`, `1G`, `8M`; binary units; default 256M). A
    /// size below what the workload always allocates on the machine is
    /// refused, and so is any --size for `basic` (a fixed handful of BOs).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub size: Option<u64>,
    /// After the checkpoint, run the workload this many steps and take a
    /// second, incremental checkpoint against the first (its `parent`),
    /// which writes only the chunks that changed; the restore then comes
    /// from that chain. Shows the bytes each checkpoint wrote.
    #[arg(long, value_name = "STEPS")]
    pub incremental: Option<usize>,
    /// Which renumbering of the default restore machine to use.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the images here (created if needed; must hold no amdgpu
    /// images) and keep them, instead of in a temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep the temporary image directory and print where it is (--dir
    /// keeps the images already).
    #[arg(long, conflicts_with = "dir")]
    pub keep: bool,
    /// Print one JSON object (`workload`, `topologies`, `image_dir`,
    /// `checkpoint`, `restore`, `gpu_map`, `verified`, plus `error`,
    /// `reasons` and `problems` when something failed) instead of text, and
    /// no progress bar.
    #[arg(long)]
    pub json: bool,
    // Make the Nth call of a kernel operation fail, to rehearse a failure;
    // the help lists the operations (computed from the simulator).
    #[arg(long, value_name = "OP[:N][=ERRNO]", value_parser = parse_fault, help = inject_help())]
    pub inject: Vec<FaultSpec>,
}

/// `256M`, `1G`, `1.5GiB`, `4096`: bytes, with binary units.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(digits_end);
    let unit = unit.trim().to_ascii_uppercase();
    let unit = unit
        .strip_suffix("IB")
        .or_else(|| unit.strip_suffix('B'))
        .unwrap_or(&unit);
    let scale: u64 = match unit {
        "" => 1,
        "K" => KIB,
        "M" => MIB,
        "G" => GIB,
        "T" => GIB << 10,
        other => {
            return Err(format!(
                "unknown unit {other:?} in size {text:?} (K, M, G, T)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("size {text:?} is not a number with an optional unit (256M, 1G)"))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("size {text:?} is out of range"));
    }
    Ok(bytes as u64)
}

fn parse_fault(text: &str) -> Result<FaultSpec, String> {
    FaultSpec::parse_known(text).map_err(|e| e.to_string())
}

/// The help of `--inject`, with every operation a fault can target.
fn inject_help() -> String {
    format!(
        "Make the Nth call of a kernel operation fail, to rehearse a failure: \
         `OP[:N][=ERRNO]`, e.g. `CRIU_OP:CHECKPOINT=EIO`, `SDMA_SHORT`, `MMAP=ENOMEM`. \
         A fault that never fires makes the run fail. Repeatable. Operations: {}",
        kfd_sim::fault::known_operations().join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("256M"), Ok(256 * MIB));
        assert_eq!(parse_size("8m"), Ok(8 * MIB));
        assert_eq!(parse_size("1G"), Ok(GIB));
        assert_eq!(parse_size("1.5GiB"), Ok(3 * GIB / 2));
        assert_eq!(parse_size("64KB"), Ok(64 * KIB));
        assert_eq!(parse_size("4096"), Ok(4096));
        for bad in ["", "M", "12Q", "0", "-1M", "1e99T", "1..2M"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
