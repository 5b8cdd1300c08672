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
