//! The CRIU private-data blob: its record layout, sizes and byte codecs.
//!
//! The blob is opaque to userspace; the simulator uses the kernel's own
//! layout (spec §1.4) so sizes match a real kernel of the same
//! `MAX_GPU_INSTANCE`:
//!
//! ```text
//! [process 8B][device 8B × D][bo × B][queue / event / svm objects …]
//! ```
//!
//! * process: `version u32` (= [`KFD_CRIU_PRIV_VERSION`], 1), `xnack_mode u32`
//! * device: 8 reserved bytes, zero
//! * bo: `user_addr u64 @0`, `idr_handle u32 @8`, `mapped_gpuids u32[MAX] @12`,
//!   padded to 8 (80 bytes for MAX 16, 272 for MAX 64)
//! * queue: a 120-byte header (object_type 0) followed by the MQD and the
//!   control stack
//! * event: 64 bytes (object_type 1)
//! * svm range: `24 + 8 × (4 + D)` bytes (object_type 2)
//!
//! Decoding reads from the caller's memory piece by piece with the kernel's
//! "enough bytes left" checks (`EINVAL`), so a bogus `priv_data_size` never
//! sizes an allocation. This module never changes process state.

use kfd_sys::KFD_CRIU_PRIV_VERSION;

use crate::kernel::copy_from_user;
use ::kfd::Errno;

/// Process record size.
pub(crate) const PROCESS_RECORD: u64 = 8;
/// Device record size.
pub(crate) const DEVICE_RECORD: u64 = 8;
/// Queue record header size.
pub(crate) const QUEUE_HEADER: u64 = 120;
/// Event record size.
pub(crate) const EVENT_RECORD: u64 = 64;
/// Object type tags.
pub(crate) const OBJ_QUEUE: u32 = 0;
pub(crate) const OBJ_EVENT: u32 = 1;
pub(crate) const OBJ_SVM: u32 = 2;

/// BO record size for `max_gpu_instance` mapped-gpu slots.
pub(crate) fn bo_record_size(max_gpu_instance: usize) -> u64 {
    (12 + 4 * max_gpu_instance as u64).div_ceil(8) * 8
}

/// SVM record size for `devices` pdds.
pub(crate) fn svm_record_size(devices: usize) -> u64 {
    24 + 8 * (4 + devices as u64)
}

/// A little-endian blob being built.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    pub(crate) fn zeros(&mut self, n: usize) {
        self.buf.resize(self.buf.len() + n, 0);
    }
    pub(crate) fn len(&self) -> u64 {
        self.buf.len() as u64
    }
}

/// Reads the caller's blob at `base` of `size` bytes, piece by piece.
#[derive(Debug)]
pub(crate) struct UserReader {
    base: u64,
    size: u64,
    pub(crate) pos: u64,
}

impl UserReader {
    pub(crate) fn new(base: u64, size: u64) -> UserReader {
        UserReader { base, size, pos: 0 }
    }

    /// Bytes not consumed yet.
    pub(crate) fn remaining(&self) -> u64 {
        self.size - self.pos
    }

    /// `EINVAL` unless `n` more bytes are available.
    pub(crate) fn need(&self, n: u64) -> Result<(), Errno> {
        if n > self.remaining() {
            Err(Errno(libc::EINVAL))
        } else {
            Ok(())
        }
    }

    /// Reads `n` bytes at the cursor without consuming them.
    pub(crate) fn peek(&self, n: u64) -> Result<Vec<u8>, Errno> {
        self.need(n)?;
        let len = usize::try_from(n).map_err(|_| Errno(libc::EINVAL))?;
        copy_from_user(self.base + self.pos, len)
    }

    /// Reads and consumes `n` bytes.
    pub(crate) fn take(&mut self, n: u64) -> Result<Vec<u8>, Errno> {
        let out = self.peek(n)?;
        self.pos += n;
        Ok(out)
    }

    /// Consumes `n` bytes unread (device records are skipped by the kernel).
    pub(crate) fn skip(&mut self, n: u64) -> Result<(), Errno> {
        self.need(n)?;
        self.pos += n;
        Ok(())
    }
}

