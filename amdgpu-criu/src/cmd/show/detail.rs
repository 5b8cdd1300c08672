//! The details part of `show`: every field of a message in the message's own
//! (tag) order, ids and addresses in hex, flags decoded.
//!
//! Messages are turned into an [`Ordered`] value through serde (struct
//! fields serialize in declaration order, which is tag order), so nothing
//! here repeats the field lists of `amdgpu_image::messages`. Entries whose
//! fields are all scalars (BOs, VM mappings, io links) take one line each;
//! device entries take one line of scalars plus one of io links.

use std::fmt::Write as _;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Serialize;

/// A JSON-like value whose maps keep their order.
#[derive(Clone, Debug, PartialEq)]
pub enum Ordered {
    /// null.
    Null,
    /// A boolean.
    Bool(bool),
    /// An unsigned integer.
    U(u64),
    /// A signed integer.
    I(i64),
    /// A float.
    F(f64),
    /// A string.
    S(String),
    /// A list.
    Seq(Vec<Ordered>),
    /// A map, in order.
    Map(Vec<(String, Ordered)>),
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Ordered, E> {
                Ok(Ordered::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Ordered, E> {
                Ok(Ordered::U(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Ordered, E> {
                Ok(Ordered::I(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Ordered, E> {
                Ok(Ordered::F(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Ordered, E> {
                Ok(Ordered::S(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Ordered>()? {
                    entries.push((k, v));
                }
                Ok(Ordered::Map(entries))
            }
        }
        d.deserialize_any(V)
    }
}

/// `value` as an [`Ordered`] map, its fields in declaration order.
pub fn ordered<T: Serialize>(value: &T) -> Ordered {
    serde_json::to_string(value)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Ordered::Null)
}

/// Fields shown in hexadecimal.
const HEX_FIELDS: &[&str] = &[
    "gpu_id",
    "addr",
    "offset",
    "handle",
    "gem_handle",
    "share_handle",
    "hive_id",
    "unique_id",
    "referencing_gpu_id",
    "capability",
    "flags",
    "shared_mem_magic",
    "vendor_id",
    "device_id",
    "content_checksum",
    "message_checksum",
];

/// Which message a value belongs to, for flag names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// `criu_kfd` and its entries.
    Kfd,
    /// `criu_render_node` and its entries.
    Render,
    /// `criu_dmabuf_node`.
    Dmabuf,
}

/// Names of the set bits of `value` from `names`, and the rest in hex.
fn bit_names(value: u64, names: &[(u64, &str)]) -> String {
    let mut parts = Vec::new();
    let mut rest = value;
    for &(bit, name) in names {
        if value & bit == bit && bit != 0 {
            parts.push(name.to_owned());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("|")
    }
}

/// `alloc_flags` of a KFD BO (`KFD_IOC_ALLOC_MEM_FLAGS_*`).
pub fn kfd_alloc_flags(v: u64) -> String {
    use kfd_sys::kfd::*;
    bit_names(
        v,
        &[
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_VRAM), "VRAM"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_GTT), "GTT"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_USERPTR), "USERPTR"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL), "DOORBELL"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP), "MMIO_REMAP"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE), "WRITABLE"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE), "EXECUTABLE"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC), "PUBLIC"),
            (
                u64::from(KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE),
                "NO_SUBSTITUTE",
            ),
            (
                u64::from(KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM),
                "AQL_QUEUE_MEM",
            ),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_COHERENT), "COHERENT"),
            (u64::from(KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED), "UNCACHED"),
            (
                u64::from(KFD_IOC_ALLOC_MEM_FLAGS_EXT_COHERENT),
                "EXT_COHERENT",
            ),
            (
                u64::from(KFD_IOC_ALLOC_MEM_FLAGS_CONTIGUOUS_BEST_EFFORT),
                "CONTIGUOUS_BEST_EFFORT",
            ),
        ],
    )
}

