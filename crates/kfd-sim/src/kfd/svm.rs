//! KFD svm ioctls (being written).

use std::ffi::c_int;
use crate::sim::{Ctx, Pid};
use crate::Errno;

pub(crate) fn svm(_ctx: &mut Ctx<'_>, _p: Pid, _buf: &mut [u8]) -> Result<c_int, Errno> { Err(Errno(libc::EOPNOTSUPP)) }
