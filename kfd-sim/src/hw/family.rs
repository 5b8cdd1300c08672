//! The one table from a GPU's `gfx_target_version` to its amdgpu family.
//!
//! amdkfd's topology reports `gfx_target_version` (`major*10000 +
//! minor*100 + stepping`, the LLVM target: 90402 is gfx942) while amdgpu's
//! `DEV_INFO` reports a family (`AMDGPU_FAMILY_*`). The kernel derives both
//! from the GC IP version: `kgd2kfd_probe()` in `amdkfd/kfd_device.c` picks
//! the `gfx_target_version` (by ASIC for GFX7/8, by GC IP from GFX9 on) and
//! `amdgpu_discovery_set_ip_blocks()` (GFX9+, `amdgpu_discovery.c`) or the
//! ASIC type (`amdgpu_device.c`, SI/CIK/VI) picks the family. The rows of
//! [`amdgpu_family`] join the two; each names its source.
//!
//! A `gfx_target_version` of 0 means "no GFX IP reported": a CPU node, or a
//! GPU node of a kernel that predates the property. The table answers
//! `None` for it; the simulator, which only ever builds GPU nodes, then
//! uses [`SIMULATED_DEFAULT_FAMILY`] ([`simulated_family`]), and every part
//! of the simulator (topology `GpuInfo`, `DEV_INFO`, SDMA rules, VM size)
//! goes through that one function.
//!
//! Pure functions: this module never reads sysfs or touches a device.

use kfd_sys::{
    AMDGPU_FAMILY_AI, AMDGPU_FAMILY_CI, AMDGPU_FAMILY_CZ, AMDGPU_FAMILY_GC_10_3_6,
    AMDGPU_FAMILY_GC_10_3_7, AMDGPU_FAMILY_GC_11_0_0, AMDGPU_FAMILY_GC_11_0_1,
    AMDGPU_FAMILY_GC_11_5_0, AMDGPU_FAMILY_GC_12_0_0, AMDGPU_FAMILY_KV, AMDGPU_FAMILY_NV,
    AMDGPU_FAMILY_RV, AMDGPU_FAMILY_SI, AMDGPU_FAMILY_VGH, AMDGPU_FAMILY_VI, AMDGPU_FAMILY_YC,
};

