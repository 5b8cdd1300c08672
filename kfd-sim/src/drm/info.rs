//! DRM_IOCTL_VERSION and DRM_IOCTL_AMDGPU_INFO: what a render node says
//! about its driver and device.
//!
//! Device facts come from the GPU's topology node (device id, shader
//! layout, clocks, VRAM) and its generation (family, VM layout, SDMA
//! version); queries the simulator cannot answer truthfully are refused
//! with the kernel's "invalid request" `EINVAL`, never invented.

use std::ffi::c_int;

use amdgpu_topology::{Node, NodeKind};
use kfd_sys as k;

use super::va::{GPU_PAGE, HOLE_END, HOLE_START, VA_RESERVED_BOTTOM, VA_RESERVED_TOP};
use super::{read_arg, write_arg, Call, DrmDevice, Step};
use crate::kernel::copy_to_user;
use ::kfd::Errno;

/// amdgpu's DRM driver version: major 3, KMS minor 58.
pub(crate) const DRIVER_MAJOR: i32 = 3;
/// `KMS_DRIVER_MINOR` of the kernel the simulator models.
pub(crate) const DRIVER_MINOR: i32 = 58;
/// Driver name.
pub(crate) const DRIVER_NAME: &str = "amdgpu";
/// Driver date (before the field was deprecated).
pub(crate) const DRIVER_DATE: &str = "20150101";
/// Driver description.
pub(crate) const DRIVER_DESC: &str = "AMD GPU";

/// The topology facts DEV_INFO reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeviceFacts {
    device_id: u32,
    shader_engines: u32,
    arrays_per_engine: u32,
    engine_clock_khz: u64,
    memory_clock_khz: u64,
    active_cus: u32,
    cus_per_array: u32,
    wave_front_size: u32,
    vram_bit_width: u32,
    vram_bytes: u64,
    cpu_visible_vram_bytes: u64,
    fusion: bool,
    /// The RAS blocks the driver enabled (`ras->features`), `None` without
    /// RAS (see [`ras_features`]).
    ras_features: Option<u64>,
}

/// `HSA_CAP_MEM_EDCSUPPORTED`, `HSA_CAP_RASEVENTNOTIFY`, `HSA_CAP_SRAM_EDCSUPPORTED`.
const CAP_MEM_EDC: u64 = 0x10_0000;
const CAP_RAS_EVENT_NOTIFY: u64 = 0x20_0000;
const CAP_SRAM_EDC: u64 = 0x400_0000;

/// The RAS state behind a GPU node's `capability`. `kfd_topology_add_device`
/// (`kfd_topology.c`) sets SRAM_EDC when RAS covers the GFX block, MEM_EDC
/// when it covers UMC (HBM ECC) and RASEVENTNOTIFY when any RAS is enabled:
/// so those bits say which blocks `ras->features` holds. `None` when the
/// node claims no RAS at all (the driver then has no RAS context).
fn ras_features(capability: u64) -> Option<u64> {
    if capability & (CAP_MEM_EDC | CAP_RAS_EVENT_NOTIFY | CAP_SRAM_EDC) == 0 {
        return None;
    }
    let mut features = 0;
    if capability & CAP_MEM_EDC != 0 {
        features |= k::AMDGPU_INFO_RAS_ENABLED_UMC;
    }
    if capability & CAP_SRAM_EDC != 0 {
        features |= k::AMDGPU_INFO_RAS_ENABLED_GFX;
    }
    Some(features)
}

fn prop32(node: &Node, key: &str) -> u32 {
    u32::try_from(node.prop(key)).unwrap_or(u32::MAX)
}

impl DeviceFacts {
    /// Facts of the GPU at `node` with `vram_bytes` of VRAM.
    pub(crate) fn from_node(node: &Node, vram_bytes: u64) -> DeviceFacts {
        let arrays = prop32(node, "array_count");
        let per_engine = prop32(node, "simd_arrays_per_engine").max(1);
        let simd_per_cu = prop32(node, "simd_per_cu").max(1);
        let bank = node.mem_banks.as_ref().and_then(|banks| banks.first());
        let bank_prop = |key: &str| bank.map_or(0, |b| b.properties.get_or_zero(key));
        DeviceFacts {
            device_id: prop32(node, "device_id"),
            shader_engines: arrays / per_engine,
            arrays_per_engine: per_engine,
            engine_clock_khz: node.prop("max_engine_clk_fcompute").saturating_mul(1000),
            memory_clock_khz: bank_prop("mem_clk_max").saturating_mul(1000),
            active_cus: prop32(node, "simd_count") / simd_per_cu,
            cus_per_array: prop32(node, "cu_per_simd_array"),
            wave_front_size: prop32(node, "wave_front_size"),
            vram_bit_width: u32::try_from(bank_prop("width")).unwrap_or(0),
            vram_bytes,
            // A small-BAR GPU shows the CPU a 256 MiB window of its VRAM.
            cpu_visible_vram_bytes: match node.vram() {
                Some((_, true)) | None => vram_bytes,
                Some((_, false)) => vram_bytes.min(256 << 20),
            },
            fusion: node.kind() == NodeKind::Apu,
            ras_features: ras_features(node.prop("capability")),
        }
    }
}

