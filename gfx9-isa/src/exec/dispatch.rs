//! AMDHSA dispatch setup as a pure function: from a kernel descriptor and
//! the dispatch's parameters to the initial state of each wave (LLVM
//! AMDGPUUsage "Kernel Descriptor" and "Initial Kernel Execution State").

use super::wave::{Apertures, Wave, LANES};
use crate::target::Target;

/// The 64-byte AMDHSA kernel descriptor (`kernel_descriptor_t`, LLVM
/// AMDGPUUsage "Kernel Descriptor for GFX6-GFX11").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelDescriptor {
    /// Bytes of LDS the kernel allocates statically.
    pub group_segment_fixed_size: u32,
    /// Bytes of scratch per work-item.
    pub private_segment_fixed_size: u32,
    /// Bytes of kernel arguments.
    pub kernarg_size: u32,
    /// The entry point relative to the descriptor's own address.
    pub kernel_code_entry_byte_offset: i64,
    /// COMPUTE_PGM_RSRC3 (gfx90a: ACCUM_OFFSET (bits 5:0)).
    pub compute_pgm_rsrc3: u32,
    /// COMPUTE_PGM_RSRC1: register counts, float mode.
    pub compute_pgm_rsrc1: u32,
    /// COMPUTE_PGM_RSRC2: system SGPR and VGPR enables.
    pub compute_pgm_rsrc2: u32,
    /// The user SGPR enable bits.
    pub kernel_code_properties: u16,
}

/// Why a dispatch cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// The descriptor is not 64 bytes.
    #[error("kernel descriptor has {len} bytes, 64 expected")]
    DescriptorSize {
        /// Bytes given.
        len: usize,
    },
    /// A workgroup or grid dimension is zero.
    #[error("grid {grid:?} with workgroup {workgroup:?} has a zero dimension")]
    EmptyGrid {
        /// The grid size in work-items.
        grid: [u32; 3],
        /// The workgroup size.
        workgroup: [u16; 3],
    },
    /// The workgroup has more work-items than a workgroup may (1024).
    #[error("workgroup {workgroup:?} has more than 1024 work-items")]
    WorkgroupTooLarge {
        /// The workgroup size.
        workgroup: [u16; 3],
    },
    /// The descriptor asks for a setup the interpreter does not provide.
    #[error("kernel descriptor enables {what}, which the dispatch setup does not provide")]
    Unsupported {
        /// The feature.
        what: &'static str,
    },
    /// The workgroup id is outside the grid.
    #[error("workgroup {id:?} is outside the grid's {count:?} workgroups")]
    WorkgroupOutside {
        /// The id asked for.
        id: [u32; 3],
        /// Workgroups per dimension.
        count: [u32; 3],
    },
    /// An AQL packet is not 64 bytes.
    #[error("aql packet has {len} bytes, 64 expected")]
    PacketSize {
        /// Bytes given.
        len: usize,
    },
    /// The AQL packet's header type is not KERNEL_DISPATCH (2).
    #[error("aql packet type {packet_type} is not a kernel dispatch (2)")]
    NotKernelDispatch {
        /// The header's type field.
        packet_type: u8,
    },
    /// USER_SGPR_COUNT disagrees with the enabled user SGPRs.
    #[error("USER_SGPR_COUNT is {count} but the enabled user SGPRs take {enabled}")]
    UserSgprCount {
        /// COMPUTE_PGM_RSRC2.USER_SGPR_COUNT.
        count: u32,
        /// What the enable bits add up to.
        enabled: u32,
    },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl KernelDescriptor {
    /// Parses the 64 bytes of a descriptor (the `<kernel>.kd` symbol).
    pub fn parse(bytes: &[u8]) -> Result<KernelDescriptor, DispatchError> {
        if bytes.len() != 64 {
            return Err(DispatchError::DescriptorSize { len: bytes.len() });
        }
        Ok(KernelDescriptor {
            group_segment_fixed_size: u32_at(bytes, 0),
            private_segment_fixed_size: u32_at(bytes, 4),
            kernarg_size: u32_at(bytes, 8),
            kernel_code_entry_byte_offset: i64::from_le_bytes(
                bytes[16..24].try_into().unwrap_or([0; 8]),
            ),
            compute_pgm_rsrc3: u32_at(bytes, 44),
            compute_pgm_rsrc1: u32_at(bytes, 48),
            compute_pgm_rsrc2: u32_at(bytes, 52),
            kernel_code_properties: u16::from_le_bytes([bytes[56], bytes[57]]),
        })
    }

    /// The MODE register the wave starts with, from COMPUTE_PGM_RSRC1's
    /// FLOAT_ROUND_MODE_32 (bits 13:12), FLOAT_ROUND_MODE_16_64 (bits 15:14),
    /// FLOAT_DENORM_MODE_32 (bits 17:16), FLOAT_DENORM_MODE_16_64 (bits 19:18),
    /// ENABLE_DX10_CLAMP (bit 21) and ENABLE_IEEE_MODE (bit 23).
    pub fn mode(&self) -> u32 {
        let r = self.compute_pgm_rsrc1;
        let round = (r >> 12) & 0xf;
        let denorm = (r >> 16) & 0xf;
        let dx10 = (r >> 21) & 1;
        let ieee = (r >> 23) & 1;
        round | denorm << 4 | dx10 << 8 | ieee << 9
    }

    /// VGPRs and AGPRs a wave gets (GRANULATED_WORKITEM_VGPR_COUNT,
    /// granules of 4 on gfx900-gfx908, of 8 of the unified file on gfx90a
    /// where ACCUM_OFFSET splits it).
    pub fn registers(&self, target: Target) -> (usize, usize) {
        let g = (self.compute_pgm_rsrc1 & 0x3f) as usize + 1;
        match target {
            Target::Gfx90a | Target::Gfx940 => {
                let total = g * 8;
                let arch = ((self.compute_pgm_rsrc3 & 0x3f) as usize + 1) * 4;
                (arch.min(total), total.saturating_sub(arch))
            }
            Target::Gfx908 => (g * 4, 256),
            _ => (g * 4, 0),
        }
    }
}

