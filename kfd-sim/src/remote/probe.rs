//! Whether this process can serve remote clients here at all.

/// Whether this process can reach a child's memory the way the server
/// serves a remote client (`process_vm_readv`, which a seccomp filter or
/// Yama's `ptrace_scope` 2 or 3 may forbid); the reason when not. Tests of
/// the served machine ask first and skip, saying why, when it cannot.
pub fn child_memory_reachable() -> Result<(), String> {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start sleep(1): {e}"))?;
    let result = (|| {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id()))
            .map_err(|e| format!("/proc/PID/maps of a child: {e}"))?;
        let start = maps
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|p| p.starts_with('r'))
            })
            .and_then(|l| l.split('-').next())
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .ok_or("no readable mapping in a child")?;
        let pid = libc::pid_t::try_from(child.id()).map_err(|e| e.to_string())?;
        crate::kernel::remote_read(pid, start, &mut [0u8; 1])
            .map_err(|e| format!("process_vm_readv of a child: {e}"))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}
