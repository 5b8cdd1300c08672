//! `kfd_sim_preload_checkpoint_busy`: a checkpoint of this process taken
//! while its GPU queues have work in flight, restored on a renumbered copy
//! of the machine, where the restored queues finish that work; then this
//! process goes on and finishes it too, so the caller can compare the two
//! ends.
//!
//! The restored process lives in this host process with this process's
//! memory (its USERPTR BOs point at the same pages), so the two must not
//! run at once: the kernel's own eviction (`Sim::evict_queues`) holds this
//! process's queues still while CRIU dumps it and while the restored queues
//! run, and is taken back however that ends, a panic included
//! ([`with_queues_held`]); what the restored run wrote into the shared
//! memory is put back as it was at the checkpoint before this process's
//! queues are let go, so each run sees only its own writes. Everything goes
//! to the simulator through its API or to files; nothing passes the hooks.

use std::ffi::{c_char, c_int, c_void};
use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

use crate::checkpoint::{
    answer, c_path, dump_here, may_checkpoint, read_kfd_image, renumbered_machine, restore_there,
};
use crate::machine::Machine;
use kfd_sim::{Pid, Sim};

/// How long the restored queues may take to finish what the checkpoint
/// left in their rings.
const SETTLE_BOUND: Duration = Duration::from_secs(60);

/// FNV-1a, as the probes hash their buffers.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Reads or writes this process's own memory without trusting it to be
/// mapped (`process_vm_readv`/`writev` on our pid): `None` when it is not.
fn own_memory(addr: u64, len: usize, write: Option<&[u8]>) -> Option<Vec<u8>> {
    let mut buf = match write {
        Some(data) => data.to_vec(),
        None => vec![0u8; len],
    };
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut c_void,
        iov_len: len,
    };
    // SAFETY: `local` is our buffer of `len` bytes; the kernel checks the
    // remote range against our own mappings and fails rather than fault.
    let n = unsafe {
        let me = libc::getpid();
        if write.is_some() {
            libc::process_vm_writev(me, &local, 1, &remote, 1, 0)
        } else {
            libc::process_vm_readv(me, &local, 1, &remote, 1, 0)
        }
    };
    (n == len as isize).then_some(buf)
}

/// One eviction level on `pid`'s queues, held while the value lives:
/// dropping it takes the level back, on every way out of the scope that
/// holds it (a panic's unwinding included).
struct HeldQueues<'a> {
    sim: &'a Sim,
    pid: Pid,
    held: bool,
}

impl<'a> HeldQueues<'a> {
    fn hold(sim: &'a Sim, pid: Pid) -> Result<HeldQueues<'a>, String> {
        sim.evict_queues(pid)
            .map_err(|e| format!("holding the queues: {e}"))?;
        Ok(HeldQueues {
            sim,
            pid,
            held: true,
        })
    }

    /// Takes the level back, saying whether that worked.
    fn release(mut self) -> Result<(), String> {
        self.held = false;
        self.sim
            .restore_queues(self.pid)
            .map_err(|e| format!("letting the queues go: {e}"))
    }
}

impl Drop for HeldQueues<'_> {
    fn drop(&mut self) {
        if self.held {
            let _ = self.sim.restore_queues(self.pid);
        }
    }
}

/// Runs `body` with `pid`'s queues held still by a kernel eviction level,
/// taken back however `body` ends: its result, or the failure to let the
/// queues go.
fn with_queues_held<T>(
    sim: &Sim,
    pid: Pid,
    body: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let held = HeldQueues::hold(sim, pid)?;
    let result = body();
    held.release()?;
    result
}

