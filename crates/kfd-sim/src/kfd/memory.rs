//! KFD memory ioctls (being written).

use std::ffi::c_int;
use crate::sim::{Ctx, Pid};
use crate::Errno;

pub(crate) fn alloc_memory_of_gpu(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn free_memory_of_gpu(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn map_memory_to_gpu(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn unmap_memory_from_gpu(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn get_dmabuf_info(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn import_dmabuf(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn export_dmabuf(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }
