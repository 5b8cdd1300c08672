//! `kfd_sim::remote`: a client in another host process is a process of the
//! simulated machine, as the kernel sees a process.
//!
//! The client is this executable started again with
//! `KFD_SIM_REMOTE_CLIENT` set (no test harness: `main` picks the role). It
//! checks, from its side, that an ioctl's argument struct comes back, that
//! user pointers inside arguments are its own memory (the answer lands in
//! its buffer; an address mapped nowhere in it is `EFAULT`), and that fd
//! numbers inside arguments name its own fd table (`ACQUIRE_VM` of its
//! render fd; a number open only in the server is `EINVAL`). The server's
//! side checks that the client's open fds count while it lives and that its
//! SIGKILL releases everything: its files, its KFD process, its tracee.

use std::ffi::c_void;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kfd::Driver;
use kfd_sim::remote::{RemoteDriver, Server, Verdict};
use kfd_sim::{Pid, Sim, SimConfig};
use kfd_sys::{
    kfd_ioctl_acquire_vm_args, kfd_ioctl_get_process_apertures_new_args,
    kfd_ioctl_get_version_args, kfd_process_device_apertures, AMDKFD_IOC_ACQUIRE_VM,
    AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, AMDKFD_IOC_GET_VERSION,
};

const ROLE: &str = "KFD_SIM_REMOTE_CLIENT";
const GPUS: usize = 2;
/// Generous limit on waiting for the client; only a hang reaches it.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn main() {
    if std::env::var_os(ROLE).is_some() {
        client();
        return;
    }
    test_env::harness::run(&[(
        "a_client_process_is_a_process_of_the_machine",
        a_client_process_is_a_process_of_the_machine,
    )]);
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} is not set for the client"))
}

/// `ioctl` of `arg` through `driver`.
fn ioctl<T>(
    driver: &RemoteDriver,
    fd: std::os::fd::BorrowedFd<'_>,
    request: u32,
    arg: &mut T,
) -> std::io::Result<i32> {
    // SAFETY: `arg` is a live, exclusively borrowed struct of the size the
    // request encodes; user pointers inside it are the caller's business.
    unsafe { driver.ioctl(fd, u64::from(request), (arg as *mut T).cast::<c_void>()) }
}

fn client() {
    let driver =
        RemoteDriver::connect(&env("ADDRESS"), Pid(env("PID").parse().unwrap())).expect("connect");
    let kfd = driver
        .open(Path::new("/dev/kfd"), libc::O_RDWR | libc::O_CLOEXEC)
        .expect("open /dev/kfd");
    let mut version = kfd_ioctl_get_version_args::default();
    ioctl(&driver, kfd.as_fd(), AMDKFD_IOC_GET_VERSION, &mut version).expect("GET_VERSION");
    assert_eq!(
        version.major_version, 1,
        "the argument came back: {version:?}"
    );

    // A user pointer inside the argument: the answer lands in this
    // process's buffer.
    let mut apertures = vec![kfd_process_device_apertures::default(); GPUS];
    let mut args = kfd_ioctl_get_process_apertures_new_args {
        kfd_process_device_apertures_ptr: apertures.as_mut_ptr() as u64,
        num_of_nodes: GPUS as u32,
        pad: 0,
    };
    ioctl(
        &driver,
        kfd.as_fd(),
        AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
        &mut args,
    )
    .expect("GET_PROCESS_APERTURES_NEW");
    assert_eq!(args.num_of_nodes, GPUS as u32);
    let gpu_id: u32 = env("GPU_ID").parse().unwrap();
    assert!(
        apertures
            .iter()
            .any(|a| a.gpu_id == gpu_id && a.gpuvm_limit > a.gpuvm_base),
        "the apertures were written into this process: {apertures:?}"
    );

    // An address mapped nowhere in this process: EFAULT, as copy_to_user.
    let page = kfd::AnonymousMapping::private(4096).expect("a page");
    let unmapped = page.addr() as u64;
    drop(page);
    args.kfd_process_device_apertures_ptr = unmapped;
    args.num_of_nodes = GPUS as u32;
    let err = ioctl(
        &driver,
        kfd.as_fd(),
        AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
        &mut args,
    )
    .expect_err("apertures into unmapped memory");
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT), "{err}");

    // Fd numbers inside an argument name this process's fds.
    let render = driver
        .open(Path::new(&env("RENDER")), libc::O_RDWR | libc::O_CLOEXEC)
        .expect("open the render node");
    let server_only: u32 = env("SERVER_FD").parse().unwrap();
    // SAFETY: F_GETFD reads no memory.
    let open_here = unsafe { libc::fcntl(server_only as i32, libc::F_GETFD) } >= 0;
    assert!(!open_here, "fd {server_only} is open only in the server");
    let mut acquire = kfd_ioctl_acquire_vm_args {
        drm_fd: server_only,
        gpu_id,
    };
    let err = ioctl(&driver, kfd.as_fd(), AMDKFD_IOC_ACQUIRE_VM, &mut acquire)
        .expect_err("ACQUIRE_VM of a number not open here");
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    acquire.drm_fd = render.as_raw_fd() as u32;
    ioctl(&driver, kfd.as_fd(), AMDKFD_IOC_ACQUIRE_VM, &mut acquire).expect("ACQUIRE_VM");

    println!("READY");
    // Holds its files until the test kills it; should the test die first,
    // its end of stdin closes and the client ends too.
    let _ = std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1]);
}

