//! `KFD_SIM_SHM_DIR`: a private stand-in for `/dev/shm`.
//!
//! The thunk creates a POSIX shared-memory object (`hsakmt_shared_mem`)
//! and a named semaphore (`hsakmt_semaphore`) in `hsaKmtOpenKFD` and never
//! removes them; CRIU's plugin records the first and recreates both at
//! restore. With `KFD_SIM_SHM_DIR` set, `shm_open`/`shm_unlink` and
//! `sem_open`/`sem_close`/`sem_unlink` use files in that directory exactly
//! as glibc uses `/dev/shm` (`<dir>/<name>` and `<dir>/sem.<name>`, a
//! process-shared `sem_t` mapped from the file), so a test neither leaves
//! objects in the host's `/dev/shm` nor meets another run's. Unset, the
//! calls go to the C library untouched.
//!
//! CRIU's amdgpu plugin (the C one, and this project's) reaches the same
//! two objects by path (`/dev/shm/hsakmt_shared_mem`,
//! `/dev/shm/sem.hsakmt_semaphore`): with the directory set, opens of those
//! two paths go there too ([`path_redirect`]). A checkpoint run restores
//! "on another host" by pointing the directory elsewhere for the restore
//! ([`set_dir`]).

use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Mutex;

use libc::{mode_t, sem_t};

/// The variable naming the directory.
pub const SHM_DIR_VAR: &str = "KFD_SIM_SHM_DIR";

/// The directory: `KFD_SIM_SHM_DIR` until [`set_dir`] changes it.
static DIR: Mutex<Option<Option<PathBuf>>> = Mutex::new(None);

fn dir() -> Option<PathBuf> {
    let mut d = DIR.lock().unwrap_or_else(|e| e.into_inner());
    d.get_or_insert_with(|| std::env::var_os(SHM_DIR_VAR).map(PathBuf::from))
        .clone()
}

/// Points the private /dev/shm at `dir`; returns the previous one.
pub(crate) fn set_dir(dir_now: Option<PathBuf>) -> Option<PathBuf> {
    let previous = dir();
    *DIR.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir_now);
    previous
}

/// The objects CRIU's amdgpu plugin opens by path in /dev/shm.
const PLUGIN_PATHS: [&[u8]; 2] = [
    b"/dev/shm/hsakmt_shared_mem",
    b"/dev/shm/sem.hsakmt_semaphore",
];

/// Where an open of `path` goes when it is one of [`PLUGIN_PATHS`] and the
/// private directory is set.
pub(crate) fn path_redirect(path: &[u8]) -> Option<CString> {
    if !PLUGIN_PATHS.contains(&path) {
        return None;
    }
    let name = &path[b"/dev/shm/".len()..];
    let mut p = dir()?.into_os_string().into_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    CString::new(p).ok()
}

/// Semaphores this module mapped (address), for `sem_close`.
static SEMS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// This module's locks held (see [`crate::fork`]).
pub(crate) type ShmHold = (
    std::sync::MutexGuard<'static, Option<Option<PathBuf>>>,
    std::sync::MutexGuard<'static, Vec<usize>>,
);

/// Holds this module's locks until the result is dropped.
pub(crate) fn hold() -> ShmHold {
    (
        DIR.lock().unwrap_or_else(|e| e.into_inner()),
        SEMS.lock().unwrap_or_else(|e| e.into_inner()),
    )
}

/// `<dir>/<prefix><name without its leading '/'>`, `None` when the
/// directory is not set or the name is not a single path component.
fn path_for(name: &CStr, prefix: &str) -> Option<Result<CString, c_int>> {
    let dir = dir()?;
    let bytes = name.to_bytes();
    let bare = bytes.strip_prefix(b"/").unwrap_or(bytes);
    if bare.is_empty() || bare.contains(&b'/') {
        return Some(Err(libc::EINVAL));
    }
    let mut p = dir.as_os_str().as_bytes().to_vec();
    p.push(b'/');
    p.extend_from_slice(prefix.as_bytes());
    p.extend_from_slice(bare);
    Some(CString::new(p).map_err(|_| libc::EINVAL))
}

