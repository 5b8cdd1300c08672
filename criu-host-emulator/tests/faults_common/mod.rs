//! Shared machinery of the fault, hostile-input and panic tests.
//!
//! * [`FaultDriver`]: a [`kfd::Driver`] over a [`SimDriver`] that records
//!   every device call the plugin makes as a [`Site`] (the simulator's fault
//!   name plus its 1-based occurrence in the run), and can make exactly one
//!   site fail through kfd-sim's own fault injection: right before that call
//!   it arms `FaultSpec::new(name, 1, errno)` (exclusively, so no concurrent
//!   call of the plugin can consume it) and afterwards checks the fault
//!   fired.
//! * [`MiniCriu`]: CRIU's hook sequence for one dump or one restore (as the
//!   plugin's emulator runs it) over any driver and host, so the tests can put
//!   the [`FaultDriver`] or a failing image store underneath.
//! * [`Snapshot`]: what must come back after a failure (simulator accounting,
//!   threads of this process).
//!
//! Never edits the plugin's `tests/common` module; each test binary uses a
//! subset of this one.

#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use amdgpu_checkpoint::options::Options;
use amdgpu_checkpoint::restore::Restored;
use criu_host_emulator::{DeviceVma, TaskFile};
use criu_plugin_amdgpu::abi::{hook, Stage, HOOK_SLOTS};
use criu_plugin_amdgpu::hooks::{CriuHost, Plugin, PluginConfig, VmaUpdate, NOT_MINE};
use kfd::Driver;
use kfd_sim::{Accounting, Errno, FaultSpec, Pid, ProcessConfig, Sim, SimDriver};

/// One call of the plugin into the (simulated) kernel: the simulator's fault
/// name of the operation and which call of that name it is in the run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Site {
    /// `OPEN`, `MMAP`, an ioctl name without prefix (`AMDGPU_CS`) or
    /// `CRIU_OP:<SUB>`.
    pub op: String,
    /// 1-based occurrence of `op` in the run.
    pub nth: u32,
}

/// Checks the call sites a clean run recorded before each is failed in
/// turn: every request is one kfd-sys names, the run made each of `must`,
/// and prints how many sites of each op `label` (the machine) has.
pub fn check_clean_sites(sites: &[Site], phase: &str, must: &[&str], label: &str) {
    let unknown: Vec<_> = sites
        .iter()
        .filter(|s| s.op.starts_with("UNKNOWN_REQUEST"))
        .collect();
    assert!(
        unknown.is_empty(),
        "requests kfd-sys does not name: {unknown:?}"
    );
    for op in must {
        assert!(
            sites.iter().any(|s| s.op == *op),
            "the {phase} never called {op}"
        );
    }
    let mut per_op = std::collections::BTreeMap::new();
    for site in sites {
        *per_op.entry(site.op.as_str()).or_insert(0) += 1;
    }
    println!("{label}: {} call sites: {per_op:?}", sites.len());
}

/// The errno a failed call site gets: `ENOMEM` for `mmap` (what it really
/// fails with), `EIO` for everything else.
pub fn site_errno(site: &Site) -> kfd_sim::Errno {
    if site.op == "MMAP" {
        kfd_sim::Errno(libc::ENOMEM)
    } else {
        kfd_sim::Errno(libc::EIO)
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.op, self.nth)
    }
}

macro_rules! request_names {
    ($($name:ident),* $(,)?) => {
        &[$((kfd_sys::$name as u32, stringify!($name))),*]
    };
}