/// The fields of an AQL kernel dispatch packet (`hsa_kernel_dispatch_packet_t`,
/// HSA Platform System Architecture 2.9.6) a dispatch is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AqlDispatch {
    /// The packet header (type in bits (bits 7:0)).
    pub header: u16,
    /// The setup field: dimensions in bits (bits 1:0).
    pub setup: u16,
    /// Workgroup size in work-items.
    pub workgroup: [u16; 3],
    /// Grid size in work-items.
    pub grid: [u32; 3],
    /// Scratch bytes per work-item the dispatch asks for.
    pub private_segment_size: u32,
    /// LDS bytes per workgroup, static plus dynamic.
    pub group_segment_size: u32,
    /// The kernel descriptor's address.
    pub kernel_object: u64,
    /// The kernel argument block.
    pub kernarg_address: u64,
    /// The completion signal handle.
    pub completion_signal: u64,
}

impl AqlDispatch {
    /// Parses the 64 bytes of a kernel dispatch packet.
    pub fn parse(bytes: &[u8]) -> Result<AqlDispatch, DispatchError> {
        if bytes.len() != 64 {
            return Err(DispatchError::PacketSize { len: bytes.len() });
        }
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u64_at = |at: usize| u32_at(bytes, at) as u64 | (u32_at(bytes, at + 4) as u64) << 32;
        let header = u16_at(0);
        if header & 0xff != 2 {
            return Err(DispatchError::NotKernelDispatch {
                packet_type: header as u8,
            });
        }
        Ok(AqlDispatch {
            header,
            setup: u16_at(2),
            workgroup: [u16_at(4), u16_at(6), u16_at(8)],
            grid: [u32_at(bytes, 12), u32_at(bytes, 16), u32_at(bytes, 20)],
            private_segment_size: u32_at(bytes, 24),
            group_segment_size: u32_at(bytes, 28),
            kernel_object: u64_at(32),
            kernarg_address: u64_at(40),
            completion_signal: u64_at(56),
        })
    }
}

