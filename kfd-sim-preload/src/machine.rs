//! The simulated machine this process talks to: built on first use from
//! `KFD_SIM_MACHINE`, with one simulated process standing for this one,
//! the simulator's sysfs tree, the DRM sysfs tree ([`crate::tree`]),
//! a `/proc/modules` that lists `amdgpu`, and the table of the device
//! files the simulator handed out.
//!
//! It decides where a path goes ([`classify`], [`Machine::redirect`]) and
//! never calls a hook: every file it touches goes through the C library's
//! own functions (the hooks pass calls made while it runs straight
//! through, see [`crate::hooks`]).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use kfd::Driver;
use kfd_sim::remote::StandInRender;
use kfd_sim::{Sim, SimConfig, SimDriver, DRM_MAJOR, KFD_MAJOR};

/// The environment variable naming the machine: a built-in topology name
/// (`amdgpu_topology::builtin_names`, bare or as `builtin:NAME`) or a directory holding a captured
/// topology (the layout of `/sys/class/kfd/kfd/topology`).
pub const MACHINE_VAR: &str = "KFD_SIM_MACHINE";
/// Set to anything to log each routed device call to stderr.
pub const TRACE_VAR: &str = "KFD_SIM_PRELOAD_TRACE";
/// The address of a served machine ([`kfd_sim::remote::Server`] serving
/// host processes): when set, device files are the stand-in nodes at
/// `/dev/kfd` and `/dev/dri/renderD<minor>` and every device call goes to
/// that machine, which `KFD_SIM_MACHINE` must describe (its sysfs trees
/// are written here from it).
pub const REMOTE_VAR: &str = "KFD_SIM_REMOTE";

/// Where a path goes, decided from its bytes alone (no allocation, no
/// machine needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathClass<'a> {
    /// `/dev/kfd`.
    Kfd,
    /// `/dev/dri/renderD<minor>`.
    Render(u32),
    /// Anything else under `/dev/dri` (`card*`, the directory itself).
    OtherDri(&'a [u8]),
    /// A path of the simulated sysfs or procfs: the machine maps it.
    Mapped,
    /// Not the simulator's business.
    Host,
}

const SYS_KFD: [&[u8]; 2] = [b"/sys/devices/virtual/kfd", b"/sys/class/kfd"];
const SYS_DRM_CLASS: &[u8] = b"/sys/class/drm";
const SYS_DEV_CHAR_DRM: &[u8] = b"/sys/dev/char/226:";
const SYS_MODULE_AMDGPU: &[u8] = b"/sys/module/amdgpu";
const PROC_MODULES: &[u8] = b"/proc/modules";

/// `rest` when `path` is `prefix` or lies below it.
fn below<'a>(path: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest[0] == b'/').then_some(rest)
}

/// Where `path` goes.
pub(crate) fn classify(path: &[u8]) -> PathClass<'_> {
    if path == b"/dev/kfd" {
        return PathClass::Kfd;
    }
    if let Some(rest) = below(path, b"/dev/dri") {
        if let Some(minor) = rest.strip_prefix(b"/renderD") {
            if let Some(m) = std::str::from_utf8(minor)
                .ok()
                .and_then(|m| m.parse::<u32>().ok())
            {
                return PathClass::Render(m);
            }
        }
        return PathClass::OtherDri(rest);
    }
    let mapped = SYS_KFD.iter().any(|p| below(path, p).is_some())
        || below(path, SYS_DRM_CLASS).is_some()
        || path.starts_with(SYS_DEV_CHAR_DRM)
        || below(path, SYS_MODULE_AMDGPU).is_some()
        || crate::tree::numa_node_of(path).is_some()
        || path == PROC_MODULES;
    if mapped {
        PathClass::Mapped
    } else {
        PathClass::Host
    }
}

/// A device file the simulator handed out, by the (device, inode) of the
/// memfd standing for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceNode {
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

