//! The topology model: what a KFD sysfs tree says about a machine.
//!
//! The model keeps every key the kernel printed, in the order it printed them,
//! so a model written back as a sysfs tree reads back equal. Typed accessors
//! sit on top for the keys the checks and the mapping use. This module never
//! touches the filesystem.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// A KFD gpu_id: the kernel's non-zero 16-bit hash of a GPU (or partition).
/// 0 in sysfs marks a CPU node.
pub type GpuId = u32;

/// A DRM render minor: the `N` of `/dev/dri/renderD<N>` (128..=255 in practice).
pub type RenderMinor = u32;

/// A `properties` file: `key value` lines, values decimal unsigned integers.
/// Order and unknown keys are preserved.
///
/// A few keys carry a comma-separated list of decimal numbers instead of one
/// number (`sibling_map` in `caches/*/properties`); those are kept verbatim as
/// list values so the file round-trips. [`Properties::get`] and
/// [`Properties::iter`] see only the numeric entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Properties {
    entries: Vec<(String, Value)>,
}

/// How a value is stored: a number, or a verbatim comma-separated list.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Number(u64),
    List(String),
}

/// One value of a [`Properties`] entry, as returned by [`Properties::entries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyValue<'a> {
    /// A decimal unsigned integer.
    Number(u64),
    /// A comma-separated list of decimal numbers, verbatim (`sibling_map`).
    List(&'a str),
}

impl std::fmt::Display for PropertyValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PropertyValue::Number(n) => write!(f, "{n}"),
            PropertyValue::List(s) => f.write_str(s),
        }
    }
}

impl Properties {
    /// An empty set of properties.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `key`, if present and numeric.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| match v {
                Value::Number(n) => Some(*n),
                Value::List(_) => None,
            })
    }

    /// The value of `key`, or 0 when absent (as the C plugin reads it).
    pub fn get_or_zero(&self, key: &str) -> u64 {
        self.get(key).unwrap_or(0)
    }

    /// The verbatim list value of `key` (e.g. `sibling_map`), if present and a list.
    pub fn list(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| match v {
                Value::List(s) => Some(s.as_str()),
                Value::Number(_) => None,
            })
    }

    /// Whether `key` is present (numeric or list).
    pub fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Sets `key` to `value`, replacing an existing value in place or
    /// appending a new key at the end.
    pub fn set(&mut self, key: &str, value: u64) {
        self.put(key, Value::Number(value));
    }

    /// Sets `key` to the list value `list` (one or more comma-separated
    /// decimal numbers, kept verbatim), replacing in place or appending at
    /// the end. The parser reads list values only for
    /// [`crate::parse::LIST_KEYS`], so only those round-trip through files.
    pub fn set_list(&mut self, key: &str, list: impl Into<String>) {
        self.put(key, Value::List(list.into()));
    }

    /// Sets `key` to `value`; a new key goes right after `anchor` (where the
    /// kernel prints it), or at the end when `anchor` is absent.
    pub fn insert_after(&mut self, anchor: &str, key: &str, value: u64) {
        if self.contains(key) {
            self.set(key, value);
            return;
        }
        let at = self
            .entries
            .iter()
            .position(|(k, _)| k == anchor)
            .map_or(self.entries.len(), |i| i + 1);
        self.entries
            .insert(at, (key.to_owned(), Value::Number(value)));
    }

    fn put(&mut self, key: &str, value: Value) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key.to_owned(), value)),
        }
    }

    /// Removes `key`, returning its value if it was numeric.
    pub fn remove(&mut self, key: &str) -> Option<u64> {
        let pos = self.entries.iter().position(|(k, _)| k == key)?;
        match self.entries.remove(pos).1 {
            Value::Number(n) => Some(n),
            Value::List(_) => None,
        }
    }

    /// The numeric entries in file order (list values are left out).
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.entries.iter().filter_map(|(k, v)| match v {
            Value::Number(n) => Some((k.as_str(), *n)),
            Value::List(_) => None,
        })
    }

    /// All entries in file order, numeric and list values alike.
    pub fn entries(&self) -> impl Iterator<Item = (&str, PropertyValue<'_>)> {
        self.entries.iter().map(|(k, v)| {
            let value = match v {
                Value::Number(n) => PropertyValue::Number(*n),
                Value::List(s) => PropertyValue::List(s),
            };
            (k.as_str(), value)
        })
    }

    /// Number of keys (numeric and list).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Serialized as a map from key to value in file order: numbers as JSON
/// numbers, list values as strings.
impl Serialize for Properties {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (key, value) in &self.entries {
            match value {
                Value::Number(n) => map.serialize_entry(key, n)?,
                Value::List(s) => map.serialize_entry(key, s)?,
            }
        }
        map.end()
    }
}

impl<K: Into<String>> FromIterator<(K, u64)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, u64)>>(iter: I) -> Self {
        let mut props = Properties::new();
        for (k, v) in iter {
            props.set(&k.into(), v);
        }
        props
    }
}

/// CRAT io-link types (`type` key of io_links/p2p_links).
pub mod link_type {
    /// HyperTransport; used for CPU to CPU (NUMA) links.
    pub const HYPERTRANSPORT: u64 = 1;
    /// PCI Express.
    pub const PCIE: u64 = 2;
    /// Intel QuickPath.
    pub const QPI: u64 = 5;
    /// AMD XGMI (Infinity Fabric) between GPUs, or GPU and CPU.
    pub const XGMI: u64 = 11;
}

