#![doc = include_str!("../README.md")]

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use amdgpu_image::{DirStore, StreamMode, StreamStore};
use kfd::{DeviceNumber, Driver};
use kfd_sim::{Pid, ProcessConfig, Sim, SimDriver, SimError};

use amdgpu_checkpoint::parallel::{Copier, ParallelFacts};
use amdgpu_checkpoint::restore::Restored;
use amdgpu_checkpoint::{Error, Options};
use criu_plugin_amdgpu::abi::{hook, Stage, HOOK_SLOTS};
use criu_plugin_amdgpu::hooks::{CriuHost, Plugin, PluginConfig, TaskFd, VmaUpdate, NOT_MINE};
use criu_plugin_amdgpu::store::HostStore;

pub mod pages;
pub mod streamer;

pub use streamer::ImageStreamer;

/// How the emulator opens a stream: through its [`ImageStreamer`].
pub type EmulatedStreamOpen =
    Box<dyn Fn(&str, StreamMode) -> io::Result<std::fs::File> + Send + Sync>;

/// The file in the images directory where the emulator keeps the
/// inventory's plugin list (CRIU keeps it in `inventory.img`).
pub const INVENTORY_FILE: &str = "emulator-inventory.txt";

/// What CRIU gives the plugin, emulated over an images directory.
#[derive(Debug, Clone)]
pub struct EmulatedHost {
    images: PathBuf,
    /// Plugins added to the inventory during a dump.
    added: Arc<Mutex<BTreeSet<String>>>,
    /// `find_unused_fd_pid`'s answer.
    fd_floor: Option<i32>,
    /// CRIU's fd store (kept by the main restorer, shared by every task).
    fdstore: Arc<Mutex<Vec<OwnedFd>>>,
    /// What the emulated CRIU says about the restore it runs, for parallel
    /// restore (nothing known by default).
    parallel: ParallelFacts,
    /// The main restorer's driver, for the parallel restore worker.
    main_driver: Option<SimDriver>,
    /// CRIU's `--stream`: images go through this streamer.
    streamer: Option<ImageStreamer>,
    /// `criu_plugin_get_options`: `None` for a CRIU without it.
    plugin_options: Option<Vec<String>>,
    /// The task and fd of the file being dumped (what CRIU's log knows).
    dumping: Arc<Mutex<Option<TaskFd>>>,
    /// The simulated task this host serves (`getpid()` there).
    task: Option<Pid>,
    /// The dump guardian's log directory and driver (none by default).
    guardian: Option<(PathBuf, amdgpu_checkpoint::guardian::GuardianDriver)>,
}

impl EmulatedHost {
    /// A host writing to / reading from `images`.
    pub fn new(images: &Path, fd_floor: Option<i32>) -> Self {
        EmulatedHost {
            images: images.to_path_buf(),
            added: Arc::default(),
            fd_floor,
            fdstore: Arc::default(),
            parallel: ParallelFacts::default(),
            main_driver: None,
            streamer: None,
            plugin_options: None,
            dumping: Arc::default(),
            task: None,
            guardian: None,
        }
    }

    /// A host whose dumps arm the guardian, logging to `log_dir` and
    /// reaching the machine through `driver` should it recover a process
    /// (the dumper must be a host process the guardian can watch: a test
    /// that runs it as its own process).
    pub fn with_guardian(
        mut self,
        log_dir: &Path,
        driver: amdgpu_checkpoint::guardian::GuardianDriver,
    ) -> Self {
        self.guardian = Some((log_dir.to_path_buf(), driver));
        self
    }

    /// A host that offers `criu_plugin_get_options` with `options` (CRIU's
    /// `--plugin-option` entries), or does not (`None`).
    pub fn with_plugin_options(mut self, options: Option<Vec<String>>) -> Self {
        self.plugin_options = options;
        self
    }

    /// The host as seen from the restored task `pid`: the same images, fd
    /// store and handle sharing, with `getpid()` answering `pid`.
    pub fn for_task(&self, pid: Pid) -> Self {
        EmulatedHost {
            task: Some(pid),
            ..self.clone()
        }
    }

    /// A host whose images go through `streamer` (CRIU's `--stream`); the
    /// emulator's own files (inventory, CPU memory) stay in the directory.
    pub fn streaming(mut self, streamer: Option<ImageStreamer>) -> Self {
        self.streamer = streamer;
        self
    }

