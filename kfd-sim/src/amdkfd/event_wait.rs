//! WAIT_EVENTS as `kfd_wait_on_events` does it: each event gets a waiter
//! (an event signaled already activates it at once and, if auto-reset, is
//! consumed by that), the call completes when one (or, with
//! `wait_for_all`, every) waiter is activated, times out after
//! `timeout` ms (0: do not wait; `KFD_EVENT_TIMEOUT_INFINITE`: never), and
//! fails with `EIO` / `KFD_IOC_WAIT_RESULT_FAIL` when an event it waits
//! for is destroyed. On completion the memory-exception data of activated
//! MEMORY events is copied back. An unknown event id is `EINVAL`, an
//! unreadable array `EFAULT`; both leave the consumed signals consumed.
//!
//! Blocking: the handler registers its waiters in the process
//! ([`Waits`](super::waits::Waits)) and asks the dispatcher to sleep ([`EventWait`]); the
//! dispatcher releases the simulator's lock while it sleeps ([`sleep`]) and
//! calls the handler again, which finds its waiters where it left them.
//! A remote client's waits are cut into slices so its connection is never
//! held ([`wait_in_slices`]).
//!
//! This module never fires an event: `event` does.

use std::ffi::{c_int, c_void};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use kfd_sys::*;

use super::proc_mut;
use super::process::KfdProcess;
use super::waits::WaitSlot;
use crate::kernel::{copy_from_user, copy_to_user, typed, Ctx, Pid, Shared, State};
use ::kfd::Errno;

/// Size of `struct kfd_event_data`; the event id is at byte 40.
const EVENT_DATA_SIZE: usize = 48;
/// `KFD_EVENT_TIMEOUT_INFINITE` and `_IMMEDIATE`.
const TIMEOUT_INFINITE: u32 = 0xFFFF_FFFF;
const TIMEOUT_IMMEDIATE: u32 = 0;
/// Longest sleep between looks (a wake-up from an engine may race the
/// sleeper's last look; this bounds what such a race costs).
const SLEEP_SLICE: Duration = Duration::from_millis(2);

/// A WAIT_EVENTS between two of its passes (the dispatcher keeps it while
/// the call sleeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventWait {
    waiter: u64,
    /// `None`: no timeout.
    deadline: Option<Instant>,
}

impl EventWait {
    /// How long the dispatcher may sleep before the next pass.
    fn sleep(&self) -> Duration {
        match self.deadline {
            None => SLEEP_SLICE,
            Some(d) => d.saturating_duration_since(Instant::now()).min(SLEEP_SLICE),
        }
    }
}

/// `init_event_waiter` for each id; `EINVAL` for an unknown one (the
/// waiters made so far go, what they consumed stays consumed).
fn register(p: &mut KfdProcess, ids: &[u32]) -> Result<u64, Errno> {
    let mut slots = Vec::with_capacity(ids.len());
    for &id in ids {
        let Some(ev) = p.events.get_mut(&id) else {
            return Err(Errno(libc::EINVAL));
        };
        let activated = ev.signaled;
        ev.signaled = ev.signaled && !ev.auto_reset;
        slots.push(WaitSlot {
            event: id,
            activated,
            queued: !activated,
            destroyed: false,
        });
    }
    let id = p.waits.next;
    p.waits.next += 1;
    p.waits.waiters.insert(id, slots);
    Ok(id)
}

/// `test_event_condition`.
fn condition(slots: &[WaitSlot], all: bool) -> u32 {
    if slots.iter().any(|s| s.destroyed) {
        return KFD_IOC_WAIT_RESULT_FAIL;
    }
    let activated = slots.iter().filter(|s| s.activated).count();
    if (all && activated == slots.len()) || (!all && activated > 0) {
        KFD_IOC_WAIT_RESULT_COMPLETE
    } else {
        KFD_IOC_WAIT_RESULT_TIMEOUT
    }
}

/// `copy_signaled_event_data`: the memory-exception data of activated
/// MEMORY events, into their `kfd_event_data` entries.
fn copy_data(p: &KfdProcess, slots: &[WaitSlot], events_ptr: u64) -> Result<(), Errno> {
    for (i, slot) in slots.iter().enumerate() {
        let Some(ev) = p.events.get(&slot.event) else {
            return Err(Errno(libc::EINVAL));
        };
        if slot.activated && ev.etype == KFD_IOC_EVENT_MEMORY {
            copy_to_user(events_ptr + (i * EVENT_DATA_SIZE) as u64, &ev.exception)?;
        }
    }
    Ok(())
}