/// `mem_banks/*/properties` heap types.
pub mod heap_type {
    /// System memory.
    pub const SYSTEM: u64 = 0;
    /// Frame buffer, CPU visible (large BAR).
    pub const FB_PUBLIC: u64 = 1;
    /// Frame buffer, not CPU visible.
    pub const FB_PRIVATE: u64 = 2;
}

/// One `io_links/M` or `p2p_links/M` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    /// The directory index M.
    pub index: u32,
    /// The link's properties (`type`, `node_from`, `node_to`, `weight`, ...).
    pub properties: Properties,
}

impl Link {
    /// CRAT io-interface type (see [`link_type`]).
    pub fn link_type(&self) -> u64 {
        self.properties.get_or_zero("type")
    }
    /// Source node id.
    pub fn node_from(&self) -> u32 {
        self.properties.get_or_zero("node_from") as u32
    }
    /// Destination node id.
    pub fn node_to(&self) -> u32 {
        self.properties.get_or_zero("node_to") as u32
    }
}

/// One `mem_banks/M` or `caches/M` entry: an index and its properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Indexed {
    /// The directory index M.
    pub index: u32,
    /// The entry's properties.
    pub properties: Properties,
    /// Contents of `mem_banks/M/used_memory` (bytes of the bank in use when
    /// the tree was read); `None` when the file is absent, always for caches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_memory: Option<u64>,
}

impl Indexed {
    /// An entry with `index` and `properties`, without `used_memory`.
    pub fn new(index: u32, properties: Properties) -> Self {
        Self {
            index,
            properties,
            used_memory: None,
        }
    }
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum NodeKind {
    /// CPU only: `gpu_id` 0 (or no SIMDs).
    Cpu,
    /// A GPU or GPU partition.
    Gpu,
    /// One node holding both CPU cores and GPU SIMDs (old-style APU).
    Apu,
}

/// One `nodes/N` directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// The node index N.
    pub id: u32,
    /// Contents of the `gpu_id` file; `None` when the file is absent.
    pub gpu_id: Option<GpuId>,
    /// Contents of the `name` file without the trailing newline; `None` when absent.
    pub name: Option<String>,
    /// The node's `properties`.
    pub properties: Properties,
    /// `mem_banks/*`, sorted by index; `None` when the directory is absent.
    pub mem_banks: Option<Vec<Indexed>>,
    /// `caches/*`, sorted by index; `None` when the directory is absent.
    pub caches: Option<Vec<Indexed>>,
    /// `io_links/*`, sorted by index; `None` when the directory is absent.
    pub io_links: Option<Vec<Link>>,
    /// `p2p_links/*`, sorted by index; `None` when the directory is absent.
    pub p2p_links: Option<Vec<Link>>,
}

impl Node {
    /// A property value, 0 when absent.
    pub fn prop(&self, key: &str) -> u64 {
        self.properties.get_or_zero(key)
    }

    /// CPU, GPU or APU. A node is a GPU when it has SIMDs; it is an APU when
    /// it also has CPU cores. A `gpu_id` of 0 always means CPU.
    pub fn kind(&self) -> NodeKind {
        let simds = self.prop("simd_count");
        let cores = self.prop("cpu_cores_count");
        if self.gpu_id == Some(0) || simds == 0 {
            NodeKind::Cpu
        } else if cores > 0 {
            NodeKind::Apu
        } else {
            NodeKind::Gpu
        }
    }

    /// Whether the node has a GPU (GPU or APU).
    pub fn is_gpu(&self) -> bool {
        self.kind() != NodeKind::Cpu
    }

    /// The render minor (`drm_render_minor`), for GPU nodes.
    pub fn render_minor(&self) -> Option<RenderMinor> {
        self.properties
            .get("drm_render_minor")
            .filter(|_| self.is_gpu())
            .map(|m| m as RenderMinor)
    }

    /// XGMI hive id, 0 when none.
    pub fn hive_id(&self) -> u64 {
        self.prop("hive_id")
    }

    /// The VRAM bank as the C plugin finds it: the first bank (by index) whose
    /// heap type is FB public or FB private, as `(size_in_bytes, public)`.
    pub fn vram(&self) -> Option<(u64, bool)> {
        self.mem_banks.as_ref()?.iter().find_map(|bank| {
            let heap = bank.properties.get_or_zero("heap_type");
            (heap == heap_type::FB_PUBLIC || heap == heap_type::FB_PRIVATE).then(|| {
                (
                    bank.properties.get_or_zero("size_in_bytes"),
                    heap == heap_type::FB_PUBLIC,
                )
            })
        })
    }

    /// The io_links, empty when the directory is absent.
    pub fn io_links(&self) -> &[Link] {
        self.io_links.as_deref().unwrap_or(&[])
    }

    /// The p2p_links, empty when the directory is absent.
    pub fn p2p_links(&self) -> &[Link] {
        self.p2p_links.as_deref().unwrap_or(&[])
    }
}

/// A whole topology: `generation_id`, `system_properties` and the nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct System {
    /// Contents of `generation_id`; `None` when absent.
    pub generation_id: Option<u64>,
    /// Contents of `system_properties`; `None` when absent.
    pub system_properties: Option<Properties>,
    /// The readable nodes, sorted by node id.
    pub nodes: Vec<Node>,
}

impl System {
    /// The node with id `id`.
    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The GPU node with `gpu_id`.
    pub fn gpu(&self, gpu_id: GpuId) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|n| n.is_gpu() && n.gpu_id == Some(gpu_id))
    }

    /// GPU (and APU) nodes in node order.
    pub fn gpus(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.is_gpu())
    }

    /// CPU nodes in node order.
    pub fn cpus(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| !n.is_gpu())
    }
}