    /// The host of a restore's main restorer: what CRIU tells the plugin
    /// about the restore (`POST_FORKING`, a single-process tree, the run
    /// id) and the main restorer's driver for the parallel restore worker.
    pub fn restoring(mut self, facts: ParallelFacts, main_driver: SimDriver) -> Self {
        self.parallel = facts;
        self.main_driver = Some(main_driver);
        self
    }

    /// Writes the inventory's plugin list, as CRIU does after the dump.
    fn write_inventory(&self) -> io::Result<()> {
        let added = self.added.lock().unwrap_or_else(PoisonError::into_inner);
        let text: String = added.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(self.images.join(INVENTORY_FILE), text)
    }
}

impl CriuHost for EmulatedHost {
    type Store = HostStore<EmulatedStreamOpen>;

    fn plugin_options(&self) -> io::Result<Option<Vec<String>>> {
        Ok(self.plugin_options.clone())
    }

    fn guardian_log_dir(&self) -> Option<PathBuf> {
        self.guardian.as_ref().map(|(dir, _)| dir.clone())
    }

    fn guardian_driver(&self) -> amdgpu_checkpoint::guardian::GuardianDriver {
        self.guardian
            .as_ref()
            .map(|(_, driver)| driver.clone())
            .unwrap_or_default()
    }

    fn task_fd(&self, _fd: BorrowedFd<'_>) -> Option<TaskFd> {
        *self.dumping.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn image_store(&self, _dump: bool) -> Result<Self::Store, Error> {
        if let Some(streamer) = &self.streamer {
            let streamer = streamer.clone();
            let open: EmulatedStreamOpen = Box::new(move |name, mode| streamer.open(name, mode));
            return Ok(HostStore::Stream(StreamStore::new(open)));
        }
        DirStore::open_dir(&self.images)
            .map(HostStore::Dir)
            .map_err(|source| Error::Image {
                step: "opening the images directory",
                source,
            })
    }

    fn add_inventory_plugin(&self) -> io::Result<()> {
        self.added
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert("amdgpu_plugin".to_owned());
        Ok(())
    }

    fn inventory_names_plugin(&self) -> bool {
        // No inventory file: images of a CRIU without inventory gating.
        match std::fs::read_to_string(self.images.join(INVENTORY_FILE)) {
            Ok(text) => text.lines().any(|l| l == "amdgpu_plugin"),
            Err(_) => true,
        }
    }

    fn find_unused_fd(&self, _pid: u32) -> Option<i32> {
        self.fd_floor
    }

    fn current_pid(&self) -> Option<u32> {
        self.task.map(|pid| pid.0)
    }

    fn fdstore_add(&self, fd: BorrowedFd<'_>) -> io::Result<i32> {
        let copy = fd.try_clone_to_owned()?;
        let mut store = self.fdstore.lock().unwrap_or_else(PoisonError::into_inner);
        store.push(copy);
        i32::try_from(store.len() - 1).map_err(|_| io::Error::from_raw_os_error(libc::ENOSPC))
    }

    fn fdstore_get(&self, id: i32) -> io::Result<OwnedFd> {
        let store = self.fdstore.lock().unwrap_or_else(PoisonError::into_inner);
        usize::try_from(id)
            .ok()
            .and_then(|i| store.get(i))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?
            .try_clone()
    }

    fn parallel_facts(&self) -> ParallelFacts {
        self.parallel.clone()
    }

    fn copier(&self) -> Option<Copier> {
        Some(Copier {
            driver: std::sync::Arc::new(self.main_driver.clone()?),
            images: DirStore::open_dir(&self.images).ok()?,
        })
    }
}

/// How the emulated CRIU behaves.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// The emulated CRIU's `CR_PLUGIN_HOOK__MAX` (10 for v3.17–v3.19, 12 for
    /// v4.0–v4.1, 13 for v4.2, 15 after): hooks at or above it are never
    /// called.
    pub max_hooks: u32,
    /// Plugin options (what the environment would say).
    pub options: Options,
    /// CRIU's `--plugin-option` entries, handed out through
    /// `criu_plugin_get_options`; `None` emulates a CRIU without it.
    pub plugin_options: Option<Vec<String>>,
    /// The shared-memory directory the plugin probes and recreates.
    pub shm_dir: PathBuf,
    /// What `find_unused_fd_pid` answers in the restored task.
    pub fd_floor: Option<i32>,
    /// CRIU's `--stream`: the plugin's images go through this streamer
    /// (capturing at dump, serving at restore) instead of the directory.
    pub streamer: Option<ImageStreamer>,
    /// The GPUs the device cgroup of the container the tree is restored
    /// into allows (`None`: every GPU of the machine). Restored tasks see
    /// only these: in KFD, in `/dev/dri` and in the topology in sysfs.
    pub restore_visible_gpus: Option<Vec<amdgpu_topology::GpuId>>,
    /// The `/dev/dri` of the container the tree is restored into (`None`:
    /// the host's): its nodes' names and minors may differ from the
    /// host's (see [`kfd_sim::ProcessConfig::dev_dri`]).
    pub restore_dev_dri: Option<Vec<kfd_sim::DevDriNode>>,
}

