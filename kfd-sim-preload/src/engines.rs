//! The simulated GPU's engine settings the environment gives a preloaded
//! process: `KFD_SIM_SDMA_BANDWIDTH` (bytes per second of every SDMA
//! engine, with an optional K/M/G suffix, binary: copies then take the
//! time they would take at that rate, so they are still in flight when a
//! checkpoint comes) and `KFD_SIM_PACKET_TRACE` (any value: record the
//! packets user-mode queues execute, listed by `kfd_sim_preload_report`).
//!
//! Reads the environment only: this module never touches a device.

use kfd_sim::Sim;

/// Bytes per second of every SDMA engine of the machine (unset: unlimited).
pub const SDMA_BANDWIDTH_VAR: &str = "KFD_SIM_SDMA_BANDWIDTH";
/// Set to anything to record the packets queues execute.
pub const PACKET_TRACE_VAR: &str = "KFD_SIM_PACKET_TRACE";

/// `1048576`, `64M`, `1G`: bytes (K, M, G are powers of 1024).
fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, shift) = match t.as_bytes().last()? {
        b'K' | b'k' => (&t[..t.len() - 1], 10),
        b'M' | b'm' => (&t[..t.len() - 1], 20),
        b'G' | b'g' => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Applies the settings to `sim`; an unusable value is an error naming it.
pub(crate) fn configure(sim: &Sim) -> Result<(), String> {
    if let Some(v) = std::env::var_os(SDMA_BANDWIDTH_VAR) {
        let text = v.to_string_lossy();
        match parse_bytes(&text) {
            Some(rate) if rate > 0 => sim.set_sdma_bandwidth(Some(rate)),
            _ => {
                return Err(format!(
                    "{SDMA_BANDWIDTH_VAR}={text} is not a rate in bytes per second (like 64M)"
                ))
            }
        }
    }
    sim.trace_packets(std::env::var_os(PACKET_TRACE_VAR).is_some());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn rates() {
        assert_eq!(parse_bytes("64M"), Some(64 << 20));
        assert_eq!(parse_bytes("1g"), Some(1 << 30));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("fast"), None);
        assert_eq!(parse_bytes(""), None);
    }
}
