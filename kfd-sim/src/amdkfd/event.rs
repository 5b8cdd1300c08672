//! Events: CREATE/DESTROY/SET/RESET/WAIT_EVENTS and the signal page.
//!
//! Event id 0 is reserved at process creation, so signal (and debug) events
//! get ids from 1 to `KFD_SIGNAL_EVENT_LIMIT - 1`, which are also their slot
//! in the signal page; other event types get ids from
//! `KFD_SIGNAL_EVENT_LIMIT` up. The signal page is either a user GTT/VRAM BO
//! passed by handle at the first CREATE_EVENT (dGPU style), or a page the
//! kernel allocates, mmapped through `/dev/kfd` at `KFD_MMAP_TYPE_EVENTS`.
//! Slots hold `UNSIGNALED_EVENT_SLOT` (all ones) until a signal writes them.
//!
//! The simulated GPU never signals asynchronously, so WAIT_EVENTS never
//! blocks: an unsatisfied wait reports `KFD_IOC_WAIT_RESULT_TIMEOUT` at once.
//! This module never writes a signal page slot other than the event's own.

use std::ffi::c_int;
use std::sync::Arc;

use kfd_sys::*;

use super::memory::split_handle;
use super::process::{Event, KfdProcess, SignalPage};
use super::{bind, proc_mut};
use crate::bo::{Backing, Memfd};
use crate::sim::{copy_from_user, copy_to_user, typed, Ctx, Pid, State};
use crate::Errno;

/// Value of a slot no signal has written.
pub(crate) const UNSIGNALED_EVENT_SLOT: u64 = u64::MAX;
/// First id of non-signal events (`KFD_FIRST_NONSIGNAL_EVENT_ID`).
pub(crate) const FIRST_NONSIGNAL_EVENT_ID: u32 = KFD_SIGNAL_EVENT_LIMIT;
/// Size of the signal page area.
pub(crate) const SIGNAL_PAGE_SIZE: u64 = KFD_SIGNAL_EVENT_LIMIT as u64 * 8;

/// Whether events of `etype` live in the signal page.
pub(crate) fn is_signal_type(etype: u32) -> bool {
    etype == KFD_IOC_EVENT_SIGNAL || etype == KFD_IOC_EVENT_DEBUG_EVENT
}

/// The memfd and base offset of the process's signal page.
fn page_of(st: &State, p: &KfdProcess) -> Option<(Arc<Memfd>, u64)> {
    match p.signal_page.as_ref()? {
        SignalPage::Kernel(m) => Some((m.clone(), 0)),
        SignalPage::User { bo, .. } => match &st.bos.get(*bo)?.backing {
            Backing::Memory(m) => Some((m.clone(), 0)),
            _ => None,
        },
    }
}

/// Writes slot `id` of the signal page.
pub(crate) fn write_slot(st: &State, pid: Pid, id: u32, value: u64) -> Result<(), Errno> {
    let p = st.kfd(pid).ok_or(Errno(libc::ESRCH))?;
    if let Some((page, base)) = page_of(st, p) {
        page.write_at(base + u64::from(id) * 8, &value.to_le_bytes())?;
    }
    Ok(())
}

/// Uses user allocation `handle` as the signal page (`kfd_kmap_event_page`).
pub(crate) fn set_user_page(st: &mut State, pid: Pid, handle: u64) -> Result<(), Errno> {
    let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
    if p.signal_page.is_some() {
        return Err(Errno(libc::EINVAL));
    }
    let (gpu_id, slot) = split_handle(handle);
    let pdd = p.pdd_by_user_id(gpu_id).ok_or(Errno(libc::EINVAL))?;
    bind(p, pdd)?;
    let bo = p.pdds[pdd].idr.get(&slot).ok_or(Errno(libc::EINVAL))?.bo;
    let b = st.bos.get(bo).ok_or(Errno(libc::EINVAL))?;
    let page = b.memory().ok_or(Errno(libc::EINVAL))?.clone();
    if b.size < SIGNAL_PAGE_SIZE {
        return Err(Errno(libc::EINVAL));
    }
    page.write_at(0, &vec![0xFF; SIGNAL_PAGE_SIZE as usize])?;
    if let Some(p) = st.kfd_mut(pid) {
        p.signal_page = Some(SignalPage::User { handle, bo });
    }
    Ok(())
}