impl EmulatorConfig {
    /// CRIU after v4.2 with default options; `shm_dir` must be a private
    /// directory (never the system's `/dev/shm` in tests).
    pub fn new(shm_dir: &Path) -> Self {
        EmulatorConfig {
            max_hooks: HOOK_SLOTS as u32,
            options: Options::default(),
            plugin_options: None,
            shm_dir: shm_dir.to_path_buf(),
            fd_floor: Some(200),
            streamer: None,
            restore_visible_gpus: None,
            restore_dev_dri: None,
        }
    }
}

/// One of the target's files CRIU hands to `DUMP_EXT_FILE`.
#[derive(Debug, Clone, Copy)]
pub struct TaskFile<'a> {
    /// The target's fd.
    pub fd: BorrowedFd<'a>,
    /// CRIU's file id for it.
    pub id: u32,
}

/// One task of a process tree to dump.
#[derive(Debug, Clone)]
pub struct TaskToDump<'a> {
    /// The task.
    pub pid: Pid,
    /// Its GPU files, in its ascending fd order.
    pub files: Vec<TaskFile<'a>>,
    /// Its device mappings.
    pub vmas: Vec<DeviceVma>,
}

/// One task of a process tree to restore.
#[derive(Debug, Clone)]
pub struct TaskToRestore {
    /// The task's pid (it is recreated under it).
    pub pid: Pid,
    /// The ids of its GPU files, in its ascending fd order.
    pub file_ids: Vec<u32>,
    /// Its device mappings as saved.
    pub vmas: Vec<DeviceVma>,
}

/// A device mapping of the target, as CRIU records it from `/proc/pid/smaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceVma {
    /// The mapped file's path.
    pub path: PathBuf,
    /// Start address.
    pub addr: u64,
    /// Offset in the file (bytes).
    pub pgoff: u64,
}

impl DeviceVma {
    /// The mappings CRIU offers `HANDLE_DEVICE_VMA` at dump: one per device
    /// of `sim` (`/dev/kfd` and each GPU's render node).
    pub fn offered_at_dump(sim: &Sim) -> Vec<DeviceVma> {
        let kfd = DeviceVma {
            path: "/dev/kfd".into(),
            addr: 0,
            pgoff: 0,
        };
        let renders = sim.gpus().into_iter().filter_map(|gpu| {
            Some(DeviceVma {
                path: sim.render_path(gpu.gpu_id)?,
                addr: 0,
                pgoff: 0,
            })
        });
        std::iter::once(kfd).chain(renders).collect()
    }

    /// The device mappings CRIU finds in a restored process's memory map for
    /// the BOs of a KFD image: VRAM and GTT BOs through their GPU's render
    /// node, doorbell and MMIO pages through `/dev/kfd`, each at CPU address
    /// = GPU address with the checkpointed mmap offset (as ROCm maps them).
    pub fn of_kfd_image(image: &amdgpu_image::CriuKfd) -> Vec<DeviceVma> {
        use amdgpu_image::flags;
        image
            .bo_entries
            .iter()
            .filter_map(|bo| {
                let path = if bo.alloc_flags & (flags::KFD_VRAM | flags::KFD_GTT) != 0 {
                    let gpu = image
                        .device_entries
                        .iter()
                        .find(|d| d.gpu_id == bo.gpu_id)?;
                    PathBuf::from(format!("/dev/dri/renderD{}", gpu.drm_render_minor))
                } else if bo.alloc_flags & (flags::KFD_DOORBELL | flags::KFD_MMIO_REMAP) != 0 {
                    PathBuf::from("/dev/kfd")
                } else {
                    return None;
                };
                Some(DeviceVma {
                    path,
                    addr: bo.addr,
                    pgoff: bo.offset,
                })
            })
            .collect()
    }
}

