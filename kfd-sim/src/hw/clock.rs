//! The clocks the hardware reads: a host clock in nanoseconds, from which
//! the GPU clock of GET_CLOCK_COUNTERS and of the queues' timestamp packets
//! is derived.

/// Nanoseconds of host clock `clock` (`CLOCK_MONOTONIC_RAW`,
/// `CLOCK_BOOTTIME`, ...).
pub(crate) fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