impl DrmDevice {
    /// VRAM size in bytes.
    pub(crate) fn facts_vram_bytes(&self) -> u64 {
        self.facts.vram_bytes
    }

    /// `drm_amdgpu_info_device` for this GPU (`AMDGPU_INFO_DEV_INFO`).
    pub(crate) fn dev_info(&self) -> k::drm_amdgpu_info_device {
        let f = &self.facts;
        let vm_bytes = self.generation.vm_bytes();
        let usable = vm_bytes - VA_RESERVED_TOP;
        let mut info = k::drm_amdgpu_info_device {
            device_id: f.device_id,
            family: self.generation.family(),
            num_shader_engines: f.shader_engines,
            num_shader_arrays_per_engine: f.arrays_per_engine,
            // The GPU timestamp counter runs at 100 MHz.
            gpu_counter_freq: 100_000,
            max_engine_clock: f.engine_clock_khz,
            max_memory_clock: f.memory_clock_khz,
            cu_active_number: f.active_cus,
            ids_flags: if f.fusion {
                k::AMDGPU_IDS_FLAGS_FUSION
            } else {
                0
            },
            virtual_address_offset: VA_RESERVED_BOTTOM,
            virtual_address_max: usable.min(HOLE_START),
            virtual_address_alignment: GPU_PAGE as u32,
            // Fragment size 9 (2 MiB) on GFX9+, 4 (64 KiB) before.
            pte_fragment_size: if self.generation.is_ai_or_later() {
                2 << 20
            } else {
                64 << 10
            },
            gart_page_size: GPU_PAGE as u32,
            vram_bit_width: f.vram_bit_width,
            wave_front_size: f.wave_front_size,
            num_cu_per_sh: f.cus_per_array,
            ..Default::default()
        };
        if usable > HOLE_START {
            info.high_va_offset = HOLE_END;
            info.high_va_max = HOLE_END | usable;
        }
        info
    }

    /// SDMA IP block version (major, minor) of this generation.
    fn sdma_version(&self) -> (u32, u32) {
        let gfx = self.generation.gfx_target_version();
        match self.generation.family() {
            k::AMDGPU_FAMILY_CI | k::AMDGPU_FAMILY_KV => (2, 0),
            k::AMDGPU_FAMILY_VI | k::AMDGPU_FAMILY_CZ => (3, 0),
            k::AMDGPU_FAMILY_AI | k::AMDGPU_FAMILY_RV => (4, 0),
            k::AMDGPU_FAMILY_GC_11_0_0
            | k::AMDGPU_FAMILY_GC_11_0_1
            | k::AMDGPU_FAMILY_GC_11_5_0 => (6, 0),
            k::AMDGPU_FAMILY_GC_12_0_0 => (7, 0),
            _ if gfx / 100 == 1003 => (5, 2),
            _ => (5, 0),
        }
    }
}

/// Copies a driver string like `drm_copy_field`: at most `*len` bytes, then
/// `*len` becomes the true length.
fn copy_field(ptr: usize, len: &mut usize, value: &str) -> Result<(), Errno> {
    let n = value.len().min(*len);
    *len = value.len();
    if n > 0 && ptr != 0 {
        copy_to_user(ptr as u64, &value.as_bytes()[..n])?;
    }
    Ok(())
}

/// DRM_IOCTL_VERSION (`drm_version`).
pub(super) fn version(_call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let mut v: k::drm_version = read_arg(buf);
    v.version_major = DRIVER_MAJOR;
    v.version_minor = DRIVER_MINOR;
    v.version_patchlevel = 0;
    let result = copy_field(v.name, &mut v.name_len, DRIVER_NAME)
        .and_then(|()| copy_field(v.date, &mut v.date_len, DRIVER_DATE))
        .and_then(|()| copy_field(v.desc, &mut v.desc_len, DRIVER_DESC));
    write_arg(buf, 0, &v);
    result.map(|()| Step::Done(0))
}

