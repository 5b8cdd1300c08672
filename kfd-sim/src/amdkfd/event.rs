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
//! Events fire as `kfd_events.c` fires them: SET_EVENT (CPU, signal events
//! only) and interrupts from the queue engines (`crate::hw::queues`): an SDMA
//! TRAP or a CP end-of-pipe carries an event id, and the kernel sets the
//! event only if its slot was written (the fence before the trap),
//! acknowledging the slot back to unsignaled; an id that names no written
//! slot makes it scan every slot. `set_event` leaves an auto-reset event
//! unsignaled when a waiter consumed it. VM faults fire the process's
//! MEMORY events, a hung queue its HW_EXCEPTION events. WAIT_EVENTS is in
//! `event_wait`. This module never writes a signal page slot other than
//! the event's own.

use std::ffi::c_int;
use std::sync::Arc;

use kfd_sys::*;

use super::memory::split_handle;
use super::process::{Event, KfdProcess, SignalPage};
use super::{bind, proc_mut};
use crate::hw::bo::{Backing, Memfd};
use crate::hw::queues::interrupt::Interrupt;
use crate::kernel::{typed, Ctx, Pid, Shared, State};
use ::kfd::Errno;

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
    drain_interrupts(ctx.sim, ctx.st, pid);
    let p = proc_mut(ctx.st, pid)?;
    p.events.remove(&id).ok_or(Errno(libc::EINVAL))?;
    // Its waiters wake and fail (`destroy_event`).
    p.waits.destroyed(id);
    ctx.sim.exec.events.notify_all();
    Ok(0)
}

/// `set_event`: signals event `id` of `p`, waking its waiters; an
/// auto-reset event a waiter takes stays unsignaled.
pub(crate) fn set(p: &mut KfdProcess, id: u32) {
    let waiting = p.waits.activate(id);
    if let Some(ev) = p.events.get_mut(&id) {
        ev.signaled = !ev.auto_reset || !waiting;
    }
}

/// SET_EVENT's rule (`kfd_set_event`): only signal events may be set by
/// the CPU (`EINVAL` otherwise, or for an unknown id).
pub(crate) fn signal(st: &mut State, pid: Pid, id: u32) -> Result<(), Errno> {
    let p = st.kfd_mut(pid).ok_or(Errno(libc::ESRCH))?;
    let ev = p.events.get(&id).ok_or(Errno(libc::EINVAL))?;
    if ev.etype != KFD_IOC_EVENT_SIGNAL {
        return Err(Errno(libc::EINVAL));
    }
    set(p, id);
    Ok(())
}

pub(crate) fn set_event(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let id = typed(buf, |a: &mut kfd_ioctl_set_event_args| a.event_id);
    drain_interrupts(ctx.sim, ctx.st, pid);
    signal(ctx.st, pid, id)?;
    ctx.sim.exec.events.notify_all();
    Ok(0)
}

pub(crate) fn reset_event(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let id = typed(buf, |a: &mut kfd_ioctl_reset_event_args| a.event_id);
    drain_interrupts(ctx.sim, ctx.st, pid);
    let ev = proc_mut(ctx.st, pid)?
        .events
        .get_mut(&id)
        .ok_or(Errno(libc::EINVAL))?;
    if ev.etype != KFD_IOC_EVENT_SIGNAL {
        return Err(Errno(libc::EINVAL));
    }
    ev.signaled = false;
    Ok(0)
}

/// Every slot of the process's signal page (as much of
/// `KFD_SIGNAL_EVENT_LIMIT` slots as the page holds); `None`: no page, or
/// it cannot be read.
fn read_slots(st: &State, p: &KfdProcess) -> Option<Vec<u8>> {
    let (page, base) = page_of(st, p)?;
    let len = page
        .size()
        .saturating_sub(base)
        .min(u64::from(KFD_SIGNAL_EVENT_LIMIT) * 8);
    let mut b = vec![0u8; usize::try_from(len).ok()?];
    page.read_at(base, &mut b).ok()?;
    Some(b)
}

/// `set_event_from_interrupt`: a GPU-signalable event fires and its slot
/// is acknowledged.
fn set_from_interrupt(st: &mut State, pid: Pid, id: u32) {
    let gpu_signaled = st
        .kfd(pid)
        .and_then(|p| p.events.get(&id))
        .is_some_and(|ev| is_signal_type(ev.etype));
    if !gpu_signaled {
        return;
    }
    let _ = write_slot(st, pid, id, UNSIGNALED_EVENT_SLOT);
    if let Some(p) = st.kfd_mut(pid) {
        set(p, id);
    }
}

