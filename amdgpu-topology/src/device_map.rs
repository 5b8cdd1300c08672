//! Device maps: the user's pins of checkpointed GPUs to local GPUs
//! (`amdgpu.device-map=SRC=DST[,SRC=DST...]`, `KFD_DEVICE_MAP`,
//! `amdgpu-criu check|map --device-map`).
//!
//! Each side of a pin names one GPU of its topology, in one of three ways:
//! - a **gpu_id**: decimal as sysfs prints it (`gpu_id` file), or `0x` hex
//!   as the plugin's log lines print it;
//! - a **PCI address** `DDDD:BB:DD.F` (or `BB:DD.F` in PCI domain 0), hex
//!   as `lspci -D` prints it, from the node's `domain` and `location_id`;
//! - a **unique_id**: the node's `unique_id` property, decimal (as sysfs
//!   prints it) or `0x` hex.
//!
//! A number is looked up among the gpu_ids and the unique_ids; one that
//! names two different GPUs that way is ambiguous and refused, and so is a
//! PCI address several GPUs share. (The partitions of a GFX 9.4.3 board have
//! their partition index ORed into the low bits of `location_id`, so their
//! addresses differ in the device and function digits from the board's;
//! naming partitions by gpu_id is clearer.)
//!
//! This module parses the map and resolves it to gpu_id pairs; the pinned
//! pairs then go through every topology check in
//! [`crate::mapping::map_topologies_pinned`]. It never reads files.

use std::fmt;
use std::str::FromStr;

use crate::devices::{DeviceNode, DeviceTopology};
use crate::mapping::Side;
use crate::model::GpuId;

/// At most this many pins (more than any machine has GPUs, with room).
pub const MAX_PINS: usize = 1024;

/// One side of a pin: how the user named a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSelector {
    /// A number: a gpu_id or a unique_id.
    Number(u64),
    /// A PCI address.
    Pci {
        /// PCI domain (segment).
        domain: u32,
        /// Bus.
        bus: u8,
        /// Device (0..=31).
        device: u8,
        /// Function (0..=7).
        function: u8,
    },
}

impl GpuSelector {
    /// Whether `node` (a GPU) is the GPU this selects.
    pub fn selects(&self, node: &DeviceNode) -> bool {
        match *self {
            GpuSelector::Number(n) => {
                u64::from(node.gpu_id) == n
                    || (node.props.unique_id != 0 && node.props.unique_id == n)
            }
            GpuSelector::Pci {
                domain,
                bus,
                device,
                function,
            } => {
                let location =
                    (u32::from(bus) << 8) | (u32::from(device) << 3) | u32::from(function);
                node.props.location_id != 0
                    && node.props.domain == domain
                    && node.props.location_id == location
            }
        }
    }
}

impl fmt::Display for GpuSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            // gpu_ids and unique_ids are shown in hex wherever they appear.
            GpuSelector::Number(n) => write!(f, "{n:#06x}"),
            GpuSelector::Pci {
                domain,
                bus,
                device,
                function,
            } => write!(f, "{domain:04x}:{bus:02x}:{device:02x}.{function:x}"),
        }
    }
}

/// The PCI address of a GPU node as [`GpuSelector`] parses it, when the
/// topology records its `location_id`.
pub fn pci_address(node: &DeviceNode) -> Option<String> {
    let location = node.props.location_id;
    (location != 0).then(|| {
        format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            node.props.domain,
            (location >> 8) & 0xff,
            (location >> 3) & 0x1f,
            location & 0x7
        )
    })
}

/// What a device-map value should look like, for error messages.
pub const ACCEPTED: &str = "SRC=DST[,SRC=DST...] where each side is a gpu_id (decimal or 0x hex), \
                            a PCI address (0000:c1:00.0) or a unique_id";

