//! A private mount namespace whose `/dev` holds stand-in GPU device nodes,
//! entered by a program between `fork` and `exec`.
//!
//! The new `/dev` has what a program and CRIU need and nothing of the
//! host's GPUs: `null`, `zero`, `full`, `random`, `urandom`, `tty`, the
//! host's `/dev/pts` (and `/dev/net/tun` when the host has it), the links
//! `fd`, `stdin`, `stdout`, `stderr` and `ptmx`, `/dev/shm` bound to the
//! served machine's shm directory, and `/dev/kfd` and
//! `/dev/dri/renderD<minor>` for each simulated GPU, all with the numbers of
//! the [`StandIn`] device. Mounts made there never reach the host (the
//! namespace's propagation is private) and go with its last process.
//!
//! Two ways, by privilege:
//! * [`Privilege::Root`]: `/dev` is a tmpfs with nodes made by `mknod`, as
//!   CRIU needs (it finds no mount of its own for a device file
//!   bind-mounted into a namespace). The tmpfs is mounted on a staging
//!   directory, filled, then moved onto `/dev`.
//! * [`Privilege::User`]: a user namespace (the user's own uid and gid
//!   mapped to themselves, so the program runs as the user) and a mount
//!   namespace; `mknod` is refused there, so the staging directory, on the
//!   host's file system, holds empty files onto which the host's device
//!   nodes are bind-mounted, and it is bind-mounted onto `/dev`. No CRIU
//!   can work without root anyway.
//!
//! Everything the child does is a system call on memory prepared before the
//! `fork` (no allocation, no lock: the parent may have other threads).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use rustix::fs::{FileType, Mode, CWD};
use rustix::mount::{MountFlags, MountPropagationFlags};

use crate::{HostError, StandIn};

/// How the namespace is made (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    /// As root: `mknod` on a tmpfs; what CRIU needs.
    Root,
    /// As a user: a user namespace and bind mounts.
    User,
}

impl Privilege {
    /// [`Privilege::Root`] when this process's effective uid is 0.
    pub fn of_this_process() -> Privilege {
        if rustix::process::geteuid().is_root() {
            Privilege::Root
        } else {
            Privilege::User
        }
    }
}

/// The host's character devices a private `/dev` copies, as (name, major,
/// minor).
const BASIC_NODES: [(&str, u32, u32); 6] = [
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// The links of a usual `/dev`, as (name, target).
const LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

/// What a private `/dev` holds.
#[derive(Debug, Clone)]
pub struct DevicePlan {
    /// The device the stand-in nodes copy.
    pub stand_in: StandIn,
    /// A render node for each of these minors.
    pub render_minors: Vec<u32>,
    /// The directory `/dev/shm` is.
    pub shm: PathBuf,
    /// An empty directory of this namespace's own, on the host's file
    /// system, which must outlive every process in the namespace.
    pub staging: PathBuf,
    /// How the namespace is made.
    pub privilege: Privilege,
}

/// A node of the private `/dev`: made with `mknod` (root) or a host node
/// bind-mounted onto a file (user).
#[derive(Debug)]
struct Node {
    /// The path in the staging directory.
    at: CString,
    /// The host's node (for a bind mount).
    host: CString,
    dev: u64,
}

/// Everything the child needs, as C strings made before the `fork`.
#[derive(Debug)]
struct Prepared {
    privilege: Privilege,
    staging: CString,
    nodes: Vec<Node>,
    dirs: Vec<CString>,
    links: Vec<(CString, CString)>,
    pts: CString,
    host_pts: CString,
    tun: Option<(CString, CString)>,
    shm: CString,
    host_shm: CString,
    dev: CString,
    root: CString,
    uid_map: CString,
    gid_map: CString,
    setgroups: CString,
    id_maps: (Vec<u8>, Vec<u8>),
}

/// A private `/dev` with stand-in device nodes that a command enters
/// ([`DeviceNamespace::configure`]); each command so configured gets a
/// namespace of its own.
#[derive(Debug, Clone)]
pub struct DeviceNamespace {
    prepared: Arc<Prepared>,
}

fn c_path(p: &Path) -> Result<CString, HostError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        HostError::io(
            "a NUL byte in",
            p,
            io::Error::from(io::ErrorKind::InvalidInput),
        )
    })
}

