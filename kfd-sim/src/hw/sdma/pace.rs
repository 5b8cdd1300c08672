//! The time an SDMA engine's copies take: one [`EngineClock`] per engine,
//! shared by everything that moves bytes on it (the kernel ring the DRM
//! half submits to and the user-mode queues KFD places on that engine), so
//! two streams on one engine each get a share of its bandwidth, as the
//! engine time-slices its queues.
//!
//! Pure timekeeping: this module never touches memory or decodes packets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::engine::lock;

/// Smallest piece a throttled copy moves between rate checks.
pub(crate) const THROTTLE_CHUNK: u64 = 64 << 10;

/// The engine's schedule: when its next piece of work may start.
#[derive(Debug, Default)]
pub(crate) struct EngineClock {
    next: Mutex<Option<Instant>>,
}

impl EngineClock {
    /// Longest single sleep, so a bandwidth change takes effect promptly.
    const SLICE: Duration = Duration::from_millis(10);

    /// Holds the schedule's lock (see [`crate::Sim::hold_for_fork`]).
    pub(crate) fn hold(&self) -> MutexGuard<'_, Option<Instant>> {
        lock(&self.next)
    }

    /// Forgets the schedule (a new limit starts from now).
    pub(crate) fn reset(&self) {
        *lock(&self.next) = None;
    }

    /// Accounts `bytes` moved on this engine at `bandwidth` bytes/s (0:
    /// unlimited) and sleeps until the engine's schedule reaches the end of
    /// this piece. Pieces of concurrent streams queue behind each other, so
    /// the engine's total rate is `bandwidth` however many streams share
    /// it. Setting the bandwidth to unlimited ends a pending wait.
    pub(crate) fn account(&self, bytes: u64, bandwidth: &AtomicU64) {
        let rate = bandwidth.load(Ordering::Relaxed);
        if rate == 0 || bytes == 0 {
            *lock(&self.next) = None;
            return;
        }
        let Some(deadline) = reserve(&mut lock(&self.next), Instant::now(), bytes, rate) else {
            return;
        };
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if left.is_zero() || bandwidth.load(Ordering::Relaxed) != rate {
                break;
            }
            std::thread::sleep(left.min(Self::SLICE));
        }
    }
}

/// Books `bytes` at `rate` bytes per second after the running deadline
/// `next` (or `now`), moves `next` past them and returns it: the time
/// before which the piece after them may not start. Oversleeping is made
/// up by the next piece (the long-run rate holds), but a backlog older than
/// one slice (an idle engine, a pause, a slow host) is dropped.
fn reserve(next: &mut Option<Instant>, now: Instant, bytes: u64, rate: u64) -> Option<Instant> {
    let start = match *next {
        Some(n) if n + EngineClock::SLICE >= now => n,
        _ => now,
    };
    let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate.max(1));
    let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
    *next = start.checked_add(wait);
    *next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_streams_share_one_engine() {
        let clock = std::sync::Arc::new(EngineClock::default());
        let rate = std::sync::Arc::new(AtomicU64::new(64 << 20));
        let start = Instant::now();
        let streams: Vec<_> = (0..2)
            .map(|_| {
                let (clock, rate) = (clock.clone(), rate.clone());
                std::thread::spawn(move || {
                    for _ in 0..16 {
                        clock.account(THROTTLE_CHUNK, &rate);
                    }
                })
            })
            .collect();
        for s in streams {
            s.join().unwrap();
        }
        // 2 MiB at 64 MiB/s: 31 ms however the two streams interleave.
        assert!(
            start.elapsed() >= Duration::from_millis(28),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn unlimited_keeps_no_schedule() {
        let clock = EngineClock::default();
        clock.account(1 << 20, &AtomicU64::new(1 << 30));
        assert!(lock(&clock.next).is_some());
        clock.account(1 << 30, &AtomicU64::new(0));
        assert!(
            lock(&clock.next).is_none(),
            "an unlimited engine has no backlog"
        );
    }

    #[test]
    fn one_deadline_shared_by_two_rings_books_them_one_after_the_other() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        let mut next = None;
        // Two rings booking 1 MiB each at 1 MiB/s from the same moment: the
        // second may go on only when both had their second.
        assert_eq!(
            reserve(&mut next, now, 1 << 20, 1 << 20),
            Some(now + second)
        );
        assert_eq!(
            reserve(&mut next, now, 1 << 20, 1 << 20),
            Some(now + 2 * second)
        );
        // A ring's own deadline books only its own bytes.
        let mut own = None;
        assert_eq!(reserve(&mut own, now, 1 << 20, 1 << 20), Some(now + second));
    }

    #[test]
    fn a_backlog_older_than_a_slice_is_dropped() {
        let now = Instant::now();
        let mut next = Some(now);
        let later = now + 3 * EngineClock::SLICE;
        assert_eq!(
            reserve(&mut next, later, 1000, 1000),
            Some(later + Duration::from_secs(1))
        );
        // Within a slice the deadline carries on from where it was.
        let mut next = Some(now);
        let soon = now + EngineClock::SLICE / 2;
        assert_eq!(
            reserve(&mut next, soon, 1000, 1000),
            Some(now + Duration::from_secs(1))
        );
    }
}
