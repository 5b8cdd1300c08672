//! The interposed C library functions. Each is a thin trampoline: decide
//! from the path or fd whether the call is the simulator's, route it there
//! or to the C library's own function (the `real` module), and never unwind
//! into C (a panic becomes `EIO`).
//!
//! A call made while this library is already working on the same thread
//! (the simulator writing its sysfs tree, `fstat` for a file key, an
//! allocation that opens a file) goes straight to the C library: the
//! `Busy` guard.
//!
//! `open`, `openat` and `ioctl` are C variadic functions; Rust cannot
//! define those, so they are defined with their optional argument as a
//! fixed one. On the x86-64 and AArch64 Linux calling conventions an
//! integer or pointer variadic argument travels where the fixed one would,
//! so the value read is the caller's when it passed one and an unused
//! register otherwise (then it is only forwarded, never interpreted).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use libc::{mode_t, off_t, size_t, DIR, FILE};

use crate::machine::{self, Machine, PathClass};
use crate::real;

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as inside the library until dropped.
struct Busy;

impl Busy {
    /// `None` when the thread is inside the library already.
    fn enter() -> Option<Busy> {
        BUSY.try_with(|b| {
            if b.get() {
                None
            } else {
                b.set(true);
                Some(Busy)
            }
        })
        .ok()
        .flatten()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The machine for a call on `fd`: the one built already, or, with
/// `KFD_SIM_REMOTE`, the one built now when `fd` is a character device: a
/// stand-in file the process got from elsewhere before it opened a device
/// path itself (CRIU receives a dumped task's files from its parasite, and
/// a plugin may `fstat` or `ioctl` them first).
fn machine_for_fd(fd: c_int) -> Option<&'static Machine> {
    if let Some(m) = machine::existing() {
        return Some(m);
    }
    if fd < 0 || std::env::var_os(machine::REMOTE_VAR).is_none() {
        return None;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable buffer of the size fstat(2) fills.
    if unsafe { real::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded and initialised the whole struct.
    let st = unsafe { st.assume_init() };
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return None;
    }
    run_guarded(None, || machine::get().ok())
}

/// Runs `f` under a [`Busy`] guard and `catch_unwind`; `pass` when the
/// thread is busy already, `failed` (with `EIO`) after a panic.
fn guarded<T>(pass: impl FnOnce() -> T, failed: T, f: impl FnOnce() -> T) -> T {
    let Some(busy) = Busy::enter() else {
        return pass();
    };
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    drop(busy);
    out.unwrap_or_else(|_| {
        set_errno(libc::EIO);
        failed
    })
}

/// [`guarded`] for the library's own entry points: `busy` when called from
/// inside the library.
pub(crate) fn run_guarded<T>(busy: T, f: impl FnOnce() -> T) -> T
where
    T: Copy,
{
    guarded(|| busy, busy, f)
}

/// Runs `f` with this thread's calls routed like any other thread's (the
/// [`Busy`] mark lifted): for the library's entry points that run client
/// code of their own (the CRIU emulator in [`crate::checkpoint`]).
pub(crate) fn routed<T>(f: impl FnOnce() -> T) -> T {
    let was = BUSY.try_with(|b| b.replace(false)).unwrap_or(false);
    let out = f();
    let _ = BUSY.try_with(|b| b.set(was));
    out
}

/// Writes all of `bytes` to `fd` through the C library; false on failure.
pub(crate) fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writes from a live buffer of `bytes.len()` bytes.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// The bytes of a C path, `None` for a null pointer.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn path_bytes<'a>(path: *const c_char) -> Option<&'a CStr> {
    // SAFETY: the caller's contract.
    (!path.is_null()).then(|| unsafe { CStr::from_ptr(path) })
}

/// The machine for a path of class `class`, or the errno to fail with.
fn machine_for(class: PathClass<'_>) -> Result<&'static Machine, c_int> {
    match class {
        PathClass::Host => Err(0),
        _ => machine::get().map_err(|_| libc::ENOENT),
    }
}

/// What a path-taking call should do with `path`.
enum Target {
    /// Call the C library with the original path.
    Host,
    /// Call the C library with this path instead.
    Redirect(std::ffi::CString),
    /// This path instead, a KFD topology file of a GPU the process's device
    /// cgroup hides ([`Machine::hides`]): it exists (`stat`, listings), but
    /// amdkfd answers its reads `EPERM`.
    Hidden(std::ffi::CString),
    /// A simulated device.
    Device(&'static Machine, PathClass<'static>),
    /// Fail with this errno.
    Fail(c_int),
}

fn target(path: &CStr) -> Target {
    let bytes = path.to_bytes();
    if let Some(p) = crate::shm::path_redirect(bytes) {
        return Target::Redirect(p);
    }
    let class = machine::classify(bytes);
    let m = match machine_for(class) {
        Ok(m) => m,
        Err(0) => return Target::Host,
        Err(e) => return Target::Fail(e),
    };
    let remote = m.remote.is_some();
    match class {
        PathClass::Kfd => Target::Device(m, PathClass::Kfd),
        PathClass::Render(named) => {
            let name = bytes.strip_prefix(b"/dev/dri/").unwrap_or_default();
            match m.render_minor(name, named) {
                Some(minor) => Target::Device(m, PathClass::Render(minor)),
                None => Target::Fail(libc::ENOENT),
            }
        }
        // A served machine's client lists its own /dev/dri: the stand-ins
        // its mount namespace holds (a container's).
        PathClass::OtherDri(rest) if rest.is_empty() || rest == b"/" => match remote {
            true => Target::Host,
            false => Target::Redirect(m.dri_dir()),
        },
        // The simulated machine has no primary nodes: a real one is never
        // reached from here.
        PathClass::OtherDri(_) => Target::Fail(libc::ENOENT),
        PathClass::Mapped => match m.redirect(bytes) {
            Some(p) if m.hides(bytes) => Target::Hidden(p),
            Some(p) => Target::Redirect(p),
            None => Target::Fail(libc::ENOENT),
        },
        PathClass::Host => Target::Host,
    }
}

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

/// Interposes `ioctl(2)`: requests on the simulator's device files go to
/// it, everything else to the kernel.
///
/// # Safety
/// The C `ioctl` contract.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::ioctl(fd, request, arg) };
    let Some(m) = machine_for_fd(fd) else {
        return pass();
    };
    guarded(pass, -1, || {
        if m.device_of(fd).is_none() {
            return pass();
        }
        // SAFETY: `fd` is open (device_of found its file); the caller
        // passes the argument block `request` describes, as for the kernel.
        let ret = m.with_driver(|d| unsafe { d.ioctl(BorrowedFd::borrow_raw(fd), request, arg) });
        m.tally.record(request, &ret);
        m.note_ioctl(request);
        if ret.is_ok() && request == c_ulong::from(kfd_sys::AMDKFD_IOC_ACQUIRE_VM) {
            // SAFETY: the kernel (simulator) just read this argument block
            // of ACQUIRE_VM's type from `arg`.
            let args = unsafe {
                arg.cast::<kfd_sys::kfd_ioctl_acquire_vm_args>()
                    .read_unaligned()
            };
            m.tally.acquired(args.gpu_id);
        }
        if m.trace {
            crate::trace::ioctl(request, &ret);
        }
        match ret {
            Ok(v) => v,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                -1
            }
        }
    })
}