/// Every request code kfd-sys defines, with its C name.
const REQUESTS: &[(u32, &str)] = request_names![
    DRM_IOCTL_AMDGPU_GEM_CREATE,
    DRM_IOCTL_AMDGPU_GEM_MMAP,
    DRM_IOCTL_AMDGPU_CTX,
    DRM_IOCTL_AMDGPU_BO_LIST,
    DRM_IOCTL_AMDGPU_CS,
    DRM_IOCTL_AMDGPU_INFO,
    DRM_IOCTL_AMDGPU_GEM_VA,
    DRM_IOCTL_AMDGPU_WAIT_CS,
    DRM_IOCTL_AMDGPU_GEM_OP,
    DRM_IOCTL_AMDGPU_GEM_USERPTR,
    DRM_IOCTL_AMDGPU_GEM_LIST_HANDLES,
    DRM_IOCTL_VERSION,
    DRM_IOCTL_GEM_CLOSE,
    DRM_IOCTL_PRIME_HANDLE_TO_FD,
    DRM_IOCTL_PRIME_FD_TO_HANDLE,
    DRM_IOCTL_GEM_CHANGE_HANDLE,
    AMDKFD_IOC_GET_VERSION,
    AMDKFD_IOC_CREATE_QUEUE,
    AMDKFD_IOC_DESTROY_QUEUE,
    AMDKFD_IOC_SET_MEMORY_POLICY,
    AMDKFD_IOC_GET_CLOCK_COUNTERS,
    AMDKFD_IOC_GET_PROCESS_APERTURES,
    AMDKFD_IOC_UPDATE_QUEUE,
    AMDKFD_IOC_CREATE_EVENT,
    AMDKFD_IOC_DESTROY_EVENT,
    AMDKFD_IOC_SET_EVENT,
    AMDKFD_IOC_RESET_EVENT,
    AMDKFD_IOC_WAIT_EVENTS,
    AMDKFD_IOC_SET_SCRATCH_BACKING_VA,
    AMDKFD_IOC_GET_TILE_CONFIG,
    AMDKFD_IOC_SET_TRAP_HANDLER,
    AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
    AMDKFD_IOC_ACQUIRE_VM,
    AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
    AMDKFD_IOC_FREE_MEMORY_OF_GPU,
    AMDKFD_IOC_MAP_MEMORY_TO_GPU,
    AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU,
    AMDKFD_IOC_SET_CU_MASK,
    AMDKFD_IOC_GET_QUEUE_WAVE_STATE,
    AMDKFD_IOC_GET_DMABUF_INFO,
    AMDKFD_IOC_IMPORT_DMABUF,
    AMDKFD_IOC_ALLOC_QUEUE_GWS,
    AMDKFD_IOC_SMI_EVENTS,
    AMDKFD_IOC_SVM,
    AMDKFD_IOC_SET_XNACK_MODE,
    AMDKFD_IOC_CRIU_OP,
    AMDKFD_IOC_AVAILABLE_MEMORY,
    AMDKFD_IOC_EXPORT_DMABUF,
];

/// CRIU sub-operations by `op` number (kfd_ioctl.h order).
const CRIU_OPS: [&str; 5] = ["PROCESS_INFO", "CHECKPOINT", "UNPAUSE", "RESTORE", "RESUME"];

/// The simulator's fault name of a request (prefix stripped), or the raw
/// code in hex when kfd-sys does not define it (the caller fails the test).
pub fn fault_name(request: u64, arg: *mut c_void) -> String {
    let code = request as u32;
    let Some((_, name)) = REQUESTS.iter().find(|(c, _)| *c == code) else {
        return format!("UNKNOWN_REQUEST_{code:#x}");
    };
    if code == kfd_sys::AMDKFD_IOC_CRIU_OP && !arg.is_null() {
        // SAFETY: the caller passes a kfd_ioctl_criu_args (the Driver::ioctl
        // contract makes `arg` valid for its 56 bytes); `op` is its u32 at 48.
        let op = unsafe {
            std::ptr::read_unaligned(
                arg.cast::<u8>()
                    .add(std::mem::offset_of!(kfd_sys::kfd_ioctl_criu_args, op))
                    .cast::<u32>(),
            )
        };
        if let Some(sub) = CRIU_OPS.get(op as usize) {
            return format!("CRIU_OP:{sub}");
        }
    }
    name.strip_prefix("AMDKFD_IOC_")
        .or_else(|| name.strip_prefix("DRM_IOCTL_"))
        .unwrap_or(name)
        .to_owned()
}

