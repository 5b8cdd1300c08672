//! `AMDKFD_IOC_GET_TILE_CONFIG`: the GPU's tiling configuration
//! (`kfd_ioctl_get_tile_config` in `kfd_chardev.c`, with
//! `amdgpu_amdkfd_get_tile_config` in `amdgpu_amdkfd.c`).
//!
//! The kernel looks the gpu_id up among the process's devices (user ids,
//! `EINVAL` when unknown; no VM needed), then reports `gb_addr_config`,
//! `num_banks` and `num_ranks`, and copies at most the caller's capacity of
//! the 32-entry `tile_mode_array` and the 16-entry `macrotile_mode_array`
//! (capacities above that are cut to the array sizes and written back; a
//! failed copy is `EFAULT` with that count set to 0). From GFX9 on the
//! driver fills neither array nor the bank and rank counts ("Those values
//! are not set from GFX9 onwards"), so they are zeros; `gb_addr_config` is
//! the value the DRM half reports for the chip. GFX8 and older chips carry
//! per-chip tiling tables the simulator does not have: the ioctl answers
//! `EOPNOTSUPP` there rather than invent them.

use std::ffi::c_int;

use kfd_sys::*;

use super::proc_mut;
use crate::kernel::{copy_to_user, typed, Ctx, Pid};
use ::kfd::Errno;

/// `ARRAY_SIZE(adev->gfx.config.tile_mode_array)`.
const TILE_CONFIGS: u32 = 32;
/// `ARRAY_SIZE(adev->gfx.config.macrotile_mode_array)`.
const MACRO_TILE_CONFIGS: u32 = 16;

pub(crate) fn get_tile_config(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_get_tile_config_args| *a);
    let p = proc_mut(ctx.st, pid)?;
    let pdd = p.pdd_by_user_id(a.gpu_id).ok_or(Errno(libc::EINVAL))?;
    let drm = &ctx.sim.gpus[p.pdds[pdd].gpu].drm;
    if !drm.generation.is_ai_or_later() {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    let mut out = a;
    out.gb_addr_config = drm.gb_addr_config();
    out.num_banks = 0;
    out.num_ranks = 0;
    out.num_tile_configs = a.num_tile_configs.min(TILE_CONFIGS);
    let zeros = |n: u32| vec![0u8; n as usize * 4];
    let mut result = Ok(0);
    if copy_to_user(a.tile_config_ptr, &zeros(out.num_tile_configs)).is_err() {
        out.num_tile_configs = 0;
        result = Err(Errno(libc::EFAULT));
    } else {
        out.num_macro_tile_configs = a.num_macro_tile_configs.min(MACRO_TILE_CONFIGS);
        if copy_to_user(a.macro_tile_config_ptr, &zeros(out.num_macro_tile_configs)).is_err() {
            out.num_macro_tile_configs = 0;
            result = Err(Errno(libc::EFAULT));
        }
    }
    typed(buf, |o: &mut kfd_ioctl_get_tile_config_args| *o = out);
    result
}