/// `alloc_flags` of a GEM BO (`AMDGPU_GEM_CREATE_*`).
fn gem_create_flags(v: u64) -> String {
    use kfd_sys::amdgpu_drm::*;
    bit_names(
        v,
        &[
            (AMDGPU_GEM_CREATE_CPU_ACCESS_REQUIRED, "CPU_ACCESS_REQUIRED"),
            (AMDGPU_GEM_CREATE_NO_CPU_ACCESS, "NO_CPU_ACCESS"),
            (AMDGPU_GEM_CREATE_CPU_GTT_USWC, "CPU_GTT_USWC"),
            (AMDGPU_GEM_CREATE_VRAM_CLEARED, "VRAM_CLEARED"),
            (AMDGPU_GEM_CREATE_VRAM_CONTIGUOUS, "VRAM_CONTIGUOUS"),
            (AMDGPU_GEM_CREATE_VM_ALWAYS_VALID, "VM_ALWAYS_VALID"),
            (AMDGPU_GEM_CREATE_EXPLICIT_SYNC, "EXPLICIT_SYNC"),
            (AMDGPU_GEM_CREATE_CP_MQD_GFX9, "CP_MQD_GFX9"),
            (
                AMDGPU_GEM_CREATE_VRAM_WIPE_ON_RELEASE,
                "VRAM_WIPE_ON_RELEASE",
            ),
            (AMDGPU_GEM_CREATE_ENCRYPTED, "ENCRYPTED"),
            (AMDGPU_GEM_CREATE_PREEMPTIBLE, "PREEMPTIBLE"),
        ],
    )
}

/// `preferred_domains` of a GEM BO (`AMDGPU_GEM_DOMAIN_*`).
pub fn gem_domains(v: u64) -> String {
    use kfd_sys::amdgpu_drm::*;
    bit_names(
        v,
        &[
            (u64::from(AMDGPU_GEM_DOMAIN_CPU), "CPU"),
            (u64::from(AMDGPU_GEM_DOMAIN_GTT), "GTT"),
            (u64::from(AMDGPU_GEM_DOMAIN_VRAM), "VRAM"),
            (u64::from(AMDGPU_GEM_DOMAIN_GDS), "GDS"),
            (u64::from(AMDGPU_GEM_DOMAIN_GWS), "GWS"),
            (u64::from(AMDGPU_GEM_DOMAIN_OA), "OA"),
            (u64::from(AMDGPU_GEM_DOMAIN_DOORBELL), "DOORBELL"),
            (u64::from(AMDGPU_GEM_DOMAIN_MMIO_REMAP), "MMIO_REMAP"),
        ],
    )
}

/// A CRAT io-link type (sysfs `type`).
pub fn link_type(v: u64) -> &'static str {
    use amdgpu_topology::model::link_type::*;
    match v {
        HYPERTRANSPORT => "HyperTransport",
        PCIE => "PCIe",
        QPI => "QPI",
        XGMI => "XGMI",
        0 => "undefined",
        3 => "AMBA",
        4 => "MIPI",
        8 => "NUMA",
        _ => "other",
    }
}

/// One scalar as text: hex for ids and addresses, flags decoded.
fn scalar(ctx: Context, key: &str, v: &Ordered) -> String {
    match v {
        Ordered::U(n) => {
            let n = *n;
            match key {
                "alloc_flags" if ctx == Context::Kfd => format!("{n:#x} ({})", kfd_alloc_flags(n)),
                "alloc_flags" => format!("{n:#x} ({})", gem_create_flags(n)),
                "preferred_domains" => format!("{n:#x} ({})", gem_domains(n)),
                "type" => format!("{n} ({})", link_type(n)),
                "handle" if n == u64::from(amdgpu_image::flags::NO_HANDLE) => "none".into(),
                "gpu_id" => u32::try_from(n).map_or_else(|_| format!("{n:#x}"), crate::out::gpu_id),
                k if HEX_FIELDS.contains(&k) => format!("{n:#x}"),
                _ => n.to_string(),
            }
        }
        Ordered::I(n) => n.to_string(),
        Ordered::F(n) => n.to_string(),
        Ordered::Bool(b) => b.to_string(),
        Ordered::S(s) => s.clone(),
        Ordered::Null => "-".into(),
        Ordered::Map(m) => {
            // `bytes` fields: { len, hex_prefix }.
            let len = m.iter().find(|(k, _)| k == "len").map(|(_, v)| v);
            let hex = m.iter().find(|(k, _)| k == "hex_prefix").map(|(_, v)| v);
            match (len, hex) {
                (Some(Ordered::U(len)), Some(Ordered::S(hex))) => {
                    format!("{len} bytes [{hex}{}]", if *len > 16 { "…" } else { "" })
                }
                _ => "{…}".into(),
            }
        }
        Ordered::Seq(items) => {
            let parts: Vec<String> = items.iter().map(|i| scalar(ctx, key, i)).collect();
            format!("[{}]", parts.join(", "))
        }
    }
}