/// The machine of this process.
pub(crate) struct Machine {
    pub(crate) sim: Sim,
    /// The simulated process standing for this host process, with the host
    /// pid it was made for: a forked child makes its own ([`Machine::driver`]).
    local: Mutex<(u32, SimDriver)>,
    /// `<sim tree>/sys/class/kfd`: stands for `/sys/class/kfd` and
    /// `/sys/devices/virtual/kfd`.
    kfd_class: PathBuf,
    /// The DRM sysfs tree and `/proc/modules`.
    extra: crate::tree::Tree,
    devices: Mutex<HashMap<(u64, u64), DeviceNode>>,
    pub(crate) trace: bool,
    /// Every routed ioctl's answer, for the report.
    pub(crate) tally: crate::report::Tally,
    /// CPU mappings the simulator made through [`crate::hooks::device::mmap`]
    /// (start, length): only an `munmap` that touches one of these goes to
    /// the simulator (and takes its lock), so other threads' unmaps never
    /// wait on it.
    mappings: Mutex<std::collections::BTreeMap<usize, usize>>,
    /// The served machine, with `KFD_SIM_REMOTE`.
    pub(crate) remote: Option<Remote>,
    /// An SVM ioctl reached the simulator: unmapping CPU memory may end
    /// SVM ranges, so unmaps are reported ([`Machine::cpu_unmapped`]).
    svm_used: std::sync::atomic::AtomicBool,
}

/// A served machine's connection for this process, made anew in a forked
/// child (which inherits the parent's, or had it closed under it: a
/// guardian closes every inherited fd).
pub(crate) struct Remote {
    /// The served machine's address; after a restore, the one the
    /// restored connection leads to.
    address: Mutex<String>,
    /// The device number of the stand-in nodes.
    stand_in: u64,
    link: Mutex<Option<Link>>,
    /// The stand-in render nodes of this process's `/dev/dri`, with the
    /// mount namespace and the directory's change time they were read in
    /// (a restored task joins its container's namespace after its copy of
    /// this library read CRIU's).
    view: Mutex<Option<(ViewKey, Vec<StandInRender>)>>,
}

/// What a [`Remote::view`] was read for: the mount namespace's inode and
/// `/dev/dri`'s change time.
type ViewKey = (u64, i64, i64);

/// This process's connection: made by the process `pid`, the socket
/// `identity` at the driver's fd number then.
struct Link {
    pid: u32,
    identity: (u64, u64),
    driver: kfd_sim::remote::RemoteDriver,
}

impl Remote {
    /// This process's driver, connected on first use in each process.
    ///
    /// A process real CRIU restored finds in its memory the driver of the
    /// process it was dumped as, same pid, whose fd number CRIU gave a new
    /// connection (the CRIU plugin side of this library,
    /// [`crate::criu_socket`], made it in the restored task): the socket at
    /// the number is then another one than the driver made. The driver is
    /// kept, with the restored connection; every other connection to a
    /// served machine the process holds (the one CRIU's own copy of this
    /// library made while restoring the task) is closed, and the address
    /// becomes the restored connection's (a restore onto another machine).
    pub(crate) fn driver(&self) -> std::io::Result<kfd_sim::remote::RemoteDriver> {
        let me = std::process::id();
        let mut link = self.link.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = &mut *link {
            if l.pid == me {
                match l.driver.connection_identity() {
                    Ok(now) if now == l.identity => return Ok(l.driver.clone()),
                    Ok(now) => {
                        self.restored(&l.driver);
                        l.identity = now;
                        return Ok(l.driver.clone());
                    }
                    // Its number was closed under it: connect anew.
                    Err(_) => {}
                }
            }
        }
        if let Some(stale) = link.take() {
            // A parent's connection, or one whose number was closed: the
            // number may name another file by now, so it is never closed
            // here.
            std::mem::forget(stale.driver);
        }
        let address = self
            .address
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let driver = kfd_sim::remote::RemoteDriver::connect_host(&address)?;
        *link = Some(Link {
            pid: me,
            identity: driver.connection_identity()?,
            driver: driver.clone(),
        });
        Ok(driver)
    }

