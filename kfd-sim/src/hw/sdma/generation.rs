//! What a GPU's `gfx_target_version` means for the simulated SDMA engine and
//! GPU VM: its family (from the one table in [`crate::family`]), the
//! LINEAR COPY rules of that family and the VM size.
//!
//! Pure functions of the version: this module never decodes packets or
//! touches memory.

use kfd_sys::sdma::{SDMA_CIK_COPY_MAX_BYTES, SDMA_V3_0_COPY_MAX_BYTES, SDMA_V4_COPY_MAX_BYTES};
use kfd_sys::{
    AMDGPU_FAMILY_AI, AMDGPU_FAMILY_CI, AMDGPU_FAMILY_CZ, AMDGPU_FAMILY_KV, AMDGPU_FAMILY_SI,
    AMDGPU_FAMILY_VI,
};

/// What the simulator derives from a GPU's `gfx_target_version`
/// (`major*10000 + minor*100 + stepping`, e.g. 90402 for gfx942).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GpuGeneration {
    gfx_target_version: u64,
    family: u32,
}

impl GpuGeneration {
    /// The generation of a GPU whose topology reports `gfx_target_version`
    /// (its family from [`crate::hw::family::simulated_family`]).
    pub(crate) fn from_gfx_target_version(gfx_target_version: u64) -> Self {
        let family = crate::hw::family::simulated_family(gfx_target_version);
        GpuGeneration {
            gfx_target_version,
            family,
        }
    }

    /// The `AMDGPU_FAMILY_*` id DEV_INFO reports.
    pub(crate) fn family(&self) -> u32 {
        self.family
    }

    /// The `gfx_target_version` this generation was derived from.
    pub(crate) fn gfx_target_version(&self) -> u64 {
        self.gfx_target_version
    }

    /// Whether this is family AI (GFX9) or later.
    pub(crate) fn is_ai_or_later(&self) -> bool {
        self.family >= AMDGPU_FAMILY_AI
    }

    /// The GPU VM size in bytes: 48 bits with 4-level page tables on GFX9+,
    /// the 40-bit maximum of the older GMCs below.
    pub(crate) fn vm_bytes(&self) -> u64 {
        if self.is_ai_or_later() {
            1 << 48
        } else {
            1 << 40
        }
    }

    /// The SDMA packet rules of this generation.
    pub(crate) fn sdma_rules(&self) -> SdmaRules {
        let max_copy_bytes = u64::from(match self.family {
            AMDGPU_FAMILY_SI => 0,
            AMDGPU_FAMILY_CI | AMDGPU_FAMILY_KV => SDMA_CIK_COPY_MAX_BYTES,
            // SDMA 2.4 (Iceland) allows 0x1FFFFF, SDMA 3.0 0x3FFFE0; the
            // topology cannot tell them apart, so take the SDMA 3.0 limit.
            AMDGPU_FAMILY_VI | AMDGPU_FAMILY_CZ => SDMA_V3_0_COPY_MAX_BYTES,
            _ => SDMA_V4_COPY_MAX_BYTES,
        });
        SdmaRules {
            family: self.family,
            count_is_bytes_minus_one: self.is_ai_or_later(),
            max_copy_bytes,
        }
    }
}

/// How a generation's SDMA encodes and bounds a LINEAR COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SdmaRules {
    pub(super) family: u32,
    /// COUNT holds `bytes - 1` (AI and later) rather than `bytes`.
    pub(crate) count_is_bytes_minus_one: bool,
    /// `copy_max_bytes`: the most bytes one packet may move (0 = no
    /// 7-dword linear copy on this family, i.e. SI's DMA engine).
    pub(crate) max_copy_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd_sys::{
        AMDGPU_FAMILY_GC_11_0_0, AMDGPU_FAMILY_GC_11_0_1, AMDGPU_FAMILY_GC_11_5_0,
        AMDGPU_FAMILY_GC_12_0_0, AMDGPU_FAMILY_NV, AMDGPU_FAMILY_RV, AMDGPU_FAMILY_VGH,
    };

    #[test]
    fn families_from_gfx_target_version() {
        let fam = |v| GpuGeneration::from_gfx_target_version(v).family();
        assert_eq!(fam(60001), AMDGPU_FAMILY_SI);
        assert_eq!(fam(70001), AMDGPU_FAMILY_CI);
        assert_eq!(fam(70000), AMDGPU_FAMILY_KV);
        assert_eq!(fam(80003), AMDGPU_FAMILY_VI);
        assert_eq!(fam(80100), AMDGPU_FAMILY_CZ);
        assert_eq!(fam(90000), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90008), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90010), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90402), AMDGPU_FAMILY_AI);
        assert_eq!(fam(90002), AMDGPU_FAMILY_RV);
        assert_eq!(fam(90012), AMDGPU_FAMILY_RV);
        assert_eq!(fam(100100), AMDGPU_FAMILY_NV);
        assert_eq!(fam(100300), AMDGPU_FAMILY_NV);
        assert_eq!(fam(100303), AMDGPU_FAMILY_VGH);
        assert_eq!(fam(110000), AMDGPU_FAMILY_GC_11_0_0);
        // 110001 is Navi32 (GC 11.0.3), a dGPU; Phoenix (GC 11.0.1) is 110003.
        assert_eq!(fam(110001), AMDGPU_FAMILY_GC_11_0_0);
        assert_eq!(fam(110003), AMDGPU_FAMILY_GC_11_0_1);
        assert_eq!(fam(110500), AMDGPU_FAMILY_GC_11_5_0);
        assert_eq!(fam(120001), AMDGPU_FAMILY_GC_12_0_0);
        let vi = GpuGeneration::from_gfx_target_version(80003);
        assert!(!vi.sdma_rules().count_is_bytes_minus_one);
        assert_eq!(vi.vm_bytes(), 1 << 40);
        let ai = GpuGeneration::from_gfx_target_version(90402);
        assert!(ai.sdma_rules().count_is_bytes_minus_one);
        assert_eq!(ai.sdma_rules().max_copy_bytes, 0x40_0000);
        assert_eq!(ai.vm_bytes(), 1 << 48);
    }
}
