//! KFD event ioctls (being written).

use std::ffi::c_int;
use crate::sim::{Ctx, Pid};
use crate::Errno;

pub(crate) fn create_event(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn destroy_event(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn set_event(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn reset_event(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }

pub(crate) fn wait_events(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }
