//! Device compatibility: whether one local GPU can stand in for one
//! checkpointed GPU, by the C plugin's rules (its per-device property
//! comparison, `device_properties_match` in `amdgpu_plugin_topology.c`), and
//! the [`Reason`] every refusal is explained with.
//!
//! This module compares properties only; links, hives and CPU placement need
//! the whole topology and live in [`crate::mapping`]. It never reads the
//! environment: the switches come in as [`CheckOptions`].

use std::fmt;

use serde::Serialize;

use crate::devices::{DeviceNode, DeviceProps};
use crate::model::GpuId;
use crate::options::CheckOptions;

/// Names of the rules that are not a single property comparison, as they
/// appear in [`Reason::check`].
pub mod rule {
    /// GPU counts differ: values are the two counts.
    pub const GPU_COUNT: &str = "gpu_count";
    /// More XGMI hives checkpointed than local: values are the two counts.
    pub const XGMI_HIVE_COUNT: &str = "xgmi_hive_count";
    /// A checkpointed hive has no local hive to go to. With `gpu` set: the
    /// hive of that GPU has `checkpointed` members, of which at most `local`
    /// fit into any one local hive. Without: `checkpointed` hives, at most
    /// `local` of them can be placed at the same time.
    pub const XGMI_HIVE: &str = "xgmi_hive";
    /// The checkpointed GPU has more valid io links than the local one:
    /// values are the two counts.
    pub const VALID_IO_LINKS: &str = "valid_io_links";
    /// A link from the checkpointed GPU to a CPU has no counterpart on the
    /// local GPU: values are the link types (local 0 when it has no CPU link).
    pub const CPU_LINK: &str = "cpu_link";
    /// CPU placement (`KFD_NUMA_CHECK`). With `gpu` set: the GPUs attached to
    /// that GPU's CPU number `checkpointed`, at most `local` of them fit on
    /// any one local CPU. Without: `checkpointed` CPUs to place, at most
    /// `local` can be placed at the same time.
    pub const NUMA: &str = "numa";
    /// Counting (Hall's condition): `checkpointed` GPUs (including `gpu`)
    /// can only go to `local` distinct local GPUs, fewer than needed. After
    /// the pair checks passed this comes from the constraints on top of
    /// them: CPU placement (the most preferred placement tried) or hive
    /// assignment.
    pub const COMPATIBLE_GPUS: &str = "compatible_gpus";
    /// A device-map pin of `gpu` to `local_gpu` fails the pair checks; the
    /// reasons that follow say which. `checkpointed` counts them.
    pub const PIN: &str = "pin";
    /// Device-map pins split the XGMI hive of `gpu`: it shares a hive with
    /// checkpointed GPU `checkpointed`, but their pins, `local_gpu` and
    /// `local`, are not in one local hive.
    pub const PIN_SPLITS_HIVE: &str = "pin_splits_hive";
    /// Device-map pins merge XGMI hives: `gpu` and checkpointed GPU
    /// `checkpointed` are in different hives, but their pins, `local_gpu`
    /// and `local`, are in one local hive.
    pub const PIN_MERGES_HIVES: &str = "pin_merges_hives";
    /// A device-map pin puts `gpu`, a member of an XGMI hive of
    /// `checkpointed` GPUs, on `local_gpu`, in a local hive of only `local`
    /// GPUs (0: in none).
    pub const PIN_HIVE_SIZE: &str = "pin_hive_size";
}

/// One reason a checkpointed topology cannot be restored on a local one.
///
/// Property reasons (`check` a property name such as `simd_count`) compare
/// the checkpointed GPU `gpu` with the local GPU `local_gpu`; rule reasons
/// (see [`rule`]) document their values there. GPU ids are decimal as in
/// sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// The checkpointed GPU concerned, if one is.
    pub gpu: Option<GpuId>,
    /// The property or rule that failed.
    pub check: &'static str,
    /// The checkpointed side's value.
    pub checkpointed: u64,
    /// The local side's value.
    pub local: u64,
    /// The local GPU compared with, for property and link reasons.
    pub local_gpu: Option<GpuId>,
}

/// How a property is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// Checkpointed and local must be equal.
    Equal,
    /// Checkpointed must be at most local (the local GPU may be more capable).
    AtMost,
}

