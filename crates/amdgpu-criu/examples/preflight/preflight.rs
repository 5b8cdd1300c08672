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

use amdgpu_image::{
    CriuKfd, DirStore, ImageName, ImageStore, KfdDeviceEntry, ReadLimits, ValidatedKfd,
};
use amdgpu_topology::devices::{DevIoLink, DeviceNode, DeviceProps, DeviceTopology};
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

/// The checkpointed topology of an image's device entries, in the terms the
/// mapping compares: GPU entries keep every property, CPU entries only their
/// core count (all the C plugin saves for them).
pub fn checkpointed_topology(entries: &[KfdDeviceEntry]) -> DeviceTopology {
    let node = |e: &KfdDeviceEntry| DeviceNode {
        node_id: e.node_id,
        gpu_id: e.gpu_id,
        props: if e.is_gpu() {
            DeviceProps {
                cpu_cores_count: e.cpu_cores_count,
                simd_count: e.simd_count,
                mem_banks_count: e.mem_banks_count,
                caches_count: e.caches_count,
                io_links_count: e.io_links_count,
                max_waves_per_simd: e.max_waves_per_simd,
                lds_size_in_kb: e.lds_size_in_kb,
                gds_size_in_kb: e.gds_size_in_kb,
                num_gws: e.num_gws,
                wave_front_size: e.wave_front_size,
                array_count: e.array_count,
                simd_arrays_per_engine: e.simd_arrays_per_engine,
                cu_per_simd_array: e.cu_per_simd_array,
                simd_per_cu: e.simd_per_cu,
                max_slots_scratch_cu: e.max_slots_scratch_cu,
                vendor_id: e.vendor_id,
                device_id: e.device_id,
                domain: e.domain,
                drm_render_minor: e.drm_render_minor,
                hive_id: e.hive_id,
                num_sdma_engines: e.num_sdma_engines,
                num_sdma_xgmi_engines: e.num_sdma_xgmi_engines,
                num_sdma_queues_per_engine: e.num_sdma_queues_per_engine,
                num_cp_queues: e.num_cp_queues,
                fw_version: e.fw_version,
                capability: e.capability,
                sdma_fw_version: e.sdma_fw_version,
                vram_public: e.vram_public != 0,
                vram_size: e.vram_size,
            }
        } else {
            DeviceProps {
                cpu_cores_count: e.cpu_cores_count,
                ..DeviceProps::default()
            }
        },
        iolinks: e
            .iolinks
            .iter()
            .map(|l| DevIoLink {
                link_type: l.r#type,
                node_to: l.node_to_id,
            })
            .collect(),
    };
    DeviceTopology {
        nodes: entries.iter().map(node).collect(),
    }
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
