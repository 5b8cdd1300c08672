//! `kfd_sim_preload_checkpoint`: CRIU (the host emulator, with this
//! project's plugin) checkpoints the GPU state AMD's code built in this
//! process, restores it as a new simulated process on a renumbered copy of
//! the machine, and checkpoints the restored process again, so a test can
//! compare the two image sets: what the kernel held for the thunk's process
//! and what it holds for the restored one.
//!
//! Runs in the process the thunk runs in, because the machine lives there;
//! everything it does goes to the simulator through [`kfd::Driver`] or to
//! files in the given directories, never through the hooks.

use std::ffi::{c_char, c_int, CStr};
use std::fmt::Write;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};

use criu_host_emulator::{CriuEmulator, DeviceVma, EmulatorConfig, TaskFile};
use std::os::unix::ffi::OsStrExt;

use kfd_sim::{Sim, SimConfig, KFD_MAJOR};

use crate::machine::Machine;

/// CRIU's file id for the process's `/dev/kfd`; render nodes follow in fd
/// order, as in the emulator's own scenarios.
pub const KFD_FILE_ID: u32 = 1;

/// Picks the renumbering (`amdgpu_topology::renumbered`'s seed); default
/// [`DEFAULT_RENUMBER_SEED`].
pub const RENUMBER_SEED_VAR: &str = "KFD_SIM_PRELOAD_RENUMBER_SEED";
/// The renumbering used unless [`RENUMBER_SEED_VAR`] says otherwise.
pub const DEFAULT_RENUMBER_SEED: u64 = 1;

/// The process's simulated device fds in ascending fd order, `/dev/kfd`
/// first (CRIU dumps the KFD file before the render nodes).
fn device_fds(m: &Machine) -> Result<Vec<RawFd>, String> {
    let mut fds: Vec<(bool, RawFd)> = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("listing /proc/self/fd: {e}"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
        .filter_map(|fd| {
            let node = m.device_of(fd)?;
            Some((node.major != KFD_MAJOR, fd))
        })
        .collect();
    fds.sort_unstable();
    // One file per device: a dup of the same open file is one file to CRIU.
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (_, fd) in fds {
        let key = crate::machine::file_key(fd).ok_or("an fd vanished while listing")?;
        if !seen.contains(&key) {
            seen.push(key);
            out.push(fd);
        }
    }
    if out.is_empty() {
        return Err("the process has no simulated device open".into());
    }
    Ok(out)
}

pub(crate) fn state_line(out: &mut String, what: &str, sim: &Sim, pid: kfd_sim::Pid) {
    match sim.kfd_state(pid) {
        Some(s) => {
            let _ = writeln!(
                out,
                "checkpoint state={what} bos={} queues={} events={} paused={} gpu_ids={}",
                s.bos,
                s.queues,
                s.events,
                u8::from(s.queues_paused),
                s.gpu_ids
                    .iter()
                    .map(|(user, actual)| format!("{user}:{actual}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
        }
        None => {
            let _ = writeln!(out, "checkpoint state={what} none");
        }
    }
}

/// Checks that the process's machine may be checkpointed here.
pub(crate) fn may_checkpoint(m: &Machine) -> Result<(), String> {
    if m.remote.is_some() {
        return Err(format!(
            "{} is set: the served machine's owner checkpoints its processes",
            crate::machine::REMOTE_VAR
        ));
    }
    if std::env::var_os(crate::shm::SHM_DIR_VAR).is_none() {
        return Err("KFD_SIM_SHM_DIR is not set: the host's /dev/shm is never used".into());
    }
    Ok(())
}

/// The plugin sees /dev/shm, as on a real host; the interposer routes the
/// thunk's objects there to the private directory
/// (crate::shm::path_redirect), and the restore's to its own.
const DEV_SHM: &str = "/dev/shm";

/// CRIU (the emulator with the plugin) dumps this process into `first`;
/// the CRIU ids of its device files, in order.
pub(crate) fn dump_here(m: &Machine, first: &Path, out: &mut String) -> Result<Vec<u32>, String> {
    let pid = m.driver().pid();
    let fds = device_fds(m)?;
    // SAFETY: the fds are open for the duration of the dump (this process
    // holds them and nothing closes them while the thunk is blocked in
    // this call).
    let borrowed: Vec<BorrowedFd<'_>> = fds
        .iter()
        .map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) })
        .collect();
    let files: Vec<TaskFile<'_>> = borrowed
        .iter()
        .zip(KFD_FILE_ID..)
        .map(|(fd, id)| TaskFile { fd: *fd, id })
        .collect();
    let ids: Vec<u32> = files.iter().map(|f| f.id).collect();
    let _ = writeln!(out, "checkpoint files={}", files.len());
    state_line(out, "before", &m.sim, pid);
    let dump = CriuEmulator::new(
        m.sim.clone(),
        first,
        EmulatorConfig::new(Path::new(DEV_SHM)),
    );
    let report =
        crate::hooks::routed(|| dump.dump(pid, &files, &DeviceVma::offered_at_dump(&m.sim)))
            .map_err(|e| format!("dump: {e}"))?;
    let _ = writeln!(out, "checkpoint step=dump late={:?}", report.late_answer);
    state_line(out, "after-dump", &m.sim, pid);
    Ok(ids)
}

/// A copy of this process's machine as another host numbers it
/// (`KFD_SIM_PRELOAD_RENUMBER_SEED`), with the same engine settings.
pub(crate) fn renumbered_machine(m: &Machine, out: &mut String) -> Result<Sim, String> {
    let seed = match std::env::var(RENUMBER_SEED_VAR) {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("{RENUMBER_SEED_VAR}={v} is not a number"))?,
        Err(_) => DEFAULT_RENUMBER_SEED,
    };
    let system = amdgpu_topology::renumbered(m.sim.topology(), seed);
    let other =
        Sim::new(system, SimConfig::default()).map_err(|e| format!("renumbered machine: {e}"))?;
    crate::engines::configure(&other)?;
    for (a, b) in m.sim.gpus().iter().zip(other.gpus()) {
        let _ = writeln!(
            out,
            "checkpoint machine node={} gpu_id={} renumbered_gpu_id={}",
            a.node_id, a.gpu_id, b.gpu_id
        );
    }
    Ok(other)
}

