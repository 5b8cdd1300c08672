//! The dump's hooks: `HANDLE_DEVICE_VMA`, `DUMP_EXT_FILE` (a KFD file, a
//! render node or a dma-buf, told apart here and handed to the engine's
//! [`Dumper`]) and `DUMP_DEVICES_LATE`. The inventory entry a restore needs
//! is recorded here; the dump itself is the engine's.
//!
//! A file is identified once, here: what it is and which traced task holds
//! it (the host's answer, else a search of the traced tasks' fds), and that
//! [`DrainedFile`] goes down to the engine, which never searches again.

use std::ffi::c_int;
use std::os::fd::BorrowedFd;

use kfd::{DeviceNumber, Driver};

use amdgpu_checkpoint::dump::{DumpConfig, Dumper};
use amdgpu_checkpoint::identify::{traced_holder, DrainedFile, FdClass};
use amdgpu_checkpoint::Error;

use super::{fail, CriuHost, Plugin, TaskFd, NOT_MINE};
use crate::host::Stage;
use crate::{log_debug, log_error, log_info};

/// Whether `err` is a KFD ioctl the device does not know (`ENOTTY`): the
/// node at `/dev/kfd` belongs to another driver.
fn answers_no_kfd_ioctl(err: &Error) -> bool {
    matches!(err, Error::Kfd { source, .. } if source.errno() == libc::ENOTTY)
}

