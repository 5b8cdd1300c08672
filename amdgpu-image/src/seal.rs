//! The per-message checksum (`message_checksum`, tag 120) that makes every
//! byte of an image message covered, not just the BO contents.
//!
//! The checksum is XXH3-64 (seed 0, from `twox-hash`) of the message's
//! payload with the tag-120 field taken out: the writer encodes the message
//! without the field, hashes those bytes and inserts the field where tag
//! order puts it (before the first top-level field with a higher tag), so the
//! result is prost's (and protobuf-c's) canonical encoding of the message
//! with the field set. A reader takes the field out of the bytes it was
//! given, wherever it stands, and hashes the rest, so every byte of the
//! payload is covered, fields it does not know included. The 8-byte length
//! header is covered by the framing's exact-length checks.
//!
//! [`write_message`](crate::write_message) seals messages that carry our
//! producer marker (or already a checksum); [`decode_message`](crate::decode_message)
//! refuses a message whose checksum does not match. Messages without the
//! field (the C plugin's) read as before: [`Coverage::NotCovered`].
//!
//! Like the BO content checksum, it guards against corruption and
//! accidental edits, not against an adversary (who can recompute it).

use twox_hash::XxHash3_64;

use crate::messages::ImageMessage;

/// Tag of `message_checksum` in `criu_kfd`, `criu_render_node` and
/// `criu_dmabuf_node`.
pub const MESSAGE_CHECKSUM_TAG: u32 = 120;

/// The field's key: tag 120, wire type 1 (fixed64), as a varint.
const KEY: [u8; 2] = [0xc1, 0x07];

/// Whether a decoded message's bytes were covered by a checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// The message carried a checksum and it matched.
    Verified,
    /// The message carried no checksum (the C plugin's images, or ours from
    /// before tag 120): its bytes were checked only for well-formedness.
    NotCovered,
}

/// What the checksum of a payload says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SealCheck {
    /// No checksum field.
    Absent,
    /// The recorded value matches the bytes.
    Match(u64),
    /// The recorded value differs from the bytes' checksum.
    Mismatch {
        /// Value recorded in the message.
        recorded: u64,
        /// Checksum of the payload without the field.
        actual: u64,
    },
    /// The field occurs more than once or not as a fixed64.
    Malformed(&'static str),
}

/// The checksum of payload bytes that do not contain the field.
pub fn message_checksum(payload_without_field: &[u8]) -> u64 {
    XxHash3_64::oneshot(payload_without_field)
}

/// Checks the tag-120 checksum of a payload (top-level fields only; the
/// payload must be valid wire format, which a successful decode proved).
pub fn check(payload: &[u8]) -> SealCheck {
    let fields = match top_level(payload) {
        Some(f) => f,
        None => return SealCheck::Malformed("the message is not valid wire format"),
    };
    let mut found: Option<(usize, usize, u64)> = None;
    for f in &fields {
        if f.tag != u64::from(MESSAGE_CHECKSUM_TAG) {
            continue;
        }
        if f.wire != 1 {
            return SealCheck::Malformed("message_checksum is not a fixed64");
        }
        if found.is_some() {
            return SealCheck::Malformed("message_checksum appears more than once");
        }
        let mut value = [0u8; 8];
        value.copy_from_slice(&payload[f.end - 8..f.end]);
        found = Some((f.start, f.end, u64::from_le_bytes(value)));
    }
    let Some((start, end, recorded)) = found else {
        return SealCheck::Absent;
    };
    let mut rest = Vec::with_capacity(payload.len() - (end - start));
    rest.extend_from_slice(&payload[..start]);
    rest.extend_from_slice(&payload[end..]);
    let actual = message_checksum(&rest);
    if actual == recorded {
        SealCheck::Match(recorded)
    } else {
        SealCheck::Mismatch { recorded, actual }
    }
}

