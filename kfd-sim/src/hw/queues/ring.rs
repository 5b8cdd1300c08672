//! A user-mode queue's ring as its engine sees it: where the ring lies in
//! the process's GPU VM, in which units its read and write pointers count
//! and how wide they are, and the engine registers ([`Regs`]) that a
//! preemption saves into the MQD and a restore loads back.
//!
//! Pointer rules, per queue format, from the MQD managers and their users:
//! * SDMA: bytes (`kfd_mqd_manager_v9.c` programs `RB_SIZE` in dwords and
//!   turns on `RPTR_WRITEBACK`; ROCr 5.2's `BlitSdma` counts in bytes).
//!   From GFX9 (SOC15) on the pointers are 64-bit and monotonic
//!   (`BlitSdmaV4`, `HwIndexMonotonic`), before that 32-bit offsets into
//!   the ring (`BlitSdmaV2V3`). The write pointer is the doorbell's value
//!   (kfdtest's `SDMAQueue::SubmitPacket`, ROCr's
//!   `UpdateWriteAndDoorbellRegister`, both of which store it to the write
//!   pointer's memory first).
//! * PM4: dwords (`load_mqd`: "PM4/CP counts in dwords"); the write
//!   pointer is 64-bit and monotonic from GFX9 on, the read pointer the
//!   CP reports stays a 32-bit offset into the ring (kfdtest's
//!   `PM4Queue::Rptr`: "still 32-bit even on Vega10").
//! * AQL: 64-byte packets (`load_mqd`: "AQL write pointer counts in 64B
//!   packets"), 64-bit monotonic `read_dispatch_id` / `write_dispatch_id`
//!   of ROCr's `amd_queue_t`; the doorbell carries a packet's index, the
//!   write pointer is the memory one (`cp_hqd_pq_wptr_poll_addr`).
//!
//! When an engine is loaded (a queue made runnable, or resumed after a
//! preemption) its read pointer comes from the MQD and its write pointer
//! from the write pointer's memory, or equals the read pointer when that
//! memory cannot be read (`kgd_gfx_v9_hqd_sdma_load`'s fallback).
//!
//! Pure arithmetic plus reads and writes through a [`VmView`]: this module
//! never decides what a packet means.

use crate::hw::sdma::{VmFault, VmView};

/// How a queue's packets are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// An SDMA ring (type SDMA or SDMA_XGMI).
    Sdma,
    /// A compute ring of PM4 packets.
    Pm4,
    /// A compute ring of AQL packets.
    Aql,
}

impl Format {
    /// Bytes per pointer unit.
    pub(crate) fn unit(self) -> u64 {
        match self {
            Format::Sdma => 1,
            Format::Pm4 => 4,
            Format::Aql => 64,
        }
    }

    /// The name log lines and errors use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Sdma => "sdma",
            Format::Pm4 => "pm4",
            Format::Aql => "aql",
        }
    }
}

/// Where a ring and its pointers live, and how the pointers count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) format: Format,
    /// GPU VA of the ring.
    pub(crate) base: u64,
    /// Ring size in bytes (a power of two).
    pub(crate) bytes: u64,
    /// GPU VA the engine reports its read pointer to.
    pub(crate) rptr_addr: u64,
    /// GPU VA of the write pointer's memory.
    pub(crate) wptr_addr: u64,
    /// SOC15 (GFX9) or later: 64-bit monotonic write pointers.
    pub(crate) soc15: bool,
}

impl Geometry {
    /// Ring size in pointer units.
    pub(crate) fn units(&self) -> u64 {
        (self.bytes / self.format.unit()).max(1)
    }

    /// Whether the write pointer is a 64-bit monotonic count (else a
    /// 32-bit offset into the ring).
    fn monotonic_wptr(&self) -> bool {
        self.soc15 || self.format == Format::Aql
    }

    /// The monotonic write pointer a raw doorbell or memory value stands
    /// for, given the engine's read pointer `rptr`; `Err` when it claims
    /// more than a ring of work or lies behind the read pointer.
    pub(crate) fn wptr_from(&self, raw: u64, rptr: u64) -> Result<u64, String> {
        let units = self.units();
        let wptr = if self.monotonic_wptr() {
            raw
        } else {
            let raw = raw & 0xFFFF_FFFF;
            let at = rptr % units;
            rptr + (raw % units + units - at) % units
        };
        match wptr.checked_sub(rptr) {
            Some(ahead) if ahead <= units => Ok(wptr),
            Some(ahead) => Err(format!(
                "write pointer {wptr:#x} is {ahead:#x} units ahead of read pointer {rptr:#x}, more than the ring's {units:#x}"
            )),
            None => Err(format!(
                "write pointer {wptr:#x} is behind read pointer {rptr:#x}"
            )),
        }
    }

