//! A hook whose body panics answers CRIU with an error and logs it; the
//! host process goes on.
//!
//! Each hook is called the way CRIU calls it — through the function pointer
//! in `CR_PLUGIN_DESC`, with C arguments — after arming the test-only trigger
//! (`abi::test_support`, compiled into this crate's unit tests only) that
//! makes its body panic. The answer must be `PANIC_ERRNO`, never 0 or
//! `-ENOTSUP`; `RESTORE_EXT_FILE` must clear `retry_needed`; an error line
//! must name the hook; and the same hook called again afterwards must answer
//! normally (the panic left no poisoned state behind). That this test
//! binary keeps running after every panic is the proof that nothing aborts.

use std::ffi::{c_char, c_int, c_void};
use std::os::fd::AsRawFd;

use crate::abi::{hook, test_support, PANIC_ERRNO};
use crate::log::{Capture, Level};

type DumpExtFile = unsafe extern "C" fn(c_int, c_int) -> c_int;
type RestoreExtFile = unsafe extern "C" fn(c_int, *mut bool) -> c_int;
type HandleDeviceVma = unsafe extern "C" fn(c_int, *const libc::stat) -> c_int;
type UpdateVmaMap = unsafe extern "C" fn(*const c_char, u64, u64, *mut u64, *mut c_int) -> c_int;
type IntHook = unsafe extern "C" fn(c_int) -> c_int;
type VoidHook = unsafe extern "C" fn() -> c_int;

fn slot(id: usize) -> *const c_void {
    let ptr = test_support::hook_ptr(id);
    assert!(!ptr.is_null(), "hook slot {id} is empty");
    ptr
}

/// Calls hook `name` once with the trigger armed and once without; returns
/// both answers and the error lines of the first call.
fn twice(name: &str, call: &dyn Fn() -> c_int) -> (c_int, c_int, Vec<String>) {
    let capture = Capture::start();
    test_support::panic_in(Some(name));
    let first = call();
    test_support::panic_in(None);
    let errors = capture
        .lines()
        .into_iter()
        .filter(|(l, _)| *l == Level::Error)
        .map(|(_, t)| t)
        .collect();
    drop(capture);
    let quiet = Capture::start();
    let second = call();
    drop(quiet);
    (first, second, errors)
}

fn check(name: &str, call: &dyn Fn() -> c_int) -> c_int {
    let (first, second, errors) = twice(name, call);
    assert_eq!(first, PANIC_ERRNO, "{name} answered {first} after a panic");
    assert!(
        errors
            .iter()
            .any(|l| l.contains(&format!("internal error in {name}"))
                && l.contains("test-triggered panic")),
        "{name}: no error line names the panic: {errors:?}"
    );
    assert_ne!(second, PANIC_ERRNO, "{name} still panics once disarmed");
    second
}

#[test]
fn every_hook_turns_a_panic_into_an_error() {
    let (init, exit) = test_support::init_exit();
    // init(DUMP) itself panicking, then a real init for the hooks below.
    // SAFETY: the descriptor's init takes the stage number.
    check("init", &|| unsafe { init(0) });

    let devnull = std::fs::File::open("/dev/null").unwrap();
    let fd = devnull.as_raw_fd();

    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let dump_ext_file: DumpExtFile = unsafe { std::mem::transmute(slot(hook::DUMP_EXT_FILE)) };
    // SAFETY: an open fd and any id, as CRIU passes them.
    let normal = check("DUMP_EXT_FILE", &|| unsafe { dump_ext_file(fd, 7) });
    assert!(normal <= 0, "DUMP_EXT_FILE answered {normal} for /dev/null");

    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let vma: HandleDeviceVma = unsafe { std::mem::transmute(slot(hook::HANDLE_DEVICE_VMA)) };
    // SAFETY: fstat fills a zeroed stat buffer for an open fd.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(fd, &mut st), 0);
        st
    };
    // SAFETY: an fd and a pointer to its stat, valid for the call.
    check("HANDLE_DEVICE_VMA", &|| unsafe { vma(fd, &st) });

    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let late: IntHook = unsafe { std::mem::transmute(slot(hook::DUMP_DEVICES_LATE)) };
    // SAFETY: a pid, as CRIU passes it.
    check("DUMP_DEVICES_LATE", &|| unsafe { late(4242) });
    let quiet = Capture::start();
    // SAFETY: the descriptor's exit takes the stage and CRIU's result.
    unsafe { exit(0, -1) };

    // SAFETY: as above, for the restore stage.
    assert_ne!(unsafe { init(2) }, PANIC_ERRNO);
    drop(quiet);
    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let restore_init: VoidHook = unsafe { std::mem::transmute(slot(hook::RESTORE_INIT)) };
    // SAFETY: no arguments.
    check("RESTORE_INIT", &|| unsafe { restore_init() });
    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let post_forking: VoidHook = unsafe { std::mem::transmute(slot(hook::POST_FORKING)) };
    // SAFETY: no arguments.
    check("POST_FORKING", &|| unsafe { post_forking() });

    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let restore: RestoreExtFile = unsafe { std::mem::transmute(slot(hook::RESTORE_EXT_FILE)) };
    let retry = std::cell::Cell::new(true);
    check("RESTORE_EXT_FILE", &|| {
        let mut flag = true;
        // SAFETY: an id and a pointer to a live bool.
        let ret = unsafe { restore(9, &mut flag) };
        retry.set(flag);
        ret
    });
    assert!(!retry.get(), "retry_needed left set");
    let quiet = Capture::start();
    test_support::panic_in(Some("RESTORE_EXT_FILE"));
    let mut flag = true;
    // SAFETY: as above.
    let ret = unsafe { restore(9, &mut flag) };
    test_support::panic_in(None);
    drop(quiet);
    assert_eq!(ret, PANIC_ERRNO);
    assert!(!flag, "a panicking RESTORE_EXT_FILE asked for a retry");

    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let update: UpdateVmaMap = unsafe { std::mem::transmute(slot(hook::UPDATE_VMA_MAP)) };
    check("UPDATE_VMA_MAP", &|| {
        let mut pgoff = 0u64;
        let mut plugin_fd: c_int = -1;
        // SAFETY: a NUL-terminated path and live out-pointers.
        unsafe {
            update(
                c"/dev/dri/renderD128".as_ptr(),
                0x7000_0000,
                0,
                &mut pgoff,
                &mut plugin_fd,
            )
        }
    });

    // SAFETY: the slot holds the trampoline of this hook, whose C
    // signature is the one it is cast to.
    let resume: IntHook = unsafe { std::mem::transmute(slot(hook::RESUME_DEVICES_LATE)) };
    // SAFETY: a pid.
    check("RESUME_DEVICES_LATE", &|| unsafe { resume(4242) });

    let capture = Capture::start();
    test_support::panic_in(Some("exit"));
    // SAFETY: stage and result; exit answers nothing, a panic must not
    // escape it.
    unsafe { exit(2, 0) };
    assert!(capture.contains(Level::Error, "internal error in exit"));
}
