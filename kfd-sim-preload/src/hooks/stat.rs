//! What a path or fd is: the `stat` family, `fstatat` and `statx`. A
//! simulated device shows as the character device its kernel would
//! create; a simulated sysfs path as its file in the simulator's tree.

use std::ffi::{c_char, c_int};

use super::{guarded, machine_for_fd, path_bytes, set_errno, target, Target};
use crate::machine;
use crate::real;

/// Makes `st` describe simulated device `node` (a character device anyone
/// may open, as udev's rules for kfd and render nodes make them).
fn as_char_device(st: &mut libc::stat, node: machine::DeviceNode) {
    st.st_mode = libc::S_IFCHR | 0o666;
    st.st_rdev = libc::makedev(node.major, node.minor);
    st.st_size = 0;
}

/// `stat`/`lstat` for a path.
///
/// # Safety
/// The `stat` contract.
unsafe fn stat_any(path: *const c_char, buf: *mut libc::stat, follow: bool) -> c_int {
    let pass = |p: *const c_char| {
        if follow {
            // SAFETY: forwarded contract; `p` is a C string.
            unsafe { real::stat(p, buf) }
        } else {
            // SAFETY: as above.
            unsafe { real::lstat(p, buf) }
        }
    };
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
                Some(node) if !buf.is_null() => {
                    // SAFETY: `buf` points to a writable struct stat (the
                    // caller's contract); all-zero is a valid value.
                    let st = unsafe { &mut *buf };
                    // SAFETY: as above.
                    *st = unsafe { std::mem::zeroed() };
                    as_char_device(st, node);
                    st.st_nlink = 1;
                    st.st_blksize = 4096;
                    0
                }
                Some(_) => {
                    set_errno(libc::EFAULT);
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

/// Interposes `stat(2)`.
///
/// # Safety
/// The C `stat` contract.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { stat_any(path, buf, true) }
}

/// Interposes `stat64`.
///
/// # Safety
/// The C `stat64` contract (the same struct on 64-bit Linux).
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { stat_any(path, buf, true) }
}

/// Interposes `lstat(2)`.
///
/// # Safety
/// The C `lstat` contract.
#[no_mangle]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { stat_any(path, buf, false) }
}

/// Interposes `lstat64`.
///
/// # Safety
/// The C `lstat64` contract.
#[no_mangle]
pub unsafe extern "C" fn lstat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { stat_any(path, buf, false) }
}

/// `fstat` with a simulated device's fd shown as the character device.
///
/// # Safety
/// The `fstat` contract.
unsafe fn fstat_any(fd: c_int, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarded contract.
    let ret = unsafe { real::fstat(fd, buf) };
    if ret != 0 || buf.is_null() {
        return ret;
    }
    let Some(m) = machine_for_fd(fd) else {
        return ret;
    };
    guarded(
        || ret,
        ret,
        || {
            if let Some(node) = m.device_of(fd) {
                // SAFETY: fstat filled `*buf`, a writable struct stat.
                as_char_device(unsafe { &mut *buf }, node);
            }
            ret
        },
    )
}

/// Interposes `fstat(2)`.
///
/// # Safety
/// The C `fstat` contract.
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstat_any(fd, buf) }
}

/// Interposes `fstat64`.
///
/// # Safety
/// The C `fstat64` contract.
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstat_any(fd, buf) }
}

/// `fstatat` for both names: an empty path with `AT_EMPTY_PATH` is
/// `fstat`, an absolute path is `stat`/`lstat`.
///
/// # Safety
/// The `fstatat` contract.
unsafe fn fstatat_any(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: `path` is a C string or null.
    match unsafe { path_bytes(path) } {
        Some(p) if p.is_empty() && flags & libc::AT_EMPTY_PATH != 0 => {
            // SAFETY: forwarded contract.
            unsafe { fstat_any(dirfd, buf) }
        }
        Some(p) if p.to_bytes().starts_with(b"/") => {
            // SAFETY: forwarded contract.
            unsafe { stat_any(path, buf, flags & libc::AT_SYMLINK_NOFOLLOW == 0) }
        }
        // SAFETY: forwarded contract.
        _ => unsafe { real::fstatat(dirfd, path, buf, flags) },
    }
}

/// Interposes `fstatat(2)`.
///
/// # Safety
/// The C `fstatat` contract.
#[no_mangle]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstatat_any(dirfd, path, buf, flags) }
}

/// Interposes `fstatat64`.
///
/// # Safety
/// The C `fstatat64` contract.
#[no_mangle]
pub unsafe extern "C" fn fstatat64(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { fstatat_any(dirfd, path, buf, flags) }
}

/// Interposes `statx(2)` (what C++'s `std::filesystem` and newer tools
/// use): paths are routed as for `stat`, simulated devices' fds are shown
/// as character devices.
///
/// # Safety
/// The C `statx` contract.
#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    buf: *mut libc::statx,
) -> c_int {
    // SAFETY: forwarded contract.
    let pass = |p: *const c_char| unsafe { real::statx(dirfd, p, flags, mask, buf) };
    // SAFETY: `path` is a C string or null.
    let Some(p) = (unsafe { path_bytes(path) }) else {
        return pass(path);
    };
    let patch = |node: machine::DeviceNode| {
        // SAFETY: `buf` is a writable struct statx (the caller's contract).
        let st = unsafe { &mut *buf };
        st.stx_mode = (libc::S_IFCHR | 0o666) as u16;
        st.stx_rdev_major = node.major;
        st.stx_rdev_minor = node.minor;
        st.stx_size = 0;
    };
    if p.is_empty() {
        let ret = pass(path);
        if ret == 0 && !buf.is_null() {
            if let Some(m) = machine_for_fd(dirfd) {
                guarded(
                    || (),
                    (),
                    || {
                        if let Some(node) = m.device_of(dirfd) {
                            patch(node);
                        }
                    },
                );
            }
        }
        return ret;
    }
    if !p.to_bytes().starts_with(b"/") {
        return pass(path);
    }
    guarded(
        || pass(path),
        -1,
        || match target(p) {
            Target::Host => pass(path),
            Target::Redirect(np) | Target::Hidden(np) => pass(np.as_ptr()),
            Target::Device(m, class) => {
                // A real file's statx for the rest of the fields: the
                // device's stand-in in the /dev/dri directory.
                let stand_in = m.dri_dir();
                let ret = pass(stand_in.as_ptr());
                if ret == 0 && !buf.is_null() {
                    if let Some(node) = m.device_at(class) {
                        patch(node);
                    }
                }
                ret
            }
            Target::Fail(e) => {
                set_errno(e);
                -1
            }
        },
    )
}