fn c_str(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

impl DeviceNamespace {
    /// Prepares `plan`: checks the staging directory and, for
    /// [`Privilege::User`], fills it with the files the host's nodes are
    /// bind-mounted onto.
    pub fn new(plan: &DevicePlan) -> Result<DeviceNamespace, HostError> {
        let staging = &plan.staging;
        if !staging.is_dir() {
            return Err(HostError::io(
                "no staging directory",
                staging,
                io::Error::from(io::ErrorKind::NotFound),
            ));
        }
        let mut nodes: Vec<Node> = Vec::new();
        for (name, major, minor) in BASIC_NODES {
            nodes.push(Node {
                at: c_path(&staging.join(name))?,
                host: c_path(&Path::new("/dev").join(name))?,
                dev: libc::makedev(major, minor),
            });
        }
        let mut gpu_nodes = vec![staging.join("kfd")];
        gpu_nodes.extend(
            plan.render_minors
                .iter()
                .map(|m| staging.join(format!("dri/renderD{m}"))),
        );
        for at in gpu_nodes {
            nodes.push(Node {
                at: c_path(&at)?,
                host: c_path(&plan.stand_in.path)?,
                dev: plan.stand_in.rdev(),
            });
        }
        let dirs = ["pts", "shm", "dri", "net"]
            .iter()
            .map(|d| c_path(&staging.join(d)))
            .collect::<Result<Vec<_>, _>>()?;
        let links = LINKS
            .iter()
            .map(|(name, target)| Ok((c_str(target), c_path(&staging.join(name))?)))
            .collect::<Result<Vec<_>, HostError>>()?;
        let tun = Path::new("/dev/net/tun")
            .exists()
            .then(|| Ok::<_, HostError>((c_str("/dev/net/tun"), c_path(&staging.join("net/tun"))?)))
            .transpose()?;
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let prepared = Prepared {
            privilege: plan.privilege,
            staging: c_path(staging)?,
            nodes,
            dirs,
            links,
            pts: c_path(&staging.join("pts"))?,
            host_pts: c_str("/dev/pts"),
            tun,
            shm: c_path(&staging.join("shm"))?,
            host_shm: c_path(&plan.shm)?,
            dev: c_str("/dev"),
            root: c_str("/"),
            uid_map: c_str("/proc/self/uid_map"),
            gid_map: c_str("/proc/self/gid_map"),
            setgroups: c_str("/proc/self/setgroups"),
            id_maps: (
                format!("{uid} {uid} 1\n").into_bytes(),
                format!("{gid} {gid} 1\n").into_bytes(),
            ),
        };
        if plan.privilege == Privilege::User {
            prepared.make_mount_points()?;
        }
        Ok(DeviceNamespace {
            prepared: Arc::new(prepared),
        })
    }

    /// Makes `command` enter a namespace of its own with this `/dev`
    /// before it runs.
    pub fn configure(&self, command: &mut Command) {
        let prepared = Arc::clone(&self.prepared);
        // SAFETY: the closure runs in the child between fork and exec; it
        // makes only system calls on memory `prepared` already holds (no
        // allocation, no lock), which is what is allowed there.
        unsafe {
            command.pre_exec(move || prepared.enter());
        }
    }

    /// How the namespace is made.
    pub fn privilege(&self) -> Privilege {
        self.prepared.privilege
    }
}

impl Prepared {
    /// For [`Privilege::User`]: the directories and empty files of the
    /// staging directory that mounts go onto.
    fn make_mount_points(&self) -> Result<(), HostError> {
        let path = |c: &CString| PathBuf::from(std::ffi::OsStr::from_bytes(c.as_bytes()));
        for dir in &self.dirs {
            std::fs::create_dir_all(path(dir))
                .map_err(|e| HostError::io("cannot create", path(dir), e))?;
        }
        let files = self
            .nodes
            .iter()
            .map(|n| &n.at)
            .chain(self.tun.iter().map(|(_, at)| at));
        for at in files {
            std::fs::File::create(path(at))
                .map_err(|e| HostError::io("cannot create", path(at), e))?;
        }
        for (target, link) in &self.links {
            std::os::unix::fs::symlink(path(target), path(link))
                .map_err(|e| HostError::io("cannot create", path(link), e))?;
        }
        Ok(())
    }

    /// In the child: the namespace and its `/dev`.
    fn enter(&self) -> io::Result<()> {
        match self.privilege {
            Privilege::Root => self.enter_as_root(),
            Privilege::User => self.enter_as_user(),
        }
    }

    fn enter_as_root(&self) -> io::Result<()> {
        // SAFETY: CLONE_NEWNS only gives this (single-threaded, forked)
        // process a copy of the mount table; no memory is shared.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS)? };
        rustix::mount::mount_change(
            self.root.as_c_str(),
            MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
        )?;
        rustix::mount::mount(
            c"fakedev",
            self.staging.as_c_str(),
            c"tmpfs",
            MountFlags::empty(),
            Some(c"mode=755"),
        )?;
        let dir_mode = Mode::from_raw_mode(0o755);
        for dir in &self.dirs {
            rustix::fs::mkdirat(CWD, dir.as_c_str(), dir_mode)?;
        }
        for node in &self.nodes {
            rustix::fs::mknodat(
                CWD,
                node.at.as_c_str(),
                FileType::CharacterDevice,
                Mode::from_raw_mode(0o666),
                node.dev,
            )?;
            // The umask narrowed the mode mknod was given.
            rustix::fs::chmodat(
                CWD,
                node.at.as_c_str(),
                Mode::from_raw_mode(0o666),
                rustix::fs::AtFlags::empty(),
            )?;
        }
        for (target, link) in &self.links {
            rustix::fs::symlinkat(target.as_c_str(), CWD, link.as_c_str())?;
        }
        rustix::mount::mount_bind(self.host_pts.as_c_str(), self.pts.as_c_str())?;
        if let Some((host, at)) = &self.tun {
            let file = rustix::fs::openat(
                CWD,
                at.as_c_str(),
                rustix::fs::OFlags::CREATE
                    | rustix::fs::OFlags::WRONLY
                    | rustix::fs::OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            )?;
            drop(file);
            rustix::mount::mount_bind(host.as_c_str(), at.as_c_str())?;
        }
        rustix::mount::mount_bind(self.host_shm.as_c_str(), self.shm.as_c_str())?;
        rustix::mount::mount_move(self.staging.as_c_str(), self.dev.as_c_str())?;
        Ok(())
    }

    fn enter_as_user(&self) -> io::Result<()> {
        // SAFETY: CLONE_NEWUSER | CLONE_NEWNS give this (single-threaded,
        // forked) process a user namespace and a copy of the mount table;
        // no memory is shared.
        unsafe {
            rustix::thread::unshare_unsafe(
                rustix::thread::UnshareFlags::NEWUSER | rustix::thread::UnshareFlags::NEWNS,
            )?
        };
        write_file(&self.setgroups, b"deny")?;
        write_file(&self.uid_map, &self.id_maps.0)?;
        write_file(&self.gid_map, &self.id_maps.1)?;
        rustix::mount::mount_change(
            self.root.as_c_str(),
            MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
        )?;
        for node in &self.nodes {
            rustix::mount::mount_bind(node.host.as_c_str(), node.at.as_c_str())?;
        }
        if let Some((host, at)) = &self.tun {
            rustix::mount::mount_bind(host.as_c_str(), at.as_c_str())?;
        }
        rustix::mount::mount_bind_recursive(self.host_pts.as_c_str(), self.pts.as_c_str())?;
        rustix::mount::mount_bind(self.host_shm.as_c_str(), self.shm.as_c_str())?;
        rustix::mount::mount_bind_recursive(self.staging.as_c_str(), self.dev.as_c_str())?;
        Ok(())
    }
}

/// Writes `bytes` to the file at `path` (in the child: no allocation).
fn write_file(path: &CString, bytes: &[u8]) -> io::Result<()> {
    let fd: OwnedFd = rustix::fs::openat(
        CWD,
        path.as_c_str(),
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let written = rustix::io::write(fd.as_fd(), bytes)?;
    if written != bytes.len() {
        return Err(io::Error::from(io::ErrorKind::WriteZero));
    }
    Ok(())
}

/// Makes `command`'s standard input `/dev/null` and, with `output`, its
/// standard output and error that file (appended, created when missing),
/// both opened by the child once it is in its mount namespace: CRIU finds
/// no mount for a file opened in another namespace (the host's
/// `/dev/null`). Call after the namespace is configured.
pub fn streams_in_namespace(command: &mut Command, output: Option<&Path>) -> Result<(), HostError> {
    let null = c_str("/dev/null");
    let output = output.map(c_path).transpose()?;
    // SAFETY: open(2) and dup2(2) are system calls on memory the closure
    // already owns (the C strings), allowed between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let input = rustix::fs::openat(
                CWD,
                null.as_c_str(),
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            rustix::stdio::dup2_stdin(&input)?;
            if let Some(path) = &output {
                let file = rustix::fs::openat(
                    CWD,
                    path.as_c_str(),
                    rustix::fs::OFlags::WRONLY
                        | rustix::fs::OFlags::CREATE
                        | rustix::fs::OFlags::APPEND
                        | rustix::fs::OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o644),
                )?;
                rustix::stdio::dup2_stdout(&file)?;
                rustix::stdio::dup2_stderr(&file)?;
            }
            Ok(())
        });
    }
    Ok(())
}