/// Encodes `msg` with a fresh checksum in tag 120 (whatever value the field
/// held is replaced): the bytes equal prost's encoding of the message with
/// the field set to the checksum of its encoding without it.
pub fn encode_sealed<M: ImageMessage>(msg: &M) -> Vec<u8> {
    let mut bytes = msg.encode_to_vec();
    // Take out the field if it is set (prost writes it in tag order).
    if msg.message_checksum().is_some() {
        if let Some(f) = top_level(&bytes).and_then(|fs| {
            fs.into_iter()
                .find(|f| f.tag == u64::from(MESSAGE_CHECKSUM_TAG))
        }) {
            bytes.drain(f.start..f.end);
        }
    }
    let sum = message_checksum(&bytes);
    let at = top_level(&bytes)
        .and_then(|fs| {
            fs.into_iter()
                .find(|f| f.tag > u64::from(MESSAGE_CHECKSUM_TAG))
                .map(|f| f.start)
        })
        .unwrap_or(bytes.len());
    let mut field = [0u8; 10];
    field[..2].copy_from_slice(&KEY);
    field[2..].copy_from_slice(&sum.to_le_bytes());
    bytes.splice(at..at, field);
    bytes
}

/// One top-level field: its byte range (key included), tag and wire type.
struct Field {
    start: usize,
    end: usize,
    tag: u64,
    wire: u64,
}

/// The top-level fields of a payload, or `None` if it is not wire format.
fn top_level(payload: &[u8]) -> Option<Vec<Field>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        let start = pos;
        let key = varint(payload, &mut pos)?;
        let (tag, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(payload, &mut pos)?;
            }
            1 => pos = pos.checked_add(8)?,
            5 => pos = pos.checked_add(4)?,
            2 => {
                let len = usize::try_from(varint(payload, &mut pos)?).ok()?;
                pos = pos.checked_add(len)?;
            }
            // Groups never occur in these messages; prost would have
            // refused them as top-level fields of a known type anyway.
            _ => return None,
        }
        if pos > payload.len() {
            return None;
        }
        out.push(Field {
            start,
            end: pos,
            tag,
            wire,
        });
    }
    Some(out)
}

fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{CriuDmabufNode, CriuKfd, KfdDeviceEntry};
    use prost::Message;

    fn kfd() -> CriuKfd {
        let mut k = CriuKfd {
            pid: 7,
            num_of_gpus: 1,
            device_entries: vec![KfdDeviceEntry {
                node_id: 1,
                gpu_id: 0x1234,
                ..Default::default()
            }],
            priv_data: vec![1, 2, 3, 4, 5],
            ..Default::default()
        };
        k.mark_producer();
        k
    }

    #[test]
    fn sealed_bytes_are_the_canonical_encoding_with_the_field() {
        let k = kfd();
        let sealed = encode_sealed(&k);
        let back = CriuKfd::decode(&sealed[..]).unwrap();
        let sum = back.message_checksum.expect("sealed");
        assert_eq!(sum, message_checksum(&k.encode_to_vec()));
        assert_eq!(back.encode_to_vec(), sealed);
        assert_eq!(check(&sealed), SealCheck::Match(sum));
        // Resealing a sealed message (stale value or not) gives the same bytes.
        let mut stale = back.clone();
        stale.message_checksum = Some(1);
        assert_eq!(encode_sealed(&stale), sealed);
    }

    #[test]
    fn every_flipped_bit_is_caught() {
        let sealed = encode_sealed(&kfd());
        for byte in 0..sealed.len() {
            for bit in 0..8 {
                let mut b = sealed.clone();
                b[byte] ^= 1 << bit;
                assert!(
                    !matches!(check(&b), SealCheck::Match(_)),
                    "byte {byte} bit {bit} passed"
                );
            }
        }
    }

    #[test]
    fn absent_twice_and_wrong_wire_type() {
        let k = kfd();
        assert_eq!(check(&k.encode_to_vec()), SealCheck::Absent);
        let mut twice = encode_sealed(&k);
        twice.extend_from_slice(&[0xc1, 0x07, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(check(&twice), SealCheck::Malformed(_)));
        let mut varint_field = k.encode_to_vec();
        varint_field.extend_from_slice(&[0xc0, 0x07, 0x01]);
        assert!(matches!(check(&varint_field), SealCheck::Malformed(_)));
        let d = CriuDmabufNode {
            gem_handle: 3,
            ..Default::default()
        };
        let sealed = encode_sealed(&d);
        assert!(matches!(check(&sealed), SealCheck::Match(_)));
    }
}
