//! PM4 type-3 packet constants for compute queues (amdkfd `kfd_pm4_opcodes.h`,
//! amdgpu `soc15d.h`, kfdtest's `pm4_pkt_struct_*.h`).
//!
//! A type-3 header holds the packet type (3) in bits 31:30, COUNT (the number of
//! dwords after the header minus one) in bits 29:16, the opcode in bits 15:8, the
//! shader type in bit 1 (1 = compute) and the predicate in bit 0. A type-2 header
//! (`0x8000_0000`) is a one-dword filler. Constants only: this module never decodes
//! or builds a packet.

/// Type-3 header: packet type field shift (bits 31:30).
pub const PM4_TYPE_SHIFT: u32 = 30;
/// Type-3 header: COUNT field mask (bits 29:16, after shifting down).
pub const PM4_COUNT_MASK: u32 = 0x3FFF;
/// Type-3 header: COUNT field shift.
pub const PM4_COUNT_SHIFT: u32 = 16;
/// Type-3 header: opcode field mask (after shifting down).
pub const PM4_OPCODE_MASK: u32 = 0xFF;
/// Type-3 header: opcode field shift.
pub const PM4_OPCODE_SHIFT: u32 = 8;
/// A type-3 NOP whose COUNT is all ones is the header alone (one dword).
pub const PM4_NOP_ONE_DWORD_COUNT: u32 = 0x3FFF;

/// `IT_NOP`.
pub const IT_NOP: u32 = 0x10;
/// `IT_DISPATCH_DIRECT`: launch a kernel.
pub const IT_DISPATCH_DIRECT: u32 = 0x15;
/// `IT_DISPATCH_INDIRECT`: launch a kernel with dimensions from memory.
pub const IT_DISPATCH_INDIRECT: u32 = 0x16;
/// `IT_WRITE_DATA`: write the packet's dwords to memory or registers.
pub const IT_WRITE_DATA: u32 = 0x37;
/// `IT_WAIT_REG_MEM`: wait until a register or memory dword compares true.
pub const IT_WAIT_REG_MEM: u32 = 0x3C;
/// `IT_INDIRECT_BUFFER`: run an indirect buffer.
pub const IT_INDIRECT_BUFFER: u32 = 0x3F;
/// `IT_EVENT_WRITE`: write an event (a partial flush, for compute).
pub const IT_EVENT_WRITE: u32 = 0x46;
/// `IT_EVENT_WRITE_EOP`: end-of-pipe fence and interrupt (before GFX9).
pub const IT_EVENT_WRITE_EOP: u32 = 0x47;
/// `IT_RELEASE_MEM`: end-of-pipe fence write and interrupt.
pub const IT_RELEASE_MEM: u32 = 0x49;
/// `IT_ACQUIRE_MEM`: cache invalidation and write-back.
pub const IT_ACQUIRE_MEM: u32 = 0x58;
/// `IT_SET_SH_REG`: write persistent shader registers (a dispatch's setup).
pub const IT_SET_SH_REG: u32 = 0x76;

/// RELEASE_MEM / EVENT_WRITE_EOP `event_index` of an end-of-pipe event.
pub const EVENT_INDEX_END_OF_PIPE: u32 = 5;
/// EVENT_WRITE `event_index` of a CS/VS/PS partial flush.
pub const EVENT_INDEX_CS_PARTIAL_FLUSH: u32 = 4;
/// The first persistent shader register (`PERSISTENT_SPACE_START`): SET_SH_REG
/// offsets count from it, in dwords.
pub const PERSISTENT_SPACE_START: u32 = 0x2C00;
/// `COMPUTE_PGM_LO`, the low bits of a dispatch's program address (>> 8).
pub const MMCOMPUTE_PGM_LO: u32 = 0x2E0C;
