//! KFD queue ioctls (being written).

use std::ffi::c_int;
use crate::sim::{Ctx, Pid};
use crate::Errno;

pub(crate) fn create_queue(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn destroy_queue(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn update_queue(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn set_cu_mask(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn get_queue_wave_state(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn alloc_queue_gws(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }
