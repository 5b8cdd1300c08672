//! How the tool's JSON carries ids and 64-bit values, so that no JSON reader
//! changes them: as proto3's JSON mapping and `crit` do, every 64-bit field
//! of an image message is a string, in hex (`"0x67ae1c0d3b5f9a9b"`) for ids,
//! addresses, offsets, flags and checksums, in decimal for sizes and counts;
//! gpu_ids are hex strings everywhere (`"0x2a1f"`), as the text output and
//! image file names show them. A JSON number above 2^53 is rounded by every
//! reader that keeps numbers as doubles (jq 1.6, JavaScript), and `encode`
//! would have written the rounded value with a fresh checksum.
//!
//! On input (`encode`), each of these fields is read from either form: a
//! string holding a decimal or `0x` hexadecimal number, or a JSON number,
//! as `crit encode` accepts both.
//!
//! The fields are told by their names, which mean one thing in every
//! message (`amdgpu-image`'s `criu-amdgpu.proto` messages). This module
//! never changes any other value.

use serde_json::{Map, Number, Value};

/// Message fields shown in hex: ids, addresses, offsets, flags, checksums.
const HEX: [&str; 14] = [
    "gpu_id",
    "device_id",
    "vendor_id",
    "capability",
    "referencing_gpu_id",
    "hive_id",
    "unique_id",
    "addr",
    "offset",
    "flags",
    "alloc_flags",
    "content_checksum",
    "message_checksum",
    "shared_mem_magic",
];

/// 64-bit message fields shown as decimal strings: sizes and counts.
const DECIMAL: [&str; 6] = [
    "size",
    "vram_size",
    "num_of_bos",
    "shared_mem_size",
    "chunk_size",
    "alignment",
];

/// A gpu_id as JSON: `"0x2a1f"` (at least four hex digits, as in image
/// file names).
pub fn gpu_id(id: u64) -> Value {
    Value::String(format!("{id:#06x}"))
}

/// serde's `serialize_with` for a gpu_id field: [`gpu_id`].
pub fn serialize_gpu_id<S: serde::Serializer>(id: &u32, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format!("{id:#06x}"))
}

fn hex(key: &str, n: u64) -> String {
    if key.ends_with("gpu_id") || key.ends_with("device_id") || key == "vendor_id" {
        format!("{n:#06x}")
    } else {
        format!("{n:#x}")
    }
}

/// Turns the ids and 64-bit fields of an image message's JSON (as serde
/// writes it) into strings, recursively.
pub fn message_to_strings(value: &mut Value) {
    walk(value, &mut |key, v| {
        let Some(n) = v.as_u64() else { return Ok(()) };
        if HEX.contains(&key) {
            *v = Value::String(hex(key, n));
        } else if DECIMAL.contains(&key) {
            *v = Value::String(n.to_string());
        }
        Ok(())
    })
    .unwrap_or(());
}

/// Reads the ids and 64-bit fields of an image message's JSON back into
/// numbers, from strings (decimal or `0x` hex) or numbers; a string that is
/// neither, or a number that lost its integer value, names its field.
pub fn message_from_strings(value: &mut Value) -> Result<(), String> {
    walk(value, &mut |key, v| {
        if !HEX.contains(&key) && !DECIMAL.contains(&key) {
            return Ok(());
        }
        match v {
            Value::String(text) => {
                let n = parse_u64(text).ok_or_else(|| {
                    format!(
                        "{key}: {text:?} is not a number (decimal, or hex with 0x, as \
                         `amdgpu-criu decode` writes it)"
                    )
                })?;
                *v = Value::Number(Number::from(n));
            }
            Value::Number(n) if n.as_u64().is_none() => {
                return Err(format!(
                    "{key}: {n} is not an unsigned integer (a JSON reader that keeps numbers \
                     as doubles rounds values above 2^53: keep them as strings)"
                ));
            }
            _ => {}
        }
        Ok(())
    })
}

/// A decimal or `0x` hexadecimal unsigned number.
pub fn parse_u64(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(digits) => u64::from_str_radix(digits, 16).ok(),
        None => t.parse().ok(),
    }
}

/// Turns the gpu_ids of a `map`/`check`/`demo` answer (`gpu_map` keys and
/// values, the `gpu`, `local_gpu` and `gpu_id` of reasons, `candidates`)
/// into hex strings, recursively.
pub fn gpu_ids_to_hex(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match key.as_str() {
                    "gpu_map" => *v = gpu_map(v),
                    "gpu" | "local_gpu" | "gpu_id" => {
                        if let Some(n) = v.as_u64() {
                            *v = gpu_id(n);
                        }
                    }
                    "candidates" => {
                        if let Value::Array(list) = v {
                            for id in list.iter_mut() {
                                if let Some(n) = id.as_u64() {
                                    *id = gpu_id(n);
                                }
                            }
                        }
                    }
                    _ => gpu_ids_to_hex(v),
                }
            }
        }
        Value::Array(list) => list.iter_mut().for_each(gpu_ids_to_hex),
        _ => {}
    }
}

