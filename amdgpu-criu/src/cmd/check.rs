//! `amdgpu-criu check IMAGES_DIR [--sysfs DIR | --builtin NAME] [--json]`:
//! could the checkpoint in IMAGES_DIR be restored on this machine (or on the
//! topology in DIR, or on a built-in machine)?
//!
//! Reads every KFD image of the set (validated as the plugin validates it at
//! restore), turns its device entries back into the checkpointed topology
//! with the plugin's own conversion ([`checkpointed_topology`]), and maps it
//! onto the local topology under the `KFD_*_CHECK` variables, exactly as
//! `RESTORE_EXT_FILE` would. Render-only images (render nodes of processes
//! without `/dev/kfd`, `gpu_id` 0) are checked each on its own with the
//! plugin's own rule ([`render_only_candidates`]): which of them belong to
//! one task is not recorded, so that two GPUs of one task need two local
//! GPUs is not checked here. Output and exit codes are those of `map`: 0
//! compatible, 1 not, 2 usage or read errors. Reads only; never opens
//! devices.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use amdgpu_checkpoint::restore::render_only_candidates;
use amdgpu_image::topology::checkpointed_topology;
use amdgpu_image::{
    CriuKfd, CriuRenderNode, DirStore, ImageMessage, ImageName, ImageStore, KfdDeviceEntry,
    ReadLimits, ValidatedKfd, ValidatedRenderNode,
};
use amdgpu_topology::checks::Reason;
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::mapping::MapResult;
use amdgpu_topology::options::CheckOptions;
use amdgpu_topology::parse::DEFAULT_ROOT;
use amdgpu_topology::GpuId;
use serde::Serialize;

use super::map;

/// Arguments of `check`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu check /var/lib/ckpt
  amdgpu-criu check /var/lib/ckpt --sysfs builtin:mi210-8gpu-2hive --json
  KFD_VRAM_SIZE_CHECK=0 amdgpu-criu check /var/lib/ckpt --sysfs ./topology-of-node2
  amdgpu-criu check /var/lib/ckpt --device-map 0x1a2b=0000:c1:00.0
  amdgpu-criu check --sysfs ./topology-of-node2 /var/lib/kubelet/checkpoints/checkpoint-POD_NAMESPACE-CONTAINER-TIMESTAMP.tar

Exit status: 0 compatible, 1 not compatible, 2 unreadable images, topology or device map")]
pub struct Args {
    /// The image directory (holding `amdgpu-kfd-<id>.img`), or a container
    /// checkpoint archive (`podman container checkpoint --export`, the
    /// kubelet's checkpoint API).
    pub images: PathBuf,
    /// Restore onto a copy of a topology tree (the directory holding
    /// `nodes/`), a topology file (what `topology --export FILE` writes) or a built-in
    /// synthetic machine `builtin:NAME`, instead of this machine's
    /// `/sys/class/kfd/kfd/topology`.
    #[arg(long, value_name = "DIR|FILE|builtin:NAME", conflicts_with = "builtin", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub sysfs: Option<String>,
    /// The same as `--sysfs builtin:NAME` (kept for scripts).
    #[arg(long, value_name = "NAME", hide = true)]
    pub builtin: Option<String>,
    /// Fill in what a partial capture given with --sysfs lacks (gpu_ids,
    /// VRAM banks, render minors) as the simulator does.
    #[arg(long)]
    pub complete: bool,
    /// Print JSON (`{"compatible", "gpu_map", "cpu_map", "reasons"}`, as
    /// `map`; with `"images"` added when the set holds processes that saw
    /// different GPUs).
    #[arg(long)]
    pub json: bool,
    /// Pin checkpointed GPUs to local ones, as the plugin's
    /// `amdgpu.device-map`, as for `map`. Overrides `KFD_DEVICE_MAP`.
    #[arg(long, value_name = "SRC=DST[,...]")]
    pub device_map: Option<String>,
}

