//! The time an SDMA engine's copies take: one [`EngineClock`] per engine,
//! shared by everything that moves bytes on it (the kernel ring the DRM
//! half submits to and the user-mode queues KFD places on that engine), so
//! two streams on one engine each get a share of its bandwidth, as the
//! engine time-slices its queues.
//!
//! Pure timekeeping: this module never touches memory or decodes packets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
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
        let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate);
        let wait = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        let deadline = {
            let mut next = lock(&self.next);
            let now = Instant::now();
            // Keep the long-run rate: oversleeping is made up by the next
            // piece, but a backlog older than one slice (an idle engine, a
            // pause, a slow host) is dropped.
            let start = match *next {
                Some(n) if n + Self::SLICE >= now => n,
                _ => now,
            };
            let Some(end) = start.checked_add(wait) else {
                *next = None;
                return;
            };
            *next = Some(end);
            end
        };
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if left.is_zero() || bandwidth.load(Ordering::Relaxed) != rate {
                break;
            }
            std::thread::sleep(left.min(Self::SLICE));
        }
    }
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
}