#[derive(Debug, Default)]
struct Recorder {
    sites: Vec<Site>,
    counts: HashMap<String, u32>,
    target: Option<(Site, Errno)>,
    /// Whether the targeted call reached the simulator's fault point.
    fired: Option<bool>,
}

/// See the module docs.
#[derive(Clone)]
pub struct FaultDriver {
    inner: SimDriver,
    rec: Arc<Mutex<Recorder>>,
    /// Taken shared by every call, exclusively by the faulted one.
    gate: Arc<RwLock<()>>,
}

impl std::fmt::Debug for FaultDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultDriver")
            .field("pid", &self.inner.pid())
            .finish()
    }
}

impl FaultDriver {
    /// Records the calls `inner` is asked to make.
    pub fn new(inner: SimDriver) -> FaultDriver {
        FaultDriver {
            inner,
            rec: Arc::default(),
            gate: Arc::default(),
        }
    }

    /// A driver for another simulated process sharing this one's record
    /// (CRIU's dumper, main restorer and restored task are one run).
    pub fn for_pid(&self, pid: Pid) -> FaultDriver {
        FaultDriver {
            inner: self.inner.sim().driver(pid),
            rec: self.rec.clone(),
            gate: self.gate.clone(),
        }
    }

    /// Makes `site` fail with `errno` in the coming run.
    pub fn fail_at(&self, site: Site, errno: Errno) {
        let mut rec = self.lock();
        rec.target = Some((site, errno));
        rec.fired = None;
    }

    /// Every call so far, in order.
    pub fn sites(&self) -> Vec<Site> {
        self.lock().sites.clone()
    }