/// The checkpointed topology of one KFD image.
#[derive(Debug, Clone)]
pub(crate) struct Checkpointed {
    /// CRIU's file id of the image.
    pub id: u32,
    /// The GPUs and CPUs the process was checkpointed with.
    pub topology: DeviceTopology,
}

/// The answer for a group of images with the same checkpointed topology.
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    /// The images (file ids) of the group.
    pub ids: Vec<u32>,
    /// Their checkpointed topology.
    pub checkpointed: DeviceTopology,
    /// The mapping onto the local topology.
    pub result: MapResult,
}

/// A render-only image: a render node of a process without `/dev/kfd`.
#[derive(Debug, Clone)]
pub(crate) struct RenderOnlyImage {
    /// CRIU's file id of the image.
    pub id: u32,
    /// The GPU it was checkpointed on.
    pub device: KfdDeviceEntry,
}

/// The answer for one render-only image.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RenderOnlyVerdict {
    /// The image's file name.
    pub file: String,
    /// Its render minor at checkpoint.
    pub drm_render_minor: u32,
    /// The checkpointed GPU's gpu_id on its machine.
    pub gpu_id: GpuId,
    /// Whether some local GPU can stand in for it.
    pub compatible: bool,
    /// The local GPUs that can (node order).
    pub candidates: Vec<GpuId>,
    /// Why none can: the mismatches of the closest local GPU.
    pub reasons: Vec<Reason>,
}

