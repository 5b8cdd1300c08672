//! An `LD_PRELOAD` interposer that runs a [`kfd_sim`] machine inside the
//! process it is loaded into, so AMD's own user space (the ROCm thunk
//! `libhsakmt`, libdrm's amdgpu half, ROCr, `rocminfo`) runs against the
//! simulated kernel unchanged: every test of the simulator then has a client
//! this project did not write.
//!
//! ```text
//! KFD_SIM_MACHINE=mi210-8gpu-2hive LD_PRELOAD=libkfd_sim_preload.so rocminfo
//! KFD_SIM_MACHINE=/path/to/captured/topology LD_PRELOAD=... ./app
//! ```
//!
//! `KFD_SIM_MACHINE` names a built-in topology
//! (`amdgpu_topology::builtin_names`) or a directory holding a captured
//! topology tree; `KFD_SIM_PRELOAD_TRACE` (any value) logs every routed
//! ioctl and mmap to stderr with the simulator's answer. The machine is
//! built on the first use of a path it serves; one simulated process stands
//! for the host process.
//!
//! # A machine served by another process (`KFD_SIM_REMOTE`)
//!
//! With `KFD_SIM_REMOTE=ADDRESS` the device half goes to a machine another
//! process serves to host processes
//! ([`kfd_sim::remote::Server::serve_host_processes`]), so several real
//! processes (an application and the CRIU that dumps it, with this
//! project's plugin inside) share one simulated kernel. `/dev/kfd` and
//! `/dev/dri/renderD<minor>` must then be stand-in character devices (in a
//! private mount namespace, nodes of a misc device CRIU has no handler
//! for, so it hands their files to the plugin): opening one opens the
//! stand-in for real and the server pairs that open file with the
//! simulator's; `fstat`, `ioctl` and `mmap` of a file with the stand-in's
//! numbers ask the server what it stands for. `KFD_SIM_MACHINE` still names
//! the machine (for the sysfs trees written here). A process sees the GPUs
//! its `/dev/dri` stand-ins stand for, under their names there
//! ([`kfd_sim::remote::stand_in_renders`]: a container's view, its device
//! cgroup as engines set it): `/dev/dri` lists its own entries, a render
//! node exists only as a stand-in there, and the KFD topology files of
//! other GPUs answer
//! `EPERM` (streams on read, as amdkfd does; `open` itself here). Each process (a fork
//! too: CRIU's dump guardian) connects on its first device call as the
//! simulated process of its own pid; its connection sits above every fd it
//! has open then, so a CRIU restoring a task's files at chosen numbers never
//! finds one taken. A file CRIU hands over before the process opened a
//! device path itself (its parasite's copies of a dumped task's files) is
//! recognised too: the machine is built on the first `fstat`, `ioctl` or
//! `mmap` of a character device. `kfd_sim_preload_checkpoint` is refused
//! and the report shows no kernel state in this mode: the machine's owner
//! has both.
//!
//! A process that forks while other threads are in the machine (its own,
//! or the simulator's engine threads) gives its child the machine with no
//! lock taken: `pthread_atfork` handlers hold them all across the fork
//! (the `fork` module).
//!
//! Through real CRIU a process's connection is a unix socket whose peer is
//! outside the dumped tree: a CRIU plugin of the tests
//! (`real-criu-harness/c/remote_sk_plugin.c`) claims it at dump
//! (`DUMP_UNIX_SK`, with `kfd_sim_preload_is_connection`) and gives the
//! restored task a connection of its own in its place (`RESTORE_UNIX_SK`,
//! with `kfd_sim_preload_connection`). The restored process's memory holds
//! the driver of the process it was dumped as; on its first device call the
//! interposer sees that the socket at the driver's number is another one,
//! keeps it, follows its address (a restore onto another machine) and closes
//! the other connections CRIU's copy of the interposer left in the task.
//! A process frozen in the middle of a device call (its request sent, the
//! reply not read) would wait for the reply on the new connection: the
//! tests dump processes between device calls.
//!
//! # What is routed
//!
//! * `open`/`open64`/`openat`/`__open_2` of `/dev/kfd` and
//!   `/dev/dri/renderD<minor>`: [`kfd::Driver::open`] of [`kfd_sim::SimDriver`], whose fds are
//!   real (memfds), so `close`, `dup`, `fcntl(F_DUPFD_CLOEXEC)` (libdrm dups
//!   the render fd) and `read` need no routing; the simulator keys its state
//!   on the open file. Other `/dev/dri` entries (primary nodes) are
//!   `ENOENT`: a real GPU is never opened.
//! * `ioctl`, `mmap`/`mmap64` on those fds: the simulator (doorbells, the
//!   MMIO page, BO CPU mappings through the render node, the events page);
//!   `munmap` lets the simulator forget the CPU mappings it covers.
//! * `fstat`/`stat`/`lstat`/`fstatat`/`statx` show the device files as the
//!   character devices they stand for (kfd 511:0, render nodes 226:minor),
//!   as libdrm checks before it accepts a render fd.
//! * Paths under `/sys/devices/virtual/kfd` and `/sys/class/kfd` go to the
//!   simulator's topology tree; `/sys/class/drm`, `/sys/dev/char/226:*` and
//!   `/sys/module/amdgpu` to a DRM tree written for the machine, and
//!   `/sys/devices/system/node/node<N>` of the simulated CPU nodes to their
//!   CPUs and caches (the thunk reads a CPU node's caches there), all in
//!   the `tree` module; `/proc/modules` to one that lists `amdgpu`. Routed
//!   for `open`, `fopen`, `opendir`, the `stat` family, `access`,
//!   `readlink` and `realpath`.
//! * With `KFD_SIM_SHM_DIR`, `shm_open`/`sem_open` and their unlinks (and
//!   opens of `/dev/shm/hsakmt_shared_mem` and
//!   `/dev/shm/sem.hsakmt_semaphore`, which CRIU's plugin uses by path) use
//!   that directory instead of the host's `/dev/shm`.
//!
//! # Entry points for the process's own code
//!
//! * `int kfd_sim_preload_report(int fd)`: what the simulated kernel holds
//!   for this process (BOs, queues, events, accounting) and every routed
//!   ioctl's answers, as `key=value` lines.
//! * `int kfd_sim_preload_checkpoint(first, second, restore_shm, fd)`: CRIU
//!   (the host emulator with this project's plugin) checkpoints the
//!   process into `first`, restores it on a renumbered copy of the machine
//!   (`KFD_SIM_PRELOAD_RENUMBER_SEED`) and checkpoints the restored process
//!   into `second`.
//! * `int kfd_sim_preload_checkpoint_busy(first, second, restore_shm,
//!   ranges, lens, n, fd)`: the same checkpoint taken while the process's
//!   queues have work in flight (held still by a kernel eviction), restored
//!   on the renumbered machine, where the restored queues finish their
//!   rings; it reports where each queue stopped, what the restored run left
//!   in the given GPU ranges, then undoes that run's writes to the memory
//!   both share and lets this process go on (see the `busy` module).
//!
//! # Where AMD's code stops
//!
//! The thunk runs its calls; ROCr (5.2) initialises, lists agents and
//! pools, allocates, creates queues and signals, and its
//! `hsa_amd_memory_async_copy` completes: the simulator's engines consume
//! the SDMA rings ROCr fills (at `KFD_SIM_SDMA_BANDWIDTH` when set), its
//! TRAP interrupts wake `hsaKmtWaitOnEvent`. A kernel dispatch needs shader
//! cores the simulator does not have: its queue stops with an error (logged
//! on stderr, and the process's HW_EXCEPTION events fire). ROCr 5.2 knows
//! no gfx942 and makes no agent for an MI300 GPU.
//!
//! Everything else passes to the C library's function (the `real` module, found with
//! `dlsym(RTLD_NEXT)`). Calls this library makes itself while handling one
//! (the simulator writing its tree, allocations) pass straight through.
//!
//! # Why not umockdev
//!
//! umockdev (`umockdev-run`, `libumockdev-preload`) fakes sysfs trees and
//! device nodes for udev-style clients, and scripts ioctls by recording or
//! by a per-request handler written against its own ioctl emulation. It
//! fits the sysfs half in principle, but not the device half: the
//! simulator must answer KFD and DRM ioctls with real user pointers inside
//! the process (ALLOC_MEMORY_OF_GPU writes through `arg`, CRIU ops copy
//! whole buffers) and serve `mmap` of doorbells and BOs from its own
//! memfds, which umockdev's preload cannot hand to an in-process Rust
//! library. Running both preloads side by side would split one machine
//! across two interposers that each rewrite `open`, so the sysfs tree would
//! come from umockdev's testbed while the fds come from here, and every
//! path of the KFD tree would have to be copied into the testbed. One
//! interposer with one machine keeps the topology, the device files and
//! the ioctl answers coming from the same [`kfd_sim::Sim`].
//!
//! # Limits
//!
//! * Only Linux on x86-64 and AArch64 (the variadic `open`/`ioctl` are
//!   defined with a fixed third argument, see the `hooks` module).
//! * Paths reached through `chdir` + a relative name, or through glibc's
//!   internal opens (`__open_nocancel` inside `opendir`'s own readers, the
//!   dynamic linker) are not seen; AMD's code uses absolute paths.
//! * CPU mappings replaced by a `MAP_FIXED` anonymous `mmap` (the thunk
//!   releases a BO's range that way) stay in the simulator's mapping
//!   accounting until the range is unmapped.

#![cfg(target_os = "linux")]

mod busy;
mod checkpoint;
mod criu_socket;
mod engines;
mod fork;
mod hooks;
mod machine;
mod real;
mod report;
mod shm;
mod trace;
mod tree;

pub use checkpoint::{DEFAULT_RENUMBER_SEED, KFD_FILE_ID, RENUMBER_SEED_VAR};
pub use engines::{PACKET_TRACE_VAR, SDMA_BANDWIDTH_VAR};
pub use machine::{MACHINE_VAR, REMOTE_VAR, TRACE_VAR};
pub use shm::SHM_DIR_VAR;
