//! POSIX shared memory and named semaphores (`shm_open`, `sem_open` and
//! their unlink and close), which the `shm` module keeps apart per
//! simulated machine.

use std::ffi::{c_char, c_int};

use libc::mode_t;

use super::{guarded, set_errno};
use crate::real;

/// Maps a `Result` of the shm module to the C convention.
fn c_result<T>(r: Result<T, c_int>, ok: impl FnOnce(T) -> c_int) -> c_int {
    match r {
        Ok(v) => ok(v),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Interposes `shm_open(3)` (see [`crate::shm`]).
///
/// # Safety
/// The C `shm_open` contract.
#[no_mangle]
pub unsafe extern "C" fn shm_open(name: *const c_char, oflag: c_int, mode: mode_t) -> c_int {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::shm_open(name, oflag, mode) };
    // SAFETY: `name` is a C string or null.
    let Some(n) = (unsafe { crate::shm::name(name) }) else {
        return pass();
    };
    guarded(pass, -1, || match crate::shm::shm_open(n, oflag, mode) {
        Some(r) => c_result(r, |fd| fd),
        None => pass(),
    })
}

/// Interposes `shm_unlink(3)`.
///
/// # Safety
/// The C `shm_unlink` contract.
#[no_mangle]
pub unsafe extern "C" fn shm_unlink(name: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::shm_unlink(name) };
    // SAFETY: `name` is a C string or null.
    let Some(n) = (unsafe { crate::shm::name(name) }) else {
        return pass();
    };
    guarded(pass, -1, || match crate::shm::shm_unlink(n) {
        Some(r) => c_result(r, |()| 0),
        None => pass(),
    })
}

/// Interposes `sem_open(3)` (variadic: `mode` and `value` are read as
/// fixed arguments, see the module docs).
///
/// # Safety
/// The C `sem_open` contract.
#[no_mangle]
pub unsafe extern "C" fn sem_open(
    name: *const c_char,
    oflag: c_int,
    mode: mode_t,
    value: libc::c_uint,
) -> *mut libc::sem_t {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::sem_open(name, oflag, mode, value) };
    // SAFETY: `name` is a C string or null.
    let Some(n) = (unsafe { crate::shm::name(name) }) else {
        return pass();
    };
    guarded(pass, libc::SEM_FAILED, || {
        match crate::shm::sem_open(n, oflag, mode, value) {
            Some(Ok(sem)) => sem,
            Some(Err(e)) => {
                set_errno(e);
                libc::SEM_FAILED
            }
            None => pass(),
        }
    })
}

/// Interposes `sem_close(3)`.
///
/// # Safety
/// The C `sem_close` contract.
#[no_mangle]
pub unsafe extern "C" fn sem_close(sem: *mut libc::sem_t) -> c_int {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::sem_close(sem) };
    guarded(pass, -1, || match crate::shm::sem_close(sem) {
        Some(r) => c_result(r, |()| 0),
        None => pass(),
    })
}

/// Interposes `sem_unlink(3)`.
///
/// # Safety
/// The C `sem_unlink` contract.
#[no_mangle]
pub unsafe extern "C" fn sem_unlink(name: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::sem_unlink(name) };
    // SAFETY: `name` is a C string or null.
    let Some(n) = (unsafe { crate::shm::name(name) }) else {
        return pass();
    };
    guarded(pass, -1, || match crate::shm::sem_unlink(n) {
        Some(r) => c_result(r, |()| 0),
        None => pass(),
    })
}
