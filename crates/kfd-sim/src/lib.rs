//! A simulated amdkfd + amdgpu kernel that implements [`kfd::Driver`](::kfd::Driver).
//!
//! The simulator stands in for the kernel at the ABI level: it receives the
//! same request codes and `#[repr(C)]` argument structs (with real user
//! pointers) as the kernel would, and answers with the same results and errno
//! values, rule for rule, as written down in the project's `spec/kernel.md`.
//! Code above `kfd::Driver` cannot tell it from [`kfd::HostDriver`](::kfd::HostDriver).
//!
//! * [`Sim`] is one simulated machine: GPUs built from an
//!   [`amdgpu_topology::System`] (a fixture or [`Sim::synthetic`]), the sysfs
//!   tree for that topology written into a directory the simulator owns
//!   ([`Sim::sysfs_root`]), simulated processes ([`Pid`]) with capabilities,
//!   ptrace parents and GPU visibility, and the device state.
//! * [`SimDriver`] is one process's view: `sim.driver(pid)` returns the
//!   [`kfd::Driver`](::kfd::Driver) a simulated process (or CRIU acting for it) uses. Every
//!   fd it hands out is a real file descriptor (a memfd), so `dup`, passing
//!   fds over unix sockets, `close` and `mmap` behave as with real devices; the
//!   simulator keys its state on the open file, never on the fd number.
//! * [`workload`] builds application-like processes (BOs of every type, queues,
//!   events, SVM ranges) that make deterministic progress, for end-to-end
//!   checkpoint/restore tests.
//! * [`FaultSpec`] injects failures (the Nth call of an ioctl or CRIU op, an
//!   mmap, a short DMA); [`Accounting`] counts what is alive so tests can
//!   assert that nothing leaked.
//!
//! Everything runs inside one host process: "processes" are identities the
//! simulator tracks, not real processes. The simulator never does anything the
//! real kernel would not do, and never touches real GPU devices.
//!
//! ```
//! use kfd::Driver;
//! use kfd_sim::{Sim, SimConfig};
//!
//! let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
//! let pid = sim.spawn_process().unwrap();
//! let drv = sim.driver(pid);
//! let kfd = drv.open("/dev/kfd".as_ref(), libc::O_RDWR | libc::O_CLOEXEC).unwrap();
//! let mut v = kfd_sys::kfd_ioctl_get_version_args::default();
//! // SAFETY: `v` is a valid, writable GET_VERSION argument block.
//! unsafe {
//!     drv.ioctl(
//!         std::os::fd::AsFd::as_fd(&kfd),
//!         kfd_sys::AMDKFD_IOC_GET_VERSION as u64,
//!         (&mut v as *mut kfd_sys::kfd_ioctl_get_version_args).cast(),
//!     )
//! }
//! .unwrap();
//! assert_eq!((v.major_version, v.minor_version), (1, 18));
//! ```

pub mod accounting;
pub(crate) mod bo;
pub(crate) mod drm;
pub mod fault;
pub(crate) mod kfd;
pub mod sdma;
mod sim;
mod sysfs;
pub mod workload;

pub use accounting::Accounting;
pub use fault::{FaultKind, FaultParseError, FaultSpec};
pub use sim::{
    GpuInfo, Pid, ProcessConfig, Sim, SimConfig, SimDriver, SimError, DRM_MAJOR, KFD_MAJOR,
};
pub use sysfs::synthetic_system;

use std::fmt;

/// A kernel error number (`EINVAL`, `EBADF`, ...), as the simulated kernel
/// returns it. Converts into [`std::io::Error`] with the same raw OS error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno`.
    pub(crate) fn last() -> Errno {
        Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    /// The symbolic name (`"EINVAL"`), or `None` for numbers this crate does
    /// not name.
    pub fn name(self) -> Option<&'static str> {
        fault::ERRNO_NAMES
            .iter()
            .find(|(_, v)| *v == self.0)
            .map(|(n, _)| *n)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name}"),
            None => write!(f, "errno {}", self.0),
        }
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}
