//! Where each queue stood when it was checkpointed, read back from the
//! private data CHECKPOINT wrote (the blob CRIU's images carry opaquely):
//! the queue records and, in each MQD, the engine registers a preemption
//! saved. For tests and tools that want to show that a dump paused queues
//! mid-ring.
//!
//! Parses untrusted bytes: every size is checked, nothing panics, and a
//! blob that is not the simulator's layout is an error naming where it
//! stops making sense.

use crate::amdkfd::priv_data::{
    bo_record_size, rd32, svm_record_size, QueueRecord, DEVICE_RECORD, EVENT_RECORD, OBJ_EVENT,
    OBJ_QUEUE, OBJ_SVM, PROCESS_RECORD, QUEUE_HEADER,
};

use crate::hw::queues::ring::Regs;

/// One queue as a checkpoint saved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedQueue {
    /// The queue id.
    pub queue_id: u32,
    /// The user gpu_id of its device.
    pub gpu_id: u32,
    /// Kernel queue type (0 compute, 1 SDMA, 4 SDMA XGMI).
    pub queue_type: u32,
    /// Read pointer where the engine stopped (the format's units).
    pub read_pointer: u64,
    /// Write pointer it had latched.
    pub write_pointer: u64,
    /// Whether it had stopped on an error.
    pub hung: bool,
}

impl SavedQueue {
    /// Whether work was left in the ring: the queue was paused mid-ring.
    pub fn mid_ring(&self) -> bool {
        self.read_pointer < self.write_pointer
    }
}

/// The queues in a private-data blob of `devices` devices and `bos` BOs
/// written by a simulator with `max_gpu_instance`
/// ([`crate::SimConfig::max_gpu_instance`]), with `objects` objects.
pub fn saved_queues(
    priv_data: &[u8],
    devices: usize,
    bos: usize,
    objects: usize,
    max_gpu_instance: usize,
) -> Result<Vec<SavedQueue>, String> {
    let len = priv_data.len() as u64;
    let start = (devices as u64)
        .checked_mul(DEVICE_RECORD)
        .and_then(|d| {
            (bos as u64)
                .checked_mul(bo_record_size(max_gpu_instance))
                .map(|b| (d, b))
        })
        .and_then(|(d, b)| PROCESS_RECORD.checked_add(d)?.checked_add(b))
        .ok_or("device and bo counts overflow")?;
    let mut at = start;
    let mut out = Vec::new();
    for i in 0..objects {
        if at.checked_add(4).is_none_or(|e| e > len) {
            return Err(format!(
                "object {i} at byte {at} runs past the {len}-byte blob"
            ));
        }
        let kind = rd32(priv_data, at as usize);
        let size = match kind {
            OBJ_QUEUE => {
                let head = at + QUEUE_HEADER;
                if head > len {
                    return Err(format!("queue record at byte {at} runs past the blob"));
                }
                let rec = QueueRecord::read(&priv_data[at as usize..head as usize]);
                let body = u64::from(rec.mqd_size) + u64::from(rec.ctl_stack_size);
                if head + body > len {
                    return Err(format!(
                        "queue {} at byte {at}: its mqd runs past the blob",
                        rec.q_id
                    ));
                }
                let mqd = &priv_data[head as usize..(head + u64::from(rec.mqd_size)) as usize];
                let regs = Regs::from_mqd(mqd);
                out.push(SavedQueue {
                    queue_id: rec.q_id,
                    gpu_id: rec.gpu_id,
                    queue_type: rec.ktype,
                    read_pointer: regs.rptr,
                    write_pointer: regs.wptr,
                    hung: regs.hang.is_some(),
                });
                QUEUE_HEADER + body
            }
            OBJ_EVENT => EVENT_RECORD,
            OBJ_SVM => svm_record_size(devices),
            other => return Err(format!("object {i} at byte {at} has unknown type {other}")),
        };
        at = at.checked_add(size).ok_or("object sizes overflow")?;
    }
    Ok(out)
}