    /// The value and width (bytes) the engine writes to the read pointer's
    /// memory for read pointer `rptr`.
    pub(crate) fn rptr_report(&self, rptr: u64) -> (u64, usize) {
        match (self.format, self.soc15) {
            (Format::Aql, _) | (Format::Sdma, true) => (rptr, 8),
            _ => (rptr % self.units(), 4),
        }
    }

    /// Reads the write pointer's memory (64-bit where the pointer is, else
    /// 32-bit).
    pub(crate) fn read_wptr_memory(&self, view: &VmView) -> Result<u64, VmFault> {
        if self.monotonic_wptr() {
            let mut b = [0u8; 8];
            view.read(self.wptr_addr, &mut b)?;
            Ok(u64::from_le_bytes(b))
        } else {
            let mut b = [0u8; 4];
            view.read(self.wptr_addr, &mut b)?;
            Ok(u64::from(u32::from_le_bytes(b)))
        }
    }

    /// Writes the read pointer back (the engine's `RPTR_WRITEBACK`).
    pub(crate) fn report_rptr(&self, view: &VmView, rptr: u64) -> Result<(), VmFault> {
        let (value, width) = self.rptr_report(rptr);
        view.write(self.rptr_addr, &value.to_le_bytes()[..width])
    }

    /// Reads `len` bytes of the ring starting `units` pointer units from
    /// its start (wrapping around its end).
    pub(crate) fn read(&self, view: &VmView, units: u64, len: usize) -> Result<Vec<u8>, VmFault> {
        let mut out = vec![0u8; len];
        let mut off = (units % self.units()) * self.format.unit();
        let mut done = 0usize;
        while done < len {
            let piece = ((self.bytes - off) as usize).min(len - done);
            view.read(self.base.wrapping_add(off), &mut out[done..done + piece])?;
            done += piece;
            off = 0;
        }
        Ok(out)
    }

    /// Writes `data` into the ring `units` pointer units from its start.
    pub(crate) fn write(&self, view: &VmView, units: u64, data: &[u8]) -> Result<(), VmFault> {
        let mut off = (units % self.units()) * self.format.unit();
        let mut done = 0usize;
        while done < data.len() {
            let piece = ((self.bytes - off) as usize).min(data.len() - done);
            view.write(self.base.wrapping_add(off), &data[done..done + piece])?;
            done += piece;
            off = 0;
        }
        Ok(())
    }
}

/// An indirect buffer the engine is inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IbPosition {
    /// GPU VA of the buffer.
    pub(crate) va: u64,
    /// Its size in dwords.
    pub(crate) dwords: u32,
    /// The next dword to execute.
    pub(crate) pos: u32,
}

/// Why a queue stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hang {
    /// The first dword of the packet it stopped at.
    pub(crate) header: u32,
    /// The read pointer there.
    pub(crate) at: u64,
    /// What went wrong, naming the packet.
    pub(crate) reason: String,
}

/// The engine registers of one queue: what a preemption saves in the MQD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Regs {
    /// Read pointer (monotonic, in the format's units).
    pub(crate) rptr: u64,
    /// Write pointer the engine last latched.
    pub(crate) wptr: u64,
    /// The indirect buffer being executed (PM4, AQL's PM4-IB packet).
    pub(crate) ib: Option<IbPosition>,
    /// Set when the queue stopped on an error.
    pub(crate) hang: Option<Hang>,
    /// Packets executed since the queue was created.
    pub(crate) packets: u64,
}

/// Where the registers start in the (first XCC's) MQD: after the
/// simulator's 64-byte queue descriptor (`amdkfd::queue`).
pub(crate) const MQD_REGS: usize = 64;
/// Bytes the registers take.
pub(crate) const MQD_REGS_LEN: usize = 64;
const REGS_MAGIC: &[u8; 4] = b"EXQ1";
const FLAG_IB: u32 = 1;
const FLAG_HUNG: u32 = 2;

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn get64(b: &[u8], at: usize) -> u64 {
    u64::from(get32(b, at)) | (u64::from(get32(b, at + 4)) << 32)
}