    /// After a restore: closes the process's other connections to served
    /// machines and follows the restored one's address.
    fn restored(&self, driver: &kfd_sim::remote::RemoteDriver) {
        let keep = driver.connection_fd();
        let stale: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok())
            .filter(|&fd| fd != keep)
            .filter(|&fd| {
                // SAFETY: `fd` is only borrowed for the checks below; a
                // number that closed since the listing fails them.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                kfd_sim::remote::is_connection(fd)
            })
            .collect();
        for fd in stale {
            // SAFETY: `fd` is a connection to a served machine that no
            // driver of this process uses (the one in use is `keep`): this
            // library made it, and nothing else refers to its number.
            unsafe { libc::close(fd) };
        }
        if let Some(address) = driver.connected_address() {
            *self.address.lock().unwrap_or_else(|e| e.into_inner()) = address;
        }
    }

    /// A new fd of this process's connection (made now if there is none),
    /// for CRIU to place where the restored task's connection was.
    pub(crate) fn connection(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.driver()?.connection()
    }

    /// The stand-in render nodes of this process's `/dev/dri`
    /// ([`kfd_sim::remote::stand_in_renders`], the view the served machine
    /// gives this process): the GPUs it sees, under their names there.
    fn view(&self) -> Vec<StandInRender> {
        use std::os::unix::fs::MetadataExt;
        let key = |path: &str| std::fs::metadata(path).ok();
        let (Some(ns), Some(dri)) = (key("/proc/self/ns/mnt"), key("/dev/dri")) else {
            return Vec::new();
        };
        let now = (ns.ino(), dri.ctime(), dri.ctime_nsec());
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        match &*view {
            Some((at, nodes)) if *at == now => nodes.clone(),
            _ => {
                let nodes = kfd_sim::remote::stand_in_renders(Path::new("/")).unwrap_or_default();
                *view = Some((now, nodes.clone()));
                nodes
            }
        }
    }

    /// The simulated device a stand-in fd stands for (the server's answer).
    fn device_of(&self, fd: RawFd) -> Option<DeviceNode> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: `st` is a writable buffer of the size fstat(2) fills.
        if unsafe { crate::real::fstat(fd, st.as_mut_ptr()) } < 0 {
            return None;
        }
        // SAFETY: fstat succeeded and initialised the whole struct.
        let st = unsafe { st.assume_init() };
        if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != self.stand_in {
            return None;
        }
        // SAFETY: `fd` is open (fstat just answered for it) for the call.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        match self.driver().ok()?.fd_kind(fd) {
            Ok(kfd::FdKind::CharDevice(dev))
                if dev.major == KFD_MAJOR || dev.major == DRM_MAJOR =>
            {
                Some(DeviceNode {
                    major: dev.major,
                    minor: dev.minor,
                })
            }
            _ => None,
        }
    }
}

/// Every lock of a [`Machine`] held (see [`Machine::hold_for_fork`]).
#[allow(dead_code)] // the guards are held, never read
pub(crate) struct MachineHold<'a> {
    link: Option<(
        std::sync::MutexGuard<'a, Option<Link>>,
        std::sync::MutexGuard<'a, String>,
    )>,
    local: std::sync::MutexGuard<'a, (u32, SimDriver)>,
    devices: std::sync::MutexGuard<'a, HashMap<(u64, u64), DeviceNode>>,
    mappings: std::sync::MutexGuard<'a, std::collections::BTreeMap<usize, usize>>,
    tally: crate::report::TallyHold<'a>,
    sim: Option<kfd_sim::ForkHold<'a>>,
}

/// The stand-in nodes' device number (`st_rdev` of `/dev/kfd`).
fn stand_in_device() -> Result<u64, String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata("/dev/kfd")
        .map_err(|e| format!("{REMOTE_VAR} needs a stand-in node at /dev/kfd: {e}"))?;
    if !meta.file_type().is_char_device() {
        return Err(format!(
            "{REMOTE_VAR} needs a stand-in character device at /dev/kfd"
        ));
    }
    Ok(meta.rdev())
}

static MACHINE: OnceLock<Result<Machine, String>> = OnceLock::new();

/// The machine, if it was built already (cheap: no initialisation).
pub(crate) fn existing() -> Option<&'static Machine> {
    MACHINE.get().and_then(|m| m.as_ref().ok())
}

/// The machine, built on first call. The error (said once on stderr) when
/// `KFD_SIM_MACHINE` is unset or names nothing usable.
pub(crate) fn get() -> Result<&'static Machine, &'static str> {
    let m = MACHINE.get_or_init(|| {
        let built = Machine::build();
        match &built {
            Ok(_) => crate::fork::register(|| {
                existing().map(|m| Box::new(m.hold_for_fork()) as crate::fork::Locks)
            }),
            Err(e) => eprintln!("kfd-sim-preload: no simulated machine: {e}"),
        }
        built
    });
    m.as_ref().map_err(String::as_str)
}

