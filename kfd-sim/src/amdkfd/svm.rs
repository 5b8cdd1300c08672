//! Shared virtual memory ranges (`AMDKFD_IOC_SVM`): SET_ATTR creates and
//! splits ranges and sets their attributes, GET_ATTR reports them. CRIU
//! checkpoints every range as an SVM object; RESTORE only parses them and
//! RESUME replays them as SET_ATTR (spec §1.3, §1.4).
//!
//! The request code of this ioctl carries the attribute array in its size
//! (`sizeof(args) + nattr × 8`), as libhsakmt encodes it. Both operations
//! first check the range as `svm_range_is_valid` does (`kfd_svm.c`): it
//! must lie in CPU mappings that are not device mappings (`EFAULT`; made
//! only for processes whose addresses are real CPU mappings, see
//! `crate::kernel::address_space`) and must not overlap a KFD allocation
//! (`EADDRINUSE`). Unmapping CPU memory ends the SVM ranges there
//! ([`unmap_from_cpu`]). This module never migrates memory.

use std::ffi::c_int;

use kfd_sys::*;

use super::proc_mut;
use super::process::{KfdProcess, SvmRange};
use crate::hw::bo::PAGE_SIZE;
use crate::kernel::{Ctx, Pid};
use ::kfd::Errno;

/// Default granularity (2^9 pages = 2 MiB).
pub(crate) const DEFAULT_GRANULARITY: u32 = 9;
const HEADER: usize = 24;

/// `KFD_IOCTL_SVM_ATTR_GRANULARITY`'s largest value: later values are
/// clamped to it (`svm_range_apply_attrs`, since the 2023 fix "drm/amdkfd:
/// Fix shift out-of-bounds issue", 270c7a8375a9; kernels before it kept
/// any value).
pub(crate) const MAX_GRANULARITY: u32 = 0x3F;

/// A new range's attributes (`svm_range_new`): no preferred or prefetch
/// location, host access and coherent, 2 MiB granularity, and access from
/// every GPU when XNACK is on (`bitmap_copy(prange->bitmap_access,
/// svms->bitmap_supported)`), from none when it is off (a GPU then faults
/// on an unmapped page instead of retrying, so nothing is mapped until the
/// application asks). GET_ATTR of memory outside any range reports the
/// same (`svm_range_get_attr`).
fn default_range(p: &KfdProcess, start: u64, size: u64) -> SvmRange {
    SvmRange {
        start,
        size,
        preferred_loc: KFD_IOCTL_SVM_LOCATION_UNDEFINED,
        prefetch_loc: KFD_IOCTL_SVM_LOCATION_UNDEFINED,
        flags: KFD_IOCTL_SVM_FLAG_HOST_ACCESS | KFD_IOCTL_SVM_FLAG_COHERENT,
        granularity: DEFAULT_GRANULARITY,
        access: vec![
            if p.xnack {
                KFD_IOCTL_SVM_ATTR_ACCESS
            } else {
                KFD_IOCTL_SVM_ATTR_NO_ACCESS
            };
            p.pdds.len()
        ],
    }
}

/// Validates attributes against the process (`svm_range_check_attr`).
pub(crate) fn check_attrs(p: &KfdProcess, attrs: &[(u32, u32)]) -> Result<(), Errno> {
    for &(ty, value) in attrs {
        match ty {
            KFD_IOCTL_SVM_ATTR_PREFERRED_LOC | KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => {
                if value != KFD_IOCTL_SVM_LOCATION_SYSMEM
                    && value != KFD_IOCTL_SVM_LOCATION_UNDEFINED
                    && p.pdd_by_user_id(value).is_none()
                {
                    return Err(Errno(libc::EINVAL));
                }
            }
            KFD_IOCTL_SVM_ATTR_ACCESS
            | KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
            | KFD_IOCTL_SVM_ATTR_NO_ACCESS => {
                if p.pdd_by_user_id(value).is_none() {
                    return Err(Errno(libc::EINVAL));
                }
            }
            // Any granularity is accepted (and clamped when applied).
            KFD_IOCTL_SVM_ATTR_SET_FLAGS
            | KFD_IOCTL_SVM_ATTR_CLR_FLAGS
            | KFD_IOCTL_SVM_ATTR_GRANULARITY => {}
            _ => return Err(Errno(libc::EINVAL)),
        }
    }
    Ok(())
}