/// `mmap(2)` for both names.
///
/// # Safety
/// The `mmap` contract.
unsafe fn mmap_any(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::mmap(addr, len, prot, flags, fd, offset) };
    if fd < 0 || flags & libc::MAP_ANONYMOUS != 0 {
        let ret = pass();
        if flags & libc::MAP_FIXED != 0 && ret != libc::MAP_FAILED {
            // What was mapped there before is gone.
            if let Some(m) = machine::existing() {
                guarded(|| (), (), || m.cpu_unmapped(addr as usize, len));
            }
        }
        return ret;
    }
    let Some(m) = machine_for_fd(fd) else {
        return pass();
    };
    guarded(pass, libc::MAP_FAILED, || {
        if m.device_of(fd).is_none() {
            if m.trace {
                eprintln!("kfd-sim-preload: mmap fd {fd} offset {offset:#x} len {len:#x}: not a simulated device");
            }
            return pass();
        }
        // The kernel takes the offset as an unsigned page offset: KFD's
        // mmap types live in its top bits (doorbells are 0x3 << 62).
        let offset = offset as u64;
        // SAFETY: `fd` is open; the caller upholds mmap's contract (a
        // MAP_FIXED range is theirs to replace).
        let ret = m.with_driver(|d| unsafe {
            d.mmap(addr, len, prot, flags, BorrowedFd::borrow_raw(fd), offset)
        });
        if m.trace {
            eprintln!(
                "kfd-sim-preload: mmap fd {fd} offset {offset:#x} len {len:#x} -> {}",
                match &ret {
                    Ok(p) => format!("{:p}", p.as_ptr()),
                    Err(e) => e.to_string(),
                }
            );
        }
        match ret {
            Ok(p) => {
                m.mapped(p.as_ptr() as usize, len);
                p.as_ptr()
            }
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                libc::MAP_FAILED
            }
        }
    })
}