/// Runs `check`: 0 when every image can be restored, 1 when one cannot, 2
/// when the images or the topology cannot be read.
pub fn run(args: Args) -> ExitCode {
    let (options, invalid) = match map::checks_from_env() {
        Ok(read) => read,
        Err(message) => {
            eprintln!("amdgpu-criu check: {message}");
            return ExitCode::from(2);
        }
    };
    for warning in &invalid {
        eprintln!("amdgpu-criu check: warning: {warning}");
    }
    // A checkpoint archive is read from its message images, unpacked.
    let unpacked = match super::unpacked::Unpacked::open(&args.images, false) {
        Ok(unpacked) => unpacked,
        Err(e) => {
            eprintln!("amdgpu-criu check: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = unpacked.dir();
    let outcome = read_images(dir).and_then(|(images, render_only)| {
        let local = load_local(&args)?;
        let pins = map::device_map(args.device_map.as_deref())?;
        let verdicts = check_pinned(&images, &local, &options, &pins)?;
        let render_verdicts = check_render_only(&render_only, &local, &options);
        Ok((local, verdicts, render_verdicts))
    });
    let (local, verdicts, render_verdicts) = match outcome {
        Ok(answer) => answer,
        Err(message) => {
            eprintln!("amdgpu-criu check: {message}");
            return ExitCode::from(2);
        }
    };
    let compatible = verdicts.iter().all(|v| v.result.compatible)
        && render_verdicts.iter().all(|v| v.compatible);
    if args.json {
        let value = match verdicts.as_slice() {
            [] => Ok(serde_json::json!({
                "compatible": compatible,
                "gpu_map": {},
                "cpu_map": {},
                "reasons": [],
            })),
            [one] => serde_json::to_value(&one.result),
            many => serde_json::to_value(Combined::new(many)),
        };
        let text = value.and_then(|mut value| {
            if !render_verdicts.is_empty() {
                value["compatible"] = compatible.into();
                value["render_only"] = serde_json::to_value(&render_verdicts)?;
            }
            crate::json64::gpu_ids_to_hex(&mut value);
            serde_json::to_string_pretty(&value)
        });
        match text {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("amdgpu-criu check: cannot format the result as JSON: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        for line in kfd_versions(dir) {
            println!("{line}");
        }
        for verdict in &verdicts {
            let names: Vec<String> = verdict
                .ids
                .iter()
                .map(|&id| ImageName::Kfd { id }.to_string())
                .collect();
            println!(
                "{} ({}):",
                names.join(", "),
                crate::out::plural(verdict.checkpointed.gpus().count() as u64, "GPU")
            );
            map::print_text(&verdict.result, &verdict.checkpointed, &local, &options);
        }
        for verdict in &render_verdicts {
            let gpus: Vec<String> = verdict
                .candidates
                .iter()
                .map(|g| crate::out::gpu_id(*g))
                .collect();
            println!(
                "{} (render-only, renderD{}, GPU {}): {}",
                verdict.file,
                verdict.drm_render_minor,
                crate::out::gpu_id(verdict.gpu_id),
                if verdict.compatible {
                    format!("compatible with local GPU {}", gpus.join(" or "))
                } else {
                    "not compatible".to_owned()
                }
            );
            for reason in &verdict.reasons {
                println!("  {reason}");
            }
        }
    }
    if compatible {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The restoring side: `--builtin`, `--sysfs`, or this machine.
fn load_local(args: &Args) -> Result<DeviceTopology, String> {
    let spec = match (&args.builtin, &args.sysfs) {
        (Some(name), _) => format!("builtin:{name}"),
        (None, Some(spec)) => spec.clone(),
        (None, None) => {
            if !Path::new(DEFAULT_ROOT).is_dir() {
                return Err(format!(
                    "{DEFAULT_ROOT} does not exist: this machine has no amdkfd topology \
                     (amdgpu not loaded, or no AMD GPU); use --sysfs DIR to check against a \
                     copy of one, or --sysfs builtin:NAME for a synthetic machine ({})",
                    crate::machine::known().join(", ")
                ));
            }
            DEFAULT_ROOT.to_owned()
        }
    };
    map::load("check", &spec, args.complete)
}

/// The KFD images and the render-only images of `dir`; an error when there
/// is neither.
fn read_images(dir: &Path) -> Result<(Vec<Checkpointed>, Vec<RenderOnlyImage>), String> {
    let render_only = read_render_only(dir)?;
    let images = read_kfd_images(dir)?;
    if images.is_empty() && render_only.is_empty() {
        return Err(format!(
            "{}: no KFD image (amdgpu-kfd-<id>.img) and no render-only image: not an amdgpu \
             checkpoint",
            dir.display()
        ));
    }
    Ok((images, render_only))
}

/// Every render-only image of `dir` (`gpu_id` 0), validated as the plugin
/// validates it before restoring.
pub(crate) fn read_render_only(dir: &Path) -> Result<Vec<RenderOnlyImage>, String> {
    let store = DirStore::open_dir(dir).map_err(|e| e.to_string())?;
    let names = store.list().map_err(|e| e.to_string())?;
    let mut images = Vec::new();
    for name in names {
        let ImageName::RenderNode { id } = name else {
            continue;
        };
        let msg: CriuRenderNode = read_listed(&store, dir, &name)?;
        let image = ValidatedRenderNode::new(id, msg)
            .map_err(|e| format!("{}: {}", dir.display(), crate::out::about(name, e)))?;
        let msg = image.into_message();
        if let (true, Some(device)) = (msg.is_render_only(), msg.device) {
            images.push(RenderOnlyImage { id, device });
        }
    }
    Ok(images)
}

/// Which local GPUs can stand in for each render-only image's GPU.
pub(crate) fn check_render_only(
    images: &[RenderOnlyImage],
    local: &DeviceTopology,
    options: &CheckOptions,
) -> Vec<RenderOnlyVerdict> {
    images
        .iter()
        .map(|image| {
            let (candidates, reasons) = match render_only_candidates(&image.device, local, options)
            {
                Ok(candidates) => (candidates, Vec::new()),
                Err(reasons) => (Vec::new(), reasons),
            };
            RenderOnlyVerdict {
                file: ImageName::RenderNode { id: image.id }.to_string(),
                drm_render_minor: image.device.drm_render_minor,
                gpu_id: image.device.gpu_id,
                compatible: !candidates.is_empty(),
                candidates,
                reasons,
            }
        })
        .collect()
}

/// The checkpointed topology of every KFD image in `dir`, in id order, each
/// image validated as the plugin validates it before restoring.
pub(crate) fn read_checkpointed(dir: &Path) -> Result<Vec<Checkpointed>, String> {
    let images = read_kfd_images(dir)?;
    if images.is_empty() {
        return Err(format!(
            "{}: no KFD image (amdgpu-kfd-<id>.img): not an amdgpu checkpoint",
            dir.display()
        ));
    }
    Ok(images)
}

/// The message of `name`, which `store` (the directory `dir`) just listed.
fn read_listed<M: ImageMessage>(
    store: &DirStore,
    dir: &Path,
    name: &ImageName,
) -> Result<M, String> {
    store
        .read_message::<M>(name, ReadLimits::default())
        .map_err(|e| format!("{}: {}", dir.display(), crate::out::about(name, e)))?
        .ok_or_else(|| format!("{}: {name} vanished while reading", dir.display()))
}

/// One line per KFD image that records its dump host's KFD interface
/// version: that version and the one a restore needs (see
/// `amdgpu_checkpoint::kfd_version`).
fn kfd_versions(dir: &Path) -> Vec<String> {
    let Ok(store) = DirStore::open_dir(dir) else {
        return Vec::new();
    };
    let names = store.list().unwrap_or_default();
    names
        .iter()
        .filter(|name| matches!(name, ImageName::Kfd { .. }))
        .filter_map(|name| {
            let msg: CriuKfd = read_listed(&store, dir, name).ok()?;
            let (major, minor) = msg.kfd_major_version.zip(msg.kfd_minor_version)?;
            let needs = msg
                .kfd_required_minor
                .unwrap_or(kfd::Version::MIN_CRIU.minor);
            Some(format!(
                "{name}: dumped on KFD interface {major}.{minor}; a restore needs {major}.{needs} \
                 or later"
            ))
        })
        .collect()
}

/// [`read_checkpointed`], none being no error.
fn read_kfd_images(dir: &Path) -> Result<Vec<Checkpointed>, String> {
    let store = DirStore::open_dir(dir).map_err(|e| e.to_string())?;
    let names = store.list().map_err(|e| e.to_string())?;
    let mut images = Vec::new();
    for name in names {
        let ImageName::Kfd { id } = name else {
            continue;
        };
        let msg: CriuKfd = read_listed(&store, dir, &name)?;
        let image = ValidatedKfd::new(id, msg)
            .map_err(|e| format!("{}: {}", dir.display(), crate::out::about(name, e)))?;
        images.push(Checkpointed {
            id,
            topology: checkpointed_topology(&image.message().device_entries),
        });
    }
    Ok(images)
}

/// Maps each distinct checkpointed topology onto `local`; images with the
/// same topology (processes that saw the same GPUs) share one verdict.
pub(crate) fn check(
    images: &[Checkpointed],
    local: &DeviceTopology,
    options: &CheckOptions,
) -> Result<Vec<Verdict>, String> {
    check_pinned(images, local, options, &Default::default())
}

/// [`check`] with the GPUs `pins` names pinned (a device map).
pub(crate) fn check_pinned(
    images: &[Checkpointed],
    local: &DeviceTopology,
    options: &CheckOptions,
    pins: &amdgpu_topology::device_map::DeviceMap,
) -> Result<Vec<Verdict>, String> {
    let mut verdicts: Vec<Verdict> = Vec::new();
    for image in images {
        if let Some(v) = verdicts
            .iter_mut()
            .find(|v| v.checkpointed == image.topology)
        {
            v.ids.push(image.id);
            continue;
        }
        let result = map::map_with(&image.topology, local, options, pins)
            .map_err(|e| format!("{}: {e}", ImageName::Kfd { id: image.id }))?;
        verdicts.push(Verdict {
            ids: vec![image.id],
            checkpointed: image.topology.clone(),
            result,
        });
    }
    Ok(verdicts)
}

/// One group of images in the combined JSON.
#[derive(Serialize)]
struct ImagesVerdict<'a> {
    ids: &'a [u32],
    #[serde(flatten)]
    result: &'a MapResult,
}

/// `map`'s JSON shape over several groups: compatible when every group is,
/// the GPU and CPU maps merged when compatible (each group is restored on
/// its own, so where two groups map one checkpointed id differently the
/// later group's answer shows at the top and each group's own map under
/// `images`), and every reason.
#[derive(Serialize)]
struct Combined<'a> {
    compatible: bool,
    gpu_map: BTreeMap<GpuId, GpuId>,
    cpu_map: BTreeMap<u32, u32>,
    reasons: Vec<&'a Reason>,
    images: Vec<ImagesVerdict<'a>>,
}

impl<'a> Combined<'a> {
    fn new(verdicts: &'a [Verdict]) -> Self {
        let compatible = verdicts.iter().all(|v| v.result.compatible);
        let mut gpu_map = BTreeMap::new();
        let mut cpu_map = BTreeMap::new();
        if compatible {
            for v in verdicts {
                gpu_map.extend(v.result.gpu_map.iter().map(|(k, v)| (*k, *v)));
                cpu_map.extend(v.result.cpu_map.iter().map(|(k, v)| (*k, *v)));
            }
        }
        Combined {
            compatible,
            gpu_map,
            cpu_map,
            reasons: verdicts.iter().flat_map(|v| &v.result.reasons).collect(),
            images: verdicts
                .iter()
                .map(|v| ImagesVerdict {
                    ids: &v.ids,
                    result: &v.result,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amdgpu_topology::mapping::map_topologies;

    fn machine(name: &str) -> DeviceTopology {
        DeviceTopology::from_system(&amdgpu_topology::builtin(name).unwrap()).unwrap()
    }

    #[test]
    fn images_with_one_topology_share_a_verdict_and_others_get_their_own() {
        let two = machine("pcie-2gpu");
        let one = machine("single-gpu");
        let images = [
            Checkpointed {
                id: 1,
                topology: two.clone(),
            },
            Checkpointed {
                id: 5,
                topology: one,
            },
            Checkpointed {
                id: 9,
                topology: two.clone(),
            },
        ];
        let verdicts = check(&images, &two, &CheckOptions::default()).unwrap();
        assert_eq!(verdicts.len(), 2);
        assert_eq!(verdicts[0].ids, [1, 9]);
        assert!(verdicts[0].result.compatible);
        assert_eq!(verdicts[0].result.gpu_map.len(), 2);
        assert_eq!(verdicts[1].ids, [5]);
        assert!(!verdicts[1].result.compatible);

        let combined = serde_json::to_value(Combined::new(&verdicts)).unwrap();
        assert_eq!(combined["compatible"], false);
        assert!(combined["gpu_map"].as_object().unwrap().is_empty());
        assert!(!combined["reasons"].as_array().unwrap().is_empty());
        let groups = combined["images"].as_array().unwrap();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0]["ids"], serde_json::json!([1, 9]));
        assert_eq!(groups[0]["compatible"], true);
        assert_eq!(groups[0]["gpu_map"].as_object().unwrap().len(), 2);
        assert_eq!(groups[1]["compatible"], false);
    }

    #[test]
    fn compatible_groups_merge_their_maps() {
        let two = machine("pcie-2gpu");
        let verdicts = vec![
            Verdict {
                ids: vec![1],
                checkpointed: two.clone(),
                result: map_topologies(&two, &two, &CheckOptions::default()).unwrap(),
            },
            Verdict {
                ids: vec![4],
                checkpointed: two.clone(),
                result: map_topologies(&two, &two, &CheckOptions::default()).unwrap(),
            },
        ];
        let combined = serde_json::to_value(Combined::new(&verdicts)).unwrap();
        assert_eq!(combined["compatible"], true);
        assert_eq!(combined["gpu_map"].as_object().unwrap().len(), 2);
        assert_eq!(combined["reasons"].as_array().unwrap().len(), 0);
    }
}