/// The `AMDGPU_FAMILY_*` id amdgpu reports for a GPU whose amdkfd topology
/// says `gfx_target_version`, or `None` for 0 (no GFX IP: a CPU node) and
/// for majors this table does not know (below 6, above 12).
///
/// Within a known major, a version without its own row gets that major's
/// discrete-GPU family (an unknown GFX9 part is AI, not RV).
pub fn amdgpu_family(gfx_target_version: u64) -> Option<u32> {
    let major = gfx_target_version / 10000;
    let minor = (gfx_target_version / 100) % 100;
    let stepping = gfx_target_version % 100;
    let family = match (major, minor, stepping) {
        (0, 0, 0) => return None,
        // SI (Tahiti gfx600, Pitcairn/Verde/Oland/Hainan gfx601/602):
        // amdgpu_device.c sets AMDGPU_FAMILY_SI for every CHIP_* of SI;
        // amdkfd never supported them.
        (6, _, _) => AMDGPU_FAMILY_SI,
        // CIK APUs: Kaveri gfx700 (kfd_device.c: CHIP_KAVERI -> 70000),
        // Kabini/Mullins gfx703, gfx705 (LLVM AMDGPUUsage processor table);
        // amdgpu_device.c: CHIP_KAVERI/KABINI/MULLINS -> AMDGPU_FAMILY_KV.
        (7, 0, 0 | 3 | 5) => AMDGPU_FAMILY_KV,
        // CIK dGPUs: Hawaii gfx701 (kfd_device.c: CHIP_HAWAII -> 70001),
        // gfx702, Bonaire gfx704; CHIP_BONAIRE/HAWAII -> AMDGPU_FAMILY_CI.
        (7, _, _) => AMDGPU_FAMILY_CI,
        // Carrizo gfx801 (kfd_device.c: CHIP_CARRIZO -> 80001) and Stoney
        // gfx810: CHIP_CARRIZO/STONEY -> AMDGPU_FAMILY_CZ.
        (8, 0, 1) | (8, 1, _) => AMDGPU_FAMILY_CZ,
        // Iceland/Topaz gfx800, Tonga gfx802 (80002), Fiji/Polaris/VegaM
        // gfx803 (80003): AMDGPU_FAMILY_VI.
        (8, _, _) => AMDGPU_FAMILY_VI,
        // Raven/Picasso/Raven2 (GC 9.1.0, 9.2.2 -> 90002), gfx909 (LLVM's
        // Raven2 target) and Renoir (GC 9.3.0 -> 90012):
        // amdgpu_discovery.c puts GC 9.1.0/9.2.2/9.3.0 in AMDGPU_FAMILY_RV.
        (9, 0, 2 | 9 | 12) => AMDGPU_FAMILY_RV,
        // Vega10 (GC 9.0.1 -> 90000), Vega12 (9.2.1 -> 90004), Vega20
        // (9.4.0 -> 90006), Arcturus (9.4.1 -> 90008), Aldebaran (9.4.2 ->
        // 90010), GC 9.4.3/9.4.4 (90400/90401/90402), GC 9.5.0 (90500):
        // AMDGPU_FAMILY_AI.
        (9, _, _) => AMDGPU_FAMILY_AI,
        // Van Gogh: GC 10.3.1 -> 100303, AMDGPU_FAMILY_VGH.
        (10, 3, 3) => AMDGPU_FAMILY_VGH,
        // Yellow Carp (Rembrandt): GC 10.3.3 -> 100305, AMDGPU_FAMILY_YC.
        (10, 3, 5) => AMDGPU_FAMILY_YC,
        // GC 10.3.6 (Raphael) and 10.3.7 (Mendocino) both report 100306 in
        // kfd_device.c, so the version cannot tell them apart: 100306 is
        // taken as GC 10.3.6. 100307 (LLVM gfx1037) is Mendocino's own
        // target.
        (10, 3, 6) => AMDGPU_FAMILY_GC_10_3_6,
        (10, 3, 7) => AMDGPU_FAMILY_GC_10_3_7,
        // Navi10/12/14 (100100..100102), Cyan Skillfish (GC 10.1.3/10.1.4
        // -> 100103), Sienna Cichlid (100300), Navy Flounder (100301),
        // Dimgrey Cavefish (100302), Beige Goby (100304): AMDGPU_FAMILY_NV.
        (10, _, _) => AMDGPU_FAMILY_NV,
        // Phoenix APUs: GC 11.0.1 and 11.0.4 -> 110003 (gfx1103),
        // AMDGPU_FAMILY_GC_11_0_1. 110001 is *not* GC 11.0.1: it is Navi32
        // (GC 11.0.3, "Compiler version is 11.0.1 while HW version is
        // 11.0.3"), a dGPU.
        (11, 0, 3) => AMDGPU_FAMILY_GC_11_0_1,
        // GC 11.5.0..11.5.2 (110500..110502): AMDGPU_FAMILY_GC_11_5_0.
        (11, 5, _) => AMDGPU_FAMILY_GC_11_5_0,
        // Navi31 (GC 11.0.0 -> 110000), Navi32 (11.0.3 -> 110001, once
        // 110005 for early parts), Navi33 (11.0.2 -> 110002):
        // AMDGPU_FAMILY_GC_11_0_0.
        (11, _, _) => AMDGPU_FAMILY_GC_11_0_0,
        // GC 12.0.0/12.0.1 (120000/120001): AMDGPU_FAMILY_GC_12_0_0.
        (12, _, _) => AMDGPU_FAMILY_GC_12_0_0,
        _ => return None,
    };
    Some(family)
}

/// The family the simulator gives a GPU node that [`amdgpu_family`] has no
/// row for (`gfx_target_version` 0 from an old kernel's topology, or a
/// major newer than the table): AI (GFX9), the oldest family current ROCm
/// supports, so the GPU has a 48-bit VM and the 7-dword SDMA linear copy.
pub const SIMULATED_DEFAULT_FAMILY: u32 = AMDGPU_FAMILY_AI;