/// A failure of an emulated CRIU run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulatorError {
    /// A hook answered an error that makes CRIU abort.
    #[error("{hook} for {object} failed with errno {}", -errno)]
    Hook {
        /// The hook.
        hook: &'static str,
        /// What it was called for.
        object: String,
        /// Its (negative) answer.
        errno: c_int,
    },
    /// A dump or restore of no task at all.
    #[error("no task to dump or restore")]
    NoTasks,
    /// The simulator refused a process operation.
    #[error("simulator: {0}")]
    Sim(#[from] SimError),
    /// Host I/O of the emulator failed.
    #[error("{what}: {source}")]
    Io {
        /// What the emulator was doing.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The emulated pages image of a task could not be written or read.
    #[error(transparent)]
    Pages(#[from] pages::PagesImageError),
}

/// The answers of a successful dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpReport {
    /// `HANDLE_DEVICE_VMA` answer per mapping.
    pub vma_answers: Vec<c_int>,
    /// `DUMP_EXT_FILE` answer per file id.
    pub file_answers: Vec<(u32, c_int)>,
    /// `DUMP_DEVICES_LATE`'s answer, when the emulated CRIU has the hook.
    pub late_answer: Option<c_int>,
}

/// A restored task.
pub struct RestoredTask {
    /// The restored process.
    pub pid: Pid,
    /// The fd `RESTORE_EXT_FILE` returned per file id (CRIU would `dup2` it
    /// onto the saved number).
    pub files: Vec<(u32, OwnedFd)>,
    /// `UPDATE_VMA_MAP`'s answer per mapping (fds owned here).
    pub vmas: Vec<(DeviceVma, VmaOutcome)>,
    /// `RESUME_DEVICES_LATE`'s answer.
    pub resume_answer: c_int,
    /// The plugin state of the task (holds the render files it opened).
    pub plugin: Plugin<SimDriver, EmulatedHost>,
}

impl std::fmt::Debug for RestoredTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoredTask")
            .field("pid", &self.pid)
            .field("files", &self.files)
            .field("vmas", &self.vmas)
            .field("resume_answer", &self.resume_answer)
            .finish_non_exhaustive()
    }
}

/// What `UPDATE_VMA_MAP` answered for one mapping.
#[derive(Debug)]
pub enum VmaOutcome {
    /// Map at `pgoff`, through `file` when given.
    Translated {
        /// The new offset.
        pgoff: u64,
        /// The file to map instead of the saved path.
        file: Option<OwnedFd>,
    },
    /// Keep the saved offset and path.
    Unchanged,
    /// Not ours.
    NotOurs,
}

/// An emulated CRIU over one simulated machine and one images directory.
#[derive(Debug)]
pub struct CriuEmulator {
    sim: Sim,
    images: PathBuf,
    config: EmulatorConfig,
}

impl CriuEmulator {
    /// An emulated CRIU for `sim` using the images directory `images`.
    pub fn new(sim: Sim, images: &Path, config: EmulatorConfig) -> Self {
        CriuEmulator {
            sim,
            images: images.to_path_buf(),
            config,
        }
    }