/// The comparison applied to property `check`, or `None` for a rule name.
pub fn comparison(check: &str) -> Option<Comparison> {
    match check {
        "vram_size" | "num_gws" | "caches_count" | "fw_version" | "sdma_fw_version" => {
            Some(Comparison::AtMost)
        }
        _ if ALWAYS_EQUAL.iter().any(|(name, _)| *name == check) || check == "capability" => {
            Some(Comparison::Equal)
        }
        _ => None,
    }
}

type Getter = fn(&DeviceProps) -> u64;

/// The properties that must always be equal (§7.4), in the C plugin's order.
const ALWAYS_EQUAL: [(&str, Getter); 18] = [
    ("simd_count", |p| p.simd_count.into()),
    ("mem_banks_count", |p| p.mem_banks_count.into()),
    ("io_links_count", |p| p.io_links_count.into()),
    ("max_waves_per_simd", |p| p.max_waves_per_simd.into()),
    ("lds_size_in_kb", |p| p.lds_size_in_kb.into()),
    ("wave_front_size", |p| p.wave_front_size.into()),
    ("array_count", |p| p.array_count.into()),
    ("simd_arrays_per_engine", |p| {
        p.simd_arrays_per_engine.into()
    }),
    ("cu_per_simd_array", |p| p.cu_per_simd_array.into()),
    ("simd_per_cu", |p| p.simd_per_cu.into()),
    ("max_slots_scratch_cu", |p| p.max_slots_scratch_cu.into()),
    ("vendor_id", |p| p.vendor_id.into()),
    ("device_id", |p| p.device_id.into()),
    ("num_sdma_engines", |p| p.num_sdma_engines.into()),
    ("num_sdma_xgmi_engines", |p| p.num_sdma_xgmi_engines.into()),
    ("num_sdma_queues_per_engine", |p| {
        p.num_sdma_queues_per_engine.into()
    }),
    ("num_cp_queues", |p| p.num_cp_queues.into()),
    ("vram_public", |p| p.vram_public.into()),
];

/// The values of every compared property (always-equal and gated), for
/// telling apart GPUs that are identical in the checks' eyes.
pub(crate) fn compared_values(p: &DeviceProps) -> [u64; 24] {
    let mut values = [0; 24];
    for (slot, (_, get)) in values.iter_mut().zip(ALWAYS_EQUAL) {
        *slot = get(p);
    }
    values[18..].copy_from_slice(&[
        p.capability.into(),
        p.vram_size,
        p.num_gws.into(),
        p.caches_count.into(),
        p.fw_version.into(),
        p.sdma_fw_version.into(),
    ]);
    values
}

