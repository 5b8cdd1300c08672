//! The C library's own functions behind the ones this library interposes,
//! found with `dlsym(RTLD_NEXT, name)` on first use.
//!
//! Every wrapper here calls straight through: it never routes anything to
//! the simulator and never allocates, so the hooks can use it at any time
//! (during initialisation too).

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{mode_t, off_t, size_t, DIR, FILE};

/// The next definition of `name` after this library, cached in `slot`.
/// Aborts the process when the C library has none: without it nothing can
/// work, and returning would jump to address 0.
fn next(slot: &AtomicUsize, name: &CStr) -> usize {
    let cached = slot.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `name` is a NUL-terminated string; RTLD_NEXT is a valid
    // pseudo-handle in a shared object loaded by the dynamic linker.
    let sym = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if sym == 0 {
        let msg = b"kfd-sim-preload: the C library lacks an interposed function\n";
        // SAFETY: writes a static buffer to stderr, then ends the process.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    slot.store(sym, Ordering::Release);
    sym
}

/// Defines `pub(crate) unsafe fn $name(args) -> ret` calling the C
/// library's `$sym`.
macro_rules! real {
    ($( $name:ident = $sym:literal : fn($($arg:ident : $ty:ty),*) -> $ret:ty; )*) => {$(
        /// The C library's function of the same name (see the module docs).
        ///
        /// # Safety
        /// The C function's own contract.
        pub(crate) unsafe fn $name($($arg: $ty),*) -> $ret {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let addr = next(&SLOT, $sym);
            // SAFETY: `addr` is the address of the C library's function
            // named `$sym`, whose C prototype is the signature below.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(addr) };
            // SAFETY: forwarded to the caller's contract.
            unsafe { f($($arg),*) }
        }
    )*};
}

real! {
    openat = c"openat": fn(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int;
    fopen = c"fopen": fn(path: *const c_char, mode: *const c_char) -> *mut FILE;
    opendir = c"opendir": fn(path: *const c_char) -> *mut DIR;
    stat = c"stat": fn(path: *const c_char, buf: *mut libc::stat) -> c_int;
    lstat = c"lstat": fn(path: *const c_char, buf: *mut libc::stat) -> c_int;
    fstat = c"fstat": fn(fd: c_int, buf: *mut libc::stat) -> c_int;
    fstatat = c"fstatat": fn(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int;
    statx = c"statx": fn(dirfd: c_int, path: *const c_char, flags: c_int, mask: libc::c_uint, buf: *mut libc::statx) -> c_int;
    access = c"access": fn(path: *const c_char, mode: c_int) -> c_int;
    faccessat = c"faccessat": fn(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int;
    readlink = c"readlink": fn(path: *const c_char, buf: *mut c_char, len: size_t) -> libc::ssize_t;
    realpath = c"realpath": fn(path: *const c_char, resolved: *mut c_char) -> *mut c_char;
    ioctl = c"ioctl": fn(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int;
    mmap = c"mmap": fn(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, offset: off_t) -> *mut c_void;
    munmap = c"munmap": fn(addr: *mut c_void, len: size_t) -> c_int;
    shm_open = c"shm_open": fn(name: *const c_char, oflag: c_int, mode: mode_t) -> c_int;
    shm_unlink = c"shm_unlink": fn(name: *const c_char) -> c_int;
    sem_open = c"sem_open": fn(name: *const c_char, oflag: c_int, mode: mode_t, value: libc::c_uint) -> *mut libc::sem_t;
    sem_close = c"sem_close": fn(sem: *mut libc::sem_t) -> c_int;
    sem_unlink = c"sem_unlink": fn(name: *const c_char) -> c_int;
}