/// Interposes `mmap(2)`.
///
/// # Safety
/// The C `mmap` contract.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { mmap_any(addr, len, prot, flags, fd, offset) }
}

/// Interposes `mmap64`.
///
/// # Safety
/// The C `mmap64` contract.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    offset: off_t,
) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { mmap_any(addr, len, prot, flags, fd, offset) }
}

/// Interposes `munmap(2)`: the simulator forgets the CPU mappings of its
/// devices that the range covers. Other ranges go straight to the kernel
/// without touching the simulator, which hears of the unmap only once SVM
/// ranges may exist (`Machine::cpu_unmapped`).
///
/// # Safety
/// The C `munmap` contract.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: forwarded contract.
    let pass = || unsafe { real::munmap(addr, len) };
    let Some(m) = machine::existing() else {
        return pass();
    };
    let Some(a) = NonNull::new(addr) else {
        return pass();
    };
    guarded(pass, -1, || {
        let ret = if !m.unmapping(addr as usize, len) {
            pass()
        } else {
            // SAFETY: the caller's munmap contract (nothing uses the range).
            match m.with_driver(|d| unsafe { d.munmap(a, len) }) {
                Ok(()) => 0,
                Err(e) => {
                    set_errno(e.raw_os_error().unwrap_or(libc::EIO));
                    -1
                }
            }
        };
        if ret == 0 {
            m.cpu_unmapped(addr as usize, len);
        }
        ret
    })
}

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

/// Writes, to `fd`, what the simulated kernel holds for this process and
/// what every routed ioctl answered: `key=value` lines a test compares with
/// what AMD's code did (see [`crate::report`]). Returns 0, or -1 with
/// `errno` (`ENOENT`: no machine).
///
/// # Safety
/// None beyond `fd` being a descriptor the caller may write to.
#[no_mangle]
pub unsafe extern "C" fn kfd_sim_preload_report(fd: c_int) -> c_int {
    guarded(
        || -1,
        -1,
        || {
            let Some(m) = machine::existing() else {
                set_errno(libc::ENOENT);
                return -1;
            };
            let pid = m.driver().pid();
            let text = crate::report::render(&m.sim, pid, m.remote.is_some(), &m.tally);
            if write_all(fd, text.as_bytes()) {
                0
            } else {
                -1
            }
        },
    )
}