/// A `{ "checkpointed": local }` gpu_id map with hex keys and values.
fn gpu_map(map: &Value) -> Value {
    let Value::Object(entries) = map else {
        return map.clone();
    };
    let mut out = Map::new();
    for (from, to) in entries {
        let key = parse_u64(from).map_or_else(|| from.clone(), |n| format!("{n:#06x}"));
        let value = to.as_u64().map_or_else(|| to.clone(), gpu_id);
        out.insert(key, value);
    }
    Value::Object(out)
}

/// Calls `f` with every object member's key and value, depth first
/// (members holding objects or arrays are walked, not passed).
fn walk(
    value: &mut Value,
    f: &mut dyn FnMut(&str, &mut Value) -> Result<(), String>,
) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if v.is_object() || v.is_array() {
                    walk(v, f).map_err(|e| format!("{key}.{e}"))?;
                } else {
                    f(key, v)?;
                }
            }
            Ok(())
        }
        Value::Array(list) => {
            for (i, v) in list.iter_mut().enumerate() {
                walk(v, f).map_err(|e| format!("[{i}]{e}"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_and_wide_values_become_strings_and_come_back() {
        let original = json!({
            "device_entries": [{ "gpu_id": 10783, "hive_id": 7457546083072701851u64,
                                 "simd_count": 416, "vram_size": 68719476736u64 }],
            "bo_entries": [{ "addr": 140737488355328u64, "size": 4096, "alloc_flags": 3 }],
            "producer": "amdgpu-criu-rs 0.1.0",
            "priv_data": { "len": 2, "hex": "0102" }
        });
        let mut v = original.clone();
        message_to_strings(&mut v);
        assert_eq!(v["device_entries"][0]["gpu_id"], "0x2a1f");
        assert_eq!(v["device_entries"][0]["hive_id"], "0x677e86a699a7759b");
        assert_eq!(v["device_entries"][0]["simd_count"], 416);
        assert_eq!(v["device_entries"][0]["vram_size"], "68719476736");
        assert_eq!(v["bo_entries"][0]["addr"], "0x800000000000");
        assert_eq!(v["bo_entries"][0]["size"], "4096");
        assert_eq!(v["priv_data"]["hex"], "0102");
        message_from_strings(&mut v).unwrap();
        assert_eq!(v, original);
    }

    #[test]
    fn both_forms_are_read_and_bad_text_names_its_field() {
        let mut v =
            json!({ "device_entries": [{ "hive_id": "7457546083072701851", "gpu_id": 10783 }] });
        message_from_strings(&mut v).unwrap();
        assert_eq!(v["device_entries"][0]["hive_id"], 7457546083072701851u64);
        assert_eq!(v["device_entries"][0]["gpu_id"], 10783);
        let mut bad = json!({ "device_entries": [{ "hive_id": "0xzz" }] });
        let e = message_from_strings(&mut bad).unwrap_err();
        assert!(e.starts_with("device_entries.[0]hive_id: \"0xzz\""), "{e}");
        // What jq 1.6 makes of a large number: a double, refused.
        let mut rounded: Value =
            serde_json::from_str(r#"{"hive_id": 7.457546083072702e18}"#).unwrap();
        let e = message_from_strings(&mut rounded).unwrap_err();
        assert!(e.contains("not an unsigned integer"), "{e}");
    }

    #[test]
    fn gpu_ids_of_answers_are_hex() {
        let mut v = json!({
            "gpu_map": { "10783": 47791 },
            "reasons": [{ "gpu": 10783, "local_gpu": null, "checkpointed": 2 }],
            "render_only": [{ "gpu_id": 1, "candidates": [2, 3] }]
        });
        gpu_ids_to_hex(&mut v);
        assert_eq!(v["gpu_map"]["0x2a1f"], "0xbaaf");
        assert_eq!(v["reasons"][0]["gpu"], "0x2a1f");
        assert_eq!(v["reasons"][0]["local_gpu"], Value::Null);
        assert_eq!(v["reasons"][0]["checkpointed"], 2);
        assert_eq!(
            v["render_only"][0]["candidates"],
            json!(["0x0002", "0x0003"])
        );
    }
}
