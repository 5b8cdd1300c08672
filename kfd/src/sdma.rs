//! SDMA linear-copy command streams, encoded per GPU family.
//!
//! [`CopyFormat`] knows, for one amdgpu family (`DEV_INFO.family`), how the
//! linear-copy packet's COUNT is encoded and how many bytes one packet may
//! move; [`CopyFormat::build_copy`] turns a copy of any length into packets
//! plus NOP padding. This fixes the C plugin's off-by-one: from AI (GFX9) on
//! the hardware copies COUNT + 1 bytes, so COUNT must be `bytes - 1`, while
//! the C plugin writes `bytes` on every family (its linear-copy
//! packets put the chunk size into COUNT unchanged, one byte too many on
//! gfx9 and later).
//!
//! Pure functions of their inputs: this module never touches a device.

use kfd_sys::{
    sdma_pkt_copy_linear, SDMA_PKT_COPY_LINEAR_COUNT_count_mask, AMDGPU_FAMILY_AI,
    AMDGPU_FAMILY_CI, AMDGPU_FAMILY_CZ, SDMA_CIK_COPY_MAX_BYTES, SDMA_IB_PAD_DWORDS, SDMA_OP_COPY,
    SDMA_OP_NOP, SDMA_PKT_COPY_LINEAR_COUNT_COUNT, SDMA_PKT_COPY_LINEAR_DWORDS,
    SDMA_PKT_COPY_LINEAR_HEADER_OP, SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP, SDMA_SUBOP_COPY_LINEAR,
    SDMA_V3_0_COPY_MAX_BYTES, SDMA_V4_COPY_MAX_BYTES,
};
use zerocopy::IntoBytes;

use crate::error::{Error, Result};

/// Packet boundaries are kept on 4 KiB multiples so that a page-aligned copy
/// stays page-aligned in every packet.
const PACKET_GRANULE: u32 = 4096;

/// How one GPU family encodes linear copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFormat {
    family: u32,
    count_minus_one: bool,
    max_bytes: u32,
}

impl CopyFormat {
    /// The format for amdgpu family id `family` (`drm_amdgpu_info_device.family`).
    ///
    /// Per-packet maxima, rounded down to 4 KiB so packets stay page aligned:
    /// CI/KV (SDMA 2.0) and VI (SDMA 2.4 on Iceland/Topaz, 3.0 elsewhere; the
    /// family does not tell them apart) use the SDMA 2.x limit 0x1FFFFF →
    /// 0x1FF000; CZ (always SDMA 3.x) uses 0x3FFFE0 → 0x3FF000; AI and later
    /// (SDMA 4.x–7.x) use 0x400000. SI (family 110) has a different DMA
    /// packet and is refused, as are unknown families below CI.
    pub fn for_family(family: u32) -> Result<Self> {
        const OP: &str = "SDMA copy format";
        let round = |max: u32| max / PACKET_GRANULE * PACKET_GRANULE;
        let (count_minus_one, max_bytes) = if family >= AMDGPU_FAMILY_AI {
            (true, SDMA_V4_COPY_MAX_BYTES)
        } else if family == AMDGPU_FAMILY_CZ {
            (false, round(SDMA_V3_0_COPY_MAX_BYTES))
        } else if family >= AMDGPU_FAMILY_CI {
            (false, round(SDMA_CIK_COPY_MAX_BYTES))
        } else {
            return Err(Error::Unsupported {
                op: OP,
                reason: format!(
                    "GPU family {family} has no SDMA linear-copy packet this crate can encode (SI and older use a different DMA engine)"
                ),
            });
        };
        Ok(CopyFormat {
            family,
            count_minus_one,
            max_bytes,
        })
    }

    /// The family this format was made for.
    pub fn family(&self) -> u32 {
        self.family
    }

    /// Whether COUNT holds `bytes - 1` (AI and later) rather than `bytes`.
    pub fn count_is_bytes_minus_one(&self) -> bool {
        self.count_minus_one
    }

    /// The most bytes one packet moves.
    pub fn max_bytes_per_packet(&self) -> u32 {
        self.max_bytes
    }