impl<D: Driver + Clone + 'static, H: CriuHost> Plugin<D, H> {
    /// `fd` and the traced task holding it: as the host names it (a host
    /// that drives the dump itself knows), else found among the tasks this
    /// process traces (CRIU traces the tree it dumps).
    fn drained<'fd>(&self, fd: BorrowedFd<'fd>) -> DrainedFile<'fd> {
        DrainedFile {
            fd,
            holder: self
                .host
                .task_fd(fd)
                .or_else(|| traced_holder(&self.driver, fd)),
        }
    }

    /// `HANDLE_DEVICE_VMA`: accepts mappings of `/dev/kfd` and of amdgpu
    /// render nodes (and records the plugin in the inventory); everything
    /// else is not ours.
    pub fn handle_device_vma(&mut self, dev: DeviceNumber) -> c_int {
        let Some(devices) = self.active() else {
            return NOT_MINE;
        };
        match devices.classify_vma(&self.driver, dev) {
            FdClass::Foreign | FdClass::DmaBuf => NOT_MINE,
            FdClass::Kfd | FdClass::Render { .. } => match self.add_to_inventory() {
                Ok(()) => 0,
                Err(e) => {
                    log_error!("HANDLE_DEVICE_VMA: cannot add the plugin to the inventory: {e}");
                    -libc::ENOMEM
                }
            },
        }
    }

    /// Records the plugin in the inventory (once), so a restore loads it.
    fn add_to_inventory(&mut self) -> std::io::Result<()> {
        if !self.added_to_inventory {
            self.host.add_inventory_plugin()?;
            self.added_to_inventory = true;
        }
        Ok(())
    }

    fn dumper_mut(&mut self) -> &mut Dumper<D> {
        let config = DumpConfig {
            topology_root: self.config.topology_root.clone(),
            options: self.options.clone(),
            unpause_early: !self.config.has_dump_devices_late,
            shm_dir: self.config.shm_dir.clone(),
            guardian_log_dir: self.host.guardian_log_dir(),
            guardian_driver: self.host.guardian_driver(),
        };
        let driver = &self.driver;
        self.dumper
            .get_or_insert_with(|| Dumper::new(driver.clone(), config))
    }

    /// `DUMP_EXT_FILE(fd, id)`.
    pub fn dump_ext_file(&mut self, fd: BorrowedFd<'_>, id: c_int) -> c_int {
        let Some(devices) = self.active() else {
            return NOT_MINE;
        };
        if self.stage != Stage::Dump {
            return NOT_MINE;
        }
        let class = match devices.classify_fd(&self.driver, fd) {
            Ok(class) => class,
            Err(e) => {
                log_debug!("DUMP_EXT_FILE: cannot identify file {id}: {e}; not ours");
                return NOT_MINE;
            }
        };
        if matches!(class, FdClass::Foreign) {
            return NOT_MINE;
        }
        let drained = self.drained(fd);
        let name = match drained.holder {
            Some(TaskFd { pid, fd }) => format!("file {id} (pid {pid} fd {fd})"),
            None => format!("file {id}"),
        };
        let store = match self.host.image_store(true) {
            Ok(store) => store,
            Err(e) => return fail("DUMP_EXT_FILE", &name, &e),
        };
        let file = id as u32;
        self.dumped_ids.insert(file);
        // A process that never mapped a GPU buffer (a render node used
        // without mmap) offers HANDLE_DEVICE_VMA nothing: its files put the
        // plugin into the inventory too.
        if !matches!(class, FdClass::DmaBuf) {
            if let Err(e) = self.add_to_inventory() {
                log_error!("DUMP_EXT_FILE: cannot add the plugin to the inventory: {e}");
                return -libc::ENOMEM;
            }
        }
        let result = match class {
            FdClass::Render { minor } => self
                .dumper_mut()
                .dump_render_node(&store, fd, minor, file)
                .map(|d| {
                    if let Some(gpu) = d.gpu_id {
                        log_info!(
                            "{name}: renderD{} of GPU {gpu:#x} dumped ({} DRM BOs)",
                            d.minor,
                            d.bos
                        )
                    }
                }),
            FdClass::DmaBuf => match self.dumper_mut().dump_dmabuf(&store, fd, file) {
                Ok(None) => return NOT_MINE,
                Ok(Some(d)) => {
                    if let Some(handle) = d.handle {
                        log_info!("{name}: dma-buf of BO handle {handle} dumped");
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            },
            // The contents copy on while CRIU dumps the next process where
            // the engine can (see `dump_kfd_background`).
            _ => self
                .dumper_mut()
                .dump_kfd_background(&store, drained, file)
                .map(|d| {
                    log_info!(
                    "{name}: KFD state of pid {} dumped ({} GPUs, {} BOs, {} content bytes{}{})",
                    d.pid,
                    d.gpus,
                    d.bos,
                    d.content_bytes,
                    if d.stored_bytes.is_none() {
                        ", copying until DUMP_DEVICES_LATE"
                    } else {
                        ""
                    },
                    if d.unpaused { ", unpaused" } else { "" }
                )
                }),
        };
        match result {
            Ok(()) => 0,
            Err(e) if matches!(class, FdClass::Kfd) && answers_no_kfd_ioctl(&e) => {
                log_error!(
                    "DUMP_EXT_FILE: {name}: the device at /dev/kfd is not an amdkfd device \
                     (it does not answer KFD's ioctls: {e}); CRIU cannot dump a process holding it"
                );
                e.errno()
            }
            Err(e) => fail("DUMP_EXT_FILE", &name, &e),
        }
    }

    /// `DUMP_DEVICES_LATE(pid)`: writes the render nodes no KFD file named
    /// as render-only images, then unpauses every process paused by the
    /// dump (also when writing failed); not ours when it did neither.
    pub fn dump_devices_late(&mut self, _pid: c_int) -> c_int {
        if self.active().is_none() {
            return NOT_MINE;
        }
        let Some(dumper) = self.dumper.as_mut() else {
            return NOT_MINE;
        };
        let written = if dumper.pending_render_nodes() > 0 {
            self.host
                .image_store(true)
                .and_then(|store| dumper.finish_render_only(&store))
        } else {
            Ok(0)
        };
        let unpaused = dumper.unpause_all();
        match (written, unpaused) {
            (Err(e), _) => fail("DUMP_DEVICES_LATE", "writing render-only nodes", &e),
            (Ok(_), Err(e)) => fail("DUMP_DEVICES_LATE", "unpausing", &e),
            (Ok(0), Ok(0)) => NOT_MINE,
            (Ok(_), Ok(_)) => 0,
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use std::ffi::{c_int, c_void, OsString};
    use std::io;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
    use std::path::{Path, PathBuf};
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use amdgpu_checkpoint::identify::traced_holder;
    use amdgpu_checkpoint::{Error, Options};
    use amdgpu_image::DirStore;
    use kfd::{DeviceNumber, Driver, FdKind, FrozenCgroup, ProcessStatus};
    use kfd_sim::workload::{Profile, Workload};
    use kfd_sim::SimDriver;

    use crate::hooks::{CriuHost, Plugin, PluginConfig, TaskFd};
    use crate::host::Stage;

    /// The simulated kernel, counting the listings of `/proc`: one per
    /// search of the traced processes' fds.
    #[derive(Clone)]
    struct Counting {
        sim: SimDriver,
        proc_listings: Arc<AtomicUsize>,
    }

    impl Driver for Counting {
        fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
            self.sim.open(path, flags)
        }

        unsafe fn ioctl(
            &self,
            fd: BorrowedFd<'_>,
            request: u64,
            arg: *mut c_void,
        ) -> io::Result<c_int> {
            // SAFETY: the caller upholds `Driver::ioctl`'s contract, passed
            // on unchanged.
            unsafe { self.sim.ioctl(fd, request, arg) }
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
            // SAFETY: the caller upholds `Driver::mmap`'s contract, passed
            // on unchanged.
            unsafe { self.sim.mmap(addr, len, prot, flags, fd, offset) }
        }

        unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()> {
            // SAFETY: the caller upholds `Driver::munmap`'s contract, passed
            // on unchanged.
            unsafe { self.sim.munmap(addr, len) }
        }

        fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind> {
            self.sim.fd_kind(fd)
        }

        fn device_number(&self, path: &Path) -> io::Result<DeviceNumber> {
            self.sim.device_number(path)
        }

        fn read_sysfs(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
            self.sim.read_sysfs(path, limit)
        }

        fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
            if path == Path::new("/proc") {
                self.proc_listings.fetch_add(1, Ordering::SeqCst);
            }
            self.sim.list_dir(path)
        }

        fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
            self.sim.read_link(path)
        }

        fn fdinfo(&self, fd: BorrowedFd<'_>) -> io::Result<String> {
            self.sim.fdinfo(fd)
        }

        fn pidfd_open(&self, pid: u32) -> io::Result<OwnedFd> {
            self.sim.pidfd_open(pid)
        }

        fn pidfd_getfd(&self, pidfd: BorrowedFd<'_>, target_fd: RawFd) -> io::Result<OwnedFd> {
            self.sim.pidfd_getfd(pidfd, target_fd)
        }

        fn ptrace_seize(&self, pid: u32) -> io::Result<()> {
            self.sim.ptrace_seize(pid)
        }

        fn ptrace_interrupt(&self, pid: u32, timeout: std::time::Duration) -> io::Result<()> {
            self.sim.ptrace_interrupt(pid, timeout)
        }

        fn ptrace_detach(&self, pid: u32) -> io::Result<()> {
            self.sim.ptrace_detach(pid)
        }

        fn caller_pid(&self) -> u32 {
            self.sim.caller_pid()
        }

        fn process_status(&self, pid: u32) -> io::Result<ProcessStatus> {
            self.sim.process_status(pid)
        }

        fn process_fds(&self, pid: u32) -> io::Result<Vec<RawFd>> {
            self.sim.process_fds(pid)
        }

        fn frozen_cgroup(&self, pid: u32) -> io::Result<Option<FrozenCgroup>> {
            self.sim.frozen_cgroup(pid)
        }
    }

    /// A dumper's host with an images directory. `searching`: its
    /// `task_fd` searches the traced tasks itself (as the `.so`'s host
    /// once did); else it names no task, as CRIU does.
    struct Host {
        images: PathBuf,
        searching: Option<Counting>,
    }

    impl CriuHost for Host {
        type Store = DirStore;

        fn image_store(&self, _dump: bool) -> Result<DirStore, Error> {
            DirStore::open_dir(&self.images).map_err(|source| Error::Image {
                step: "opening the images directory",
                source,
            })
        }

        fn add_inventory_plugin(&self) -> io::Result<()> {
            Ok(())
        }

        fn inventory_names_plugin(&self) -> bool {
            true
        }

        fn task_fd(&self, fd: BorrowedFd<'_>) -> Option<TaskFd> {
            traced_holder(self.searching.as_ref()?, fd)
        }

        fn find_unused_fd(&self, _pid: u32) -> Option<i32> {
            None
        }

        fn current_pid(&self) -> Option<u32> {
            None
        }
    }

    #[test]
    fn a_dumped_kfd_file_is_searched_for_among_the_traced_tasks_once() {
        // A search reads every fd of every traced task (a pidfd_getfd and
        // a kcmp each): DUMP_EXT_FILE names the file's task once, for its
        // log lines and for the dump, which is handed the answer.
        for host_searches in [true, false] {
            let sim = kfd_sim::Sim::synthetic(1, kfd_sim::SimConfig::default()).unwrap();
            let mut app = Workload::launch(&sim, &Profile::Basic).unwrap();
            app.step().unwrap();
            let criu = sim.spawn_process().unwrap();
            let driver = Counting {
                sim: sim.driver(criu),
                proc_listings: Arc::default(),
            };
            driver.ptrace_seize(app.pid().0).unwrap();
            let pidfd = driver.pidfd_open(app.pid().0).unwrap();
            let drained = driver
                .pidfd_getfd(pidfd.as_fd(), app.kfd_fd().unwrap().as_raw_fd())
                .unwrap();
            let images = tempfile::tempdir().unwrap();
            let shm = tempfile::tempdir().unwrap();
            let host = Host {
                images: images.path().to_path_buf(),
                searching: host_searches.then(|| driver.clone()),
            };
            let config = PluginConfig {
                topology_root: sim.sysfs_root(),
                shm_dir: shm.path().to_path_buf(),
                has_dump_devices_late: true,
                has_restore_retry: true,
            };
            let mut plugin = Plugin::init(
                driver.clone(),
                host,
                Stage::Dump,
                config,
                Options::default(),
            );
            assert_eq!(plugin.dump_ext_file(drained.as_fd(), 1), 0);
            assert_eq!(
                driver.proc_listings.load(Ordering::SeqCst),
                1,
                "searches for the task of one /dev/kfd file (host searching: {host_searches})"
            );
            assert_eq!(plugin.dump_devices_late(app.pid().0 as c_int), 0);
            plugin.exit(0);
            assert!(sim.kfd_state(app.pid()).unwrap().queues_running());
        }
    }
}