/// One dispatch: the kernel and the parameters of its AQL packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    /// The instruction encoding.
    pub target: Target,
    /// The kernel's descriptor.
    pub descriptor: KernelDescriptor,
    /// The descriptor's address (`kernel_object` in the packet).
    pub kernel_object: u64,
    /// Grid size in work-items.
    pub grid: [u32; 3],
    /// Workgroup size in work-items.
    pub workgroup: [u16; 3],
    /// LDS bytes per workgroup: the static size plus dynamic LDS (the
    /// packet's `group_segment_size`).
    pub group_segment_size: u32,
    /// The kernel argument block.
    pub kernarg_address: u64,
    /// The AQL dispatch packet (for the dispatch pointer SGPRs).
    pub dispatch_packet: u64,
    /// The queue (`hsa_queue_t`) address (for the queue pointer SGPRs).
    pub queue: u64,
    /// The dispatch id.
    pub dispatch_id: u64,
    /// The private segment buffer descriptor (4 dwords) the queue's
    /// scratch setup gives, see [`Dispatch::scratch_descriptor`].
    pub private_segment_buffer: [u32; 4],
    /// The scratch backing memory's address (flat scratch init).
    pub scratch_base: u64,
    /// Scratch bytes per wave slot.
    pub scratch_wave_bytes: u64,
    /// The flat apertures.
    pub apertures: Apertures,
}

/// The user SGPR enables of `kernel_code_properties`, in load order, with
/// their sizes (AMDGPUUsage "Initial Kernel Execution State").
const USER_SGPRS: [(u16, u32, &str); 7] = [
    (1 << 0, 4, "private segment buffer"),
    (1 << 1, 2, "dispatch ptr"),
    (1 << 2, 2, "queue ptr"),
    (1 << 3, 2, "kernarg segment ptr"),
    (1 << 4, 2, "dispatch id"),
    (1 << 5, 2, "flat scratch init"),
    (1 << 6, 1, "private segment size"),
];

impl Dispatch {
    /// A dispatch of the kernel whose descriptor is `descriptor` at
    /// `kernel_object` over `grid` in `workgroup`s: LDS the descriptor's
    /// static size plus `dynamic_lds`, scratch per wave as the descriptor
    /// asks, the default apertures, and every address (kernarg block,
    /// packet, queue, scratch) and the dispatch id zero, for the caller to
    /// place.
    pub fn of_kernel(
        target: Target,
        descriptor: KernelDescriptor,
        kernel_object: u64,
        grid: [u32; 3],
        workgroup: [u16; 3],
        dynamic_lds: u32,
    ) -> Dispatch {
        Dispatch {
            target,
            descriptor,
            kernel_object,
            grid,
            workgroup,
            group_segment_size: descriptor
                .group_segment_fixed_size
                .saturating_add(dynamic_lds),
            kernarg_address: 0,
            dispatch_packet: 0,
            queue: 0,
            dispatch_id: 0,
            private_segment_buffer: [0; 4],
            scratch_base: 0,
            scratch_wave_bytes: Dispatch::scratch_bytes_per_wave(&descriptor),
            apertures: Apertures::default(),
        }
    }

    /// The private segment buffer descriptor ROCr builds for gfx9 over
    /// scratch at `base`: swizzled (SWIZZLE_ENABLE, ADD_TID_ENABLE,
    /// INDEX_STRIDE 64, ELEMENT_SIZE 4), stride 0, NUM_RECORDS all ones.
    pub fn scratch_descriptor(base: u64) -> [u32; 4] {
        [
            base as u32,
            ((base >> 32) as u32 & 0xffff) | 1 << 31,
            u32::MAX,
            1 << 23 | 3 << 21 | 1 << 19,
        ]
    }

    /// Scratch bytes a wave needs: the private segment size times 64
    /// lanes, rounded up to 1 KiB as ROCr allocates it.
    pub fn scratch_bytes_per_wave(descriptor: &KernelDescriptor) -> u64 {
        (descriptor.private_segment_fixed_size as u64 * LANES as u64).div_ceil(1024) * 1024
    }

    /// The kernel's first instruction.
    pub fn entry(&self) -> u64 {
        self.kernel_object
            .wrapping_add(self.descriptor.kernel_code_entry_byte_offset as u64)
    }