    /// One linear-copy packet moving `bytes` (1..=[`Self::max_bytes_per_packet`])
    /// from GPU address `src` to `dst`.
    pub fn linear_copy(&self, src: u64, dst: u64, bytes: u32) -> Result<sdma_pkt_copy_linear> {
        if bytes == 0 || bytes > self.max_bytes {
            return Err(Error::invalid(
                "SDMA linear copy",
                format!(
                    "{bytes} bytes is outside 1..={} for family {}",
                    self.max_bytes, self.family
                ),
            ));
        }
        let count = if self.count_minus_one {
            bytes - 1
        } else {
            bytes
        };
        debug_assert!(count <= SDMA_PKT_COPY_LINEAR_COUNT_count_mask);
        Ok(sdma_pkt_copy_linear {
            header: SDMA_PKT_COPY_LINEAR_HEADER_OP(SDMA_OP_COPY)
                | SDMA_PKT_COPY_LINEAR_HEADER_SUB_OP(SDMA_SUBOP_COPY_LINEAR),
            count: SDMA_PKT_COPY_LINEAR_COUNT_COUNT(count),
            parameter: 0,
            src_addr_lo: src as u32,
            src_addr_hi: (src >> 32) as u32,
            dst_addr_lo: dst as u32,
            dst_addr_hi: (dst >> 32) as u32,
        })
    }

    /// How many packets a copy of `len` bytes needs.
    pub fn packets_for(&self, len: u64) -> u64 {
        len.div_ceil(u64::from(self.max_bytes))
    }

    /// The IB size in dwords for a copy of `len` bytes: the packets, padded
    /// to a multiple of 8 dwords.
    pub fn ib_dwords_for(&self, len: u64) -> u64 {
        let dwords = self.packets_for(len) * SDMA_PKT_COPY_LINEAR_DWORDS as u64;
        dwords.div_ceil(SDMA_IB_PAD_DWORDS as u64) * SDMA_IB_PAD_DWORDS as u64
    }

    /// Appends to `ib` the packets copying `len` bytes from `src` to `dst`,
    /// then NOPs up to a multiple of 8 dwords (counted from the start of
    /// `ib`, which should itself start on a 32-byte boundary).
    pub fn build_copy(&self, src: u64, dst: u64, len: u64, ib: &mut Vec<u32>) -> Result<()> {
        const OP: &str = "SDMA copy";
        if len == 0 {
            return Err(Error::invalid(OP, "a copy must move at least one byte"));
        }
        if src.checked_add(len).is_none() || dst.checked_add(len).is_none() {
            return Err(Error::invalid(
                OP,
                format!("{len} bytes from {src:#x} to {dst:#x} overflow the address space"),
            ));
        }
        let mut done = 0u64;
        while done < len {
            // Bounded by max_bytes, a u32.
            let bytes = (len - done).min(u64::from(self.max_bytes)) as u32;
            let packet = self.linear_copy(src + done, dst + done, bytes)?;
            ib.extend(
                packet
                    .as_bytes()
                    .chunks_exact(4)
                    .map(|dw| u32::from_le_bytes([dw[0], dw[1], dw[2], dw[3]])),
            );
            done += u64::from(bytes);
        }
        pad_ib(ib);
        Ok(())
    }
}

