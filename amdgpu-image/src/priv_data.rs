//! What can be told from a KFD image's opaque `priv_data`: how many
//! queues (per GPU, compute or SDMA), events and SVM ranges it holds, and
//! queues of a type no kernel up to this plugin's knowledge writes (`show`
//! prints the counts; the dump refuses unknown queue types).
//!
//! The blob is the kernel's (`../shared/spec/kernel.md` §1.4):
//! `[process 8][device 8 × D][bo × B][objects …]`, where a BO record is 80
//! or 272 bytes depending on the kernel's `MAX_GPU_INSTANCE` (16 or 64), a
//! queue is a 120-byte header (`object_type` 0, user `gpu_id` @64, `type`
//! @68, `ctl_stack_size` @108, `mqd_size` @112) followed by its MQD and
//! control stack, an event 64 bytes (type 1) and an SVM range
//! `24 + 8 × (4 + D)` bytes (type 2). The walk must account for every byte
//! and exactly `num_of_objects` objects with one of the two BO sizes;
//! otherwise the layout is unknown and nothing is claimed.

use std::collections::BTreeMap;

/// Objects found in a `priv_data` blob.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Objects {
    /// Queues per user gpu_id: (compute, SDMA, other).
    pub queues: BTreeMap<u32, (u32, u32, u32)>,
    /// Events.
    pub events: u32,
    /// SVM ranges.
    pub svm_ranges: u32,
    /// The BO record size that made the walk come out exact (80 or 272).
    pub bo_record: u64,
    /// Queues whose `type` is none of the kernel's user queue types
    /// (`enum kfd_queue_type`: COMPUTE 0, SDMA 1, SDMA_XGMI 4,
    /// SDMA_BY_ENG_ID 5; HIQ 2 and DIQ 3 are the kernel's own): (user
    /// gpu_id, type), in blob order.
    pub unknown_queue_types: Vec<(u32, u32)>,
}

impl Objects {
    /// All queues.
    pub fn queue_count(&self) -> u32 {
        self.queues.values().map(|(c, s, o)| c + s + o).sum()
    }
}

/// Walks `blob` for an image with `gpus` GPU entries, `bos` BOs and
/// `objects` objects; `None` when no known layout accounts for it exactly.
pub fn objects(blob: &[u8], gpus: u64, bos: u64, objects: u32) -> Option<Objects> {
    [272u64, 80].into_iter().find_map(|bo_record| {
        walk(blob, gpus, bos, objects, bo_record).map(|mut o| {
            o.bo_record = bo_record;
            o
        })
    })
}

fn walk(blob: &[u8], gpus: u64, bos: u64, count: u32, bo_record: u64) -> Option<Objects> {
    let start = 8u64
        .checked_add(gpus.checked_mul(8)?)?
        .checked_add(bos.checked_mul(bo_record)?)?;
    let mut at = usize::try_from(start).ok()?;
    let mut found = Objects::default();
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(blob.get(at..at + 4)?.try_into().ok()?))
    };
    for _ in 0..count {
        let size = match u32_at(at)? {
            0 => {
                let gpu_id = u32_at(at + 64)?;
                let kind = u32_at(at + 68)?;
                let ctl = u64::from(u32_at(at + 108)?);
                let mqd = u64::from(u32_at(at + 112)?);
                let q = found.queues.entry(gpu_id).or_default();
                match kind {
                    0 => q.0 += 1,
                    1 | 4 | 5 => q.1 += 1,
                    _ => {
                        q.2 += 1;
                        found.unknown_queue_types.push((gpu_id, kind));
                    }
                }
                120 + ctl + mqd
            }
            1 => {
                found.events += 1;
                64
            }
            2 => {
                found.svm_ranges += 1;
                24 + 8 * (4 + gpus)
            }
            _ => return None,
        };
        at = at.checked_add(usize::try_from(size).ok()?)?;
        if at > blob.len() {
            return None;
        }
    }
    (at == blob.len()).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(bo_record: usize) -> Vec<u8> {
        let mut b = vec![0u8; 8 + 2 * 8 + 3 * bo_record];
        // A compute queue of gpu 0x1234 with a 16-byte MQD and 8-byte ctl stack.
        let mut q = vec![0u8; 120];
        q[64..68].copy_from_slice(&0x1234u32.to_le_bytes());
        q[108..112].copy_from_slice(&8u32.to_le_bytes());
        q[112..116].copy_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&q);
        b.extend_from_slice(&[7u8; 24]);
        // An SDMA queue, no MQD.
        let mut s = vec![0u8; 120];
        s[64..68].copy_from_slice(&0x1234u32.to_le_bytes());
        s[68..72].copy_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&s);
        let mut e = vec![0u8; 64];
        e[0] = 1;
        b.extend_from_slice(&e);
        b
    }

    #[test]
    fn counts_objects_with_either_bo_size() {
        for record in [80, 272] {
            let o = objects(&blob(record), 2, 3, 3).expect("known layout");
            assert_eq!(o.bo_record, record as u64);
            assert_eq!(o.queues[&0x1234], (1, 1, 0));
            assert_eq!(o.events, 1);
            assert_eq!(o.queue_count(), 2);
            assert!(o.unknown_queue_types.is_empty());
        }
    }

    #[test]
    fn a_queue_of_an_unknown_type_is_named() {
        let mut b = blob(80);
        // The SDMA queue (second object) becomes type 9.
        let at = 8 + 2 * 8 + 3 * 80 + 120 + 24 + 68;
        b[at..at + 4].copy_from_slice(&9u32.to_le_bytes());
        let o = objects(&b, 2, 3, 3).expect("known layout");
        assert_eq!(o.queues[&0x1234], (1, 0, 1));
        assert_eq!(o.unknown_queue_types, vec![(0x1234, 9)]);
    }

    #[test]
    fn a_blob_that_does_not_add_up_is_unknown() {
        let mut b = blob(80);
        b.push(0);
        assert_eq!(objects(&b, 2, 3, 3), None);
        assert_eq!(objects(&blob(80), 2, 3, 4), None);
        assert_eq!(objects(&[], 2, 3, 0), None);
    }
}