/// Why a device map was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceMapError {
    /// The text is not a device map.
    #[error("device map {text:?}: {why}; expecting {ACCEPTED}", text = .text, why = .why)]
    Syntax {
        /// The offending part.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// No GPU of that side matches a selector.
    #[error("device map: no {side} GPU is {selector} (the {side} GPUs are: {known})")]
    NoSuchGpu {
        /// Which topology.
        side: Side,
        /// The selector as written.
        selector: String,
        /// Every GPU of that side, by gpu_id, PCI address and unique_id.
        known: String,
    },
    /// Several GPUs match a selector.
    #[error(
        "device map: {selector} names {count} {side} GPUs ({matches}); name one by its gpu_id"
    )]
    Ambiguous {
        /// Which topology.
        side: Side,
        /// The selector as written.
        selector: String,
        /// How many matched.
        count: usize,
        /// Their gpu_ids.
        matches: String,
    },
    /// One GPU appears in two pins.
    #[error(
        "device map names {side} GPU {gpu:#06x} twice ({first} and {second}); a GPU can be pinned once"
    )]
    NamedTwice {
        /// Which topology.
        side: Side,
        /// The GPU's gpu_id.
        gpu: GpuId,
        /// The first selector that named it.
        first: String,
        /// The second.
        second: String,
    },
}

/// One pin, as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    /// The checkpointed GPU.
    pub checkpointed: GpuSelector,
    /// The local GPU.
    pub local: GpuSelector,
}

/// A parsed device map; empty means no pins.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceMap {
    /// The pins in the order written.
    pub pins: Vec<Pin>,
}

fn syntax(text: &str, why: impl Into<String>) -> DeviceMapError {
    DeviceMapError::Syntax {
        text: text.to_owned(),
        why: why.into(),
    }
}

fn parse_number(text: &str) -> Option<u64> {
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    } else {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    }
}

fn parse_hex<T: TryFrom<u32>>(text: &str, max_digits: usize) -> Option<T> {
    if text.is_empty() || text.len() > max_digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    T::try_from(u32::from_str_radix(text, 16).ok()?).ok()
}

impl FromStr for GpuSelector {
    type Err = DeviceMapError;

    fn from_str(text: &str) -> Result<Self, DeviceMapError> {
        if !text.contains(':') {
            return parse_number(text).map(GpuSelector::Number).ok_or_else(|| {
                syntax(
                    text,
                    "not a number (a gpu_id or unique_id, decimal or 0x hex) nor a PCI address",
                )
            });
        }
        let parts: Vec<&str> = text.split(':').collect();
        let (domain, bus, rest) = match parts[..] {
            [domain, bus, rest] => (parse_hex::<u32>(domain, 8), bus, rest),
            [bus, rest] => (Some(0), bus, rest),
            _ => return Err(syntax(text, "a PCI address has the form DDDD:BB:DD.F")),
        };
        let bad = || syntax(text, "a PCI address has the form DDDD:BB:DD.F (hex)");
        let (device, function) = rest.split_once('.').ok_or_else(bad)?;
        let domain = domain.ok_or_else(bad)?;
        let bus = parse_hex::<u8>(bus, 2).ok_or_else(bad)?;
        let device = parse_hex::<u8>(device, 2)
            .filter(|d| *d < 32)
            .ok_or_else(bad)?;
        let function = parse_hex::<u8>(function, 1)
            .filter(|f| *f < 8)
            .ok_or_else(bad)?;
        Ok(GpuSelector::Pci {
            domain,
            bus,
            device,
            function,
        })
    }
}

impl FromStr for DeviceMap {
    type Err = DeviceMapError;

    /// Parses `SRC=DST[,SRC=DST...]`; white space around items is allowed,
    /// an empty string is an empty map.
    fn from_str(text: &str) -> Result<Self, DeviceMapError> {
        let mut pins = Vec::new();
        if text.trim().is_empty() {
            return Ok(DeviceMap { pins });
        }
        for item in text.split(',') {
            let item = item.trim();
            let (src, dst) = item
                .split_once('=')
                .ok_or_else(|| syntax(item, "a pin needs SRC=DST"))?;
            if src.trim().is_empty() || dst.trim().is_empty() {
                return Err(syntax(item, "a pin needs a GPU on each side of '='"));
            }
            if dst.contains('=') {
                return Err(syntax(item, "a pin has one '='; separate pins with ','"));
            }
            if pins.len() == MAX_PINS {
                return Err(syntax(text, format!("more than {MAX_PINS} pins")));
            }
            pins.push(Pin {
                checkpointed: src.trim().parse()?,
                local: dst.trim().parse()?,
            });
        }
        Ok(DeviceMap { pins })
    }
}

impl fmt::Display for DeviceMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pin) in self.pins.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", pin.checkpointed, pin.local)?;
        }
        Ok(())
    }
}

