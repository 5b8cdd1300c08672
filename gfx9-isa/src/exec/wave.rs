//! A wave's architectural state (Vega ISA 3 "Kernel State"; MI200 ISA 3):
//! 64 lanes, the scalar register file, VGPRs and AGPRs, EXEC, VCC, SCC,
//! M0, the PC and the hardware registers `s_getreg_b32` reads.

use crate::target::Target;

/// Lanes per wave on gfx9.
pub const LANES: usize = 64;

/// Scalar-file index of FLAT_SCRATCH_LO (operand code 102).
pub(crate) const FLAT_SCRATCH: usize = 102;
/// Scalar-file index of VCC_LO (operand code 106).
pub(crate) const VCC: usize = 106;
/// Scalar-file index of TTMP0 (operand code 108).
pub(crate) const TTMP: usize = 108;
/// Scalar-file index of M0 (operand code 124).
pub(crate) const M0: usize = 124;
/// Scalar-file index of EXEC_LO (operand code 126).
pub(crate) const EXEC: usize = 126;
/// MODE with rounding to nearest even, denormals kept, DX10 clamp and
/// IEEE mode (Vega ISA 3.6 "Mode Register": FP_ROUND (bits 3:0), FP_DENORM
/// (bits 7:4), DX10_CLAMP 8, IEEE 9).
pub const MODE_DEFAULT: u32 = 0x3f0;
/// How many general SGPRs a gfx9 wave addresses (Vega ISA 3.3.1: 102).
pub const SGPRS: usize = 102;

/// The flat address apertures (Vega ISA 9.3.1 "FLAT addressing": an
/// address whose high dword equals an aperture's goes to LDS or scratch),
/// as `SH_MEM_BASES` programs them and `src_shared_base` /
/// `src_private_base` read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Apertures {
    /// Base of the LDS aperture (low 32 bits zero).
    pub shared_base: u64,
    /// Base of the scratch aperture (low 32 bits zero).
    pub private_base: u64,
}

impl Default for Apertures {
    /// Shared at 0x1000_0000_0000_0000 and private at
    /// 0x2000_0000_0000_0000, outside any canonical GPU virtual address; a
    /// caller that knows the real `SH_MEM_BASES` sets those instead.
    fn default() -> Apertures {
        Apertures {
            shared_base: 0x1000_0000_0000_0000,
            private_base: 0x2000_0000_0000_0000,
        }
    }
}

/// A workgroup's LDS (Vega ISA 11 "Data Share Operations"): bytes indexed
/// from zero, the size the dispatch allocates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lds {
    /// The contents.
    pub bytes: Vec<u8>,
}

impl Lds {
    /// Zeroed LDS of `size` bytes.
    pub fn new(size: usize) -> Lds {
        Lds {
            bytes: vec![0; size],
        }
    }
}

/// One wave's state.
#[derive(Debug, Clone)]
pub struct Wave {
    /// The instruction encoding the wave runs.
    pub target: Target,
    /// The address of the next instruction.
    pub pc: u64,
    /// The scalar file by operand code: SGPRs 0-101, FLAT_SCRATCH 102-103,
    /// XNACK_MASK 104-105, VCC 106-107, TTMP0-15 108-123, M0 124, EXEC
    /// 126-127.
    pub sregs: [u32; 128],
    /// The VGPRs, one array of lanes each.
    pub vgprs: Vec<[u32; LANES]>,
    /// The AGPRs (gfx908 and later), one array of lanes each.
    pub agprs: Vec<[u32; LANES]>,
    /// The scalar condition code.
    pub scc: bool,
    /// HW_REG_MODE (Vega ISA 3.6 "Mode register"): rounding, denormals,
    /// DX10 clamp, IEEE.
    pub mode: u32,
    /// HW_REG_TRAPSTS (Vega ISA 3.9).
    pub trapsts: u32,
    /// HW_REG_HW_ID: wave, SIMD, CU ids as the scheduler placed the wave.
    pub hw_id: u32,
    /// The flat apertures.
    pub apertures: Apertures,
    /// Instructions executed.
    pub retired: u64,
}

impl Wave {
    /// A wave with every register zero and EXEC all ones, at `pc`, with
    /// `vgprs` VGPRs and `agprs` AGPRs.
    pub fn new(target: Target, pc: u64, vgprs: usize, agprs: usize) -> Wave {
        let mut sregs = [0; 128];
        sregs[EXEC] = u32::MAX;
        sregs[EXEC + 1] = u32::MAX;
        Wave {
            target,
            pc,
            sregs,
            vgprs: vec![[0; LANES]; vgprs],
            agprs: vec![[0; LANES]; agprs],
            scc: false,
            // Round to nearest even, denormals kept, DX10 clamp, IEEE mode
            // (MODE bits [3:0], [7:4], 8, 9).
            mode: MODE_DEFAULT,
            trapsts: 0,
            hw_id: 0,
            apertures: Apertures::default(),
            retired: 0,
        }
    }

    /// EXEC.
    pub fn exec(&self) -> u64 {
        self.sreg64(EXEC)
    }

    /// Sets EXEC.
    pub fn set_exec(&mut self, v: u64) {
        self.set_sreg64(EXEC, v);
    }

    /// VCC.
    pub fn vcc(&self) -> u64 {
        self.sreg64(VCC)
    }

    /// Sets VCC.
    pub fn set_vcc(&mut self, v: u64) {
        self.set_sreg64(VCC, v);
    }

    /// M0.
    pub fn m0(&self) -> u32 {
        self.sregs[M0]
    }

    /// FLAT_SCRATCH: the wave's scratch base address on gfx9 (Vega ISA
    /// 9.3.4 "Scratch"), as the kernel prologue sets it.
    pub fn flat_scratch(&self) -> u64 {
        self.sreg64(FLAT_SCRATCH)
    }

    /// Two consecutive scalar-file entries as a 64-bit value.
    pub fn sreg64(&self, at: usize) -> u64 {
        self.sregs[at] as u64 | (self.sregs[at + 1] as u64) << 32
    }

    /// Sets two consecutive scalar-file entries.
    pub fn set_sreg64(&mut self, at: usize, v: u64) {
        self.sregs[at] = v as u32;
        self.sregs[at + 1] = (v >> 32) as u32;
    }

    /// HW_REG_STATUS as `s_getreg_b32` reads it (Vega ISA 3.5 "Status
    /// register"): SCC (bit 0), EXECZ (9), VCCZ (10), IN_BARRIER (12,
    /// never set while the wave executes) and the wave's VALID bit (16).
    pub fn status(&self) -> u32 {
        let mut s = self.scc as u32;
        s |= ((self.exec() == 0) as u32) << 9;
        s |= ((self.vcc() == 0) as u32) << 10;
        s | 1 << 16
    }
}