/// `kfd_signal_event_interrupt`: the event a signal interrupt's
/// `valid_bits` of `partial_id` name, if its slot was written; else every
/// event whose slot was.
fn signal_interrupt(st: &mut State, pid: Pid, partial_id: u32, valid_bits: u32) {
    let Some(p) = st.kfd(pid) else { return };
    // The slots are read once per interrupt, as the kernel reads its
    // mapping of the page, instead of one file read per event looked at
    // (the slow path looks at every event: 4,095 of them in kfdtest's
    // SignalInvalidEvent). No page (or an unreadable one): no slot written.
    let Some(slots) = read_slots(st, p) else {
        return;
    };
    let written = |id: u32| {
        let at = id as usize * 8;
        slots
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .is_some_and(|b| u64::from_le_bytes(b) != UNSIGNALED_EVENT_SLOT)
    };
    let mut hit = None;
    if valid_bits > 0 && partial_id < KFD_SIGNAL_EVENT_LIMIT {
        if valid_bits > 31 || (1u64 << valid_bits) >= u64::from(KFD_SIGNAL_EVENT_LIMIT) {
            hit = (written(partial_id) && p.events.contains_key(&partial_id)).then_some(partial_id);
        } else {
            let mut id = partial_id;
            while id < KFD_SIGNAL_EVENT_LIMIT && hit.is_none() {
                if written(id) && p.events.contains_key(&id) {
                    hit = Some(id);
                }
                id += 1 << valid_bits;
            }
        }
    }
    let ids: Vec<u32> = match hit {
        Some(id) => vec![id],
        None => p
            .events
            .keys()
            .copied()
            .filter(|&id| id < KFD_SIGNAL_EVENT_LIMIT && written(id))
            .collect(),
    };
    for id in ids {
        set_from_interrupt(st, pid, id);
    }
}

/// Delivers every pending interrupt of `pid` in order (the caller holds
/// the simulator's lock: `st`). Interrupts of a process that is gone
/// are dropped, as `kfd_lookup_process_by_pasid` finds nothing.
pub(crate) fn drain_interrupts(sim: &Shared, st: &mut State, pid: Pid) {
    for irq in sim.exec.interrupts.take(pid) {
        deliver(st, pid, &irq);
    }
}

/// Applies one interrupt of process `pid` (see the module docs).
fn deliver(st: &mut State, pid: Pid, irq: &Interrupt) {
    match *irq {
        Interrupt::Signal {
            partial_id,
            valid_bits,
        } => signal_interrupt(st, pid, partial_id, valid_bits),
        Interrupt::VmFault { gpu_id, fault } => {
            // kfd_signal_vm_fault_event: struct kfd_hsa_memory_exception_data
            // {failure {NotPresent, ReadOnly, NoExecute, imprecise}, va,
            // gpu_id, ErrorType}.
            let mut data = [0u8; 32];
            data[0..4].copy_from_slice(&1u32.to_le_bytes());
            data[16..24].copy_from_slice(&(fault.va & !0xFFF).to_le_bytes());
            data[24..28].copy_from_slice(&gpu_id.to_le_bytes());
            fire_typed(st, pid, KFD_IOC_EVENT_MEMORY, data);
        }
        Interrupt::Hang { gpu_id } => {
            // kfd_signal_reset_event: struct kfd_hsa_hw_exception_data
            // {reset_type, reset_cause, memory_lost, gpu_id}.
            let mut data = [0u8; 32];
            data[0..4].copy_from_slice(&KFD_HW_EXCEPTION_WHOLE_GPU_RESET.to_le_bytes());
            data[4..8].copy_from_slice(&KFD_HW_EXCEPTION_GPU_HANG.to_le_bytes());
            data[8..12].copy_from_slice(&1u32.to_le_bytes());
            data[12..16].copy_from_slice(&gpu_id.to_le_bytes());
            fire_typed(st, pid, KFD_IOC_EVENT_HW_EXCEPTION, data);
        }
    }
}

/// Sets every event of type `etype` with `data` as its exception data.
fn fire_typed(st: &mut State, pid: Pid, etype: u32, data: [u8; 32]) {
    let Some(p) = st.kfd_mut(pid) else { return };
    let ids: Vec<u32> = p
        .events
        .values()
        .filter(|e| e.etype == etype)
        .map(|e| e.id)
        .collect();
    for id in ids {
        if let Some(ev) = p.events.get_mut(&id) {
            ev.exception = data;
        }
        set(p, id);
    }
}