pub(crate) fn wait_events(ctx: &mut Ctx<'_>, pid: Pid, buf: &mut [u8]) -> Result<c_int, Errno> {
    let a = typed(buf, |a: &mut kfd_ioctl_wait_events_args| *a);
    super::event::drain_interrupts(ctx.sim, ctx.st, pid);
    let result = pass(ctx, pid, &a);
    let wait_result = match &result {
        Ok(Some(r)) => *r,
        Ok(None) => return Ok(0),
        Err(_) => KFD_IOC_WAIT_RESULT_FAIL,
    };
    typed(buf, |out: &mut kfd_ioctl_wait_events_args| {
        out.wait_result = wait_result;
    });
    match result {
        Ok(_) if wait_result == KFD_IOC_WAIT_RESULT_FAIL => Err(Errno(libc::EIO)),
        Ok(_) => Ok(0),
        Err(e) => Err(e),
    }
}

/// One pass: `Ok(Some(result))` when the call ends, `Ok(None)` when it
/// must sleep (with `ctx.wait` set).
fn pass(ctx: &mut Ctx<'_>, pid: Pid, a: &kfd_ioctl_wait_events_args) -> Result<Option<u32>, Errno> {
    let all = a.wait_for_all != 0;
    let waiter = match ctx.wait.take() {
        Some(w) => w,
        None => {
            let n = a.num_events as usize;
            let data = copy_from_user(
                a.events_ptr,
                n.checked_mul(EVENT_DATA_SIZE).ok_or(Errno(libc::EINVAL))?,
            )?;
            let ids: Vec<u32> = (0..n)
                .map(|i| {
                    let off = i * EVENT_DATA_SIZE + 40;
                    u32::from_ne_bytes([data[off], data[off + 1], data[off + 2], data[off + 3]])
                })
                .collect();
            let waiter = register(proc_mut(ctx.st, pid)?, &ids)?;
            let deadline = match a.timeout {
                TIMEOUT_INFINITE => None,
                ms => Some(Instant::now() + Duration::from_millis(u64::from(ms.min(0x7FFF_FFFF)))),
            };
            EventWait { waiter, deadline }
        }
    };
    let p = proc_mut(ctx.st, pid)?;
    let slots = p
        .waits
        .waiters
        .get(&waiter.waiter)
        .cloned()
        .unwrap_or_default();
    let result = condition(&slots, all);
    let expired =
        a.timeout == TIMEOUT_IMMEDIATE || waiter.deadline.is_some_and(|d| Instant::now() >= d);
    if result == KFD_IOC_WAIT_RESULT_TIMEOUT && !expired {
        ctx.wait = Some(waiter);
        return Ok(None);
    }
    let copied = if result == KFD_IOC_WAIT_RESULT_COMPLETE {
        copy_data(p, &slots, a.events_ptr)
    } else {
        Ok(())
    };
    p.waits.waiters.remove(&waiter.waiter);
    copied.map(|()| Some(result))
}

/// The dispatcher's sleep between two passes of `wait`: releases the
/// simulator's lock until an event may have fired or the next look is due.
pub(crate) fn sleep<'a>(
    shared: &'a Shared,
    st: MutexGuard<'a, State>,
    wait: &EventWait,
) -> MutexGuard<'a, State> {
    shared
        .exec
        .events
        .wait_timeout(st, wait.sleep())
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .0
}

thread_local! {
    /// Set while this thread runs a slice of [`in_slices`].
    static SLICING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A client-side WAIT_EVENTS cut into slices of at most 20 ms, each one
/// call through `call`, so a remote client's connection (one call at a
/// time) is never held by a long wait; the result is the one the whole
/// wait would give. `None` when called from inside a slice (`call` itself
/// runs the ioctl then).
///
/// # Safety
/// `arg` must point to a valid, writable `kfd_ioctl_wait_events_args`.
pub(crate) unsafe fn in_slices(
    arg: *mut c_void,
    mut call: impl FnMut(*mut c_void) -> std::io::Result<c_int>,
) -> Option<std::io::Result<c_int>> {
    const SLICE_MS: u32 = 20;
    if arg.is_null() || SLICING.with(std::cell::Cell::get) {
        return None;
    }
    let args = arg.cast::<kfd_ioctl_wait_events_args>();
    // SAFETY: the caller guarantees `arg` points to the argument struct.
    let timeout = unsafe { (*args).timeout };
    let deadline = (timeout != TIMEOUT_INFINITE)
        .then(|| Instant::now() + Duration::from_millis(u64::from(timeout)));
    SLICING.with(|s| s.set(true));
    let r = loop {
        let slice = match deadline {
            None => SLICE_MS,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now()).as_millis();
                u32::try_from(left).unwrap_or(u32::MAX).min(SLICE_MS)
            }
        };
        // SAFETY: as above; `call` writes the struct back in place.
        unsafe { (*args).timeout = slice };
        let r = call(arg);
        // SAFETY: as above.
        let result = unsafe { (*args).wait_result };
        if r.is_err() || result != KFD_IOC_WAIT_RESULT_TIMEOUT || slice == TIMEOUT_IMMEDIATE {
            break r;
        }
    };
    SLICING.with(|s| s.set(false));
    // SAFETY: as above.
    unsafe { (*args).timeout = timeout };
    Some(r)
}