    /// Workgroups per dimension.
    pub fn workgroups(&self) -> [u32; 3] {
        let mut n = [0; 3];
        for d in 0..3 {
            n[d] = self.grid[d].div_ceil(self.workgroup[d].max(1) as u32);
        }
        n
    }

    /// The work-items of workgroup `id` per dimension (the last one in a
    /// dimension may be partial).
    pub fn workgroup_extent(&self, id: [u32; 3]) -> [u32; 3] {
        let mut e = [0; 3];
        for d in 0..3 {
            let w = self.workgroup[d] as u32;
            e[d] = w.min(self.grid[d].saturating_sub(id[d].saturating_mul(w)));
        }
        e
    }

    /// Waves in workgroup `id`.
    pub fn waves_in(&self, id: [u32; 3]) -> u32 {
        let e = self.workgroup_extent(id);
        (e[0] * e[1] * e[2]).div_ceil(LANES as u32)
    }

    /// Checks the dispatch as a whole.
    pub fn check(&self) -> Result<(), DispatchError> {
        if self.grid.contains(&0) || self.workgroup.contains(&0) {
            return Err(DispatchError::EmptyGrid {
                grid: self.grid,
                workgroup: self.workgroup,
            });
        }
        if self.workgroup.iter().map(|&w| w as u32).product::<u32>() > 1024 {
            return Err(DispatchError::WorkgroupTooLarge {
                workgroup: self.workgroup,
            });
        }
        let props = self.descriptor.kernel_code_properties;
        let enabled: u32 = USER_SGPRS
            .iter()
            .filter(|(bit, _, _)| props & bit != 0)
            .map(|(_, n, _)| n)
            .sum();
        let count = (self.descriptor.compute_pgm_rsrc2 >> 1) & 0x1f;
        if count < enabled {
            return Err(DispatchError::UserSgprCount { count, enabled });
        }
        if self.descriptor.compute_pgm_rsrc2 >> 10 & 1 == 1 {
            return Err(DispatchError::Unsupported {
                what: "the workgroup info SGPR",
            });
        }
        Ok(())
    }