    /// `Some(true)` when the targeted call met its injected fault,
    /// `Some(false)` when the call happened but the simulator rejected it
    /// before its fault point, `None` when the site was never reached.
    pub fn fired(&self) -> Option<bool> {
        self.lock().fired
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorder> {
        self.rec.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one call and runs it, armed if it is the target.
    fn call<T>(&self, op: String, run: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let armed = {
            let mut rec = self.lock();
            let n = rec.counts.entry(op.clone()).or_insert(0);
            *n += 1;
            let site = Site { op, nth: *n };
            rec.sites.push(site.clone());
            match &rec.target {
                Some((target, errno)) if *target == site => Some((site, *errno)),
                _ => None,
            }
        };
        let Some((site, errno)) = armed else {
            let _shared = self.gate.read().unwrap_or_else(PoisonError::into_inner);
            return run();
        };
        let _exclusive = self.gate.write().unwrap_or_else(PoisonError::into_inner);
        let sim = self.inner.sim();
        sim.inject(FaultSpec::new(&site.op, 1, errno));
        let result = run();
        let fired = sim.pending_faults().is_empty();
        sim.clear_faults();
        self.lock().fired = Some(fired);
        result
    }
}

impl Driver for FaultDriver {
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
        self.call("OPEN".into(), || self.inner.open(path, flags))
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<c_int> {
        let name = fault_name(request, arg);
        // SAFETY: forwarded Driver::ioctl contract.
        self.call(name, || unsafe { self.inner.ioctl(fd, request, arg) })
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
        self.call("MMAP".into(), || unsafe {
            self.inner.mmap(addr, len, prot, flags, fd, offset)
        })
    }

    forward_driver_rest!();
}

/// The [`kfd::Driver`] methods a test's driver passes straight to its
/// `inner` [`SimDriver`] (all but `open`, `ioctl` and `mmap`, which the
/// test drivers watch).
macro_rules! forward_driver_rest {
    () => {
        unsafe fn munmap(
            &self,
            addr: std::ptr::NonNull<std::ffi::c_void>,
            len: usize,
        ) -> std::io::Result<()> {
            // SAFETY: forwarded Driver::munmap contract (a dead process's
            // mappings go with it; the host memory is released either way).
            unsafe { self.inner.munmap(addr, len) }
        }

        fn fd_kind(&self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<kfd::FdKind> {
            self.inner.fd_kind(fd)
        }

        fn device_number(&self, path: &std::path::Path) -> std::io::Result<kfd::DeviceNumber> {
            self.inner.device_number(path)
        }

        fn read_sysfs(&self, path: &std::path::Path, limit: usize) -> std::io::Result<Vec<u8>> {
            self.inner.read_sysfs(path, limit)
        }

        fn list_dir(&self, path: &std::path::Path) -> std::io::Result<Vec<std::ffi::OsString>> {
            self.inner.list_dir(path)
        }

        fn read_link(&self, path: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
            self.inner.read_link(path)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use forward_driver_rest;

/// A hook that made CRIU give up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// The hook.
    pub hook: &'static str,
    /// Its negative answer.
    pub errno: c_int,
}

/// What a successful restore left: the restored task's plugin state (it
/// holds render files, as the real restored process does) and the files.
pub struct RestoredTask<D: Driver + Clone + 'static, H: CriuHost> {
    /// The plugin state of the restored task.
    pub plugin: Plugin<D, H>,
    /// The fds `RESTORE_EXT_FILE` returned.
    pub files: Vec<OwnedFd>,
    /// `RESUME_DEVICES_LATE`'s answer (CRIU only logs it).
    pub resume_answer: c_int,
}

/// A `Basic` workload on `sim`, stepped once, given `prepare` (more GPU
/// state for the paths under test), dumped cleanly into `images` by a
/// [`MiniCriu`] with the plugin's log kept quiet, and killed: its pid, its
/// GPU file ids and what `prepare` returned.
pub fn dump_and_kill<T>(
    sim: &Sim,
    images: &Path,
    shm: &Path,
    prepare: impl FnOnce(&kfd_sim::workload::Workload) -> T,
) -> (Pid, Vec<u32>, T) {
    let mut app = kfd_sim::workload::Workload::launch(sim, &kfd_sim::workload::Profile::Basic)
        .expect("launch app");
    app.step().expect("app step");
    let prepared = prepare(&app);
    let criu = MiniCriu::new(sim, shm);
    let (files, ids) = crate::common::gpu_files(&app);
    let quiet = criu_plugin_amdgpu::log::Capture::start();
    criu.dump(
        |pid| sim.driver(pid),
        criu_host_emulator::EmulatedHost::new(images, None),
        app.pid(),
        &files,
        &crate::common::device_vmas(sim),
    )
    .expect("clean dump");
    drop(quiet);
    drop(files);
    let pid = app.pid();
    app.exit().expect("the app exits");
    (pid, ids, prepared)
}

/// Which hooks a CRIU release calls: the shapes of host the plugin must
/// handle, told apart by the length of CRIU's hook table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostShape {
    /// The releases of this shape.
    pub name: &'static str,
    /// CRIU's `CR_PLUGIN_HOOK__MAX`: hooks below it exist.
    pub max_hooks: u32,
}

impl HostShape {
    /// CRIU after v4.2: every hook, so `DUMP_DEVICES_LATE` unpauses and
    /// writes render-only nodes, and `RESTORE_EXT_FILE` can retry.
    pub const AFTER_V4_2: HostShape = HostShape {
        name: "CRIU after v4.2",
        max_hooks: HOOK_SLOTS as u32,
    };
    /// CRIU v4.2 and older (v4.2's table): no `DUMP_DEVICES_LATE` (the
    /// plugin unpauses at the end of the KFD file's `DUMP_EXT_FILE`, copying
    /// nothing in the background, and writes render-only nodes at `exit`),
    /// no `RESTORE_INIT` and no retry.
    pub const V4_2: HostShape = HostShape {
        name: "CRIU v4.2",
        // Its last hook is POST_FORKING.
        max_hooks: hook::POST_FORKING as u32 + 1,
    };
    /// Both, for the sweeps that inject faults.
    pub const ALL: [HostShape; 2] = [HostShape::AFTER_V4_2, HostShape::V4_2];

    /// Whether CRIU of this shape calls hook `id`.
    pub fn has(self, id: usize) -> bool {
        (id as u32) < self.max_hooks
    }
}

impl std::fmt::Display for HostShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// A case of the call-site sweeps: the machine (GPUs, whether the app has
/// a DRM BO) and the host shape.
pub type Config = (usize, bool, HostShape);

/// Every case of the call-site sweeps with its label: one, two GPUs, and
/// one with a DRM BO, under each host shape.
pub fn sweep_configs() -> Vec<(Config, String)> {
    let machines = [(1, false), (2, false), (1, true)];
    HostShape::ALL
        .into_iter()
        .flat_map(|shape| machines.map(|(gpus, drm_bo)| (gpus, drm_bo, shape)))
        .map(|(gpus, drm_bo, shape)| {
            let label = format!(
                "{gpus} GPU(s){}, {shape}",
                if drm_bo { " and a DRM BO" } else { "" }
            );
            ((gpus, drm_bo, shape), label)
        })
        .collect()
}

/// CRIU's hook sequence over any driver and host (see the module docs).
pub struct MiniCriu {
    /// The simulated machine.
    pub sim: Sim,
    /// The KFD topology root the plugin parses.
    pub topology_root: PathBuf,
    /// The private shared-memory directory.
    pub shm_dir: PathBuf,
    /// The hooks this CRIU calls.
    pub shape: HostShape,
}

impl MiniCriu {
    /// A CRIU after v4.2 on `sim` whose plugin reads the simulator's own
    /// topology.
    pub fn new(sim: &Sim, shm_dir: &Path) -> MiniCriu {
        MiniCriu::of_shape(sim, shm_dir, HostShape::AFTER_V4_2)
    }

    /// A CRIU of `shape` on `sim` whose plugin reads the simulator's own
    /// topology.
    pub fn of_shape(sim: &Sim, shm_dir: &Path, shape: HostShape) -> MiniCriu {
        MiniCriu {
            sim: sim.clone(),
            topology_root: sim.sysfs_root(),
            shm_dir: shm_dir.to_path_buf(),
            shape,
        }
    }

    /// The plugin configuration of this CRIU.
    pub fn config(&self) -> PluginConfig {
        PluginConfig {
            topology_root: self.topology_root.clone(),
            shm_dir: self.shm_dir.clone(),
            has_dump_devices_late: self.shape.has(hook::DUMP_DEVICES_LATE),
            has_restore_retry: self.shape.has(hook::RESTORE_INIT),
        }
    }

    /// `criu dump --leave-running` of `target` by a dumper process whose
    /// driver `driver_of` makes; files in ascending fd order.
    pub fn dump<D: Driver + Clone + 'static, H: CriuHost>(
        &self,
        driver_of: impl Fn(Pid) -> D,
        host: H,
        target: Pid,
        files: &[TaskFile<'_>],
        vmas: &[DeviceVma],
    ) -> Result<(), HookFailure> {
        let dumper = self.sim.spawn_process().expect("spawn the dumper");
        self.sim
            .ptrace_attach(dumper, target)
            .expect("ptrace-attach the target");
        let result = dump_hooks(driver_of(dumper), host, self.config(), target, files, vmas);
        let _ = self.sim.ptrace_detach(target);
        match self.sim.exit_process(dumper) {
            // A test that killed the dumper mid-dump ended it already.
            Ok(()) | Err(kfd_sim::SimError::NoSuchProcess(_)) => {}
            Err(e) => panic!("the dumper exits: {e}"),
        }
        result
    }

    /// `criu restore` of `pid` with GPU files `ids` and device mappings
    /// `vmas`. On failure the restored task is killed, as CRIU does.
    pub fn restore<D: Driver + Clone + 'static, H: CriuHost + Clone>(
        &self,
        driver_of: impl Fn(Pid) -> D,
        host: H,
        pid: Pid,
        ids: &[u32],
        vmas: &[DeviceVma],
    ) -> Result<RestoredTask<D, H>, HookFailure> {
        let task = self
            .sim
            .spawn_process_with(ProcessConfig {
                pid: Some(pid),
                ..ProcessConfig::default()
            })
            .expect("recreate the task");
        let main = self.sim.spawn_process().expect("spawn the main restorer");
        let result = restore_hooks(
            driver_of(main),
            driver_of(task),
            host,
            self.config(),
            self.shape,
            task,
            ids,
            vmas,
        );
        match &result {
            Ok(_) => match self.sim.exit_process(main) {
                // A test that killed the restore at RESUME ended it.
                Ok(()) | Err(kfd_sim::SimError::NoSuchProcess(_)) => {}
                Err(e) => panic!("the main restorer exits: {e}"),
            },
            Err(_) => {
                // A test that killed the restore ended both already.
                for (pid, what) in [
                    (task, "the failed task is killed"),
                    (main, "the main restorer exits"),
                ] {
                    match self.sim.exit_process(pid) {
                        Ok(()) | Err(kfd_sim::SimError::NoSuchProcess(_)) => {}
                        Err(e) => panic!("{what}: {e}"),
                    }
                }
            }
        }
        result
    }
}

/// The dumper's side of `criu dump --leave-running` of `target`: the hooks
/// in CRIU's order, by a dumper (already the target's tracer) whose driver
/// is `driver`; files in ascending fd order. `DUMP_DEVICES_LATE` is called
/// when `config` says this CRIU has it.
pub fn dump_hooks<D: Driver + Clone + 'static, H: CriuHost>(
    driver: D,
    host: H,
    config: PluginConfig,
    target: Pid,
    files: &[TaskFile<'_>],
    vmas: &[DeviceVma],
) -> Result<(), HookFailure> {
    let config_has_dump_devices_late = config.has_dump_devices_late;
    let mut plugin = Plugin::init(
        driver.clone(),
        host,
        Stage::Dump,
        config,
        Options::default(),
    );
    let result = (|| {
        for vma in vmas {
            if let Ok(dev) = driver.device_number(&vma.path) {
                let answer = plugin.handle_device_vma(dev);
                if answer < 0 {
                    return Err(HookFailure {
                        hook: "HANDLE_DEVICE_VMA",
                        errno: answer,
                    });
                }
            }
        }
        for file in files {
            let drained = file.fd.try_clone_to_owned().expect("drain a file");
            let answer = plugin.dump_ext_file(drained.as_fd(), file.id as c_int);
            if answer < 0 {
                return Err(HookFailure {
                    hook: "DUMP_EXT_FILE",
                    errno: answer,
                });
            }
        }
        if config_has_dump_devices_late {
            let answer = plugin.dump_devices_late(target.0 as c_int);
            if answer < 0 && answer != NOT_MINE {
                return Err(HookFailure {
                    hook: "DUMP_DEVICES_LATE",
                    errno: answer,
                });
            }
        }
        Ok(())
    })();
    plugin.exit(if result.is_ok() { 0 } else { -1 });
    result
}

/// The restorer's side of `criu restore` of task `task` with GPU files
/// `ids` and device mappings `vmas`: the main restorer's and the task's
/// hooks in CRIU's order, those `shape` has. On failure the plugins are
/// ended as CRIU ends them (the caller kills the task).
#[allow(clippy::too_many_arguments)]
pub fn restore_hooks<D: Driver + Clone + 'static, H: CriuHost + Clone>(
    main_driver: D,
    task_driver: D,
    host: H,
    config: PluginConfig,
    shape: HostShape,
    task: Pid,
    ids: &[u32],
    vmas: &[DeviceVma],
) -> Result<RestoredTask<D, H>, HookFailure> {
    let mut main_plugin = Plugin::init(
        main_driver,
        host.clone(),
        Stage::Restore,
        config,
        Options::default(),
    );
    let mut task_plugin = main_plugin.forked_task(task_driver, host);
    let result = (|| {
        if shape.has(hook::RESTORE_INIT) {
            let answer = main_plugin.restore_init();
            if answer < 0 && answer != NOT_MINE {
                return Err(HookFailure {
                    hook: "RESTORE_INIT",
                    errno: answer,
                });
            }
        }
        if shape.has(hook::POST_FORKING) {
            let answer = main_plugin.post_forking();
            if answer < 0 && answer != NOT_MINE {
                return Err(HookFailure {
                    hook: "POST_FORKING",
                    errno: answer,
                });
            }
        }
        let mut files = Vec::new();
        let mut waiting = ids.to_vec();
        while !waiting.is_empty() {
            let mut still = Vec::new();
            for &id in &waiting {
                match task_plugin.restore_file(id as c_int) {
                    Ok(Restored::File(fd)) => files.push(fd),
                    Ok(Restored::WaitForKfd | Restored::WaitForBuffer) => still.push(id),
                    Ok(Restored::NotOurs) => {
                        return Err(HookFailure {
                            hook: "RESTORE_EXT_FILE",
                            errno: NOT_MINE,
                        })
                    }
                    Err(errno) => {
                        return Err(HookFailure {
                            hook: "RESTORE_EXT_FILE",
                            errno,
                        })
                    }
                }
            }
            if still.len() == waiting.len() {
                return Err(HookFailure {
                    hook: "RESTORE_EXT_FILE",
                    errno: -libc::EAGAIN,
                });
            }
            waiting = still;
        }
        for vma in vmas {
            let path = vma.path.as_os_str().as_encoded_bytes();
            match task_plugin.update_vma_map(path, vma.addr, vma.pgoff) {
                VmaUpdate::Translated { fd, .. } if fd >= 0 => {
                    // SAFETY: an fd >= 0 from UPDATE_VMA_MAP is new and
                    // owned by CRIU, here this function.
                    files.push(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) });
                }
                VmaUpdate::Errno(e) if e != NOT_MINE => {
                    return Err(HookFailure {
                        hook: "UPDATE_VMA_MAP",
                        errno: e,
                    })
                }
                _ => {}
            }
        }
        Ok(files)
    })();
    match result {
        Ok(files) => {
            let resume_answer = main_plugin.resume_devices_late(task.0 as c_int);
            main_plugin.exit(0);
            Ok(RestoredTask {
                plugin: task_plugin,
                files,
                resume_answer,
            })
        }
        Err(failure) => {
            main_plugin.exit(-1);
            drop(task_plugin);
            Err(failure)
        }
    }
}

