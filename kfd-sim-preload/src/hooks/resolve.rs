//! Whether a path exists and what it resolves to: `access`, `faccessat`,
//! `readlink` and `realpath`, answered inside the simulator's tree for its
//! paths.

use std::ffi::{c_char, c_int};

use libc::size_t;

use super::{guarded, path_bytes, set_errno, target, Target};
use crate::real;

/// Interposes `access(2)`.
///
/// # Safety
/// The C `access` contract.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: forwarded contract.
    let pass = |p: *const c_char| unsafe { real::access(p, mode) };
    // SAFETY: `path` is a C string or null.
    let Some(p) = (unsafe { path_bytes(path) }) else {
        return pass(path);
    };
    guarded(
        || pass(path),
        -1,
        || match target(p) {
            Target::Host => pass(path),
            Target::Redirect(np) | Target::Hidden(np) => pass(np.as_ptr()),
            Target::Device(m, class) => match m.device_at(class) {
                Some(_) if mode & libc::X_OK == 0 => 0,
                Some(_) => {
                    set_errno(libc::EACCES);
                    -1
                }
                None => {
                    set_errno(libc::ENOENT);
                    -1
                }
            },
            Target::Fail(e) => {
                set_errno(e);
                -1
            }
        },
    )
}

/// Interposes `faccessat(2)` for absolute paths.
///
/// # Safety
/// The C `faccessat` contract.
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: `path` is a C string or null.
    match unsafe { path_bytes(path) } {
        // SAFETY: forwarded contract.
        Some(p) if p.to_bytes().starts_with(b"/") => unsafe { access(path, mode) },
        // SAFETY: forwarded contract.
        _ => unsafe { real::faccessat(dirfd, path, mode, flags) },
    }
}

/// Interposes `readlink(2)`.
///
/// # Safety
/// The C `readlink` contract.
#[no_mangle]
pub unsafe extern "C" fn readlink(
    path: *const c_char,
    buf: *mut c_char,
    len: size_t,
) -> libc::ssize_t {
    // SAFETY: forwarded contract.
    let pass = |p: *const c_char| unsafe { real::readlink(p, buf, len) };
    // SAFETY: `path` is a C string or null.
    let Some(p) = (unsafe { path_bytes(path) }) else {
        return pass(path);
    };
    guarded(
        || pass(path),
        -1,
        || match target(p) {
            Target::Host => pass(path),
            Target::Redirect(np) | Target::Hidden(np) => pass(np.as_ptr()),
            Target::Device(..) => {
                set_errno(libc::EINVAL);
                -1
            }
            Target::Fail(e) => {
                set_errno(e);
                -1
            }
        },
    )
}

/// `realpath(3)`: a simulated path resolves inside the simulator's tree
/// (callers take names from it, as libdrm takes the subsystem's).
///
/// # Safety
/// The `realpath` contract.
unsafe fn realpath_any(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: forwarded contract.
    let pass = |p: *const c_char| unsafe { real::realpath(p, resolved) };
    // SAFETY: `path` is a C string or null.
    let Some(p) = (unsafe { path_bytes(path) }) else {
        return pass(path);
    };
    guarded(
        || pass(path),
        std::ptr::null_mut(),
        || match target(p) {
            Target::Host => pass(path),
            Target::Redirect(np) | Target::Hidden(np) => pass(np.as_ptr()),
            Target::Device(..) => {
                let bytes = p.to_bytes_with_nul();
                let out = if resolved.is_null() {
                    // SAFETY: malloc returns a buffer of that size or null;
                    // the caller frees it, as with realpath's own.
                    unsafe { libc::malloc(bytes.len()) }.cast::<c_char>()
                } else {
                    resolved
                };
                if out.is_null() {
                    set_errno(libc::ENOMEM);
                    return out;
                }
                // SAFETY: `out` holds PATH_MAX bytes (caller's) or
                // `bytes.len()` (ours); a device path is far shorter than
                // PATH_MAX.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), out, bytes.len()) };
                out
            }
            Target::Fail(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        },
    )
}

/// Interposes `realpath(3)`.
///
/// # Safety
/// The C `realpath` contract.
#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    // SAFETY: forwarded contract.
    unsafe { realpath_any(path, resolved) }
}

/// Interposes `__realpath_chk` (the fortified `realpath`).
///
/// # Safety
/// The C `realpath` contract, `resolved` holding `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(
    path: *const c_char,
    resolved: *mut c_char,
    len: size_t,
) -> *mut c_char {
    if !resolved.is_null() && len < libc::PATH_MAX as size_t {
        // What glibc's own check does for a buffer smaller than PATH_MAX.
        // SAFETY: abort never returns.
        unsafe { libc::abort() };
    }
    // SAFETY: forwarded contract.
    unsafe { realpath_any(path, resolved) }
}