pub(crate) fn rd32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn rd64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).map_or(0, |s| {
        u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]])
    })
}

/// The process record.
pub(crate) fn write_process(w: &mut Writer, xnack: bool) {
    w.u32(KFD_CRIU_PRIV_VERSION);
    w.u32(u32::from(xnack));
}

/// A BO record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BoRecord {
    pub(crate) user_addr: u64,
    pub(crate) idr_handle: u32,
    /// User gpu ids the BO is mapped on, zero-terminated when shorter.
    pub(crate) mapped_gpuids: Vec<u32>,
}

impl BoRecord {
    pub(crate) fn write(&self, w: &mut Writer, max_gpu_instance: usize) {
        let start = w.len();
        w.u64(self.user_addr);
        w.u32(self.idr_handle);
        for i in 0..max_gpu_instance {
            w.u32(self.mapped_gpuids.get(i).copied().unwrap_or(0));
        }
        let pad = bo_record_size(max_gpu_instance) - (w.len() - start);
        w.zeros(pad as usize);
    }

    pub(crate) fn read(b: &[u8], max_gpu_instance: usize) -> BoRecord {
        BoRecord {
            user_addr: rd64(b, 0),
            idr_handle: rd32(b, 8),
            mapped_gpuids: (0..max_gpu_instance).map(|i| rd32(b, 12 + 4 * i)).collect(),
        }
    }
}

/// A queue record header (the MQD and control stack follow it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QueueRecord {
    pub(crate) q_address: u64,
    pub(crate) q_size: u64,
    pub(crate) read_ptr_addr: u64,
    pub(crate) write_ptr_addr: u64,
    pub(crate) doorbell_off: u64,
    pub(crate) eop_ring_buffer_address: u64,
    pub(crate) ctx_save_restore_area_address: u64,
    pub(crate) gpu_id: u32,
    pub(crate) ktype: u32,
    pub(crate) format: u32,
    pub(crate) q_id: u32,
    pub(crate) priority: u32,
    pub(crate) q_percent: u32,
    pub(crate) doorbell_id: u32,
    pub(crate) gws: u32,
    pub(crate) sdma_id: u32,
    pub(crate) eop_ring_buffer_size: u32,
    pub(crate) ctx_save_restore_area_size: u32,
    pub(crate) ctl_stack_size: u32,
    pub(crate) mqd_size: u32,
}

impl QueueRecord {
    pub(crate) fn write(&self, w: &mut Writer) {
        w.u32(OBJ_QUEUE);
        w.u32(0);
        for v in [
            self.q_address,
            self.q_size,
            self.read_ptr_addr,
            self.write_ptr_addr,
            self.doorbell_off,
            self.eop_ring_buffer_address,
            self.ctx_save_restore_area_address,
        ] {
            w.u64(v);
        }
        for v in [
            self.gpu_id,
            self.ktype,
            self.format,
            self.q_id,
            self.priority,
            self.q_percent,
            self.doorbell_id,
            self.gws,
            self.sdma_id,
            self.eop_ring_buffer_size,
            self.ctx_save_restore_area_size,
            self.ctl_stack_size,
            self.mqd_size,
        ] {
            w.u32(v);
        }
        w.u32(0);
    }

    pub(crate) fn read(b: &[u8]) -> QueueRecord {
        QueueRecord {
            q_address: rd64(b, 8),
            q_size: rd64(b, 16),
            read_ptr_addr: rd64(b, 24),
            write_ptr_addr: rd64(b, 32),
            doorbell_off: rd64(b, 40),
            eop_ring_buffer_address: rd64(b, 48),
            ctx_save_restore_area_address: rd64(b, 56),
            gpu_id: rd32(b, 64),
            ktype: rd32(b, 68),
            format: rd32(b, 72),
            q_id: rd32(b, 76),
            priority: rd32(b, 80),
            q_percent: rd32(b, 84),
            doorbell_id: rd32(b, 88),
            gws: rd32(b, 92),
            sdma_id: rd32(b, 96),
            eop_ring_buffer_size: rd32(b, 100),
            ctx_save_restore_area_size: rd32(b, 104),
            ctl_stack_size: rd32(b, 108),
            mqd_size: rd32(b, 112),
        }
    }
}