fn apply(p: &KfdProcess, r: &mut SvmRange, attrs: &[(u32, u32)]) {
    for &(ty, value) in attrs {
        match ty {
            KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => r.preferred_loc = value,
            KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => r.prefetch_loc = value,
            KFD_IOCTL_SVM_ATTR_ACCESS
            | KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
            | KFD_IOCTL_SVM_ATTR_NO_ACCESS => {
                if let Some(i) = p.pdd_by_user_id(value) {
                    r.access[i] = ty;
                }
            }
            KFD_IOCTL_SVM_ATTR_SET_FLAGS => r.flags |= value,
            KFD_IOCTL_SVM_ATTR_CLR_FLAGS => r.flags &= !value,
            KFD_IOCTL_SVM_ATTR_GRANULARITY => r.granularity = value.min(MAX_GRANULARITY),
            _ => {}
        }
    }
}

/// SET_ATTR on `[start, start+size)` (bytes, page aligned, checked): splits
/// ranges at the edges, applies `attrs` to the covered parts and creates
/// ranges with default attributes for the gaps.
pub(crate) fn set_attr(
    p: &mut KfdProcess,
    start: u64,
    size: u64,
    attrs: &[(u32, u32)],
) -> Result<(), Errno> {
    check_attrs(p, attrs)?;
    let end = start + size;
    let mut out = Vec::new();
    let mut covered = Vec::new();
    for r in std::mem::take(&mut p.svm) {
        let r_end = r.start + r.size;
        if r_end <= start || r.start >= end {
            out.push(r);
            continue;
        }
        if r.start < start {
            let mut head = r.clone();
            head.size = start - r.start;
            out.push(head);
        }
        if r_end > end {
            let mut tail = r.clone();
            tail.start = end;
            tail.size = r_end - end;
            out.push(tail);
        }
        let mut mid = r.clone();
        mid.start = r.start.max(start);
        mid.size = r_end.min(end) - mid.start;
        covered.push(mid);
    }
    covered.sort_by_key(|r| r.start);
    let mut cursor = start;
    let mut filled = Vec::new();
    for r in covered {
        if r.start > cursor {
            filled.push(default_range(p, cursor, r.start - cursor));
        }
        cursor = r.start + r.size;
        filled.push(r);
    }
    if cursor < end {
        filled.push(default_range(p, cursor, end - cursor));
    }
    for mut r in filled {
        apply(p, &mut r, attrs);
        out.push(r);
    }
    out.sort_by_key(|r| r.start);
    p.svm = out;
    Ok(())
}

fn get_attr(p: &KfdProcess, start: u64, size: u64, attrs: &mut [(u32, u32)]) -> Result<(), Errno> {
    let end = start + size;
    let hits: Vec<&SvmRange> = p
        .svm
        .iter()
        .filter(|r| r.start < end && start < r.start + r.size)
        .collect();
    let default = default_range(p, start, size);
    let all: Vec<&SvmRange> = if hits.is_empty() {
        vec![&default]
    } else {
        hits
    };
    let same = |f: fn(&SvmRange) -> u32| {
        let v = f(all[0]);
        if all.iter().all(|r| f(r) == v) {
            v
        } else {
            KFD_IOCTL_SVM_LOCATION_UNDEFINED
        }
    };
    for attr in attrs.iter_mut() {
        match attr.0 {
            KFD_IOCTL_SVM_ATTR_PREFERRED_LOC => attr.1 = same(|r| r.preferred_loc),
            KFD_IOCTL_SVM_ATTR_PREFETCH_LOC => attr.1 = same(|r| r.prefetch_loc),
            KFD_IOCTL_SVM_ATTR_ACCESS
            | KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
            | KFD_IOCTL_SVM_ATTR_NO_ACCESS => {
                let i = p.pdd_by_user_id(attr.1).ok_or(Errno(libc::EINVAL))?;
                attr.0 = if all
                    .iter()
                    .all(|r| r.access[i] == KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE)
                {
                    KFD_IOCTL_SVM_ATTR_ACCESS_IN_PLACE
                } else if all
                    .iter()
                    .all(|r| r.access[i] != KFD_IOCTL_SVM_ATTR_NO_ACCESS)
                {
                    KFD_IOCTL_SVM_ATTR_ACCESS
                } else {
                    KFD_IOCTL_SVM_ATTR_NO_ACCESS
                };
            }
            KFD_IOCTL_SVM_ATTR_SET_FLAGS => {
                attr.1 = all.iter().fold(u32::MAX, |acc, r| acc & r.flags)
            }
            KFD_IOCTL_SVM_ATTR_CLR_FLAGS => {
                attr.1 = all.iter().fold(u32::MAX, |acc, r| acc & !r.flags)
            }
            KFD_IOCTL_SVM_ATTR_GRANULARITY => {
                attr.1 = all.iter().map(|r| r.granularity).min().unwrap_or(0)
            }
            _ => return Err(Errno(libc::EINVAL)),
        }
    }
    Ok(())
}

