//! A queue the plugin cannot save, reported by the kernel (issue: KFD
//! 1.19-1.23, CRIU as it is in 2026): a dump of a process whose private
//! data holds a queue of a type no kernel the plugin knows writes is refused
//! with `-ENOTSUP` and a message naming the queue, the process is unpaused
//! and runs on, and the images directory never verifies as complete.
//!
//! kfd-sim creates only the queue types the kernel has; a later kernel's
//! queue is stood for by the dumper's driver rewriting the `type` of the
//! first queue in what `CRIU_OP CHECKPOINT` copied out (the kernel's blob
//! layout, `../shared/spec/kernel.md` §1.4).

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;

use criu_host_emulator::EmulatedHost;
use kfd::Driver;
use kfd_sim::workload::{Profile, Workload};
use kfd_sim::{Sim, SimConfig, SimDriver};
use kfd_sys::{kfd_ioctl_criu_args, AMDKFD_IOC_CRIU_OP, KFD_CRIU_OP_CHECKPOINT};

mod common;
mod faults_common;

use common::{device_vmas, gpu_files};
use faults_common::{set_looks_complete, MiniCriu};

/// A queue type after SDMA_BY_ENG_ID (5).
const NEW_QUEUE_TYPE: u32 = 9;

/// The dumper's driver: the kernel's answers, with the first queue of a
/// checkpoint's private data turned into a queue of [`NEW_QUEUE_TYPE`].
#[derive(Clone)]
struct NewerKernel {
    inner: SimDriver,
}

impl Driver for NewerKernel {
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
        self.inner.open(path, flags)
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<c_int> {
        // SAFETY: forwarded Driver::ioctl contract.
        let answer = unsafe { self.inner.ioctl(fd, request, arg) }?;
        if request == u64::from(AMDKFD_IOC_CRIU_OP) {
            // SAFETY: the caller's contract makes `arg` a valid
            // kfd_ioctl_criu_args for CRIU_OP, and after a successful
            // CHECKPOINT its priv_data points at priv_data_size bytes the
            // caller owns and the kernel just filled.
            unsafe {
                let args = &*(arg as *const kfd_ioctl_criu_args);
                if args.op == KFD_CRIU_OP_CHECKPOINT {
                    let blob = std::slice::from_raw_parts_mut(
                        args.priv_data as usize as *mut u8,
                        args.priv_data_size as usize,
                    );
                    retype_first_queue(blob, args);
                }
            }
        }
        Ok(answer)
    }

    unsafe fn mmap(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<NonNull<c_void>> {
        // SAFETY: forwarded Driver::mmap contract.
        unsafe { self.inner.mmap(addr, len, prot, flags, fd, offset) }
    }

    faults_common::forward_driver_rest!();
}

/// Sets the `type` (offset 68 of the queue record) of the blob's first
/// object, which must be a queue (object_type 0): the kernel writes queues
/// before events and SVM ranges.
fn retype_first_queue(blob: &mut [u8], args: &kfd_ioctl_criu_args) {
    let objects = amdgpu_image::priv_data::objects(
        blob,
        u64::from(args.num_devices),
        u64::from(args.num_bos),
        args.num_objects,
    )
    .expect("kfd-sim writes the kernel's layout");
    assert!(objects.queue_count() > 0, "the workload has queues");
    let first = (8 + 8 * u64::from(args.num_devices) + objects.bo_record * u64::from(args.num_bos))
        as usize;
    assert_eq!(
        &blob[first..first + 4],
        &0u32.to_le_bytes(),
        "a queue first"
    );
    blob[first + 68..first + 72].copy_from_slice(&NEW_QUEUE_TYPE.to_le_bytes());
}

#[test]
fn a_queue_of_a_newer_kernel_is_refused_and_the_process_runs_on() {
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let sim = Sim::synthetic(1, SimConfig::default()).unwrap();
    let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
    app.step().unwrap();
    let (files, _) = gpu_files(&app);
    let log = criu_plugin_amdgpu::log::Capture::start();
    let result = MiniCriu::new(&sim, shm.path()).dump(
        |pid| NewerKernel {
            inner: sim.driver(pid),
        },
        EmulatedHost::new(images.path(), None),
        app.pid(),
        &files,
        &device_vmas(&sim),
    );
    let text: String = log
        .lines()
        .into_iter()
        .map(|(_, line)| line + "\n")
        .collect();
    drop(log);
    let failure = result.expect_err("the dump is refused");
    assert_eq!(failure.hook, "DUMP_EXT_FILE");
    assert_eq!(failure.errno, -libc::ENOTSUP, "{text}");
    assert!(
        text.contains(&format!("type {NEW_QUEUE_TYPE} on GPU"))
            && text.contains("the process was left running"),
        "the log names the queue: {text}"
    );
    // Unpaused: its queues run on.
    for _ in 0..3 {
        app.step()
            .expect("the application's queues run after the refused dump");
    }
    assert!(
        !set_looks_complete(images.path()),
        "a refused dump leaves no complete image set"
    );
}
