//! Which switchable device checks a restore applies ([`CheckOptions`]).
//!
//! This crate only takes the switches; reading them from the environment
//! (`KFD_*_CHECK`) or from a tool's options is the caller's business (the
//! engine, `amdgpu-checkpoint`, does it as the C plugin does).

/// Which of the switchable device checks are on. All are on by default.
/// Each field names the C plugin's environment variable that switches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// `KFD_FW_VER_CHECK`.
    pub fw_version: bool,
    /// `KFD_SDMA_FW_VER_CHECK`.
    pub sdma_fw_version: bool,
    /// `KFD_CACHES_COUNT_CHECK`.
    pub caches_count: bool,
    /// `KFD_NUM_GWS_CHECK`.
    pub num_gws: bool,
    /// `KFD_VRAM_SIZE_CHECK`.
    pub vram_size: bool,
    /// `KFD_NUMA_CHECK`.
    pub numa: bool,
    /// `KFD_CAPABILITY_CHECK`.
    pub capability: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self::all()
    }
}

impl CheckOptions {
    /// Every check on (the default).
    pub const fn all() -> Self {
        Self {
            fw_version: true,
            sdma_fw_version: true,
            caches_count: true,
            num_gws: true,
            vram_size: true,
            numa: true,
            capability: true,
        }
    }

    /// Every check off: only the always-compared properties are checked.
    pub const fn none() -> Self {
        Self {
            fw_version: false,
            sdma_fw_version: false,
            caches_count: false,
            num_gws: false,
            vram_size: false,
            numa: false,
            capability: false,
        }
    }
}