/// Every property mismatch between checkpointed GPU `src` and local GPU
/// `dest`, in the C plugin's order: the always-equal properties, then
/// `capability` (equal), `vram_size`, `num_gws`, `caches_count`,
/// `fw_version`, `sdma_fw_version` (checkpointed at most local), each of the
/// latter six only when its switch in `options` is on. Empty when the local
/// GPU's properties can stand in for the checkpointed GPU's.
pub fn device_mismatches(
    src: &DeviceNode,
    dest: &DeviceNode,
    options: &CheckOptions,
) -> Vec<Reason> {
    let mut reasons = Vec::new();
    let (s, d) = (&src.props, &dest.props);
    let mut add = |check, checkpointed: u64, local: u64| {
        reasons.push(Reason {
            gpu: Some(src.gpu_id),
            check,
            checkpointed,
            local,
            local_gpu: Some(dest.gpu_id),
        })
    };
    for (check, get) in ALWAYS_EQUAL {
        if get(s) != get(d) {
            add(check, get(s), get(d));
        }
    }
    if options.capability && s.capability != d.capability {
        add("capability", s.capability.into(), d.capability.into());
    }
    let at_most: [(&'static str, bool, u64, u64); 5] = [
        ("vram_size", options.vram_size, s.vram_size, d.vram_size),
        (
            "num_gws",
            options.num_gws,
            s.num_gws.into(),
            d.num_gws.into(),
        ),
        (
            "caches_count",
            options.caches_count,
            s.caches_count.into(),
            d.caches_count.into(),
        ),
        (
            "fw_version",
            options.fw_version,
            s.fw_version.into(),
            d.fw_version.into(),
        ),
        (
            "sdma_fw_version",
            options.sdma_fw_version,
            s.sdma_fw_version.into(),
            d.sdma_fw_version.into(),
        ),
    ];
    for (check, enabled, checkpointed, local) in at_most {
        if enabled && checkpointed > local {
            add(check, checkpointed, local);
        }
    }
    reasons
}

/// Whether local GPU `dest`'s properties can stand in for checkpointed GPU
/// `src`'s (no [`device_mismatches`]).
pub fn device_properties_match(
    src: &DeviceNode,
    dest: &DeviceNode,
    options: &CheckOptions,
) -> bool {
    device_mismatches(src, dest, options).is_empty()
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(gpu) = self.gpu {
            write!(f, "checkpointed GPU {gpu:#06x}: ")?;
        }
        let (c, l) = (self.checkpointed, self.local);
        let local_gpu = match self.local_gpu {
            Some(id) => format!("local GPU {id:#06x}"),
            None => "local".to_owned(),
        };
        match (self.check, comparison(self.check)) {
            // PCI ids read as lspci and `amdgpu-criu topology` print them.
            (check @ ("device_id" | "vendor_id"), Some(Comparison::Equal)) => {
                write!(f, "{check} {c:#06x}, {local_gpu} has {l:#06x} (must be equal)")
            }
            (check, Some(Comparison::Equal)) => {
                write!(f, "{check} {c}, {local_gpu} has {l} (must be equal)")
            }
            (check, Some(Comparison::AtMost)) => {
                write!(f, "{check} {c}, {local_gpu} has only {l}")
            }
            (rule::GPU_COUNT, None) => {
                write!(f, "number of GPUs mismatch: {c} checkpointed, {l} local")
            }
            (rule::XGMI_HIVE_COUNT, None) => write!(
                f,
                "number of XGMI hives mismatch: {c} checkpointed, only {l} local"
            ),
            (rule::XGMI_HIVE, None) if self.gpu.is_some() => write!(
                f,
                "its XGMI hive of {c} GPUs has no compatible local hive (at most {l} of its GPUs fit into one)"
            ),
            (rule::XGMI_HIVE, None) => write!(
                f,
                "{c} checkpointed XGMI hives, at most {l} can be placed on distinct local hives"
            ),
            (rule::VALID_IO_LINKS, None) => {
                write!(f, "{c} valid io links, {local_gpu} has only {l}")
            }
            (rule::CPU_LINK, None) => write!(
                f,
                "its link to a CPU (type {c}) has no counterpart on {local_gpu} (CPU link type {l})"
            ),
            (rule::NUMA, None) if self.gpu.is_some() => write!(
                f,
                "{c} GPUs share its CPU node, at most {l} of them fit on one local CPU node"
            ),
            (rule::NUMA, None) => write!(
                f,
                "{c} checkpointed CPU nodes carry GPUs, at most {l} can be placed on distinct local CPU nodes"
            ),
            (rule::COMPATIBLE_GPUS, None) => write!(
                f,
                "{c} checkpointed GPUs (this one among them) are compatible with only {l} local GPUs"
            ),
            (rule::PIN, None) => write!(
                f,
                "the device map pins it to {local_gpu}, which fails {c} check(s)"
            ),
            (rule::PIN_SPLITS_HIVE, None) => write!(
                f,
                "the device map splits its XGMI hive: it shares a hive with checkpointed GPU {c:#06x}, \
                 but they are pinned to {local_gpu} and local GPU {l:#06x}, which are not in one hive"
            ),
            (rule::PIN_MERGES_HIVES, None) => write!(
                f,
                "the device map merges XGMI hives: it and checkpointed GPU {c:#06x} are in different \
                 hives, but they are pinned to {local_gpu} and local GPU {l:#06x}, which share one"
            ),
            (rule::PIN_HIVE_SIZE, None) if l == 0 => write!(
                f,
                "the device map breaks its XGMI hive of {c} GPUs: it is pinned to {local_gpu}, \
                 which is in no XGMI hive"
            ),
            (rule::PIN_HIVE_SIZE, None) => write!(
                f,
                "the device map breaks its XGMI hive of {c} GPUs: it is pinned to {local_gpu}, \
                 whose hive has only {l}"
            ),
            (check, None) => write!(f, "{check}: checkpointed {c}, {local_gpu} {l}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(gpu_id: GpuId) -> DeviceNode {
        DeviceNode {
            node_id: 1,
            gpu_id,
            props: DeviceProps {
                simd_count: 416,
                mem_banks_count: 1,
                caches_count: 100,
                io_links_count: 4,
                num_gws: 64,
                vendor_id: 4098,
                device_id: 29711,
                fw_version: 78,
                capability: 0x2800_0000,
                sdma_fw_version: 8,
                vram_size: 64 << 30,
                ..DeviceProps::default()
            },
            iolinks: Vec::new(),
        }
    }

    #[test]
    fn equal_devices_match_and_ids_are_not_compared() {
        let mut dest = gpu(2);
        dest.props.domain = 1;
        dest.props.drm_render_minor = 130;
        dest.props.hive_id = 99;
        dest.props.gds_size_in_kb = 7;
        dest.props.cpu_cores_count = 3;
        dest.node_id = 9;
        assert!(device_properties_match(
            &gpu(1),
            &dest,
            &CheckOptions::all()
        ));
    }

    #[test]
    fn always_equal_properties_refuse_in_both_directions() {
        for delta in [-1i64, 1] {
            let mut dest = gpu(2);
            dest.props.simd_count = (416 + delta) as u32;
            dest.props.vram_public = true;
            let reasons = device_mismatches(&gpu(1), &dest, &CheckOptions::none());
            assert_eq!(
                reasons,
                [
                    Reason {
                        gpu: Some(1),
                        check: "simd_count",
                        checkpointed: 416,
                        local: (416 + delta) as u64,
                        local_gpu: Some(2),
                    },
                    Reason {
                        gpu: Some(1),
                        check: "vram_public",
                        checkpointed: 0,
                        local: 1,
                        local_gpu: Some(2),
                    }
                ]
            );
        }
    }

    #[test]
    fn more_capable_local_gpu_is_accepted() {
        let mut dest = gpu(2);
        dest.props.vram_size *= 2;
        dest.props.num_gws += 1;
        dest.props.caches_count += 1;
        dest.props.fw_version += 1;
        dest.props.sdma_fw_version += 1;
        assert!(device_mismatches(&gpu(1), &dest, &CheckOptions::all()).is_empty());
        // and the reverse is refused on all five
        let checks: Vec<_> = device_mismatches(&dest, &gpu(1), &CheckOptions::all())
            .iter()
            .map(|r| r.check)
            .collect();
        assert_eq!(
            checks,
            [
                "vram_size",
                "num_gws",
                "caches_count",
                "fw_version",
                "sdma_fw_version"
            ]
        );
    }

    #[test]
    fn each_switch_lets_exactly_its_own_mismatch_through() {
        let src = gpu(1);
        let mut weaker = gpu(2);
        weaker.props.capability ^= 1;
        weaker.props.vram_size -= 1;
        weaker.props.num_gws -= 1;
        weaker.props.caches_count -= 1;
        weaker.props.fw_version -= 1;
        weaker.props.sdma_fw_version -= 1;
        let all = [
            "capability",
            "vram_size",
            "num_gws",
            "caches_count",
            "fw_version",
            "sdma_fw_version",
        ];
        type Switch = (&'static str, fn(&mut CheckOptions));
        let switches: [Switch; 6] = [
            ("capability", |o| o.capability = false),
            ("vram_size", |o| o.vram_size = false),
            ("num_gws", |o| o.num_gws = false),
            ("caches_count", |o| o.caches_count = false),
            ("fw_version", |o| o.fw_version = false),
            ("sdma_fw_version", |o| o.sdma_fw_version = false),
        ];
        for (name, off) in switches {
            let mut options = CheckOptions::all();
            off(&mut options);
            let checks: Vec<_> = device_mismatches(&src, &weaker, &options)
                .iter()
                .map(|r| r.check)
                .collect();
            let expected: Vec<_> = all.iter().copied().filter(|c| *c != name).collect();
            assert_eq!(checks, expected, "with {name} off");
        }
        // NUMA is not a property check: switching it off changes nothing here.
        let mut options = CheckOptions::all();
        options.numa = false;
        assert_eq!(device_mismatches(&src, &weaker, &options).len(), 6);
    }

    #[test]
    fn reasons_read_well() {
        let mut dest = gpu(2);
        dest.props.vram_size = 1 << 30;
        let text = device_mismatches(&gpu(1), &dest, &CheckOptions::all())[0].to_string();
        assert_eq!(
            text,
            "checkpointed GPU 0x0001: vram_size 68719476736, local GPU 0x0002 has only 1073741824"
        );
        assert_eq!(comparison("simd_count"), Some(Comparison::Equal));
        assert_eq!(comparison("fw_version"), Some(Comparison::AtMost));
        assert_eq!(comparison(rule::NUMA), None);
    }
}