/// The KFD image of the dump in `first`.
pub(crate) fn read_kfd_image(first: &Path) -> Result<amdgpu_image::CriuKfd, String> {
    let store = amdgpu_image::DirStore::open_dir(first).map_err(|e| e.to_string())?;
    let name = amdgpu_image::ImageName::Kfd { id: KFD_FILE_ID };
    amdgpu_image::ImageStore::read_message::<amdgpu_image::CriuKfd>(
        &store,
        &name,
        amdgpu_image::ReadLimits::default(),
    )
    .map_err(|e| format!("reading {name}: {e}"))?
    .ok_or_else(|| format!("the dump wrote no {name}"))
}

/// Restores the dump in `first` on `other` as process `pid`, with
/// `restore_shm` standing for that host's /dev/shm (empty: the plugin
/// recreates the thunk's objects there).
pub(crate) fn restore_there(
    other: &Sim,
    pid: kfd_sim::Pid,
    first: &Path,
    ids: &[u32],
    restore_shm: &Path,
    out: &mut String,
) -> Result<criu_host_emulator::RestoredTask, String> {
    let image = read_kfd_image(first)?;
    let restore = CriuEmulator::new(
        other.clone(),
        first,
        EmulatorConfig::new(Path::new(DEV_SHM)),
    );
    let thunk_shm = crate::shm::set_dir(Some(restore_shm.to_path_buf()));
    let restored =
        crate::hooks::routed(|| restore.restore(pid, ids, &DeviceVma::of_kfd_image(&image)));
    crate::shm::set_dir(thunk_shm);
    let task = restored.map_err(|e| format!("restore on the renumbered machine: {e}"))?;
    let _ = writeln!(out, "checkpoint step=restore resume={}", task.resume_answer);
    state_line(out, "restored", other, pid);
    Ok(task)
}

/// The run: dump into `first`, restore on the renumbered machine with
/// `restore_shm` as its /dev/shm, dump again into `second`.
fn run(m: &Machine, first: &Path, second: &Path, restore_shm: &Path) -> Result<String, String> {
    let mut out = String::new();
    let pid = m.driver().pid();
    may_checkpoint(m)?;
    let ids = dump_here(m, first, &mut out)?;
    let other = renumbered_machine(m, &mut out)?;
    let task = restore_there(&other, pid, first, &ids, restore_shm, &mut out)?;
    let again: Vec<TaskFile<'_>> = task
        .files
        .iter()
        .map(|(id, fd)| TaskFile {
            fd: fd.as_fd(),
            id: *id,
        })
        .collect();
    let redump = CriuEmulator::new(
        other.clone(),
        second,
        EmulatorConfig::new(Path::new(DEV_SHM)),
    );
    let thunk_shm = crate::shm::set_dir(Some(restore_shm.to_path_buf()));
    let redumped =
        crate::hooks::routed(|| redump.dump(pid, &again, &DeviceVma::offered_at_dump(&other)));
    crate::shm::set_dir(thunk_shm);
    redumped.map_err(|e| format!("second dump on the renumbered machine: {e}"))?;
    let _ = writeln!(out, "checkpoint step=redump");
    drop(task);
    other
        .exit_process(pid)
        .map_err(|e| format!("ending the restored process: {e}"))?;
    Ok(out)
}

/// Checkpoints this process's simulated GPU state into `first`, restores
/// it on a renumbered copy of the machine (with `restore_shm` standing for
/// that host's /dev/shm) and checkpoints the restored process into
/// `second`. Writes `checkpoint ...` lines to `fd`; returns 0, or -1 after
/// a `checkpoint error=...` line.
///
/// # Safety
/// The three arguments are NUL-terminated paths; `fd` is writable.
#[no_mangle]
pub unsafe extern "C" fn kfd_sim_preload_checkpoint(
    first: *const c_char,
    second: *const c_char,
    restore_shm: *const c_char,
    fd: c_int,
) -> c_int {
    crate::hooks::run_guarded(-1, || {
        // SAFETY: the caller passes NUL-terminated paths (or null).
        let paths = unsafe { (c_path(first), c_path(second), c_path(restore_shm)) };
        let outcome = match (crate::machine::existing(), paths) {
            (Some(m), (Some(a), Some(b), Some(s))) => run(m, &a, &b, &s),
            (None, _) => Err("no simulated machine".into()),
            _ => Err("null path".into()),
        };
        answer(fd, outcome)
    })
}

/// The path a C string names (`None` for null).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn c_path(p: *const c_char) -> Option<PathBuf> {
    // SAFETY: the caller's promise.
    let s = (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(s.to_bytes())))
}

/// Writes a run's lines to `fd`, or a `checkpoint error=...` line for its
/// failure (whitespace turned into `_`): 0, or -1 after an error.
pub(crate) fn answer(fd: c_int, outcome: Result<String, String>) -> c_int {
    let (text, code) = match outcome {
        Ok(text) => (text, 0),
        Err(e) => (
            format!("checkpoint error={}\n", e.replace(char::is_whitespace, "_")),
            -1,
        ),
    };
    crate::hooks::write_all(fd, text.as_bytes());
    code
}