/// Makes `command` start clean: no file inherited but its standard
/// streams (every other fd of the starting process, its caller's pipes or
/// a shell's extras, is made close-on-exec in the child: CRIU cannot dump
/// a program holding a file of another mount namespace, and an inherited
/// pipe would keep its reader waiting), and no signal blocked (the
/// starting process may block the ones it takes with `sigwait`, and a
/// child inherits the mask).
pub fn start_clean(command: &mut Command) {
    // SAFETY: sigprocmask(2), close_range(2) and fcntl(2) are system calls
    // on memory of the closure's own stack, allowed between fork and exec;
    // marking fds close-on-exec leaves the pipe std reports an exec failure
    // on (close-on-exec already) working.
    unsafe {
        command.pre_exec(|| {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            let done = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            );
            if done != 0 {
                // Before Linux 5.11: one fd at a time, up to the limit.
                let limit = libc::sysconf(libc::_SC_OPEN_MAX).clamp(1024, 1 << 20) as libc::c_int;
                for fd in 3..limit {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
}

/// Makes `command` start a session of its own (`setsid`) before it runs:
/// CRIU before 4.3 refuses to dump a tree whose root leads no session.
pub fn new_session(command: &mut Command) {
    // SAFETY: setsid(2) is a system call on no memory, allowed between
    // fork and exec.
    unsafe {
        command.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        });
    }
}

/// Makes `command` run in the mount namespace of process `pid` (as CRIU
/// must, to dump a process in a namespace without dumping the namespace),
/// in directory `cwd` there.
pub fn enter_mount_namespace_of(
    command: &mut Command,
    pid: u32,
    cwd: &Path,
) -> Result<(), HostError> {
    let ns = PathBuf::from(format!("/proc/{pid}/ns/mnt"));
    let fd: OwnedFd = std::fs::File::open(&ns)
        .map_err(|e| HostError::io("cannot open", &ns, e))?
        .into();
    let cwd = c_path(cwd)?;
    // SAFETY: setns(2) and chdir(2) are system calls on memory the closure
    // already owns (the fd, the C string), allowed between fork and exec.
    unsafe {
        command.pre_exec(move || {
            rustix::thread::move_into_link_name_space(
                fd.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Mount),
            )?;
            rustix::process::chdir(cwd.as_c_str())?;
            Ok(())
        });
    }
    Ok(())
}
