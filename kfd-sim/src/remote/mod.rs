//! The simulated machine served to other host processes: a [`Server`] in
//! the process that owns the [`crate::Sim`], and a [`RemoteDriver`] (a
//! [`kfd::Driver`]) in a client process, talking over a unix
//! `SOCK_SEQPACKET` socket in the abstract namespace (no file to clean up).
//!
//! | module | job |
//! |---|---|
//! | `wire` | request codes and the message encoding |
//! | `socket` | the sockets, messages with fds (`SCM_RIGHTS`, rustix) |
//! | `server` | [`Server`], one serving thread per connection |
//! | `hosts` | host processes as clients: identity, lifetime, stand-in files |
//! | `view` | the GPUs and render nodes a host client's mount namespace shows |
//! | `client` | [`RemoteDriver`] |
//!
//! One connection serves one simulated process:
//! * device fds are the simulator's memfds, passed with `SCM_RIGHTS` both
//!   ways, so the client holds the very open files (same inodes) the
//!   simulator keys its state on; the fds open in a live client count as
//!   open for the simulator's accounting (read from `/proc/PID/fd`);
//! * an ioctl's argument struct (`_IOC_SIZE` bytes) goes over the socket
//!   and comes back; user pointers inside it are the client's addresses,
//!   read and written with `process_vm_readv`/`process_vm_writev` (the
//!   kernel's `copy_*_user` on `current->mm`, `EFAULT` when unmapped), and
//!   userptr BOs the client creates pin the client's memory;
//! * fd numbers inside an argument are the client's: while its ioctl runs,
//!   the server asks the client for the fd a number names (`fdget`) and
//!   has the client install the fds the call creates (`fd_install`, the
//!   number written into the argument), over the same connection;
//! * `mmap` of a device fd hands the client the memfd behind the mapping
//!   (the BO's backing, shared), which the client maps itself;
//! * the client's end (its socket closes: exit, `SIGKILL`) is handled as
//!   the kernel handles a process's death: [`crate::Sim::exit_process`]
//!   (its tracees detached, its KFD process torn down), its fds and
//!   mappings gone with it. For host processes (below) the end is the
//!   process's exit, not a connection's.
//!
//! Where the model stops short of the kernel:
//! * a client is one simulated process; a process it forks shares its
//!   connection, so (unlike a real fork) the child is not a process of its
//!   own until it connects anew (a dump guardian does, accepted with
//!   [`Server::accept_matching`] or as a host process);
//! * fds are received close-on-exec whatever the call asked for;
//! * an fd travelling in a message (between the server's reply and the
//!   client's receipt) is open nowhere, so [`crate::Sim::accounting`]
//!   taken at that moment misses it; tests take it with the client idle or
//!   gone;
//! * pinned userptr pages of a client outlive it as in the kernel, but
//!   their contents do not: once the server has seen the client's end,
//!   device writes to them land nowhere and reads give zeros.
//!
//! # Host processes with stand-in device files
//!
//! [`Server::serve_host_processes`] serves any host process that connects
//! with [`RemoteDriver::connect_host`], each as the simulated process of
//! its own pid, so that a real CRIU can dump and restore a real process
//! holding simulated KFD state:
//! * the client opens a device path itself (a character device node that
//!   stands in for `/dev/kfd` or a render node, one CRIU has no handler
//!   for, such as `/dev/fuse`'s numbers) and passes that open file along
//!   with the `open`; the simulator's file (its memfd) stays in the server,
//!   paired with the stand-in file for as long as any process holds it.
//!   Every fd a client passes later (an ioctl's, an mmap's, a number inside
//!   an argument) is matched against the stand-ins with `kcmp(KCMP_FILE)`
//!   (stand-in opens share one inode, not one file) and replaced by its
//!   simulator file, so a copy of the fd in another process (CRIU's,
//!   received from its parasite; a guardian's, from `pidfd_getfd`; the
//!   restored task's, opened by CRIU's plugin and placed by CRIU) reaches
//!   the same simulated file;
//! * a client is named by its pid in the served machine's pid namespace
//!   (`SO_PEERCRED`); a client in a pid namespace of its own (a
//!   container's) names itself by its pid there, which the server checks
//!   against the peer's `NSpid:`, and `CRIU_OP PROCESS_INFO` reports that
//!   pid, the lead thread's pid in its own namespace, as the kernel does
//!   (a `RESUME`'s pid is looked up as the served machine numbers it,
//!   CRIU's main process being there);
//! * a client whose `/dev/kfd` is a stand-in sees the GPUs its `/dev/dri`
//!   stand-ins stand for, under their names there, as a container's device
//!   cgroup and device nodes show it the GPUs it was given ([`stand_in_renders`]:
//!   topology nodes of other GPUs answer `EPERM`, its KFD process has a pdd
//!   for each of its GPUs only);
//! * a client is one instance of a pid (pid and start time), and its
//!   simulated process lives until that process exits, however many
//!   connections it makes and closes meanwhile; a pid reused by a new
//!   process (a task CRIU restores) is a new simulated process;
//! * the ptrace-parent rule of `CRIU_OP` is checked against the host
//!   kernel's tracer of the fd owner (`TracerPid`, a thread), which must
//!   be the calling thread (each ioctl carries the caller's tid), as the
//!   kernel compares `ptrace_parent()` with `current`: the host really
//!   seizes the process;
//! * the process's CPU mappings of its BOs are the simulator's memfds,
//!   which real CRIU dumps and restores as shared memory. A restored
//!   process's mappings are CRIU's new memfds; when `CRIU_OP RESUME`
//!   resumes a host process, the served machine fills each of them with
//!   what the BO holds and makes it the BO's memory (`crate::amdkfd::adopt`), so the
//!   process and the device share memory again, as a restored device
//!   mapping does on a real GPU.
//!
//! This module never interprets ioctl arguments: [`crate::SimDriver`]
//! does, in the client's address space.

mod client;
mod hosts;
mod probe;
mod server;
mod socket;
mod view;
mod wire;

pub use client::{is_connection, RemoteDriver};
pub use hosts::HostService;
pub use probe::child_memory_reachable;
pub(crate) use server::{client_close, client_fd, client_install};
pub use server::{Connection, Observer, RemoteCall, RemoteOp, Server, Verdict};
pub use view::{stand_in_minor, stand_in_renders, StandInRender};
