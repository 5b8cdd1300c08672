//! The WAIT_EVENTS calls blocked in one process, as its state holds them:
//! one waiter per event waited on ([`WaitSlot`]), activated by the event
//! code and read back by WAIT_EVENTS (`super::event_wait`).

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitSlot {
    pub(crate) event: u32,
    /// The event fired for this waiter.
    pub(crate) activated: bool,
    /// The waiter is on the event's wait queue (was not activated at once).
    pub(crate) queued: bool,
    /// The event was destroyed.
    pub(crate) destroyed: bool,
}

/// The WAIT_EVENTS calls blocked in one process.
#[derive(Debug, Default)]
pub(crate) struct Waits {
    pub(crate) next: u64,
    pub(crate) waiters: BTreeMap<u64, Vec<WaitSlot>>,
}

impl Waits {
    /// Activates every queued waiter of event `id`; whether there was one
    /// (`waitqueue_active`).
    pub(crate) fn activate(&mut self, id: u32) -> bool {
        let mut any = false;
        for slot in self.waiters.values_mut().flatten() {
            if slot.event == id && slot.queued {
                slot.activated = true;
                any = true;
            }
        }
        any
    }

    /// Event `id` is gone: its waiters fail.
    pub(crate) fn destroyed(&mut self, id: u32) {
        for slot in self.waiters.values_mut().flatten() {
            if slot.event == id {
                slot.destroyed = true;
            }
        }
    }
}
