//! The kernel's gpu_id recipe (the hash in amdkfd's `kfd_topology.c`), so
//! synthetic and partial topologies get ids shaped like a real host's.
//!
//! Recent kernels hash eight u32 words describing the GPU (or partition)
//! with CRC-16 (poly 0x8005 reflected, init 0) over their little-endian
//! bytes, replace 0 by 1, and increment past ids already taken. The recipe is
//! checked against a real capture: with subsystem id `0x1002:device_id`,
//! `devfn` 0, the partition's VRAM bank size and `first_xcc` = the partition
//! index, it reproduces all 32 gpu_ids of the mi308x fixture.
//!
//! This module computes ids; it never reads or writes files.

use crate::model::{GpuId, Node};

/// PCI vendor id of AMD/ATI.
pub const AMD_VENDOR_ID: u16 = 0x1002;

/// CRC-16 as the kernel's `crc16()` computes it (CRC-16/ARC: poly 0x8005
/// reflected = 0xA001, init 0, no final xor).
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xA001
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// What the kernel hashes into a gpu_id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuIdInputs {
    /// PCI device/function of the physical GPU.
    pub devfn: u8,
    /// PCI subsystem vendor id.
    pub subsystem_vendor: u16,
    /// PCI subsystem device id.
    pub subsystem_device: u16,
    /// PCI segment (domain).
    pub domain: u32,
    /// PCI device id.
    pub device_id: u16,
    /// PCI bus number.
    pub bus: u8,
    /// VRAM of the node (private + public), bytes.
    pub local_mem_size: u64,
    /// Index of the node's first XCC within the GPU.
    pub first_xcc: u16,
    /// Number of XCCs of the node.
    pub num_xcc: u16,
}

impl GpuIdInputs {
    /// The eight hashed words, in the kernel's order.
    pub fn words(&self) -> [u32; 8] {
        [
            u32::from(self.devfn),
            u32::from(self.subsystem_vendor) | (u32::from(self.subsystem_device) << 16),
            self.domain,
            u32::from(self.device_id),
            u32::from(self.bus),
            self.local_mem_size as u32,
            (self.local_mem_size >> 32) as u32,
            u32::from(self.first_xcc) | (u32::from(self.num_xcc) << 16),
        ]
    }

    /// The hash before the uniqueness step: CRC-16 of the words'
    /// little-endian bytes, 0 replaced by 1.
    pub fn hash(&self) -> GpuId {
        let mut bytes = [0u8; 32];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(self.words()) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        match crc16(&bytes) {
            0 => 1,
            h => GpuId::from(h),
        }
    }

    /// The plausible inputs for a GPU node whose `gpu_id` file is missing,
    /// from what its properties give (`location_id`, `domain`, `device_id`,
    /// `num_xcc`, `gfx_target_version`) plus fill-ins: subsystem
    /// `0x1002:device_id` (as on the MI308X capture) and `vram` bytes.
    ///
    /// On GFX 9.4.x/9.5.x (`gfx_target_version` 90400..=90599) the kernel
    /// ORs the partition index into the low byte of `location_id`; there the
    /// devfn is taken as 0 and `first_xcc` = partition × `num_xcc`. On other
    /// GPUs the low byte is the devfn and `first_xcc` is 0.
    pub fn for_node(node: &Node, vram: u64) -> Self {
        let location = node.prop("location_id");
        let low = (location & 0xff) as u8;
        let num_xcc = node.properties.get("num_xcc").unwrap_or(1).max(1) as u16;
        let partitioned = (90400..=90599).contains(&node.prop("gfx_target_version"));
        let (devfn, first_xcc) = if partitioned {
            (0, u16::from(low).saturating_mul(num_xcc))
        } else {
            (low, 0)
        };
        let device_id = node.prop("device_id") as u16;
        GpuIdInputs {
            devfn,
            subsystem_vendor: AMD_VENDOR_ID,
            subsystem_device: device_id,
            domain: node.prop("domain") as u32,
            device_id,
            bus: ((location >> 8) & 0xff) as u8,
            local_mem_size: vram,
            first_xcc,
            num_xcc,
        }
    }
}

/// The kernel's uniqueness step: starting at `hash` (0 counts as 1), the
/// first 16-bit id not `taken`, wrapping and skipping 0. `None` only when
/// all 65535 ids are taken.
pub fn make_unique(hash: GpuId, taken: impl Fn(GpuId) -> bool) -> Option<GpuId> {
    let mut id = (hash & 0xffff).max(1);
    for _ in 0..0xffff {
        if !taken(id) {
            return Some(id);
        }
        id = if id == 0xffff { 1 } else { id + 1 };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_arc_check_value() {
        assert_eq!(crc16(b"123456789"), 0xBB3D);
        assert_eq!(crc16(b""), 0);
        assert_eq!(crc16(&[0]), 0);
        assert_eq!(crc16(&[1]), 0xC0C1);
    }

    #[test]
    fn words_follow_the_kernel_layout() {
        let inputs = GpuIdInputs {
            devfn: 0x08,
            subsystem_vendor: 0x1002,
            subsystem_device: 0x0c34,
            domain: 1,
            device_id: 0x740f,
            bus: 0x63,
            local_mem_size: 0x0000_0010_0000_0000 | 0x1234,
            first_xcc: 2,
            num_xcc: 1,
        };
        assert_eq!(
            inputs.words(),
            [
                0x08,
                0x0c34_1002,
                1,
                0x740f,
                0x63,
                0x1234,
                0x10,
                0x0001_0002
            ]
        );
    }

    #[test]
    fn uniqueness_increments_wraps_and_skips_zero() {
        assert_eq!(make_unique(5, |_| false), Some(5));
        assert_eq!(make_unique(5, |id| id == 5 || id == 6), Some(7));
        assert_eq!(make_unique(0xffff, |id| id == 0xffff), Some(1));
        assert_eq!(make_unique(0, |_| false), Some(1));
        assert_eq!(make_unique(9, |_| true), None);
    }
}
