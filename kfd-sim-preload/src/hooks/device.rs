//! Calls on device files: `ioctl` (the simulator's requests on its device
//! fds, the kernel's on every other fd), `mmap` of a simulated device and
//! `munmap` of what it mapped.

use std::ffi::{c_int, c_ulong, c_void};
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use libc::{off_t, size_t};

use super::{guarded, machine_for_fd, set_errno};
use crate::machine;
use crate::real;

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
