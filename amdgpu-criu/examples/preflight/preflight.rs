//! The preflight decision, shared by the example's `main.rs` and by
//! `tests/preflight.rs` (which includes this file with `#[path]`).
//!
//! A checkpoint is the set of `amdgpu-kfd-<id>.img` images of an image
//! directory, one per process that had `/dev/kfd` open. Each image carries
//! the device entries of the machine it was taken on; a machine can take the
//! checkpoint when every image's GPUs map onto the machine's GPUs, which is
//! the decision the plugin makes in each restored task. Reads files only.

use std::fmt;
use std::path::Path;

use amdgpu_image::topology::checkpointed_topology;
use amdgpu_image::{CriuKfd, DirStore, ImageName, ImageStore, ReadLimits, ValidatedKfd};
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::mapping::{map_topologies, MapResult};
use amdgpu_topology::options::CheckOptions;
use amdgpu_topology::{builtin, builtin_names, parse, GpuId};

/// One process of the checkpoint: its KFD image and the topology it saw.
pub struct Process {
    /// The image file name (`amdgpu-kfd-<id>.img`).
    pub image: String,
    /// The checkpointed process id.
    pub pid: u32,
    /// The checkpointed machine as the image describes it.
    pub topology: DeviceTopology,
}

/// Reads and validates every KFD image of `dir`.
pub fn read_checkpoint(dir: &Path) -> Result<Vec<Process>, String> {
    let store = DirStore::open_dir(dir).map_err(|e| e.to_string())?;
    let mut processes = Vec::new();
    for name in store.list().map_err(|e| e.to_string())? {
        let ImageName::Kfd { id } = name else {
            continue;
        };
        let msg: CriuKfd = store
            .read_message(&name, ReadLimits::default())
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{name}: vanished while reading"))?;
        let image = ValidatedKfd::new(id, msg).map_err(|e| e.to_string())?;
        processes.push(Process {
            image: name.to_string(),
            pid: image.message().pid,
            topology: checkpointed_topology(&image.message().device_entries),
        });
    }
    if processes.is_empty() {
        return Err(format!("{}: no amdgpu-kfd-*.img images", dir.display()));
    }
    Ok(processes)
}

/// A candidate machine: `NAME=SPEC` or `SPEC`, where SPEC is a copy of a
/// machine's `/sys/class/kfd/kfd/topology` or `builtin:NAME`.
pub struct Machine {
    /// The name printed (the part before `=`, else the spec).
    pub name: String,
    /// The topology, or why it could not be read.
    pub topology: Result<DeviceTopology, String>,
}

impl Machine {
    /// Reads the machine named by `arg`.
    pub fn load(arg: &str) -> Machine {
        let (name, spec) = match arg.split_once('=') {
            Some((name, spec)) => (name.to_owned(), spec),
            None => (arg.to_owned(), arg),
        };
        let system = match spec.strip_prefix("builtin:") {
            Some(builtin_name) => builtin(builtin_name).ok_or_else(|| {
                format!(
                    "no built-in topology {builtin_name:?} (known: {})",
                    builtin_names().join(", ")
                )
            }),
            None => parse(Path::new(spec))
                .map(|parsed| parsed.system)
                .map_err(|e| format!("{spec}: {e}")),
        };
        let topology = system.and_then(|system| {
            DeviceTopology::from_system(&system).map_err(|e| format!("{spec}: {e}"))
        });
        Machine { name, topology }
    }
}

/// What one machine would do with the checkpoint.
pub enum Verdict {
    /// Every process maps; the GPU mapping of each, in process order.
    Compatible(Vec<Vec<(GpuId, GpuId)>>),
    /// At least one process does not map: the reasons, per process image.
    Incompatible(Vec<(String, Vec<String>)>),
    /// The machine's topology could not be read or the mapping gave no answer.
    Unknown(String),
}

/// Decides whether `machine` can restore every process of the checkpoint.
pub fn preflight(processes: &[Process], machine: &Machine, options: &CheckOptions) -> Verdict {
    let local = match &machine.topology {
        Ok(topology) => topology,
        Err(e) => return Verdict::Unknown(format!("cannot read the topology: {e}")),
    };
    let mut maps = Vec::new();
    let mut refusals = Vec::new();
    for process in processes {
        match map_topologies(&process.topology, local, options) {
            Ok(MapResult {
                compatible: true,
                gpu_map,
                ..
            }) => maps.push(gpu_map.into_iter().collect()),
            Ok(result) => refusals.push((
                process.image.clone(),
                result.reasons.iter().map(ToString::to_string).collect(),
            )),
            Err(e) => return Verdict::Unknown(format!("{}: {e}", process.image)),
        }
    }
    if refusals.is_empty() {
        Verdict::Compatible(maps)
    } else {
        Verdict::Incompatible(refusals)
    }
}

/// The report lines for one machine.
pub struct Report<'a> {
    /// The machine.
    pub machine: &'a Machine,
    /// The processes, for naming them.
    pub processes: &'a [Process],
    /// The verdict.
    pub verdict: &'a Verdict,
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.machine.name;
        match self.verdict {
            Verdict::Compatible(maps) => {
                writeln!(f, "{name}: compatible")?;
                for (process, map) in self.processes.iter().zip(maps) {
                    let pairs: Vec<String> = map.iter().map(|(c, l)| format!("{c}->{l}")).collect();
                    writeln!(
                        f,
                        "  {} (pid {}): gpu_ids {}",
                        process.image,
                        process.pid,
                        pairs.join(" ")
                    )?;
                }
            }
            Verdict::Incompatible(refusals) => {
                writeln!(f, "{name}: not compatible")?;
                for (image, reasons) in refusals {
                    for reason in reasons {
                        writeln!(f, "  {image}: {reason}")?;
                    }
                }
            }
            Verdict::Unknown(why) => writeln!(f, "{name}: unknown: {why}")?,
        }
        Ok(())
    }
}