/// `shm_open` in the directory; `None`: not ours.
pub(crate) fn shm_open(name: &CStr, oflag: c_int, mode: mode_t) -> Option<Result<c_int, c_int>> {
    let path = match path_for(name, "")? {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    let flags = oflag | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `path` is a NUL-terminated path.
    let fd = unsafe { crate::real::openat(libc::AT_FDCWD, path.as_ptr(), flags, mode) };
    Some(if fd < 0 { Err(errno()) } else { Ok(fd) })
}

/// `shm_unlink` in the directory; `None`: not ours.
pub(crate) fn shm_unlink(name: &CStr) -> Option<Result<(), c_int>> {
    Some(unlink(path_for(name, "")?))
}

/// `sem_unlink` in the directory; `None`: not ours.
pub(crate) fn sem_unlink(name: &CStr) -> Option<Result<(), c_int>> {
    Some(unlink(path_for(name, "sem.")?))
}

fn unlink(path: Result<CString, c_int>) -> Result<(), c_int> {
    let path = path?;
    // SAFETY: `path` is a NUL-terminated path.
    if unsafe { libc::unlink(path.as_ptr()) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `sem_open` in the directory, as glibc does it in `/dev/shm`; `None`:
/// not ours.
pub(crate) fn sem_open(
    name: &CStr,
    oflag: c_int,
    mode: mode_t,
    value: c_uint,
) -> Option<Result<*mut sem_t, c_int>> {
    let path = match path_for(name, "sem.")? {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    Some(open_sem(&path, oflag, mode, value))
}

fn open_sem(path: &CStr, oflag: c_int, mode: mode_t, value: c_uint) -> Result<*mut sem_t, c_int> {
    let size = std::mem::size_of::<sem_t>();
    let create = oflag & libc::O_CREAT != 0;
    let mut flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    if create {
        flags |= libc::O_CREAT | (oflag & libc::O_EXCL);
    }
    // SAFETY: `path` is a NUL-terminated path.
    let fd = unsafe { crate::real::openat(libc::AT_FDCWD, path.as_ptr(), flags, mode) };
    if fd < 0 {
        return Err(errno());
    }
    let result = (|| {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is writable and of fstat's size; `fd` is open.
        if unsafe { crate::real::fstat(fd, st.as_mut_ptr()) } < 0 {
            return Err(errno());
        }
        // SAFETY: fstat succeeded.
        let fresh = unsafe { st.assume_init() }.st_size == 0;
        if fresh {
            // SAFETY: `fd` is open for writing.
            if unsafe { libc::ftruncate(fd, size as libc::off_t) } < 0 {
                return Err(errno());
            }
        }
        // SAFETY: maps `size` bytes of the file just sized; the kernel
        // picks the address.
        let p = unsafe {
            crate::real::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        let sem = p.cast::<sem_t>();
        if fresh {
            // SAFETY: `sem` is a writable, process-shared mapping of a
            // sem_t's size; sem_init with pshared 1 is what glibc's
            // sem_open writes into a new file.
            if unsafe { libc::sem_init(sem, 1, value) } < 0 {
                let e = errno();
                // SAFETY: unmaps the mapping made above.
                unsafe { crate::real::munmap(p, size) };
                return Err(e);
            }
        }
        SEMS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sem as usize);
        Ok(sem)
    })();
    // SAFETY: `fd` is ours; the mapping keeps the file.
    unsafe { libc::close(fd) };
    result
}

/// `sem_close` of a semaphore this module opened; `None`: not ours.
pub(crate) fn sem_close(sem: *mut sem_t) -> Option<Result<(), c_int>> {
    let mut sems = SEMS.lock().unwrap_or_else(|e| e.into_inner());
    let at = sems.iter().position(|&s| s == sem as usize)?;
    sems.swap_remove(at);
    // SAFETY: `sem` is a mapping of a sem_t's size made by `open_sem`.
    let ret = unsafe { crate::real::munmap(sem.cast(), std::mem::size_of::<sem_t>()) };
    Some(if ret < 0 { Err(errno()) } else { Ok(()) })
}

/// The hooks' view: a C name or null.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
pub(crate) unsafe fn name<'a>(name: *const c_char) -> Option<&'a CStr> {
    // SAFETY: the caller's contract.
    (!name.is_null()).then(|| unsafe { CStr::from_ptr(name) })
}