impl Machine {
    fn build() -> Result<Machine, String> {
        let name = std::env::var_os(MACHINE_VAR).ok_or_else(|| {
            format!(
                "{MACHINE_VAR} is not set: set it to a built-in topology ({}) or to a captured topology directory",
                amdgpu_topology::builtin_names().join(", ")
            )
        })?;
        let path = Path::new(&name);
        let sim = if path.is_dir() {
            Sim::from_sysfs(path, SimConfig::default())
        } else {
            // `builtin:NAME`, as amdgpu-criu names built-in machines, or the
            // bare name.
            let name = name.to_string_lossy();
            let name = name.strip_prefix("builtin:").unwrap_or(&name);
            Sim::builtin(name, SimConfig::default())
        }
        .map_err(|e| format!("{MACHINE_VAR}={}: {e}", path.display()))?;
        crate::engines::configure(&sim)?;
        // It stands for this process: its user addresses are this
        // process's CPU mappings.
        let pid = sim
            .spawn_process_with(kfd_sim::ProcessConfig {
                host_address_space: true,
                ..Default::default()
            })
            .map_err(|e| format!("cannot create the simulated process: {e}"))?;
        let extra = crate::tree::Tree::write(&sim)
            .map_err(|e| format!("cannot write the DRM sysfs tree: {e}"))?;
        let remote = match std::env::var(REMOTE_VAR) {
            Ok(address) => Some(Remote {
                address: Mutex::new(address),
                stand_in: stand_in_device()?,
                link: Mutex::new(None),
                view: Mutex::new(None),
            }),
            Err(std::env::VarError::NotPresent) => None,
            Err(e) => return Err(format!("{REMOTE_VAR}: {e}")),
        };
        let kfd_class = sim
            .sysfs_root()
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .ok_or("the simulator's sysfs tree has no kfd class directory")?;
        Ok(Machine {
            local: Mutex::new((std::process::id(), sim.driver(pid))),
            sim,
            kfd_class,
            extra,
            devices: Mutex::new(HashMap::new()),
            trace: std::env::var_os(TRACE_VAR).is_some(),
            tally: Default::default(),
            mappings: Mutex::new(Default::default()),
            remote,
            svm_used: Default::default(),
        })
    }

    /// Runs `f` with the driver device calls go to: the served machine's
    /// with `KFD_SIM_REMOTE`, else this process's simulator.
    pub(crate) fn with_driver<T>(
        &self,
        f: impl FnOnce(&dyn Driver) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        match &self.remote {
            Some(remote) => f(&remote.driver()?),
            None => f(&self.driver()),
        }
    }

    /// The driver of the simulated process standing for this host process
    /// (without `KFD_SIM_REMOTE`).
    ///
    /// After a `fork(2)` the child holds a copy of the parent's machine, in
    /// which it is a process of its own, as the kernel makes it: on its
    /// first device call the child becomes the simulated fork of the
    /// process that stood for its parent ([`Sim::fork_process`]), so it
    /// gets a new KFD process when it opens `/dev/kfd`, and the parent's
    /// `/dev/kfd` file answers it `EBADF`. Copy-on-write keeps the two
    /// machines apart from then on: state the parent and the child would
    /// share through the kernel (IPC handles, memory accounting) is not
    /// shared.
    pub(crate) fn driver(&self) -> SimDriver {
        let me = std::process::id();
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        if local.0 != me {
            self.sim.after_host_fork();
            match self.sim.fork_process(local.1.pid()) {
                Ok(child) => *local = (me, self.sim.driver(child)),
                Err(e) => {
                    eprintln!("kfd-sim-preload: cannot make the forked child's process: {e}");
                    local.0 = me;
                }
            }
        }
        local.1.clone()
    }

