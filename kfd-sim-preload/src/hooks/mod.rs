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
//!
//! Inside: this module holds the guard, the routing of a path
//! ([`Target`]) and the report entry point; `open`, `stat`, `resolve`,
//! `device` and `shm` hold the interposed functions by what they act on.

mod device;
mod open;
mod resolve;
mod shm;
mod stat;

use std::cell::Cell;
use std::ffi::{c_char, c_int, CStr};

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