/// The family the simulator reports for a GPU node with
/// `gfx_target_version`: [`amdgpu_family`], or [`SIMULATED_DEFAULT_FAMILY`].
pub fn simulated_family(gfx_target_version: u64) -> u32 {
    amdgpu_family(gfx_target_version).unwrap_or(SIMULATED_DEFAULT_FAMILY)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (gfx_target_version, family, what it is), one per row of the table.
    const ROWS: &[(u64, u32, &str)] = &[
        (60000, AMDGPU_FAMILY_SI, "Tahiti gfx600"),
        (60001, AMDGPU_FAMILY_SI, "Pitcairn gfx601"),
        (70000, AMDGPU_FAMILY_KV, "Kaveri gfx700"),
        (70003, AMDGPU_FAMILY_KV, "Kabini/Mullins gfx703"),
        (70005, AMDGPU_FAMILY_KV, "gfx705 APU"),
        (70001, AMDGPU_FAMILY_CI, "Hawaii gfx701"),
        (70002, AMDGPU_FAMILY_CI, "gfx702"),
        (70004, AMDGPU_FAMILY_CI, "Bonaire gfx704"),
        (80001, AMDGPU_FAMILY_CZ, "Carrizo gfx801"),
        (80100, AMDGPU_FAMILY_CZ, "Stoney gfx810"),
        (80000, AMDGPU_FAMILY_VI, "Iceland gfx800"),
        (80002, AMDGPU_FAMILY_VI, "Tonga gfx802"),
        (80003, AMDGPU_FAMILY_VI, "Fiji/Polaris gfx803"),
        (90002, AMDGPU_FAMILY_RV, "Raven/Picasso gfx902"),
        (90009, AMDGPU_FAMILY_RV, "Raven2 gfx909"),
        (90012, AMDGPU_FAMILY_RV, "Renoir gfx90c"),
        (90000, AMDGPU_FAMILY_AI, "Vega10 gfx900"),
        (90004, AMDGPU_FAMILY_AI, "Vega12 gfx904"),
        (90006, AMDGPU_FAMILY_AI, "Vega20 gfx906"),
        (90008, AMDGPU_FAMILY_AI, "Arcturus gfx908"),
        (90010, AMDGPU_FAMILY_AI, "Aldebaran gfx90a"),
        (90400, AMDGPU_FAMILY_AI, "GC 9.4.3 APU gfx940"),
        (90402, AMDGPU_FAMILY_AI, "GC 9.4.3/9.4.4 gfx942"),
        (90500, AMDGPU_FAMILY_AI, "GC 9.5.0 gfx950"),
        (100100, AMDGPU_FAMILY_NV, "Navi10 gfx1010"),
        (100103, AMDGPU_FAMILY_NV, "Cyan Skillfish gfx1013"),
        (100300, AMDGPU_FAMILY_NV, "Sienna Cichlid gfx1030"),
        (100302, AMDGPU_FAMILY_NV, "Dimgrey Cavefish gfx1032"),
        (100304, AMDGPU_FAMILY_NV, "Beige Goby gfx1034"),
        (100303, AMDGPU_FAMILY_VGH, "Van Gogh gfx1033"),
        (100305, AMDGPU_FAMILY_YC, "Yellow Carp gfx1035"),
        (100306, AMDGPU_FAMILY_GC_10_3_6, "Raphael gfx1036"),
        (100307, AMDGPU_FAMILY_GC_10_3_7, "Mendocino gfx1037"),
        (110000, AMDGPU_FAMILY_GC_11_0_0, "Navi31 gfx1100"),
        (110001, AMDGPU_FAMILY_GC_11_0_0, "Navi32 gfx1101"),
        (110002, AMDGPU_FAMILY_GC_11_0_0, "Navi33 gfx1102"),
        (110003, AMDGPU_FAMILY_GC_11_0_1, "Phoenix gfx1103"),
        (110500, AMDGPU_FAMILY_GC_11_5_0, "GC 11.5.0 gfx1150"),
        (110502, AMDGPU_FAMILY_GC_11_5_0, "GC 11.5.2 gfx1152"),
        (120000, AMDGPU_FAMILY_GC_12_0_0, "GC 12.0.0 gfx1200"),
        (120001, AMDGPU_FAMILY_GC_12_0_0, "GC 12.0.1 gfx1201"),
    ];

    #[test]
    fn every_row_maps_to_the_kernels_family() {
        for &(gfx, family, what) in ROWS {
            assert_eq!(amdgpu_family(gfx), Some(family), "{what} ({gfx})");
            assert_eq!(simulated_family(gfx), family, "{what} ({gfx})");
        }
    }

    #[test]
    fn no_gfx_ip_and_unknown_majors_have_no_family() {
        assert_eq!(amdgpu_family(0), None);
        assert_eq!(amdgpu_family(50000), None);
        assert_eq!(amdgpu_family(130000), None);
        assert_eq!(simulated_family(0), AMDGPU_FAMILY_AI);
        assert_eq!(simulated_family(130000), SIMULATED_DEFAULT_FAMILY);
    }
}
