//! The dump's hooks: `HANDLE_DEVICE_VMA`, `DUMP_EXT_FILE` (a KFD file, a
//! render node or a dma-buf, told apart here and handed to the engine's
//! [`Dumper`]) and `DUMP_DEVICES_LATE`. The inventory entry a restore needs
//! is recorded here; the dump itself is the engine's.

use std::ffi::c_int;
use std::os::fd::BorrowedFd;

use kfd::{DeviceNumber, Driver};

use amdgpu_checkpoint::dump::{DumpConfig, Dumper};
use amdgpu_checkpoint::identify::FdClass;
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
    /// How log lines name file `id` at dump: with the task's pid and fd
    /// number when the host can tell them.
    fn dumped_file(&self, fd: BorrowedFd<'_>, id: c_int) -> String {
        match self.host.task_fd(fd) {
            Some(TaskFd { pid, fd }) => format!("file {id} (pid {pid} fd {fd})"),
            None => format!("file {id}"),
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
        let name = self.dumped_file(fd, id);
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
            _ => {
                let task = self.host.task_fd(fd);
                let dumper = self.dumper_mut();
                // The contents copy on while CRIU dumps the next process
                // where the engine can (see `dump_kfd_background`).
                task.map_or(Ok(()), |task| dumper.refuse_second_kfd_file(task.pid, file))
                    .and_then(|()| dumper.dump_kfd_background(&store, fd, file))
            }
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