    /// The simulated machine.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    fn has(&self, hook_id: usize) -> bool {
        (hook_id as u32) < self.config.max_hooks
    }

    fn plugin_config(&self) -> PluginConfig {
        PluginConfig {
            topology_root: self.sim.sysfs_root(),
            shm_dir: self.config.shm_dir.clone(),
            has_dump_devices_late: self.has(hook::DUMP_DEVICES_LATE),
            has_restore_retry: self.has(hook::RESTORE_INIT),
        }
    }

    /// The device numbers of the mappings, as `stat` on their paths gives.
    fn vma_device(&self, driver: &SimDriver, vma: &DeviceVma) -> Option<DeviceNumber> {
        driver.device_number(&vma.path).ok()
    }

    /// `criu dump` of process `target` with its GPU `files`, given in the
    /// target's ascending fd order (the order CRIU dumps them in), and its
    /// device `vmas`. The target keeps running afterwards
    /// (`--leave-running`).
    pub fn dump(
        &self,
        target: Pid,
        files: &[TaskFile<'_>],
        vmas: &[DeviceVma],
    ) -> Result<DumpReport, EmulatorError> {
        self.dump_tree(&[TaskToDump {
            pid: target,
            files: files.to_vec(),
            vmas: vmas.to_vec(),
        }])
    }

    /// `criu dump` of a process tree, `tasks[0]` being the root: CRIU's
    /// dumper attaches every task, handles each task's mappings then its
    /// files, and calls `DUMP_DEVICES_LATE` once after all tasks.
    pub fn dump_tree(&self, tasks: &[TaskToDump<'_>]) -> Result<DumpReport, EmulatorError> {
        let root = tasks.first().map(|t| t.pid).ok_or(EmulatorError::NoTasks)?;
        let dumper = self.sim.spawn_process()?;
        let mut result = Ok(());
        for task in tasks {
            result = result.and_then(|()| {
                self.sim
                    .ptrace_attach(dumper, task.pid)
                    .map_err(EmulatorError::from)
            });
        }
        let result = result.and_then(|()| self.dump_as(dumper, root, tasks));
        for task in tasks {
            let _ = self.sim.ptrace_detach(task.pid);
        }
        self.sim.exit_process(dumper)?;
        result
    }

    fn dump_as(
        &self,
        dumper: Pid,
        root: Pid,
        tasks: &[TaskToDump<'_>],
    ) -> Result<DumpReport, EmulatorError> {
        let driver = self.sim.driver(dumper);
        let host = EmulatedHost::new(&self.images, None)
            .streaming(self.config.streamer.clone())
            .with_plugin_options(self.config.plugin_options.clone());
        let mut plugin = Plugin::init(
            driver.clone(),
            host.clone(),
            Stage::Dump,
            self.plugin_config(),
            self.config.options.clone(),
        );
        if plugin.refused() {
            return Err(EmulatorError::Hook {
                hook: "init",
                object: "dump".into(),
                errno: -libc::EINVAL,
            });
        }
        let mut report = DumpReport {
            vma_answers: Vec::new(),
            file_answers: Vec::new(),
            late_answer: None,
        };
        for task in tasks {
            for vma in &task.vmas {
                let answer = match self.vma_device(&driver, vma) {
                    Some(dev) => plugin.handle_device_vma(dev),
                    None => NOT_MINE,
                };
                report.vma_answers.push(answer);
                if answer < 0 {
                    plugin.exit(-1);
                    return Err(EmulatorError::Hook {
                        hook: "HANDLE_DEVICE_VMA",
                        object: vma.path.display().to_string(),
                        errno: answer,
                    });
                }
            }
            for file in &task.files {
                let drained = file
                    .fd
                    .try_clone_to_owned()
                    .map_err(|source| EmulatorError::Io {
                        what: "draining a file of the target",
                        source,
                    })?;
                *host.dumping.lock().unwrap_or_else(PoisonError::into_inner) = Some(TaskFd {
                    pid: task.pid.0,
                    fd: std::os::fd::AsRawFd::as_raw_fd(&file.fd),
                });
                let answer = plugin.dump_ext_file(drained.as_fd(), file.id as c_int);
                *host.dumping.lock().unwrap_or_else(PoisonError::into_inner) = None;
                drop(drained);
                report.file_answers.push((file.id, answer));
                if answer < 0 {
                    plugin.exit(-1);
                    return Err(EmulatorError::Hook {
                        hook: "DUMP_EXT_FILE",
                        object: format!("file {}", file.id),
                        errno: answer,
                    });
                }
            }
            // CRIU's pages dump of the task, its USERPTR targets among its
            // memory: in `dump_one_task`, so before DUMP_DEVICES_LATE lets
            // the GPU queues run on (memory and queue state agree).
            let memory = self.sim.host_memory_of(task.pid);
            if let Err(e) = pages::write(&self.images, task.pid.0, &memory) {
                plugin.exit(-1);
                return Err(e.into());
            }
        }
        if self.has(hook::DUMP_DEVICES_LATE) {
            let answer = plugin.dump_devices_late(root.0 as c_int);
            report.late_answer = Some(answer);
            if answer != 0 && answer != NOT_MINE {
                plugin.exit(-1);
                return Err(EmulatorError::Hook {
                    hook: "DUMP_DEVICES_LATE",
                    object: format!("pid {root}"),
                    errno: answer,
                });
            }
        }
        plugin.exit(0);
        if let Some(streamer) = &self.config.streamer {
            streamer.finish().map_err(|source| EmulatorError::Io {
                what: "finishing the image stream",
                source,
            })?;
        }
        host.write_inventory().map_err(|source| EmulatorError::Io {
            what: "writing the inventory",
            source,
        })?;
        Ok(report)
    }

    /// `criu restore` of process `pid` (recreated under that pid) whose GPU
    /// files had ids `file_ids` (in the task's ascending fd order) and whose
    /// device mappings were `vmas`.
    pub fn restore(
        &self,
        pid: Pid,
        file_ids: &[u32],
        vmas: &[DeviceVma],
    ) -> Result<RestoredTask, EmulatorError> {
        let mut tasks = self.restore_tree(&[TaskToRestore {
            pid,
            file_ids: file_ids.to_vec(),
            vmas: vmas.to_vec(),
        }])?;
        tasks.pop().ok_or(EmulatorError::NoTasks)
    }

    /// `criu restore` of a process tree: the main restorer initialises,
    /// forks every task (each recreated under its pid), each task restores
    /// its files and mappings, and the main restorer resumes every task.
    pub fn restore_tree(
        &self,
        tasks: &[TaskToRestore],
    ) -> Result<Vec<RestoredTask>, EmulatorError> {
        if tasks.is_empty() {
            return Err(EmulatorError::NoTasks);
        }
        // The tasks' pids are taken first: the simulated main restorer must
        // not occupy them (CRIU runs in its own pid namespace level).
        let mut pids = Vec::new();
        for task in tasks {
            match self.sim.spawn_process_with(ProcessConfig {
                pid: Some(task.pid),
                visible_gpus: self.config.restore_visible_gpus.clone(),
                dev_dri: self.config.restore_dev_dri.clone(),
                ..ProcessConfig::default()
            }) {
                Ok(pid) => pids.push(pid),
                Err(e) => {
                    for pid in pids {
                        let _ = self.sim.exit_process(pid);
                    }
                    return Err(e.into());
                }
            }
        }
        // Each task's memory back at its addresses, as CRIU maps it from the
        // pages images; the USERPTR BOs over it are revalidated at RESUME.
        if let Err(e) = self.restore_memory(tasks) {
            for pid in pids {
                let _ = self.sim.exit_process(pid);
            }
            return Err(e);
        }
        let main = match self.sim.spawn_process() {
            Ok(main) => main,
            Err(e) => {
                for pid in pids {
                    let _ = self.sim.exit_process(pid);
                }
                return Err(e.into());
            }
        };
        let result = self.restore_as(main, tasks);
        if let Some(streamer) = &self.config.streamer {
            // Every feeding thread is done once its pipe was read or closed.
            let _ = streamer.finish();
        }
        if result.is_err() {
            for pid in pids {
                let _ = self.sim.exit_process(pid);
            }
        }
        self.sim.exit_process(main)?;
        result
    }

    /// Maps every task's memory from its emulated pages image (none: the
    /// dump carried no memory of that task) into the recreated task.
    fn restore_memory(&self, tasks: &[TaskToRestore]) -> Result<(), EmulatorError> {
        for task in tasks {
            let Some(regions) = pages::read(&self.images, task.pid.0)? else {
                continue;
            };
            for region in regions {
                self.sim
                    .restore_host_memory(task.pid, region.addr, &region.bytes)?;
            }
        }
        Ok(())
    }

    fn restore_as(
        &self,
        main: Pid,
        tasks: &[TaskToRestore],
    ) -> Result<Vec<RestoredTask>, EmulatorError> {
        let host = EmulatedHost::new(&self.images, self.config.fd_floor)
            .restoring(
                ParallelFacts {
                    calls_post_forking: self.has(hook::POST_FORKING),
                    single_process: Some(tasks.len() == 1),
                    streaming: self.config.streamer.is_some(),
                    run_id: None,
                    turned_off: false,
                },
                self.sim.driver(main),
            )
            .streaming(self.config.streamer.clone())
            .with_plugin_options(self.config.plugin_options.clone());
        let mut main_plugin = Plugin::init(
            self.sim.driver(main),
            host.clone(),
            Stage::Restore,
            self.plugin_config(),
            self.config.options.clone(),
        );
        if main_plugin.refused() {
            // CRIU stops when a plugin's init fails, without calling exit.
            return Err(EmulatorError::Hook {
                hook: "init",
                object: "restore".into(),
                errno: -libc::EINVAL,
            });
        }
        let fail = |plugin: Plugin<SimDriver, EmulatedHost>,
                    hook: &'static str,
                    object: String,
                    errno: c_int| {
            plugin.exit(-1);
            EmulatorError::Hook {
                hook,
                object,
                errno,
            }
        };
        if self.has(hook::RESTORE_INIT) {
            let answer = main_plugin.restore_init();
            if answer < 0 && answer != NOT_MINE {
                return Err(fail(main_plugin, "RESTORE_INIT", "images".into(), answer));
            }
        }
        let mut task_plugins: Vec<_> = tasks
            .iter()
            .map(|t| main_plugin.forked_task(self.sim.driver(t.pid), host.for_task(t.pid)))
            .collect();
        if self.has(hook::POST_FORKING) {
            let answer = main_plugin.post_forking();
            if answer < 0 && answer != NOT_MINE {
                return Err(fail(main_plugin, "POST_FORKING", "tasks".into(), answer));
            }
        }
        // As CRIU's open_fdinfos() in every task at once: each task opens
        // its files in ascending fd order, again and again while some ask
        // for a retry; a task may wait for another (a buffer it imports), so
        // the tasks take turns until all are done or a whole round makes no
        // progress.
        let mut files: Vec<Vec<(u32, OwnedFd)>> = tasks.iter().map(|_| Vec::new()).collect();
        let mut waiting: Vec<Vec<u32>> = tasks.iter().map(|t| t.file_ids.clone()).collect();
        while waiting.iter().any(|w| !w.is_empty()) {
            let mut progress = false;
            for (i, task_plugin) in task_plugins.iter_mut().enumerate() {
                let mut still_waiting = Vec::new();
                for &id in &waiting[i] {
                    match task_plugin.restore_file(id as c_int) {
                        Ok(Restored::File(fd)) => {
                            files[i].push((id, fd));
                            progress = true;
                        }
                        Ok(Restored::WaitForKfd | Restored::WaitForBuffer) => {
                            still_waiting.push(id)
                        }
                        Ok(Restored::NotOurs) => {
                            return Err(fail(
                                main_plugin,
                                "RESTORE_EXT_FILE",
                                format!("file {id}"),
                                NOT_MINE,
                            ));
                        }
                        Err(errno) => {
                            return Err(fail(
                                main_plugin,
                                "RESTORE_EXT_FILE",
                                format!("file {id}"),
                                errno,
                            ));
                        }
                    }
                }
                waiting[i] = still_waiting;
            }
            if !progress {
                let stuck: Vec<u32> = waiting.iter().flatten().copied().collect();
                return Err(fail(
                    main_plugin,
                    "RESTORE_EXT_FILE",
                    format!("files {stuck:?} (no progress)"),
                    -libc::EAGAIN,
                ));
            }
        }
        let mut restored = Vec::new();
        for ((task, task_plugin), files) in tasks.iter().zip(task_plugins.iter_mut()).zip(files) {
            let mut mapped = Vec::new();
            for vma in &task.vmas {
                let path = vma.path.as_os_str().as_encoded_bytes();
                let outcome = match task_plugin.update_vma_map(path, vma.addr, vma.pgoff) {
                    VmaUpdate::Translated { pgoff, fd } => VmaOutcome::Translated {
                        pgoff,
                        // SAFETY: an fd >= 0 from UPDATE_VMA_MAP is a new fd
                        // owned by CRIU, here the emulator.
                        file: (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }),
                    },
                    VmaUpdate::Unchanged => VmaOutcome::Unchanged,
                    VmaUpdate::Errno(NOT_MINE) => VmaOutcome::NotOurs,
                    VmaUpdate::Errno(errno) => {
                        return Err(fail(
                            main_plugin,
                            "UPDATE_VMA_MAP",
                            vma.path.display().to_string(),
                            errno,
                        ));
                    }
                };
                mapped.push((vma.clone(), outcome));
            }
            restored.push((task.pid, files, mapped));
        }
        // CRIU only logs RESUME failures (at debug level) and releases the
        // tasks anyway; the answers are reported to the caller.
        let mut out = Vec::new();
        for ((pid, files, vmas), plugin) in restored.into_iter().zip(task_plugins) {
            let resume_answer = main_plugin.resume_devices_late(pid.0 as c_int);
            out.push(RestoredTask {
                pid,
                files,
                vmas,
                resume_answer,
                plugin,
            });
        }
        main_plugin.exit(0);
        Ok(out)
    }
}
