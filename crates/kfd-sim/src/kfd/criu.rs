//! KFD criu ioctls (being written).

use std::ffi::c_int;
use crate::sim::{Ctx, Pid};
use crate::Errno;

pub(crate) fn criu_op(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }
