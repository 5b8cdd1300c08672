//! DRM_IOCTL_AMDGPU_GEM_METADATA (`amdgpu_gem_metadata_ioctl` in
//! `amdgpu_gem.c`): a BO's tiling flags and the opaque metadata a user-mode
//! driver attaches to it for whoever imports it later (the thunk reads it
//! back through KFD's GET_DMABUF_INFO).
//!
//! An unknown handle is `ENOENT`. SET: more than the 256 bytes of the
//! argument's data array is `EINVAL`; `amdgpu_bo_set_tiling_flags` refuses a
//! TILE_SPLIT above 6 on families up to CZ (`EINVAL`); then
//! `amdgpu_bo_set_metadata` keeps a copy of the bytes and the flags, or
//! drops what was kept for a size of 0. GET returns the tiling flags and
//! `amdgpu_bo_get_metadata`'s copy (its size and flags). Any other op does
//! nothing and succeeds, as in the kernel. The metadata belongs to the BO,
//! so every handle of it and every import on the same device sees it.
//! This module never changes anything but a BO's metadata.

use kfd_sys as k;

use super::{read_arg, write_arg, Call, Step};
use crate::hw::bo::BoMetadata;
use ::kfd::Errno;

/// `AMDGPU_TILING_TILE_SPLIT` (shift 9, 3 bits).
fn tile_split(tiling: u64) -> u64 {
    (tiling >> 9) & 0x7
}

pub(super) fn gem_metadata(call: &mut Call<'_>, buf: &mut [u8]) -> Result<Step, Errno> {
    let mut args: k::drm_amdgpu_gem_metadata = read_arg(buf);
    let gem = call.file()?.handle(args.handle, libc::ENOENT)?;
    let family = call.device().generation.family();
    let bo = call.st.bos.get_mut(gem.bo).ok_or(Errno(libc::ENOENT))?;
    let capacity = std::mem::size_of_val(&args.data.data);
    match args.op {
        k::AMDGPU_GEM_METADATA_OP_GET_METADATA => {
            let m = &bo.metadata;
            args.data.tiling_info = m.tiling_flags;
            if m.data.len() > capacity {
                return Err(Errno(libc::EINVAL));
            }
            let mut data = [0u8; 256];
            data[..m.data.len()].copy_from_slice(&m.data);
            for (word, chunk) in args.data.data.iter_mut().zip(data.chunks_exact(4)) {
                *word = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            }
            args.data.data_size_bytes = m.data.len() as u32;
            args.data.flags = m.flags;
            write_arg(buf, 0, &args);
        }
        k::AMDGPU_GEM_METADATA_OP_SET_METADATA => {
            let size = args.data.data_size_bytes as usize;
            if size > capacity {
                return Err(Errno(libc::EINVAL));
            }
            if family <= k::AMDGPU_FAMILY_CZ && tile_split(args.data.tiling_info) > 6 {
                return Err(Errno(libc::EINVAL));
            }
            bo.metadata.tiling_flags = args.data.tiling_info;
            if size == 0 {
                bo.metadata = BoMetadata {
                    tiling_flags: args.data.tiling_info,
                    ..BoMetadata::default()
                };
            } else {
                let bytes: Vec<u8> = args
                    .data
                    .data
                    .iter()
                    .flat_map(|w| w.to_ne_bytes())
                    .take(size)
                    .collect();
                bo.metadata.data = bytes;
                bo.metadata.flags = args.data.flags;
            }
        }
        _ => {}
    }
    Ok(Step::Done(0))
}