/// Whether `[start, end)` intersects a KFD allocation's VA range.
fn overlaps_bo(p: &KfdProcess, start: u64, end: u64) -> bool {
    p.pdds
        .iter()
        .flat_map(|pdd| pdd.idr.values())
        .any(|m| m.va != 0 && m.va < end && start < m.va.saturating_add(m.size))
}

pub(crate) fn svm(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let rd64 = |b: &[u8], o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let rd32 = |b: &[u8], o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    if buf.len() < HEADER {
        return Err(Errno(libc::EINVAL));
    }
    let (start, size, op, nattr) = (
        rd64(buf, 0),
        rd64(buf, 8),
        rd32(buf, 16),
        rd32(buf, 20) as usize,
    );
    let need = nattr
        .checked_mul(8)
        .and_then(|n| n.checked_add(HEADER))
        .ok_or(Errno(libc::EINVAL))?;
    if need > buf.len() {
        return Err(Errno(libc::EINVAL));
    }
    if size == 0
        || start % PAGE_SIZE != 0
        || size % PAGE_SIZE != 0
        || start.checked_add(size).is_none()
    {
        return Err(Errno(libc::EINVAL));
    }
    let mut attrs: Vec<(u32, u32)> = (0..nattr)
        .map(|i| (rd32(buf, HEADER + 8 * i), rd32(buf, HEADER + 8 * i + 4)))
        .collect();
    if op != KFD_IOCTL_SVM_OP_SET_ATTR && op != KFD_IOCTL_SVM_OP_GET_ATTR {
        return Err(Errno(libc::EINVAL));
    }
    let real_mm = ctx.st.processes.get(&pid).is_some_and(|p| p.real_mm);
    let p = proc_mut(ctx.st, pid)?;
    if op == KFD_IOCTL_SVM_OP_SET_ATTR {
        check_attrs(p, &attrs)?;
    }
    // svm_range_is_valid.
    if real_mm {
        crate::kernel::check_caller_mapped(start, size)?;
    }
    if overlaps_bo(p, start, start + size) {
        return Err(Errno(libc::EADDRINUSE));
    }
    match op {
        KFD_IOCTL_SVM_OP_SET_ATTR => set_attr(p, start, size, &attrs)?,
        _ => {
            get_attr(p, start, size, &mut attrs)?;
            for (i, (t, v)) in attrs.iter().enumerate() {
                buf[HEADER + 8 * i..HEADER + 8 * i + 4].copy_from_slice(&t.to_ne_bytes());
                buf[HEADER + 8 * i + 4..HEADER + 8 * i + 8].copy_from_slice(&v.to_ne_bytes());
            }
        }
    }
    Ok(0)
}

/// `svm_range_unmap_from_cpu`: the CPU memory `[start, end)` is gone, and
/// so is that part of every SVM range (a range it cuts keeps the parts
/// outside, with its attributes).
pub(crate) fn unmap_from_cpu(p: &mut KfdProcess, start: u64, end: u64) {
    let mut out = Vec::new();
    for r in std::mem::take(&mut p.svm) {
        let r_end = r.start + r.size;
        if r_end <= start || r.start >= end {
            out.push(r);
            continue;
        }
        if r.start < start {
            let mut head = r.clone();
            head.size = start - r.start;
            out.push(head);
        }
        if r_end > end {
            let mut tail = r;
            tail.size = r_end - end;
            tail.start = end;
            out.push(tail);
        }
    }
    p.svm = out;
}