/// Every GPU of `topology`, named every way a selector can name it.
fn describe_gpus(topology: &DeviceTopology) -> String {
    let mut gpus: Vec<&DeviceNode> = topology.gpus().collect();
    gpus.sort_by_key(|n| n.node_id);
    if gpus.is_empty() {
        return "none".to_owned();
    }
    gpus.iter()
        .map(|n| {
            let mut text = format!("gpu_id {:#06x}", n.gpu_id);
            if let Some(pci) = pci_address(n) {
                text.push_str(&format!(" at {pci}"));
            }
            if n.props.unique_id != 0 {
                text.push_str(&format!(" unique_id {:#x}", n.props.unique_id));
            }
            text
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn resolve_one(
    selector: &GpuSelector,
    topology: &DeviceTopology,
    side: Side,
) -> Result<GpuId, DeviceMapError> {
    let mut matches: Vec<&DeviceNode> = topology.gpus().filter(|n| selector.selects(n)).collect();
    matches.sort_by_key(|n| n.node_id);
    match matches[..] {
        [one] => Ok(one.gpu_id),
        [] => Err(DeviceMapError::NoSuchGpu {
            side,
            selector: selector.to_string(),
            known: describe_gpus(topology),
        }),
        _ => Err(DeviceMapError::Ambiguous {
            side,
            selector: selector.to_string(),
            count: matches.len(),
            matches: matches
                .iter()
                .map(|n| format!("{:#06x}", n.gpu_id))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

impl DeviceMap {
    /// The local GPU the map pins checkpointed GPU `node` to, if a pin
    /// names it (the first such pin): for a GPU restored on its own, outside
    /// a whole-topology mapping (a render node without a KFD process).
    pub fn pin_of(
        &self,
        node: &DeviceNode,
        local: &DeviceTopology,
    ) -> Option<Result<GpuId, DeviceMapError>> {
        let pin = self.pins.iter().find(|p| p.checkpointed.selects(node))?;
        Some(resolve_one(&pin.local, local, Side::Local))
    }

    /// Whether the map pins nothing.
    pub fn is_empty(&self) -> bool {
        self.pins.is_empty()
    }

    /// The pins as `(checkpointed gpu_id, local gpu_id)` pairs: every
    /// selector names exactly one GPU of its side, and no GPU is named twice
    /// on one side.
    pub fn resolve(
        &self,
        checkpointed: &DeviceTopology,
        local: &DeviceTopology,
    ) -> Result<Vec<(GpuId, GpuId)>, DeviceMapError> {
        let mut pairs: Vec<(GpuId, GpuId)> = Vec::with_capacity(self.pins.len());
        let mut names: Vec<(String, String)> = Vec::with_capacity(self.pins.len());
        for pin in &self.pins {
            let src = resolve_one(&pin.checkpointed, checkpointed, Side::Checkpointed)?;
            let dst = resolve_one(&pin.local, local, Side::Local)?;
            for (k, &(s, d)) in pairs.iter().enumerate() {
                if s == src {
                    return Err(DeviceMapError::NamedTwice {
                        side: Side::Checkpointed,
                        gpu: src,
                        first: names[k].0.clone(),
                        second: pin.checkpointed.to_string(),
                    });
                }
                if d == dst {
                    return Err(DeviceMapError::NamedTwice {
                        side: Side::Local,
                        gpu: dst,
                        first: names[k].1.clone(),
                        second: pin.local.to_string(),
                    });
                }
            }
            pairs.push((src, dst));
            names.push((pin.checkpointed.to_string(), pin.local.to_string()));
        }
        Ok(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::DeviceProps;

    fn gpu(node_id: u32, gpu_id: GpuId, location_id: u32, unique_id: u64) -> DeviceNode {
        DeviceNode {
            node_id,
            gpu_id,
            props: DeviceProps {
                simd_count: 4,
                location_id,
                unique_id,
                ..DeviceProps::default()
            },
            iolinks: Vec::new(),
        }
    }

    fn two() -> DeviceTopology {
        DeviceTopology {
            nodes: vec![gpu(1, 0x1111, 0xc100, 77), gpu(2, 0x2222, 0xc200, 0)],
        }
    }

    #[test]
    fn selectors_parse() {
        assert_eq!("4369".parse(), Ok(GpuSelector::Number(4369)));
        assert_eq!("0x1111".parse(), Ok(GpuSelector::Number(0x1111)));
        assert_eq!(
            "0000:c1:00.0".parse(),
            Ok(GpuSelector::Pci {
                domain: 0,
                bus: 0xc1,
                device: 0,
                function: 0
            })
        );
        assert_eq!(
            "c1:1f.7".parse(),
            Ok(GpuSelector::Pci {
                domain: 0,
                bus: 0xc1,
                device: 0x1f,
                function: 7
            })
        );
        for bad in [
            "", "gpu", "0x", "c1:20.0", "c1:00.8", "1:2:3:4", "c1:00", "-1", "0xg",
        ] {
            assert!(bad.parse::<GpuSelector>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn maps_parse_and_print_back() {
        let map: DeviceMap = "0x1111=0000:c2:00.0, 77=4369".parse().unwrap();
        assert_eq!(map.pins.len(), 2);
        assert_eq!(map.to_string(), "0x1111=0000:c2:00.0,0x004d=0x1111");
        assert!("".parse::<DeviceMap>().unwrap().is_empty());
        for bad in ["1", "1=2=3", "1=2,", "=2", "1=x"] {
            let err = bad.parse::<DeviceMap>().unwrap_err().to_string();
            assert!(err.contains("expecting SRC=DST"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn resolves_each_way_of_naming() {
        let t = two();
        for text in [
            "0x1111=0x2222",
            "4369=0000:c2:00.0",
            "77=c2:00.0",
            "c1:00.0=8738",
        ] {
            let map: DeviceMap = text.parse().unwrap();
            assert_eq!(map.resolve(&t, &t), Ok(vec![(0x1111, 0x2222)]), "{text}");
        }
    }

    #[test]
    fn refuses_unknown_ambiguous_and_twice() {
        let t = two();
        let err = "0x3333=0x1111"
            .parse::<DeviceMap>()
            .unwrap()
            .resolve(&t, &t);
        let text = err.unwrap_err().to_string();
        assert!(text.contains("no checkpointed GPU is 0x3333"), "{text}");
        assert!(
            text.contains("0000:c1:00.0") && text.contains("unique_id 0x4d"),
            "{text}"
        );

        let err = "0x1111=0x1111,4369=0x2222"
            .parse::<DeviceMap>()
            .unwrap()
            .resolve(&t, &t)
            .unwrap_err();
        assert!(matches!(
            err,
            DeviceMapError::NamedTwice {
                side: Side::Checkpointed,
                gpu: 0x1111,
                ..
            }
        ));
        let err = "0x1111=c1:00.0,0x2222=0x1111"
            .parse::<DeviceMap>()
            .unwrap()
            .resolve(&t, &t)
            .unwrap_err();
        assert!(
            err.to_string().contains("names local GPU 0x1111 twice"),
            "{err}"
        );

        // A unique_id equal to another GPU's gpu_id names two GPUs.
        let clash = DeviceTopology {
            nodes: vec![gpu(1, 5, 0xc100, 0), gpu(2, 6, 0xc200, 5)],
        };
        let err = "5=5".parse::<DeviceMap>().unwrap().resolve(&clash, &t);
        assert!(matches!(
            err,
            Err(DeviceMapError::Ambiguous { count: 2, .. })
        ));
        // Partitions share a PCI function.
        let parts = DeviceTopology {
            nodes: vec![gpu(1, 5, 0xc100, 0), gpu(2, 6, 0xc100, 0)],
        };
        let err = "5=c1:00.0"
            .parse::<DeviceMap>()
            .unwrap()
            .resolve(&t, &parts);
        assert!(matches!(err, Err(DeviceMapError::NoSuchGpu { .. })));
        let err = "0x1111=c1:00.0"
            .parse::<DeviceMap>()
            .unwrap()
            .resolve(&t, &parts);
        assert!(
            err.as_ref()
                .unwrap_err()
                .to_string()
                .contains("names 2 local GPUs"),
            "{err:?}"
        );
    }

    #[test]
    fn a_topology_without_pci_addresses_matches_none() {
        let bare = DeviceTopology {
            nodes: vec![gpu(1, 0x1111, 0, 0)],
        };
        let err = "c1:00.0=0x1111"
            .parse::<DeviceMap>()
            .unwrap()
            .resolve(&bare, &bare);
        assert!(matches!(err, Err(DeviceMapError::NoSuchGpu { .. })));
    }
}
