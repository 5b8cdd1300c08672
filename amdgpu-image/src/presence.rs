//! Presence of proto2 `required` fields, checked on the wire bytes.
//!
//! prost decodes a missing required scalar as zero; protobuf-c (the C
//! plugin's reader) rejects the message. To behave like protobuf-c this module
//! walks the encoded message once, records which tags occur at every level
//! (recursing into the known sub-messages) and reports the first required
//! field that is absent, with its full path. It runs after prost accepted the
//! bytes, never allocates beyond the path of the error, and never panics.

/// Which tags of a message are required and which carry sub-messages.
#[derive(Debug)]
pub struct Schema {
    /// Proto message name (`criu_kfd`).
    pub name: &'static str,
    /// Required fields: tag and proto field name. Tags must be below 64.
    pub required: &'static [(u32, &'static str)],
    /// Sub-message fields: tag, proto field name, schema of the sub-message.
    pub children: &'static [(u32, &'static str, &'static Schema)],
}

/// Messages whose required fields can be checked.
pub trait Checked {
    /// The message's schema.
    const SCHEMA: &'static Schema;
}

/// Returns the path of the first missing required field (`criu_kfd.bo_entries[3].size`).
pub fn first_missing(bytes: &[u8], schema: &'static Schema) -> Option<String> {
    let mut stack = Vec::new();
    match scan(bytes, schema, &mut stack) {
        Scan::Complete | Scan::Malformed => None,
        Scan::Missing(field) => {
            let mut path = schema.name.to_owned();
            for (name, index) in &stack {
                path.push('.');
                path.push_str(name);
                path.push_str(&format!("[{index}]"));
            }
            path.push('.');
            path.push_str(field);
            Some(path)
        }
    }
}

enum Scan {
    Complete,
    Missing(&'static str),
    /// Not valid wire format; prost reports those, so stop looking.
    Malformed,
}

fn scan(mut bytes: &[u8], schema: &'static Schema, stack: &mut Vec<(&'static str, usize)>) -> Scan {
    let mut seen: u64 = 0;
    let mut counts = [0usize; 4];
    while !bytes.is_empty() {
        let Some(key) = varint(&mut bytes) else {
            return Scan::Malformed;
        };
        let tag = key >> 3;
        let wire = key & 7;
        if tag < 64 {
            seen |= 1 << tag;
        }
        match wire {
            0 => {
                if varint(&mut bytes).is_none() {
                    return Scan::Malformed;
                }
            }
            1 => {
                let Some(rest) = bytes.get(8..) else {
                    return Scan::Malformed;
                };
                bytes = rest;
            }
            5 => {
                let Some(rest) = bytes.get(4..) else {
                    return Scan::Malformed;
                };
                bytes = rest;
            }
            2 => {
                let Some(len) = varint(&mut bytes).and_then(|l| usize::try_from(l).ok()) else {
                    return Scan::Malformed;
                };
                if len > bytes.len() {
                    return Scan::Malformed;
                }
                let (body, rest) = bytes.split_at(len);
                bytes = rest;
                let child = schema
                    .children
                    .iter()
                    .enumerate()
                    .find(|(_, c)| u64::from(c.0) == tag);
                if let Some((slot, &(_, name, child_schema))) = child {
                    let index = counts.get(slot).copied().unwrap_or(0);
                    if let Some(c) = counts.get_mut(slot) {
                        *c += 1;
                    }
                    stack.push((name, index));
                    match scan(body, child_schema, stack) {
                        Scan::Complete => {
                            stack.pop();
                        }
                        other => return other,
                    }
                }
            }
            3 => {
                if !skip_group(&mut bytes, tag, 0) {
                    return Scan::Malformed;
                }
            }
            _ => return Scan::Malformed,
        }
    }
    for &(tag, name) in schema.required {
        if seen & (1 << tag) == 0 {
            return Scan::Missing(name);
        }
    }
    Scan::Complete
}

/// Skips a (deprecated) group up to its end-group key; depth-limited like prost.
fn skip_group(bytes: &mut &[u8], group_tag: u64, depth: u32) -> bool {
    if depth > 100 {
        return false;
    }
    loop {
        let Some(key) = varint(bytes) else {
            return false;
        };
        let (tag, wire) = (key >> 3, key & 7);
        let ok = match wire {
            0 => varint(bytes).is_some(),
            1 => advance(bytes, 8),
            5 => advance(bytes, 4),
            2 => match varint(bytes).and_then(|l| usize::try_from(l).ok()) {
                Some(len) => advance(bytes, len),
                None => false,
            },
            3 => skip_group(bytes, tag, depth + 1),
            4 => return tag == group_tag,
            _ => false,
        };
        if !ok {
            return false;
        }
    }
}