/// An event record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventRecord {
    pub(crate) user_handle: u64,
    pub(crate) event_id: u32,
    pub(crate) auto_reset: u32,
    pub(crate) etype: u32,
    pub(crate) signaled: u32,
    pub(crate) exception: [u8; 32],
}

impl EventRecord {
    pub(crate) fn write(&self, w: &mut Writer) {
        w.u32(OBJ_EVENT);
        w.u32(0);
        w.u64(self.user_handle);
        w.u32(self.event_id);
        w.u32(self.auto_reset);
        w.u32(self.etype);
        w.u32(self.signaled);
        w.bytes(&self.exception);
    }

    pub(crate) fn read(b: &[u8]) -> EventRecord {
        let mut exception = [0u8; 32];
        if let Some(s) = b.get(32..64) {
            exception.copy_from_slice(s);
        }
        EventRecord {
            user_handle: rd64(b, 8),
            event_id: rd32(b, 16),
            auto_reset: rd32(b, 20),
            etype: rd32(b, 24),
            signaled: rd32(b, 28),
            exception,
        }
    }
}

/// An SVM range record (addresses in pages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SvmRecord {
    pub(crate) start_pages: u64,
    pub(crate) size_pages: u64,
    pub(crate) attrs: Vec<(u32, u32)>,
}

impl SvmRecord {
    pub(crate) fn write(&self, w: &mut Writer) {
        w.u32(OBJ_SVM);
        w.u32(0);
        w.u64(self.start_pages);
        w.u64(self.size_pages);
        for &(t, v) in &self.attrs {
            w.u32(t);
            w.u32(v);
        }
    }

    pub(crate) fn read(b: &[u8], devices: usize) -> SvmRecord {
        SvmRecord {
            start_pages: rd64(b, 8),
            size_pages: rd64(b, 16),
            attrs: (0..4 + devices)
                .map(|i| (rd32(b, 24 + 8 * i), rd32(b, 28 + 8 * i)))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sizes_match_the_kernel() {
        assert_eq!(bo_record_size(64), 272);
        assert_eq!(bo_record_size(16), 80);
        assert_eq!(svm_record_size(2), 24 + 8 * 6);
        let mut w = Writer::default();
        QueueRecord::default().write(&mut w);
        assert_eq!(w.len(), QUEUE_HEADER);
        let mut w = Writer::default();
        EventRecord {
            user_handle: 1,
            event_id: 2,
            auto_reset: 1,
            etype: 0,
            signaled: 1,
            exception: [7; 32],
        }
        .write(&mut w);
        assert_eq!(w.len(), EVENT_RECORD);
    }

    #[test]
    fn records_round_trip() {
        let bo = BoRecord {
            user_addr: 0x7f00_0000_1000,
            idr_handle: 17,
            mapped_gpuids: {
                let mut v = vec![0u32; 64];
                v[0] = 0x1234;
                v[1] = 0x5678;
                v
            },
        };
        let mut w = Writer::default();
        bo.write(&mut w, 64);
        assert_eq!(BoRecord::read(&w.buf, 64), bo);
        let q = QueueRecord {
            q_address: 1,
            q_size: 2,
            gpu_id: 3,
            ktype: 1,
            q_id: 9,
            doorbell_id: 0x102,
            sdma_id: 1,
            mqd_size: 512,
            ..Default::default()
        };
        let mut w = Writer::default();
        q.write(&mut w);
        assert_eq!(QueueRecord::read(&w.buf), q);
        let s = SvmRecord {
            start_pages: 0x100,
            size_pages: 0x10,
            attrs: vec![(0, 1), (1, 2), (5, 3), (7, 9), (2, 0x1234)],
        };
        let mut w = Writer::default();
        s.write(&mut w);
        assert_eq!(w.len(), svm_record_size(1));
        assert_eq!(SvmRecord::read(&w.buf, 1), s);
    }
}