impl Regs {
    /// The registers saved in `mqd` (zero for a queue never preempted, or
    /// an MQD too short to hold them).
    pub(crate) fn from_mqd(mqd: &[u8]) -> Regs {
        let Some(m) = mqd.get(MQD_REGS..MQD_REGS + MQD_REGS_LEN) else {
            return Regs::default();
        };
        if &m[..4] != REGS_MAGIC {
            return Regs::default();
        }
        let flags = get32(m, 4);
        let ib = (flags & FLAG_IB != 0).then(|| IbPosition {
            va: get64(m, 24),
            dwords: get32(m, 32),
            pos: get32(m, 36),
        });
        let hang = (flags & FLAG_HUNG != 0).then(|| Hang {
            header: get32(m, 40),
            at: get64(m, 48),
            reason: "stopped before the checkpoint".to_owned(),
        });
        Regs {
            rptr: get64(m, 8),
            wptr: get64(m, 16),
            ib,
            hang,
            packets: get64(m, 56),
        }
    }

    /// Saves the registers into `mqd` (no-op for a too short MQD).
    pub(crate) fn to_mqd(&self, mqd: &mut [u8]) {
        let Some(m) = mqd.get_mut(MQD_REGS..MQD_REGS + MQD_REGS_LEN) else {
            return;
        };
        let mut flags = 0;
        let ib = self.ib.unwrap_or(IbPosition {
            va: 0,
            dwords: 0,
            pos: 0,
        });
        if self.ib.is_some() {
            flags |= FLAG_IB;
        }
        let (header, at) = match &self.hang {
            Some(h) => {
                flags |= FLAG_HUNG;
                (h.header, h.at)
            }
            None => (0, 0),
        };
        m[..4].copy_from_slice(REGS_MAGIC);
        m[4..8].copy_from_slice(&flags.to_le_bytes());
        m[8..16].copy_from_slice(&self.rptr.to_le_bytes());
        m[16..24].copy_from_slice(&self.wptr.to_le_bytes());
        m[24..32].copy_from_slice(&ib.va.to_le_bytes());
        m[32..36].copy_from_slice(&ib.dwords.to_le_bytes());
        m[36..40].copy_from_slice(&ib.pos.to_le_bytes());
        m[40..44].copy_from_slice(&header.to_le_bytes());
        m[44..48].fill(0);
        m[48..56].copy_from_slice(&at.to_le_bytes());
        m[56..64].copy_from_slice(&self.packets.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(format: Format, soc15: bool) -> Geometry {
        Geometry {
            format,
            base: 0x10_0000,
            bytes: 4096,
            rptr_addr: 0,
            wptr_addr: 0,
            soc15,
        }
    }

    #[test]
    fn write_pointers_by_format() {
        let sdma = geometry(Format::Sdma, true);
        assert_eq!(sdma.wptr_from(0x1_0040, 0x1_0000), Ok(0x1_0040));
        assert!(sdma.wptr_from(0x1_0000 + 4097, 0x1_0000).is_err());
        assert!(sdma.wptr_from(0xFF, 0x100).is_err());
        // Pre-SOC15: a 32-bit offset into the ring, ahead of the read pointer.
        let old = geometry(Format::Sdma, false);
        assert_eq!(old.wptr_from(0x10, 4096 + 0xF00), Ok(4096 + 0xF00 + 0x110));
        assert_eq!(old.rptr_report(4096 + 0xF00), (0xF00, 4));
        // PM4 on GFX9: 64-bit dword write pointer, 32-bit wrapped read pointer.
        let pm4 = geometry(Format::Pm4, true);
        assert_eq!(pm4.units(), 1024);
        assert_eq!(pm4.wptr_from(2050, 2040), Ok(2050));
        assert_eq!(pm4.rptr_report(2050), (2, 4));
        let aql = geometry(Format::Aql, false);
        assert_eq!(aql.rptr_report(70), (70, 8));
    }

    #[test]
    fn registers_round_trip_through_the_mqd() {
        let regs = Regs {
            rptr: 0x1234_5678_9ABC,
            wptr: 0x1234_5678_9B00,
            ib: Some(IbPosition {
                va: 0x7F00_0000_1000,
                dwords: 40,
                pos: 12,
            }),
            hang: None,
            packets: 77,
        };
        let mut mqd = vec![0xA5; 512];
        regs.to_mqd(&mut mqd);
        assert_eq!(&mqd[..64], &[0xA5; 64][..], "the descriptor stays");
        assert_eq!(Regs::from_mqd(&mqd), regs);
        assert_eq!(Regs::from_mqd(&[0; 512]), Regs::default(), "never saved");
        assert_eq!(Regs::from_mqd(&[0; 100]), Regs::default(), "too short");
    }
}