fn advance(bytes: &mut &[u8], n: usize) -> bool {
    match bytes.get(n..) {
        Some(rest) => {
            *bytes = rest;
            true
        }
        None => false,
    }
}

#[inline]
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    // Keys and most values fit one byte.
    if let Some((&b, rest)) = bytes.split_first() {
        if b < 0x80 {
            *bytes = rest;
            return Some(u64::from(b));
        }
    }
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

macro_rules! schema {
    ($static:ident, $ty:ty, $name:literal, [$($tag:literal => $field:literal),* $(,)?], [$($ctag:literal => $cfield:literal : $cschema:ident),* $(,)?]) => {
        static $static: Schema = Schema {
            name: $name,
            required: &[$(($tag, $field)),*],
            children: &[$(($ctag, $cfield, &$cschema)),*],
        };
        impl Checked for $ty {
            const SCHEMA: &'static Schema = &$static;
        }
    };
}

use crate::messages::*;

schema!(DEV_IOLINK, DevIolink, "dev_iolink", [1 => "type", 2 => "node_to_id"], []);
schema!(KFD_DEVICE_ENTRY, KfdDeviceEntry, "kfd_device_entry", [
    1 => "node_id", 2 => "gpu_id", 3 => "cpu_cores_count", 4 => "simd_count",
    5 => "mem_banks_count", 6 => "caches_count", 7 => "io_links_count",
    8 => "max_waves_per_simd", 9 => "lds_size_in_kb", 10 => "gds_size_in_kb",
    11 => "num_gws", 12 => "wave_front_size", 13 => "array_count",
    14 => "simd_arrays_per_engine", 15 => "cu_per_simd_array", 16 => "simd_per_cu",
    17 => "max_slots_scratch_cu", 18 => "vendor_id", 19 => "device_id", 20 => "domain",
    21 => "drm_render_minor", 22 => "hive_id", 23 => "num_sdma_engines",
    24 => "num_sdma_xgmi_engines", 25 => "num_sdma_queues_per_engine", 26 => "num_cp_queues",
    27 => "fw_version", 28 => "capability", 29 => "sdma_fw_version", 30 => "vram_public",
    31 => "vram_size",
], [32 => "iolinks": DEV_IOLINK]);
schema!(KFD_BO_ENTRY, KfdBoEntry, "kfd_bo_entry", [
    1 => "addr", 2 => "size", 3 => "offset", 4 => "alloc_flags", 5 => "gpu_id", 6 => "handle",
], []);
schema!(CRIU_KFD, CriuKfd, "criu_kfd", [
    1 => "pid", 2 => "num_of_gpus", 3 => "num_of_cpus", 5 => "num_of_bos",
    7 => "num_of_objects", 8 => "shared_mem_size", 9 => "shared_mem_magic", 10 => "priv_data",
], [4 => "device_entries": KFD_DEVICE_ENTRY, 6 => "bo_entries": KFD_BO_ENTRY]);
schema!(DRM_VM_ENTRY, DrmVmEntry, "drm_vm_entry", [1 => "addr", 2 => "size", 3 => "offset", 4 => "flags"], []);
schema!(DRM_BO_ENTRY, DrmBoEntry, "drm_bo_entry", [
    1 => "addr", 2 => "size", 3 => "offset", 4 => "alloc_flags", 5 => "alignment",
    6 => "preferred_domains", 7 => "handle", 8 => "is_import", 9 => "num_of_vms",
], [10 => "vm_entries": DRM_VM_ENTRY]);
schema!(CRIU_RENDER_NODE, CriuRenderNode, "criu_render_node", [
    1 => "gpu_id", 2 => "id", 3 => "drm_render_minor", 4 => "num_of_bos",
], [5 => "bo_entries": DRM_BO_ENTRY, 102 => "device": KFD_DEVICE_ENTRY]);
schema!(CRIU_DMABUF_NODE, CriuDmabufNode, "criu_dmabuf_node", [1 => "gem_handle"], []);