fn a_client_process_is_a_process_of_the_machine() {
    if let Err(why) = kfd_sim::remote::child_memory_reachable() {
        // The simulator reaches its clients' memory as the kernel reaches
        // a caller's; where this process may not, nothing here can run.
        test_env::skip(format!(
            "the served machine cannot reach a child's memory: {why}"
        ));
        return;
    }
    let sim = Sim::synthetic(GPUS, SimConfig::default()).expect("simulated machine");
    let baseline = sim.accounting();
    let gpu = sim.gpus()[0].clone();
    let target = sim.spawn_process().unwrap();
    let client_pid = sim.spawn_process().unwrap();
    sim.ptrace_attach(client_pid, target).unwrap();
    // A render fd open in this process only, at a number the client does
    // not have open (a fresh process's fds are the low ones).
    let local = {
        let opened = sim
            .driver(target)
            .open(
                &sim.render_path(gpu.gpu_id).unwrap(),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
            .unwrap();
        // SAFETY: F_DUPFD_CLOEXEC reads no memory; `opened` is open.
        let high = unsafe { libc::fcntl(opened.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 900) };
        assert!(
            high >= 900,
            "dup the render fd: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fcntl returned a new descriptor, owned from here on.
        unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(high) }
    };
    let server = Server::new(&sim).expect("serve the machine");
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, "1")
        .env("ADDRESS", server.address())
        .env("PID", client_pid.0.to_string())
        .env("GPU_ID", gpu.gpu_id.to_string())
        .env("RENDER", format!("/dev/dri/renderD{}", gpu.render_minor))
        .env("SERVER_FD", local.as_raw_fd().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the client");
    let connection = server
        .accept(
            child.id(),
            client_pid,
            HANG_GUARD,
            Arc::new(move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
                Verdict::Run
            }),
        )
        .expect("the client connects");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().map(|l| l.expect("the client's output"));
    if ready.as_deref() != Some("READY") {
        let status = child.wait().unwrap();
        panic!("the client failed ({status}): {ready:?}");
    }
    assert!(
        calls.load(Ordering::Relaxed) >= 6,
        "the observer saw the calls"
    );
    let live = sim.accounting();
    assert_eq!(
        live.kfd_fds,
        baseline.kfd_fds + 1,
        "the client's /dev/kfd fd"
    );
    assert_eq!(
        live.render_fds,
        baseline.render_fds + 2,
        "its render fd and ours"
    );
    assert_eq!(live.kfd_processes, baseline.kfd_processes + 1);

    let killed = Instant::now();
    child.kill().expect("SIGKILL the client");
    child.wait().expect("reap the client");
    connection.join();
    println!(
        "client SIGKILLed: its process ended {:?} later",
        killed.elapsed()
    );
    assert!(!sim.process_alive(client_pid), "its process exited");
    assert_eq!(sim.tracer_of(target), None, "its tracee was detached");
    drop(local);
    assert_eq!(sim.accounting(), baseline, "everything it held is released");
}