    /// Takes every lock of the machine, in the order its calls nest them
    /// (the served machine's connection, this process's driver, the file
    /// and mapping tables, the report's tally, then the simulator's own,
    /// [`Sim::hold_for_fork`]), and holds them until the result is dropped:
    /// see [`crate::fork`].
    pub(crate) fn hold_for_fork(&self) -> MachineHold<'_> {
        let link = self.remote.as_ref().map(|r| {
            (
                r.link.lock().unwrap_or_else(|e| e.into_inner()),
                r.address.lock().unwrap_or_else(|e| e.into_inner()),
            )
        });
        MachineHold {
            link,
            local: self.local.lock().unwrap_or_else(|e| e.into_inner()),
            devices: self.lock_devices(),
            mappings: self.lock_mappings(),
            tally: self.tally.hold(),
            sim: self.remote.is_none().then(|| self.sim.hold_for_fork()),
        }
    }

    /// The file a `Mapped` path stands for (`None`: no such file).
    pub(crate) fn redirect(&self, path: &[u8]) -> Option<CString> {
        let mut out = None;
        for prefix in SYS_KFD {
            if let Some(rest) = below(path, prefix) {
                out = Some(crate::tree::join(&self.kfd_class, rest));
            }
        }
        if out.is_none() {
            out = self.extra.redirect(path);
        }
        match out {
            Some(p) => CString::new(p).ok(),
            // A NUMA node the simulated machine lacks: the host's own
            // (libnuma reads node0 of the host).
            None if crate::tree::numa_node_of(path).is_some() => CString::new(path).ok(),
            None => None,
        }
    }

    /// Opens `/dev/kfd` or a render node in the simulator: a real fd.
    pub(crate) fn open_device(&self, path: &CStr, flags: i32) -> Result<RawFd, i32> {
        let p = Path::new(std::ffi::OsStr::from_bytes(path.to_bytes()));
        let fd = self
            .with_driver(|d| d.open(p, flags))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        if self.remote.is_some() {
            // The stand-in file: the served machine knows it.
            if self.trace {
                eprintln!(
                    "kfd-sim-preload: open {} -> the served machine's",
                    path.to_string_lossy()
                );
            }
            return Ok(fd.into_raw_fd());
        }
        let node = match classify(path.to_bytes()) {
            PathClass::Render(minor) => DeviceNode {
                major: DRM_MAJOR,
                minor,
            },
            _ => DeviceNode {
                major: KFD_MAJOR,
                minor: 0,
            },
        };
        let key = file_key(std::os::fd::AsRawFd::as_raw_fd(&fd)).ok_or(libc::EBADF)?;
        self.lock_devices().insert(key, node);
        if self.trace {
            eprintln!(
                "kfd-sim-preload: open {} -> simulated {}:{}",
                path.to_string_lossy(),
                node.major,
                node.minor
            );
        }
        Ok(fd.into_raw_fd())
    }

    /// The device node `fd` stands for, if the simulator handed it out.
    pub(crate) fn device_of(&self, fd: RawFd) -> Option<DeviceNode> {
        if let Some(remote) = &self.remote {
            return remote.device_of(fd);
        }
        let key = file_key(fd)?;
        self.lock_devices().get(&key).copied()
    }

    /// The render minor the render node at `/dev/dri/<name>` stands for
    /// (`named`: the one its name says, for `renderD<minor>`), when it is
    /// one of this machine's: with `KFD_SIM_REMOTE`, only a stand-in of
    /// that name in this process's `/dev/dri` stands for one.
    pub(crate) fn render_minor(&self, name: &[u8], named: u32) -> Option<u32> {
        let minor = match &self.remote {
            Some(remote) => {
                remote
                    .view()
                    .into_iter()
                    .find(|n| n.name.as_bytes() == name)?
                    .minor
            }
            None => named,
        };
        self.sim
            .gpus()
            .iter()
            .any(|g| g.render_minor == minor)
            .then_some(minor)
    }

    /// Whether `path` is a file of the KFD topology node of a GPU this
    /// process's device cgroup hides: with `KFD_SIM_REMOTE`, a GPU none of
    /// whose render nodes is in its `/dev/dri` (a container's, see
    /// [`kfd_sim::remote::stand_in_renders`]); amdkfd answers `EPERM` for
    /// those.
    pub(crate) fn hides(&self, path: &[u8]) -> bool {
        let Some(remote) = &self.remote else {
            return false;
        };
        let Some(rest) = SYS_KFD
            .iter()
            .find_map(|p| below(path, p))
            .and_then(|rest| rest.strip_prefix(b"/kfd/topology/nodes/"))
        else {
            return false;
        };
        // A file below nodes/N/ (the directory itself lists as before).
        let Some(at) = rest.iter().position(|&b| b == b'/') else {
            return false;
        };
        let (id, file) = (&rest[..at], &rest[at + 1..]);
        if file.is_empty() {
            return false;
        }
        let Some(node) = std::str::from_utf8(id)
            .ok()
            .and_then(|id| id.parse::<u32>().ok())
            .and_then(|id| self.sim.topology().node(id))
        else {
            return false;
        };
        let minor = node.prop("drm_render_minor");
        if node.gpu_id.unwrap_or(0) == 0 || minor == 0 {
            return false;
        }
        !remote.view().iter().any(|n| u64::from(n.minor) == minor)
    }

    /// The device node `/dev/kfd` or render node `path` names on this
    /// machine (`None`: the simulated machine has no such device).
    pub(crate) fn device_at(&self, class: PathClass<'_>) -> Option<DeviceNode> {
        match class {
            PathClass::Kfd => Some(DeviceNode {
                major: KFD_MAJOR,
                minor: 0,
            }),
            PathClass::Render(minor) => self
                .sim
                .gpus()
                .iter()
                .any(|g| g.render_minor == minor)
                .then_some(DeviceNode {
                    major: DRM_MAJOR,
                    minor,
                }),
            _ => None,
        }
    }

    /// Notes an ioctl the simulator answered (`AMDKFD_IOC_SVM` carries its
    /// attribute count in the size bits, so it is matched by type and
    /// number).
    pub(crate) fn note_ioctl(&self, request: std::ffi::c_ulong) {
        let request = request as u32;
        if kfd_sys::_IOC_TYPE(request) == kfd_sys::_IOC_TYPE(kfd_sys::AMDKFD_IOC_SVM)
            && kfd_sys::_IOC_NR(request) == kfd_sys::_IOC_NR(kfd_sys::AMDKFD_IOC_SVM)
        {
            self.svm_used
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// This process unmapped `[start, start+len)` (`munmap`, or a
    /// `MAP_FIXED` mapping over it): the kernel's MMU notifier ends the SVM
    /// ranges there ([`Sim::cpu_unmapped`]). Only once SVM is in use, and
    /// only for a machine of this process (a served machine is told by
    /// nothing: its SVM ranges outlive CPU unmaps).
    pub(crate) fn cpu_unmapped(&self, start: usize, len: usize) {
        if self.remote.is_none() && self.svm_used.load(std::sync::atomic::Ordering::Relaxed) {
            self.sim
                .cpu_unmapped(self.driver().pid(), start as u64, len as u64);
        }
    }

    /// Notes a CPU mapping the simulator made.
    pub(crate) fn mapped(&self, start: usize, len: usize) {
        self.lock_mappings().insert(start, len);
    }

    /// Whether `[start, start+len)` touches a mapping the simulator made;
    /// forgets the ones it covers whole.
    pub(crate) fn unmapping(&self, start: usize, len: usize) -> bool {
        let end = start.saturating_add(len);
        let mut maps = self.lock_mappings();
        let touched: Vec<(usize, usize)> = maps
            .range(..end)
            .filter(|(&a, &l)| a.saturating_add(l) > start)
            .map(|(&a, &l)| (a, l))
            .collect();
        for &(a, l) in &touched {
            if a >= start && a.saturating_add(l) <= end {
                maps.remove(&a);
            }
        }
        !touched.is_empty()
    }

    fn lock_mappings(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<usize, usize>> {
        self.mappings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where `/dev/dri` itself (a directory of the render nodes) is.
    pub(crate) fn dri_dir(&self) -> CString {
        CString::new(self.extra.dri_dir().as_os_str().as_bytes()).unwrap_or_default()
    }

    fn lock_devices(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), DeviceNode>> {
        self.devices.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The (device, inode) of open fd `fd`, through the C library's fstat.
pub(crate) fn file_key(fd: RawFd) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` is a writable buffer of the size fstat(2) fills.
    let ret = unsafe { crate::real::fstat(fd, st.as_mut_ptr()) };
    if ret < 0 {
        return None;
    }
    // SAFETY: fstat succeeded and initialised the whole struct.
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_classified_by_prefix_only() {
        assert_eq!(classify(b"/dev/kfd"), PathClass::Kfd);
        assert_eq!(classify(b"/dev/kfdx"), PathClass::Host);
        assert_eq!(classify(b"/dev/dri/renderD129"), PathClass::Render(129));
        assert_eq!(classify(b"/dev/dri/card0"), PathClass::OtherDri(b"/card0"));
        assert_eq!(classify(b"/dev/dri"), PathClass::OtherDri(b""));
        assert_eq!(
            classify(b"/sys/devices/virtual/kfd/kfd/topology/nodes/1/properties"),
            PathClass::Mapped
        );
        assert_eq!(classify(b"/sys/class/kfdx"), PathClass::Host);
        assert_eq!(classify(b"/sys/dev/char/226:128/device"), PathClass::Mapped);
        assert_eq!(classify(b"/sys/dev/char/4:1"), PathClass::Host);
        assert_eq!(classify(b"/proc/modules"), PathClass::Mapped);
        assert_eq!(classify(b"/proc/self/maps"), PathClass::Host);
    }
}