/// Answers one INFO query, or the kernel's errno.
fn answer(device: &DrmDevice, args: &k::drm_amdgpu_info, request: &[u8]) -> Result<Vec<u8>, Errno> {
    use zerocopy::IntoBytes;
    match args.query {
        k::AMDGPU_INFO_ACCEL_WORKING => Ok(1u32.to_ne_bytes().to_vec()),
        k::AMDGPU_INFO_HW_IP_INFO => {
            let q: k::drm_amdgpu_info_query_hw_ip = read_arg(request);
            if q.ip_instance >= k::AMDGPU_HW_IP_INSTANCE_MAX_COUNT
                || q.r#type >= k::AMDGPU_HW_IP_NUM
            {
                return Err(Errno(libc::EINVAL));
            }
            let mut ip = k::drm_amdgpu_info_hw_ip::default();
            // Other IP types have no IP block in the simulator: the kernel
            // then answers a zeroed structure.
            if q.r#type == k::AMDGPU_HW_IP_DMA {
                let (major, minor) = device.sdma_version();
                let rings = device.sdma.ring_count().min(32);
                ip.hw_ip_version_major = major;
                ip.hw_ip_version_minor = minor;
                ip.ib_start_alignment = 256;
                ip.ib_size_alignment = 4;
                ip.available_rings = if rings == 32 {
                    u32::MAX
                } else {
                    (1u32 << rings) - 1
                };
            }
            Ok(ip.as_bytes().to_vec())
        }
        k::AMDGPU_INFO_HW_IP_COUNT => {
            let q: k::drm_amdgpu_info_query_hw_ip = read_arg(request);
            if q.r#type >= k::AMDGPU_HW_IP_NUM {
                return Err(Errno(libc::EINVAL));
            }
            let count: u32 = u32::from(q.r#type == k::AMDGPU_HW_IP_DMA);
            Ok(count.to_ne_bytes().to_vec())
        }
        k::AMDGPU_INFO_DEV_INFO => Ok(device.dev_info().as_bytes().to_vec()),
        k::AMDGPU_INFO_READ_MMR_REG => {
            let q: k::drm_amdgpu_info_read_mmr_reg = read_arg(request);
            read_mmr_reg(device, &q)
        }
        // `ras_enabled << 32 | ras->features`; EINVAL without a RAS
        // context (amdgpu_info_ioctl). The blocks enabled are the ones the
        // hardware supports, the driver's default (`amdgpu_ras_mask` ~0).
        k::AMDGPU_INFO_RAS_ENABLED_FEATURES => {
            let features = device.facts.ras_features.ok_or(Errno(libc::EINVAL))?;
            Ok(((features << 32) | features).to_ne_bytes().to_vec())
        }
        k::AMDGPU_INFO_VRAM_GTT => {
            let vram = device.facts.vram_bytes;
            let out = k::drm_amdgpu_info_vram_gtt {
                vram_size: vram,
                vram_cpu_accessible_size: device.facts.cpu_visible_vram_bytes,
                gtt_size: 0,
            };
            Ok(out.as_bytes().to_vec())
        }
        _ => Err(Errno(libc::EINVAL)),
    }
}

/// `GB_ADDR_CONFIG`: the same absolute dword offset on every chip
/// (libdrm's `amdgpu_query_gpu_info_init` reads it at device start-up).
const MM_GB_ADDR_CONFIG: u32 = 0x263e;
/// `AMDGPU_GFX_MAX_SE` and `AMDGPU_GFX_MAX_SH_PER_SE`.
const GFX_MAX_SE: u32 = 8;
const GFX_MAX_SH_PER_SE: u32 = 2;