/// Resources that must be back where they were after a failed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The simulator's accounting.
    pub accounting: Accounting,
    /// Threads of this process.
    pub threads: usize,
}

impl Snapshot {
    /// Takes one now.
    pub fn take(sim: &Sim) -> Snapshot {
        Snapshot {
            accounting: sim.accounting(),
            threads: thread_count(),
        }
    }
}

/// The number of threads once joined threads have left `/proc/self/task`:
/// `pthread_join` returns when the kernel clears the thread's tid, which is
/// before the exiting task is released, so a thread joined a moment ago can
/// still be listed. Waits up to two seconds for the count to drop to `limit`
/// and returns the count then; a thread that is really still alive stays
/// counted.
pub fn thread_count_settled(limit: usize) -> usize {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let count = thread_count();
        if count <= limit || std::time::Instant::now() >= deadline {
            return count;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The number of threads of this process.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The words an error line must contain for a failure of `op`: the
/// operation as the kfd crate names it.
pub fn op_words(op: &str) -> String {
    match op {
        "OPEN" => "open".into(),
        "MMAP" => "mmap".into(),
        _ => op.replace(':', " "),
    }
}

/// Whether an error-level line of `lines` names `op`.
pub fn log_names_op(lines: &[(criu_plugin_amdgpu::log::Level, String)], op: &str) -> bool {
    let words = op_words(op).to_ascii_lowercase();
    lines.iter().any(|(level, text)| {
        *level == criu_plugin_amdgpu::log::Level::Error
            && text.to_ascii_lowercase().contains(&words)
    })
}

/// Whether `amdgpu-criu verify` would call the set in `dir` complete: it has
/// amdgpu image files and no problem.
pub fn set_looks_complete(dir: &Path) -> bool {
    let store = amdgpu_image::DirStore::open_dir(dir).expect("open the images dir");
    let report = amdgpu_image::verify_set(&store, amdgpu_image::ReadLimits::default())
        .expect("list the images dir");
    report.files > 0 && report.is_clean()
}

/// Removes every file of `dir` (between runs in one images directory).
pub fn empty_dir(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("read the images dir") {
        let path = entry.expect("dir entry").path();
        std::fs::remove_file(&path).expect("remove an image");
    }
}

/// One device call of a CRIU run: its name (as [`fault_name`] gives it,
/// `OPEN`, `MMAP`) and, on a render node, its minor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The call's name.
    pub name: String,
    /// The render node's minor, for a call on one.
    pub minor: Option<u32>,
}

/// (label, call index) of each stage in a clean dump's calls where the
/// kill tests kill the dumper: right after `PROCESS_INFO`, during the BO
/// drain of each of the `gpus` GPUs and at `DUMP_DEVICES_LATE`.
pub fn dump_kill_stages(calls: &[Call], gpus: usize) -> Vec<(String, usize)> {
    let position = |from: usize, name: &str| {
        calls[from..]
            .iter()
            .position(|c| c.name == name)
            .map(|i| i + from)
            .unwrap_or_else(|| panic!("no {name} in the dump: {calls:?}"))
    };
    let info = position(0, "CRIU_OP:PROCESS_INFO");
    let mut stages = vec![("after PROCESS_INFO".to_owned(), info + 1)];
    let checkpoint = position(info, "CRIU_OP:CHECKPOINT");
    let mut minors: Vec<u32> = calls[checkpoint..].iter().filter_map(|c| c.minor).collect();
    minors.sort_unstable();
    minors.dedup();
    assert_eq!(minors.len(), gpus, "every GPU drains: {calls:?}");
    for minor in minors {
        // The GPU's SDMA submissions; killed at its second (one BO's copy
        // submitted, the next one on its way) or its only one.
        let submissions: Vec<usize> = (checkpoint..calls.len())
            .filter(|&i| calls[i].minor == Some(minor) && calls[i].name == "AMDGPU_CS")
            .collect();
        let at = *submissions
            .get(1)
            .or(submissions.first())
            .unwrap_or_else(|| panic!("no SDMA submission on renderD{minor}: {calls:?}"));
        stages.push((format!("during the BO drain of renderD{minor}"), at));
    }
    let late = position(checkpoint, "CRIU_OP:UNPAUSE");
    stages.push(("at DUMP_DEVICES_LATE".to_owned(), late));
    stages
}

/// (label, call index) of each restore stage: right after `RESTORE`, during
/// the BO fill of each GPU (its second SDMA submission, or its only one),
/// and at `RESUME`.
pub fn restore_kill_stages(calls: &[Call]) -> Vec<(String, usize)> {
    let restore = calls
        .iter()
        .position(|c| c.name == "CRIU_OP:RESTORE")
        .unwrap_or_else(|| panic!("no RESTORE: {calls:?}"));
    let mut stages = vec![("after RESTORE".to_owned(), restore + 1)];
    let mut minors: Vec<u32> = calls[restore..].iter().filter_map(|c| c.minor).collect();
    minors.sort_unstable();
    minors.dedup();
    for minor in minors {
        let submissions: Vec<usize> = (restore..calls.len())
            .filter(|&i| calls[i].minor == Some(minor) && calls[i].name == "AMDGPU_CS")
            .collect();
        if let Some(&at) = submissions.get(1).or(submissions.first()) {
            stages.push((format!("during the BO fill of renderD{minor}"), at));
        }
    }
    let resume = calls
        .iter()
        .position(|c| c.name == "CRIU_OP:RESUME")
        .unwrap_or_else(|| panic!("no RESUME: {calls:?}"));
    stages.push(("at RESUME".to_owned(), resume));
    stages
}