fn is_scalar(v: &Ordered) -> bool {
    match v {
        Ordered::Seq(items) => !items.iter().any(|i| matches!(i, Ordered::Map(_))),
        Ordered::Map(m) => m.iter().any(|(k, _)| k == "len"),
        _ => true,
    }
}

/// Appends the fields of `map` at `depth`.
pub fn print_map(out: &mut String, ctx: Context, map: &[(String, Ordered)], depth: usize) {
    let indent = "  ".repeat(depth);
    for (key, value) in map {
        match value {
            Ordered::Seq(items) if !is_scalar(value) => {
                let _ = writeln!(
                    out,
                    "{indent}{key}: {}",
                    crate::out::plural(items.len() as u64, "entry").replace("entrys", "entries")
                );
                for (i, item) in items.iter().enumerate() {
                    if let Ordered::Map(fields) = item {
                        print_entry(out, ctx, i, fields, depth + 1);
                    }
                }
            }
            Ordered::Map(fields) if !is_scalar(value) => {
                let _ = writeln!(out, "{indent}{key}:");
                print_entry_body(out, ctx, fields, depth + 1);
            }
            _ => {
                let _ = writeln!(out, "{indent}{key}: {}", scalar(ctx, key, value));
            }
        }
    }
}

/// One entry of a repeated field: `[i] k v, k v, …` and, for its own
/// repeated fields, one further line each.
fn print_entry(
    out: &mut String,
    ctx: Context,
    i: usize,
    fields: &[(String, Ordered)],
    depth: usize,
) {
    let indent = "  ".repeat(depth);
    let _ = write!(out, "{indent}[{i}] ");
    print_entry_body_inline(out, ctx, fields, depth);
}

fn print_entry_body(out: &mut String, ctx: Context, fields: &[(String, Ordered)], depth: usize) {
    let indent = "  ".repeat(depth);
    let _ = write!(out, "{indent}");
    print_entry_body_inline(out, ctx, fields, depth);
}

fn print_entry_body_inline(
    out: &mut String,
    ctx: Context,
    fields: &[(String, Ordered)],
    depth: usize,
) {
    let indent = "  ".repeat(depth + 1);
    let scalars: Vec<String> = fields
        .iter()
        .filter(|(_, v)| is_scalar(v))
        .map(|(k, v)| format!("{k} {}", scalar(ctx, k, v)))
        .collect();
    let _ = writeln!(out, "{}", scalars.join(", "));
    for (key, value) in fields.iter().filter(|(_, v)| !is_scalar(v)) {
        match value {
            Ordered::Seq(items) => {
                let parts: Vec<String> = items
                    .iter()
                    .map(|item| match item {
                        Ordered::Map(f) => f
                            .iter()
                            .map(|(k, v)| format!("{k} {}", scalar(ctx, k, v)))
                            .collect::<Vec<_>>()
                            .join(" "),
                        other => scalar(ctx, key, other),
                    })
                    .collect();
                let _ = writeln!(out, "{indent}{key}: {}", parts.join("; "));
            }
            Ordered::Map(f) => {
                let _ = writeln!(out, "{indent}{key}:");
                print_entry_body(out, ctx, f, depth + 2);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_decode() {
        assert_eq!(kfd_alloc_flags(0x8000_0001), "VRAM|WRITABLE");
        assert_eq!(kfd_alloc_flags(0x0040_0000), "0x400000");
        assert_eq!(kfd_alloc_flags(0), "none");
        assert_eq!(gem_domains(0x6), "GTT|VRAM");
        assert_eq!(link_type(11), "XGMI");
    }

    #[test]
    fn order_is_kept() {
        #[derive(Serialize)]
        struct T {
            z: u32,
            a: u32,
        }
        assert_eq!(
            ordered(&T { z: 1, a: 2 }),
            Ordered::Map(vec![
                ("z".into(), Ordered::U(1)),
                ("a".into(), Ordered::U(2))
            ])
        );
    }
}