fn run(
    m: &Machine,
    first: &Path,
    restore_shm: &Path,
    ranges: &[(u64, usize)],
) -> Result<String, String> {
    may_checkpoint(m)?;
    let pid = m.driver().pid();
    let mut out = String::new();
    with_queues_held(&m.sim, pid, || {
        let ids = dump_here(m, first, &mut out)?;
        let image = read_kfd_image(first)?;
        let devices = image
            .device_entries
            .iter()
            .filter(|d| d.gpu_id != 0)
            .count();
        let queues = kfd_sim::saved_queues(
            &image.priv_data,
            devices,
            image.bo_entries.len(),
            image.num_of_objects as usize,
            m.sim.config().max_gpu_instance,
        )?;
        for q in &queues {
            let _ = writeln!(
                out,
                "busy saved queue={} type={} rptr={} wptr={} mid_ring={}",
                q.queue_id,
                q.queue_type,
                q.read_pointer,
                q.write_pointer,
                u8::from(q.mid_ring())
            );
        }
        // The memory both runs share: every USERPTR BO's pages, as at the
        // checkpoint.
        let userptr = amdgpu_image::flags::KFD_USERPTR;
        let mut saved = Vec::new();
        for bo in image
            .bo_entries
            .iter()
            .filter(|b| b.alloc_flags & userptr != 0)
        {
            let Ok(len) = usize::try_from(bo.size) else {
                continue;
            };
            let addr = bo.addr;
            if let Some(bytes) = own_memory(addr, len, None) {
                saved.push((addr, bytes));
            }
        }
        let other = renumbered_machine(m, &mut out)?;
        let task = restore_there(&other, pid, first, &ids, restore_shm, &mut out)?;
        let settled = other.wait_queues_settled(pid, SETTLE_BOUND);
        for (q, s) in other.queue_statuses(pid) {
            let _ = writeln!(
                out,
                "busy restored queue={q} rptr={} wptr={} settled={}",
                s.read_pointer,
                s.write_pointer,
                u8::from(s.settled())
            );
        }
        if let Err(busy) = &settled {
            let _ = writeln!(
                out,
                "busy error=restored_queues_did_not_settle count={}",
                busy.len()
            );
        }
        // What the restored run produced: each range as the restored GPUs
        // see it.
        let gpus: Vec<u32> = image
            .device_entries
            .iter()
            .map(|d| d.gpu_id)
            .filter(|&g| g != 0)
            .collect();
        for (i, &(addr, len)) in ranges.iter().enumerate() {
            let bytes = gpus
                .iter()
                .find_map(|&g| other.read_gpu_memory(pid, g, addr, len));
            match bytes {
                Some(b) => {
                    let value = (len >= 16)
                        .then(|| i64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8])));
                    let _ = writeln!(
                        out,
                        "busy range={i} hash={:016x} value={}",
                        fnv(&b),
                        value.map_or("-".to_owned(), |v| v.to_string())
                    );
                }
                None => {
                    let _ = writeln!(out, "busy range={i} unmapped=1");
                }
            }
        }
        drop(task);
        other
            .exit_process(pid)
            .map_err(|e| format!("ending the restored process: {e}"))?;
        // The restored run's writes go; this process goes on from the
        // checkpoint's memory.
        for (addr, bytes) in &saved {
            own_memory(*addr, bytes.len(), Some(bytes));
        }
        let _ = writeln!(out, "busy step=restored-run-undone");
        Ok::<(), String>(())
    })?;
    Ok(out)
}

/// Checkpoints this process while its queues are busy into `first`,
/// restores it on a renumbered copy of the machine (`restore_shm` standing
/// for that host's /dev/shm), lets the restored queues finish their rings
/// and reports, per `(ranges[i], lens[i])` (GPU VAs), the hash of what the
/// restored run left there (and, for ranges of 16 to 64 bytes, the 64-bit
/// value at byte 8: a signal's value); then undoes the restored
/// run's writes to the memory both share and lets this process's queues
/// run on. Writes `checkpoint ...` and `busy ...` lines to `fd`; returns 0,
/// or -1 after a `checkpoint error=...` line.
///
/// # Safety
/// The paths are NUL-terminated; `ranges` and `lens` hold `n` entries;
/// `fd` is writable.
#[no_mangle]
pub unsafe extern "C" fn kfd_sim_preload_checkpoint_busy(
    first: *const c_char,
    _second: *const c_char,
    restore_shm: *const c_char,
    ranges: *const *const c_void,
    lens: *const usize,
    n: c_int,
    fd: c_int,
) -> c_int {
    let n = usize::try_from(n).unwrap_or(0).min(64);
    let list: Vec<(u64, usize)> = if ranges.is_null() || lens.is_null() {
        Vec::new()
    } else {
        // SAFETY: the caller guarantees `n` entries in both arrays.
        (0..n)
            .map(|i| unsafe { (*ranges.add(i) as u64, *lens.add(i)) })
            .collect()
    };
    crate::hooks::run_guarded(-1, || {
        // SAFETY: the caller passes NUL-terminated paths (or null).
        let paths = unsafe { (c_path(first), c_path(restore_shm)) };
        let outcome = match (crate::machine::existing(), paths) {
            (Some(m), (Some(a), Some(s))) => run(m, &a, &s, &list),
            (None, _) => Err("no simulated machine".into()),
            _ => Err("null path".into()),
        };
        answer(fd, outcome)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kfd_sim::workload::{Profile, Workload};
    use kfd_sim::SimConfig;

    #[test]
    fn the_queues_are_let_go_however_the_held_run_ends() {
        let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
        let w = Workload::launch(&sim, &Profile::Basic).unwrap();
        let pid = w.pid();
        let levels = || sim.kfd_state(pid).unwrap().eviction_levels;
        let before = levels();
        assert!(sim.kfd_state(pid).unwrap().queues_running());

        let failed = with_queues_held(&sim, pid, || -> Result<(), String> {
            assert_ne!(levels(), before, "held while the body runs");
            Err("a failed dump".into())
        });
        assert_eq!(failed, Err("a failed dump".into()));
        assert_eq!(levels(), before, "let go after an error");

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_queues_held(&sim, pid, || -> Result<(), String> {
                panic!("a bug while the queues are held")
            })
        }));
        assert!(panicked.is_err());
        assert_eq!(levels(), before, "let go after a panic");
        assert!(sim.kfd_state(pid).unwrap().queues_running());
    }
}
