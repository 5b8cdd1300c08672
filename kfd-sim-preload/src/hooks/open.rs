//! Opening files: `open`, `openat` and their fortified and 64-bit names,
//! `fopen` (a stream of a hidden topology file reads as amdkfd answers it)
//! and `opendir`. A simulated device path opens the simulator's device; a
//! simulated sysfs or procfs path opens the simulator's tree, read-only.

use std::ffi::{c_char, c_int, c_void};

use libc::{mode_t, size_t, DIR, FILE};

use super::{guarded, path_bytes, set_errno, target, Target};
use crate::real;

/// Whether open `flags` ask to write or create.
fn writes(flags: c_int) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0
}

/// `openat(2)` for every open variant.
///
/// # Safety
/// The `openat` contract.
unsafe fn open_any(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::openat(dirfd, path, flags, mode) };
    // SAFETY: `path` is a C string or null (the caller's contract).
    let Some(p) = (unsafe { path_bytes(path) }) else {
        return pass();
    };
    guarded(pass, -1, || match target(p) {
        Target::Host => pass(),
        // The simulated sysfs and procfs files are read-only, as the
        // kernel's topology attributes (0444) are.
        Target::Redirect(_)
            if writes(flags) && crate::shm::path_redirect(p.to_bytes()).is_none() =>
        {
            set_errno(libc::EACCES);
            -1
        }
        // SAFETY: `np` is a NUL-terminated path that outlives the call.
        Target::Redirect(np) => unsafe { real::openat(dirfd, np.as_ptr(), flags, mode) },
        // amdkfd fails the read; here the open fails, which readers of the
        // file alone (amdgpu-topology's parser) take alike. A directory
        // opens, as it lists. Streams read as the kernel answers
        // (`fopen_any`).
        Target::Hidden(np) if flags & libc::O_DIRECTORY != 0 => {
            // SAFETY: `np` is a NUL-terminated path that outlives the call.
            unsafe { real::openat(dirfd, np.as_ptr(), flags, mode) }
        }
        Target::Hidden(_) => {
            set_errno(libc::EPERM);
            -1
        }
        Target::Device(m, _) => m.open_device(p, flags).unwrap_or_else(|e| {
            set_errno(e);
            -1
        }),
        Target::Fail(e) => {
            set_errno(e);
            -1
        }
    })
}

/// Interposes `open(2)`.
///
/// # Safety
/// The C `open` contract.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { open_any(libc::AT_FDCWD, path, flags, mode) }
}

/// Interposes `open64`.
///
/// # Safety
/// The C `open64` contract.
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { open_any(libc::AT_FDCWD, path, flags, mode) }
}

/// Interposes `__open_2` (the fortified `open` without a mode).
///
/// # Safety
/// The C `open` contract.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { open_any(libc::AT_FDCWD, path, flags, 0) }
}

/// Interposes `__open64_2`.
///
/// # Safety
/// The C `open` contract.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { open_any(libc::AT_FDCWD, path, flags, 0) }
}

/// Interposes `openat(2)`.
///
/// # Safety
/// The C `openat` contract.
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { open_any(dirfd, path, flags, mode) }
}

/// Interposes `openat64`.
///
/// # Safety
/// The C `openat` contract.
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { open_any(dirfd, path, flags, mode) }
}

/// `fopen(3)` for both names.
///
/// # Safety
/// The `fopen` contract.
unsafe fn fopen_any(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::fopen(path, mode) };
    // SAFETY: `path` is a C string or null.
    let Some(p) = (unsafe { path_bytes(path) }) else {
        return pass();
    };
    // SAFETY: `mode` is a C string or null (the caller's contract).
    let writing = unsafe { path_bytes(mode) }
        .is_some_and(|m| m.to_bytes().iter().any(|c| matches!(c, b'w' | b'a' | b'+')));
    guarded(pass, std::ptr::null_mut(), || match target(p) {
        Target::Host => pass(),
        Target::Redirect(_) if writing && crate::shm::path_redirect(p.to_bytes()).is_none() => {
            set_errno(libc::EACCES);
            std::ptr::null_mut()
        }
        // SAFETY: `np` is a NUL-terminated path that outlives the call.
        Target::Redirect(np) => unsafe { real::fopen(np.as_ptr(), mode) },
        Target::Hidden(_) if writing => {
            set_errno(libc::EACCES);
            std::ptr::null_mut()
        }
        // The stream opens and every read fails with EPERM, as amdkfd
        // answers a reader its device cgroup denies the GPU (libhsakmt then
        // skips the node).
        Target::Hidden(_) => eperm_stream(mode),
        // No user space streams a device file; refuse rather than open a
        // real device.
        Target::Device(..) => {
            set_errno(libc::EACCES);
            std::ptr::null_mut()
        }
        Target::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// glibc's `cookie_io_functions_t` (`<stdio.h>`, `_GNU_SOURCE`).
#[repr(C)]
struct CookieIo {
    read: Option<extern "C" fn(*mut c_void, *mut c_char, size_t) -> libc::ssize_t>,
    write: Option<extern "C" fn(*mut c_void, *const c_char, size_t) -> libc::ssize_t>,
    seek: Option<extern "C" fn(*mut c_void, *mut libc::off64_t, c_int) -> c_int>,
    close: Option<extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    /// glibc's `fopencookie(3)`: a stream whose I/O `io` performs.
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

/// A stream whose every read fails with `EPERM` (`fopencookie`).
fn eperm_stream(mode: *const c_char) -> *mut FILE {
    extern "C" fn read(_: *mut c_void, _: *mut c_char, _: size_t) -> libc::ssize_t {
        set_errno(libc::EPERM);
        -1
    }
    extern "C" fn close(_: *mut c_void) -> c_int {
        0
    }
    let io = CookieIo {
        read: Some(read),
        write: None,
        seek: None,
        close: Some(close),
    };
    // SAFETY: `mode` is the caller's C string (fopen's contract); the
    // cookie is never dereferenced (the functions ignore it) and the
    // functions are plain `extern "C"` ones that live for the program.
    unsafe { fopencookie(std::ptr::null_mut(), mode, io) }
}

/// Interposes `fopen(3)`.
///
/// # Safety
/// The C `fopen` contract.
#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: forwarded contract.
    unsafe { fopen_any(path, mode) }
}

/// Interposes `fopen64`.
///
/// # Safety
/// The C `fopen` contract.
#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: forwarded contract.
    unsafe { fopen_any(path, mode) }
}

/// Interposes `opendir(3)`.
///
/// # Safety
/// The C `opendir` contract.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::opendir(path) };
    // SAFETY: `path` is a C string or null.
    let Some(p) = (unsafe { path_bytes(path) }) else {
        return pass();
    };
    guarded(pass, std::ptr::null_mut(), || match target(p) {
        Target::Host => pass(),
        // SAFETY: `np` is a NUL-terminated path that outlives the call.
        Target::Redirect(np) | Target::Hidden(np) => unsafe { real::opendir(np.as_ptr()) },
        Target::Device(..) => {
            set_errno(libc::ENOTDIR);
            std::ptr::null_mut()
        }
        Target::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}