    /// The initial state of wave `wave` of workgroup `id`, its scratch at
    /// wave slot `scratch_slot` (AMDGPUUsage "Initial Kernel Execution
    /// State": user SGPRs in order from s0, then the workgroup ids and the
    /// private segment wave offset; work-item ids in v0-v2, packed into v0
    /// on gfx90a and gfx940).
    pub fn wave(&self, id: [u32; 3], wave: u32, scratch_slot: u64) -> Result<Wave, DispatchError> {
        self.check()?;
        let count = self.workgroups();
        if (0..3).any(|d| id[d] >= count[d]) {
            return Err(DispatchError::WorkgroupOutside { id, count });
        }
        let kd = &self.descriptor;
        let (vgprs, agprs) = kd.registers(self.target);
        let mut w = Wave::new(self.target, self.entry(), vgprs.max(3), agprs);
        w.mode = kd.mode();
        w.apertures = self.apertures;
        let props = kd.kernel_code_properties;
        let rsrc2 = kd.compute_pgm_rsrc2;
        let mut s = 0usize;
        let push = |w: &mut Wave, s: &mut usize, v: u32| {
            w.sregs[*s] = v;
            *s += 1;
        };
        let wave_offset = scratch_slot.wrapping_mul(self.scratch_wave_bytes);
        for (bit, _, _) in USER_SGPRS {
            if props & bit == 0 {
                continue;
            }
            match bit {
                1 => {
                    for d in self.private_segment_buffer {
                        push(&mut w, &mut s, d);
                    }
                }
                2 => {
                    push(&mut w, &mut s, self.dispatch_packet as u32);
                    push(&mut w, &mut s, (self.dispatch_packet >> 32) as u32);
                }
                4 => {
                    push(&mut w, &mut s, self.queue as u32);
                    push(&mut w, &mut s, (self.queue >> 32) as u32);
                }
                8 => {
                    push(&mut w, &mut s, self.kernarg_address as u32);
                    push(&mut w, &mut s, (self.kernarg_address >> 32) as u32);
                }
                16 => {
                    push(&mut w, &mut s, self.dispatch_id as u32);
                    push(&mut w, &mut s, (self.dispatch_id >> 32) as u32);
                }
                32 => {
                    // gfx9: the scratch base; the kernel prologue adds the
                    // wave offset into FLAT_SCRATCH.
                    push(&mut w, &mut s, self.scratch_base as u32);
                    push(&mut w, &mut s, (self.scratch_base >> 32) as u32);
                }
                _ => push(&mut w, &mut s, kd.private_segment_fixed_size),
            }
        }
        // System SGPRs follow the USER_SGPR_COUNT user SGPRs.
        s = ((rsrc2 >> 1) & 0x1f) as usize;
        for d in 0..3 {
            if rsrc2 >> (7 + d) & 1 == 1 {
                push(&mut w, &mut s, id[d]);
            }
        }
        if rsrc2 & 1 == 1 {
            push(&mut w, &mut s, wave_offset as u32);
        }
        // gfx940 has architected flat scratch: the hardware sets
        // FLAT_SCRATCH to the wave's scratch (AMDGPUUsage "Flat Scratch",
        // GFX940), where earlier targets' prologues add the wave offset to
        // the flat scratch init SGPRs.
        if self.target == Target::Gfx940 {
            w.set_sreg64(
                super::wave::FLAT_SCRATCH,
                self.scratch_base.wrapping_add(wave_offset),
            );
        }
        // Work-item ids and EXEC.
        let e = self.workgroup_extent(id);
        let items = e[0] * e[1] * e[2];
        let ids = (rsrc2 >> 11) & 3;
        let packed = matches!(self.target, Target::Gfx90a | Target::Gfx940);
        let mut exec = 0u64;
        for lane in 0..LANES {
            let flat = wave as u64 * LANES as u64 + lane as u64;
            if flat >= items as u64 {
                continue;
            }
            let flat = flat as u32;
            exec |= 1 << lane;
            let x = flat % e[0];
            let y = (flat / e[0]) % e[1];
            let z = flat / (e[0] * e[1]);
            if packed {
                let mut v = x;
                if ids >= 1 {
                    v |= y << 10;
                }
                if ids >= 2 {
                    v |= z << 20;
                }
                w.vgprs[0][lane] = v;
            } else {
                w.vgprs[0][lane] = x;
                if ids >= 1 {
                    w.vgprs[1][lane] = y;
                }
                if ids >= 2 {
                    w.vgprs[2][lane] = z;
                }
            }
        }
        w.set_exec(exec);
        Ok(w)
    }

    /// The 64-byte AQL kernel dispatch packet of this dispatch
    /// (`hsa_kernel_dispatch_packet_t`, HSA Platform System Architecture
    /// 2.9.6), for a caller that places it in memory.
    pub fn packet_bytes(&self, completion_signal: u64) -> [u8; 64] {
        let mut p = [0u8; 64];
        // header: KERNEL_DISPATCH (2), barrier, system-scope fences.
        let header: u16 = 2 | 1 << 8 | 2 << 9 | 2 << 11;
        let dims = if self.grid[2] > 1 {
            3u16
        } else if self.grid[1] > 1 {
            2
        } else {
            1
        };
        p[0..2].copy_from_slice(&header.to_le_bytes());
        p[2..4].copy_from_slice(&dims.to_le_bytes());
        for d in 0..3 {
            p[4 + 2 * d..6 + 2 * d].copy_from_slice(&self.workgroup[d].to_le_bytes());
            p[12 + 4 * d..16 + 4 * d].copy_from_slice(&self.grid[d].to_le_bytes());
        }
        p[24..28].copy_from_slice(&self.descriptor.private_segment_fixed_size.to_le_bytes());
        p[28..32].copy_from_slice(&self.group_segment_size.to_le_bytes());
        p[32..40].copy_from_slice(&self.kernel_object.to_le_bytes());
        p[40..48].copy_from_slice(&self.kernarg_address.to_le_bytes());
        p[56..64].copy_from_slice(&completion_signal.to_le_bytes());
        p
    }
}