/// Creates an event with a chosen or the next free id.
pub(crate) fn add_event(
    st: &mut State,
    pid: Pid,
    etype: u32,
    auto_reset: bool,
    want_id: Option<u32>,
) -> Result<u32, Errno> {
    let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
    let signal = is_signal_type(etype);
    let range = if signal {
        1..KFD_SIGNAL_EVENT_LIMIT
    } else {
        FIRST_NONSIGNAL_EVENT_ID..u32::MAX
    };
    if signal && p.signal_page.is_none() {
        let page = Memfd::new("kfd-sim-events", SIGNAL_PAGE_SIZE)?;
        page.write_at(0, &vec![0xFF; SIGNAL_PAGE_SIZE as usize])?;
        p.signal_page = Some(SignalPage::Kernel(Arc::new(page)));
    }
    let id = match want_id {
        Some(id) if !range.contains(&id) || p.events.contains_key(&id) => {
            return Err(Errno(libc::ENOSPC))
        }
        Some(id) => id,
        None => range
            .clone()
            .find(|id| !p.events.contains_key(id))
            .ok_or(Errno(libc::ENOSPC))?,
    };
    p.events.insert(
        id,
        Event {
            id,
            etype,
            auto_reset,
            signaled: false,
            exception: [0; 32],
        },
    );
    if signal {
        write_slot(st, pid, id, UNSIGNALED_EVENT_SLOT)?;
    }
    Ok(id)
}

pub(crate) fn create_event(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_create_event_args| *a);
    if a.event_page_offset != 0 {
        set_user_page(ctx.st, pid, a.event_page_offset)?;
    }
    let id = add_event(ctx.st, pid, a.event_type, a.auto_reset != 0, None)?;
    let signal = is_signal_type(a.event_type);
    typed(buf, |out: &mut kfd_ioctl_create_event_args| {
        out.event_id = id;
        if signal {
            out.event_page_offset = KFD_MMAP_TYPE_EVENTS;
            out.event_slot_index = id;
            out.event_trigger_data = id;
        }
        Ok(0)
    })
}

pub(crate) fn destroy_event(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let id = typed(buf, |a: &mut kfd_ioctl_destroy_event_args| a.event_id);
    proc_mut(ctx.st, pid)?
        .events
        .remove(&id)
        .ok_or(Errno(libc::EINVAL))?;
    Ok(0)
}

/// Signals event `id` as the CPU (SET_EVENT) or the simulated GPU does.
pub(crate) fn signal(st: &mut State, pid: Pid, id: u32) -> Result<(), Errno> {
    let ev = st
        .kfd_mut(pid)
        .ok_or(Errno(libc::ESRCH))?
        .events
        .get_mut(&id)
        .ok_or(Errno(libc::EINVAL))?;
    if !is_signal_type(ev.etype) {
        return Err(Errno(libc::EINVAL));
    }
    ev.signaled = true;
    write_slot(st, pid, id, u64::from(id))
}

pub(crate) fn set_event(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let id = typed(buf, |a: &mut kfd_ioctl_set_event_args| a.event_id);
    signal(ctx.st, pid, id)?;
    Ok(0)
}

pub(crate) fn reset_event(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let id = typed(buf, |a: &mut kfd_ioctl_reset_event_args| a.event_id);
    let ev = proc_mut(ctx.st, pid)?
        .events
        .get_mut(&id)
        .ok_or(Errno(libc::EINVAL))?;
    if !is_signal_type(ev.etype) {
        return Err(Errno(libc::EINVAL));
    }
    ev.signaled = false;
    write_slot(ctx.st, pid, id, UNSIGNALED_EVENT_SLOT)?;
    Ok(0)
}

/// Size of `struct kfd_event_data`.
const EVENT_DATA_SIZE: usize = 48;

pub(crate) fn wait_events(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_wait_events_args| *a);
    let n = a.num_events as usize;
    let mut data = copy_from_user(
        a.events_ptr,
        n.checked_mul(EVENT_DATA_SIZE).ok_or(Errno(libc::EINVAL))?,
    )?;
    let p = proc_mut(ctx.st, pid)?;
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let off = i * EVENT_DATA_SIZE + 40;
        let id = u32::from_ne_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]]);
        if !p.events.contains_key(&id) {
            return Err(Errno(libc::EINVAL));
        }
        ids.push(id);
    }
    let signaled: Vec<bool> = ids.iter().map(|id| p.events[id].signaled).collect();
    let done = if a.wait_for_all != 0 {
        signaled.iter().all(|&s| s)
    } else {
        signaled.iter().any(|&s| s)
    };
    let result = if done {
        for (i, id) in ids.iter().enumerate() {
            if let Some(ev) = p.events.get_mut(id) {
                if signaled[i] {
                    // Copy exception data out and consume auto-reset signals.
                    data[i * EVENT_DATA_SIZE..i * EVENT_DATA_SIZE + 32]
                        .copy_from_slice(&ev.exception);
                    if ev.auto_reset {
                        ev.signaled = false;
                    }
                }
            }
        }
        copy_to_user(a.events_ptr, &data)?;
        KFD_IOC_WAIT_RESULT_COMPLETE
    } else {
        KFD_IOC_WAIT_RESULT_TIMEOUT
    };
    typed(buf, |out: &mut kfd_ioctl_wait_events_args| {
        out.wait_result = result;
        Ok(0)
    })
}