impl DrmDevice {
    /// The value `amdgpu_asic_read_register` answers for register `reg`,
    /// `None` for a register it does not allow (or the simulator does not
    /// model, see [`read_mmr_reg`]).
    ///
    /// `GB_ADDR_CONFIG` is the kernel's cached `gfx.config.gb_addr_config`:
    /// the golden value `gfx_v9_0_gpu_early_init` sets for the chip (Vega10
    /// `0x2a114042`, Vega12 `0x24104041`, Vega20 `0x26013041`, Raven
    /// `0x24000042`; Arcturus and Aldebaran OR `0x22014042` into the
    /// hardware's value, whose other bits read zero here). GFX 9.4.3 and
    /// GFX10+ read it from the hardware with no golden value in the driver:
    /// the GFX9 `0x22014042` stands in (the value only feeds surface tiling
    /// in Mesa, never the compute stack or CRIU). Polaris and Carrizo
    /// (GFX8): `gfx_v8_0`'s golden `0x22011003` and `0x22010001`.
    /// The kernel's `gfx.config.gb_addr_config` (see [`Self::register`]).
    pub(crate) fn gb_addr_config(&self) -> u32 {
        self.register(MM_GB_ADDR_CONFIG).unwrap_or(0)
    }

    fn register(&self, reg: u32) -> Option<u32> {
        if reg != MM_GB_ADDR_CONFIG {
            return None;
        }
        Some(match self.generation.gfx_target_version() {
            90000 => 0x2a11_4042,
            90004 => 0x2410_4041,
            90006 => 0x2601_3041,
            90002 | 90009 | 90012 => 0x2400_0042,
            80003 => 0x2201_1003,
            80001 => 0x2201_0001,
            _ => 0x2201_4042,
        })
    }
}

/// AMDGPU_INFO_READ_MMR_REG (`amdgpu_info_ioctl`): the shader-engine and
/// array selectors are checked (`EINVAL`), at most 128 registers, and a
/// register outside the allowed list fails the whole read with `EFAULT`.
///
/// Modelled: `GB_ADDR_CONFIG` only. The GFX6–8 tiling registers
/// (`GB_TILE_MODE*`, `GB_MACROTILE_MODE*`, `MC_ARB_RAMCFG`,
/// `CC_RB_BACKEND_DISABLE`, `PA_SC_RASTER_CONFIG*`) that libdrm also reads
/// on pre-GFX9 chips come from per-chip tables the simulator does not carry:
/// they answer `EFAULT` as an unallowed register would, so libdrm's device
/// initialisation fails on simulated GFX8 chips (the thunk then goes on
/// without the marketing name, as it does on any libdrm failure).
fn read_mmr_reg(device: &DrmDevice, q: &k::drm_amdgpu_info_read_mmr_reg) -> Result<Vec<u8>, Errno> {
    let se = (q.instance >> k::AMDGPU_INFO_MMR_SE_INDEX_SHIFT) & k::AMDGPU_INFO_MMR_SE_INDEX_MASK;
    let sh = (q.instance >> k::AMDGPU_INFO_MMR_SH_INDEX_SHIFT) & k::AMDGPU_INFO_MMR_SH_INDEX_MASK;
    if se != k::AMDGPU_INFO_MMR_SE_INDEX_MASK && se >= GFX_MAX_SE {
        return Err(Errno(libc::EINVAL));
    }
    if sh != k::AMDGPU_INFO_MMR_SH_INDEX_MASK && sh >= GFX_MAX_SH_PER_SE {
        return Err(Errno(libc::EINVAL));
    }
    if q.count > 128 {
        return Err(Errno(libc::EINVAL));
    }
    let mut out = Vec::with_capacity(q.count as usize * 4);
    for i in 0..q.count {
        let reg = q.dword_offset.checked_add(i).ok_or(Errno(libc::EFAULT))?;
        let value = device.register(reg).ok_or(Errno(libc::EFAULT))?;
        out.extend_from_slice(&value.to_ne_bytes());
    }
    Ok(out)
}

/// DRM_IOCTL_AMDGPU_INFO (`amdgpu_info_ioctl`): write-only argument; the
/// answer goes to `return_pointer`, at most `return_size` bytes of it.
pub(super) fn info(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let args: k::drm_amdgpu_info = read_arg(buf);
    if args.return_size == 0 || args.return_pointer == 0 {
        return Err(Errno(libc::EINVAL));
    }
    let request = buf.get(16..).unwrap_or(&[]);
    let mut out = answer(call.device(), &args, request)?;
    if args.query == k::AMDGPU_INFO_VRAM_GTT {
        let gtt = call.shared.config.system_memory_bytes;
        out[16..24].copy_from_slice(&gtt.to_ne_bytes());
    }
    out.truncate(args.return_size as usize);
    copy_to_user(args.return_pointer, &out)?;
    Ok(Step::Done(0 as c_int))
}