/// Pads `ib` with one-dword NOPs to a multiple of 8 dwords.
pub fn pad_ib(ib: &mut Vec<u32>) {
    while !ib.len().is_multiple_of(SDMA_IB_PAD_DWORDS) {
        ib.push(SDMA_OP_NOP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd_sys::{AMDGPU_FAMILY_GC_12_0_0, AMDGPU_FAMILY_KV, AMDGPU_FAMILY_SI, AMDGPU_FAMILY_VI};

    #[test]
    fn ai_packet_encodes_bytes_minus_one() {
        let f = CopyFormat::for_family(AMDGPU_FAMILY_AI).unwrap();
        let mut ib = Vec::new();
        f.build_copy(0x1_0000_2000, 0x7fff_0000_1000, 0x1000, &mut ib)
            .unwrap();
        assert_eq!(
            ib,
            [
                0x0000_0001,
                0x0000_0fff,
                0,
                0x0000_2000,
                0x0000_0001,
                0x0000_1000,
                0x0000_7fff,
                0
            ]
        );
    }

    #[test]
    fn pre_ai_packet_encodes_bytes() {
        for family in [
            AMDGPU_FAMILY_CI,
            AMDGPU_FAMILY_KV,
            AMDGPU_FAMILY_VI,
            AMDGPU_FAMILY_CZ,
        ] {
            let f = CopyFormat::for_family(family).unwrap();
            assert!(!f.count_is_bytes_minus_one());
            let p = f.linear_copy(0x10, 0x20, 0x1000).unwrap();
            assert_eq!(
                [
                    p.header,
                    p.count,
                    p.parameter,
                    p.src_addr_lo,
                    p.src_addr_hi,
                    p.dst_addr_lo,
                    p.dst_addr_hi
                ],
                [1, 0x1000, 0, 0x10, 0, 0x20, 0]
            );
        }
    }

    #[test]
    fn per_family_maxima() {
        let max = |fam| CopyFormat::for_family(fam).unwrap().max_bytes_per_packet();
        assert_eq!(max(AMDGPU_FAMILY_CI), 0x1F_F000);
        assert_eq!(max(AMDGPU_FAMILY_VI), 0x1F_F000);
        assert_eq!(max(AMDGPU_FAMILY_CZ), 0x3F_F000);
        assert_eq!(max(AMDGPU_FAMILY_AI), 0x40_0000);
        assert_eq!(max(AMDGPU_FAMILY_GC_12_0_0), 0x40_0000);
        let err = CopyFormat::for_family(AMDGPU_FAMILY_SI).unwrap_err();
        assert_eq!(err.errno(), libc::ENODEV);
        assert!(err.to_string().contains("family 110"), "{err}");
        assert!(CopyFormat::for_family(0).is_err());
    }

    #[test]
    fn maximal_ai_packet_fits_the_count_field() {
        let f = CopyFormat::for_family(AMDGPU_FAMILY_AI).unwrap();
        assert_eq!(f.linear_copy(0, 0, 0x40_0000).unwrap().count, 0x3F_FFFF);
        assert!(f.linear_copy(0, 0, 0x40_0001).is_err());
        assert!(f.linear_copy(0, 0, 0).is_err());
    }

    #[test]
    fn long_copy_splits_without_overlap_and_pads() {
        let f = CopyFormat::for_family(AMDGPU_FAMILY_AI).unwrap();
        let mut ib = Vec::new();
        let src = 0x10_0000_0000;
        let dst = 0x20_0000_0000;
        f.build_copy(src, dst, 0x40_0010, &mut ib).unwrap();
        // Two packets (14 dwords) padded to 16.
        assert_eq!(ib.len(), 16);
        assert_eq!(&ib[0..7], &[1, 0x3F_FFFF, 0, 0, 0x10, 0, 0x20]);
        assert_eq!(&ib[7..14], &[1, 0xF, 0, 0x40_0000, 0x10, 0x40_0000, 0x20]);
        assert_eq!(&ib[14..], &[0, 0]);
        assert_eq!(f.packets_for(0x40_0010), 2);
        assert_eq!(f.ib_dwords_for(0x40_0010), 16);
    }

    #[test]
    fn encoded_counts_sum_to_the_length() {
        for family in [AMDGPU_FAMILY_CI, AMDGPU_FAMILY_CZ, AMDGPU_FAMILY_AI] {
            let f = CopyFormat::for_family(family).unwrap();
            for len in [1u64, 4095, 4096, 0x1F_F001, 0x40_0000, 0x80_0001, 10 << 20] {
                let mut ib = Vec::new();
                f.build_copy(0x1000, 0x1_0000_0000, len, &mut ib).unwrap();
                assert_eq!(ib.len() % 8, 0);
                assert_eq!(ib.len() as u64, f.ib_dwords_for(len));
                let mut total = 0u64;
                let mut expect_src = 0x1000u64;
                for p in ib.chunks(7).take(f.packets_for(len) as usize) {
                    assert_eq!(p[0], 1);
                    let bytes = u64::from(p[1]) + u64::from(f.count_is_bytes_minus_one());
                    let src = u64::from(p[3]) | u64::from(p[4]) << 32;
                    assert_eq!(src, expect_src);
                    expect_src += bytes;
                    total += bytes;
                }
                assert_eq!(total, len, "family {family} len {len}");
            }
        }
    }

    #[test]
    fn bad_copies_are_rejected() {
        let f = CopyFormat::for_family(AMDGPU_FAMILY_AI).unwrap();
        let mut ib = Vec::new();
        assert!(f.build_copy(0, 0, 0, &mut ib).is_err());
        assert!(f.build_copy(u64::MAX - 10, 0, 100, &mut ib).is_err());
        assert!(ib.is_empty());
    }

    #[test]
    fn padding_rounds_up_to_eight() {
        let mut ib = vec![5u32; 9];
        pad_ib(&mut ib);
        assert_eq!(ib.len(), 16);
        assert!(ib[9..].iter().all(|&d| d == 0));
        let mut empty = Vec::new();
        pad_ib(&mut empty);
        assert!(empty.is_empty());
    }
}
