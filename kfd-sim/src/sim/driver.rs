//! [`SimDriver`], one simulated process's [`kfd::Driver`]: routes `open`,
//! `ioctl`, `mmap` and `munmap` to the KFD half (`crate::amdkfd`) or the DRM
//! half, and answers `fd_kind`, `device_number` and `read_sysfs` as the
//! kernel would for that process.
//!
//! This module never interprets ioctl arguments itself.

use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use kfd::{DeviceNumber, Driver, FdKind, FrozenCgroup, HostDriver, ProcessStatus};

use crate::amdkfd::process::KfdProcess;
use crate::hw::bo::{memfd_create, Memfd};
use ::kfd::Errno;

use super::Sim;
use crate::kernel::{
    CpuMapping, Ctx, FileKey, KfdFile, OpenFile, Pid, RenderFile, State, DRM_MAJOR, KFD_MAJOR,
};

/// One simulated process's [`kfd::Driver`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SimDriver {
    pub(crate) sim: Sim,
    pub(crate) pid: Pid,
}

impl SimDriver {
    /// The process this driver acts as.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The simulator.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    fn alive(&self, st: &State) -> Result<(), Errno> {
        if st.processes.contains_key(&self.pid) {
            Ok(())
        } else {
            Err(Errno(libc::ESRCH))
        }
    }

    fn open_inner(&self, path: &Path, flags: c_int) -> Result<OwnedFd, Errno> {
        let shared = &self.sim.shared;
        let mut st = self.sim.lock();
        self.alive(&st)?;
        crate::kernel::fault::check(&mut st, "OPEN")?;
        let cloexec = flags & libc::O_CLOEXEC != 0;
        let path_str = path.to_str().ok_or(Errno(libc::ENOENT))?;
        if path_str == "/dev/kfd" {
            let fd = memfd_create("kfd-sim-kfd", cloexec)?;
            let key = FileKey::of_raw(fd.as_raw_fd())?;
            let pid = self.pid;
            let proc_ = st.processes.get_mut(&pid).ok_or(Errno(libc::ESRCH))?;
            if proc_.kfd.is_none() {
                proc_.kfd = Some(KfdProcess::new(&shared.gpus, &proc_.visible));
            }
            proc_.fds.insert(fd.as_raw_fd(), key);
            st.insert_file(key, OpenFile::Kfd(KfdFile { owner: pid }));
            return Ok(fd);
        }
        if let Some(gpu) = self.dri_node(&st, path_str)? {
            let minor = shared.gpus[gpu].info.render_minor;
            let visible = st
                .processes
                .get(&self.pid)
                .is_some_and(|p| p.visible.contains(&gpu));
            if !visible {
                return Err(Errno(libc::EPERM));
            }
            let fd = memfd_create(&format!("kfd-sim-renderD{minor}"), cloexec)?;
            let key = FileKey::of_raw(fd.as_raw_fd())?;
            if let Some(p) = st.processes.get_mut(&self.pid) {
                p.fds.insert(fd.as_raw_fd(), key);
            }
            st.insert_file(
                key,
                OpenFile::Render(RenderFile {
                    gpu,
                    opener: self.pid,
                    kfd_vm_owner: None,
                    drm: crate::drm::DrmFile::new(&shared.gpus[gpu].drm),
                }),
            );
            return Ok(fd);
        }
        Err(Errno(libc::ENOENT))
    }

    /// The GPU (index) behind `/dev/dri/<name>` as this process sees it:
    /// its container's nodes, else the host's `renderD<minor>` of every GPU.
    /// `Ok(None)` for paths outside `/dev/dri`, `ENOENT` for names there
    /// that are not a node.
    fn dri_node(&self, st: &State, path: &str) -> Result<Option<usize>, Errno> {
        let Some(name) = path.strip_prefix("/dev/dri/") else {
            return Ok(None);
        };
        let gpus = &self.sim.shared.gpus;
        let view = st.processes.get(&self.pid).and_then(|p| p.dev_dri.as_ref());
        let gpu = match view {
            Some(nodes) => nodes
                .iter()
                .find(|n| n.name == name)
                .and_then(|n| gpus.iter().position(|g| g.info.gpu_id == n.gpu_id)),
            None => name
                .strip_prefix("renderD")
                .and_then(|m| m.parse::<u32>().ok())
                .and_then(|m| gpus.iter().position(|g| g.info.render_minor == m)),
        };
        gpu.map(Some).ok_or(Errno(libc::ENOENT))
    }

    /// The process's `/dev/dri` nodes: `(name, minor, GPU index)`.
    fn dri_view(&self) -> Vec<(String, u32, usize)> {
        let st = self.sim.lock();
        let gpus = &self.sim.shared.gpus;
        match st.processes.get(&self.pid).and_then(|p| p.dev_dri.as_ref()) {
            Some(nodes) => nodes
                .iter()
                .filter_map(|n| {
                    let gpu = gpus.iter().position(|g| g.info.gpu_id == n.gpu_id)?;
                    Some((n.name.clone(), n.minor, gpu))
                })
                .collect(),
            None => gpus
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    (
                        format!("renderD{}", g.info.render_minor),
                        g.info.render_minor,
                        i,
                    )
                })
                .collect(),
        }
    }

    /// # Safety
    /// The [`Driver::ioctl`] contract.
    unsafe fn ioctl_inner(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> Result<c_int, Errno> {
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let mut st = self.sim.lock();
        self.alive(&st)?;
        let owner = match st.files.get(&key) {
            Some(OpenFile::Kfd(k)) => Some(k.owner),
            Some(OpenFile::Render(_)) => None,
            None => return Err(Errno(libc::ENOTTY)),
        };
        match owner {
            Some(owner) => {
                let shared = &*self.sim.shared;
                let mut wait = None;
                loop {
                    let mut ctx = Ctx {
                        sim: shared,
                        st: &mut st,
                        caller: self.pid,
                        wait,
                    };
                    // SAFETY: forwarded Driver::ioctl contract.
                    let r = unsafe { crate::amdkfd::ioctl(&mut ctx, owner, request, arg) };
                    wait = ctx.wait;
                    // A WAIT_EVENTS that must block sleeps without the lock.
                    match (&r, &wait) {
                        (Ok(_), Some(w)) => st = crate::amdkfd::event_wait::sleep(shared, st, w),
                        _ => return r,
                    }
                }
            }
            // SAFETY: forwarded Driver::ioctl contract. The DRM half takes
            // the lock: fence waits happen without it.
            None => unsafe { crate::drm::ioctl(&self.sim.shared, st, self.pid, key, request, arg) },
        }
    }

    fn mmap_source(
        &self,
        st: &mut State,
        key: FileKey,
        len: usize,
        offset: u64,
    ) -> Result<Option<(Arc<Memfd>, u64)>, Errno> {
        match st.files.get(&key) {
            Some(OpenFile::Kfd(_)) => {
                crate::amdkfd::mmap(&self.sim.shared, st, self.pid, offset, len as u64).map(Some)
            }
            Some(OpenFile::Render(r)) => {
                let gpu = r.gpu;
                // A BO imported from another GPU has an offset of its own
                // on this one.
                let (id, base) = match st.bos.import_at(gpu, offset, len as u64) {
                    Some(found) => found,
                    None => {
                        let id = st
                            .bos
                            .lookup_offset(gpu, offset, len as u64)
                            .ok_or(Errno(libc::EINVAL))?;
                        (id, st.bos.get(id).ok_or(Errno(libc::EINVAL))?.mmap_offset)
                    }
                };
                let bo = st.bos.get(id).ok_or(Errno(libc::EINVAL))?;
                if !bo.allowed_files.contains(&key) {
                    return Err(Errno(libc::EACCES));
                }
                let memfd = match &bo.backing {
                    crate::hw::bo::Backing::Memory(m) | crate::hw::bo::Backing::Aperture(m) => {
                        m.clone()
                    }
                    crate::hw::bo::Backing::UserPtr { .. } => return Err(Errno(libc::EPERM)),
                };
                Ok(Some((memfd, offset - base)))
            }
            None => Ok(None),
        }
    }
}

impl SimDriver {
    /// What a mapping of `len` bytes of `fd` at `offset` would show, for a
    /// remote client that maps it itself ([`crate::remote`]): the memfd and
    /// the offset in it, with `mmap`'s checks and errors; `None` when `fd`
    /// is no device file of the simulator.
    pub(crate) fn mmap_backing(
        &self,
        fd: BorrowedFd<'_>,
        len: usize,
        offset: u64,
    ) -> Result<Option<(Arc<Memfd>, u64)>, Errno> {
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let mut st = self.sim.lock();
        self.alive(&st)?;
        crate::kernel::fault::check(&mut st, "MMAP")?;
        if len == 0 || !offset.is_multiple_of(crate::hw::bo::PAGE_SIZE) {
            return Err(Errno(libc::EINVAL));
        }
        self.mmap_source(&mut st, key, len, offset)
    }
}

impl Driver for SimDriver {
    fn open(&self, path: &Path, flags: c_int) -> io::Result<OwnedFd> {
        self.open_inner(path, flags).map_err(Into::into)
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<c_int> {
        // SAFETY: forwarded Driver::ioctl contract.
        unsafe { self.ioctl_inner(fd, request, arg) }.map_err(Into::into)
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
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let mut st = self.sim.lock();
        self.alive(&st)?;
        crate::kernel::fault::check(&mut st, "MMAP")?;
        if len == 0 || !offset.is_multiple_of(crate::hw::bo::PAGE_SIZE) {
            return Err(Errno(libc::EINVAL).into());
        }
        let source = self.mmap_source(&mut st, key, len, offset)?;
        // `source` keeps the memfd open until the mapping exists.
        let (raw_fd, file_offset) = match &source {
            Some((memfd, off)) => (memfd.file().as_raw_fd(), *off),
            // Not a device of ours (a dma-buf or any other file): the host maps it.
            None => (fd.as_raw_fd(), offset),
        };
        let file_offset = libc::off_t::try_from(file_offset).map_err(|_| Errno(libc::EOVERFLOW))?;
        // SAFETY: the caller upholds the MAP_FIXED contract of Driver::mmap;
        // otherwise the kernel picks an unused range. `raw_fd` is open for the
        // duration of the call (held by the store or by the caller).
        let ptr = unsafe { libc::mmap(addr, len, prot, flags, raw_fd, file_offset) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Mappings of the simulator's devices and dma-bufs are accounted;
        // other files are the host's business.
        if source.is_some() || st.bos.by_key(key).is_some() {
            st.cpu_maps.insert(ptr as usize, CpuMapping { len });
        }
        NonNull::new(ptr).ok_or_else(|| Errno(libc::EFAULT).into())
    }

    unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()> {
        let mut st = self.sim.lock();
        // SAFETY: the caller guarantees the range is a mapping of ours that
        // nothing references any more.
        let ret = unsafe { libc::munmap(addr.as_ptr(), len) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let start = addr.as_ptr() as usize;
        let end = start.saturating_add(len);
        let covered: Vec<usize> = st
            .cpu_maps
            .range(start..end)
            .filter(|(&a, m)| a + m.len <= end)
            .map(|(&a, _)| a)
            .collect();
        for a in covered {
            st.cpu_maps.remove(&a);
        }
        Ok(())
    }

    fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind> {
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let st = self.sim.lock();
        match st.files.get(&key) {
            Some(OpenFile::Kfd(_)) => {
                return Ok(FdKind::CharDevice(DeviceNumber {
                    major: KFD_MAJOR,
                    minor: 0,
                }))
            }
            Some(OpenFile::Render(r)) => {
                return Ok(FdKind::CharDevice(DeviceNumber {
                    major: DRM_MAJOR,
                    minor: self.sim.shared.gpus[r.gpu].info.render_minor,
                }))
            }
            None => {}
        }
        if st.bos.by_key(key).is_some() {
            return Ok(FdKind::DmaBuf);
        }
        drop(st);
        HostDriver.fd_kind(fd)
    }

    /// The VFS's lines for the file, and for a render file amdgpu's
    /// (as `amdgpu_show_fdinfo` prints them).
    fn fdinfo(&self, fd: BorrowedFd<'_>) -> io::Result<String> {
        let generic = HostDriver.fdinfo(fd)?;
        let key = FileKey::of_raw(fd.as_raw_fd())?;
        let st = self.sim.lock();
        let Some(OpenFile::Render(file)) = st.files.get(&key) else {
            return Ok(generic);
        };
        let pdev = self.sim.pci_address(file.gpu);
        let ino = std::os::unix::fs::MetadataExt::ino(
            &std::fs::File::from(fd.try_clone_to_owned()?).metadata()?,
        );
        Ok(crate::drm::fdinfo::render_fdinfo(
            &st, key, file, &generic, &pdev, ino,
        ))
    }

    fn device_number(&self, path: &Path) -> io::Result<DeviceNumber> {
        let s = path
            .to_str()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        if s == "/dev/kfd" {
            return Ok(DeviceNumber {
                major: KFD_MAJOR,
                minor: 0,
            });
        }
        if let Some(name) = s.strip_prefix("/dev/dri/") {
            if let Some((_, minor, _)) = self.dri_view().into_iter().find(|(n, _, _)| n == name) {
                return Ok(DeviceNumber {
                    major: DRM_MAJOR,
                    minor,
                });
            }
        }
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
        if path == Path::new("/dev/dri") {
            return Ok(self
                .dri_view()
                .into_iter()
                .map(|(n, _, _)| n.into())
                .collect());
        }
        if path == Path::new("/proc") {
            // A directory per live process, named by its pid (the machine
            // models no pid namespaces: every process sees them all).
            return Ok(self.sim_pids().into_iter().map(Into::into).collect());
        }
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }

    /// `/sys/class/drm/renderD<minor>/device`: the PCI device of the GPU
    /// the process's node of that minor stands for, as the kernel's link
    /// (`../../../DDDD:BB:DD.F`).
    fn read_link(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        let minor = path
            .to_str()
            .and_then(|p| p.strip_prefix("/sys/class/drm/renderD"))
            .and_then(|p| p.strip_suffix("/device"))
            .and_then(|m| m.parse::<u32>().ok());
        let gpu = minor.and_then(|minor| {
            self.dri_view()
                .into_iter()
                .find(|(_, m, _)| *m == minor)
                .map(|(_, _, gpu)| gpu)
        });
        match gpu {
            Some(gpu) => Ok(format!("../../../{}", self.sim.pci_address(gpu)).into()),
            None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    fn read_sysfs(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        // As amdkfd's topology attributes: a node of a GPU the caller's
        // device cgroup hides answers EPERM, whoever reads it.
        if let Some(gpu) = self.sim.gpu_of_sysfs_path(path) {
            let st = self.sim.lock();
            let visible = st
                .processes
                .get(&self.pid)
                .is_some_and(|p| p.visible.contains(&gpu));
            if !visible {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
        }
        kfd::driver::read_file_prefix(path, limit)
    }

    fn pidfd_open(&self, pid: u32) -> io::Result<OwnedFd> {
        self.sim_pidfd_open(pid)
    }

    fn pidfd_getfd(&self, pidfd: BorrowedFd<'_>, target_fd: RawFd) -> io::Result<OwnedFd> {
        self.sim_pidfd_getfd(pidfd, target_fd)
    }

    fn ptrace_seize(&self, pid: u32) -> io::Result<()> {
        self.sim_ptrace_seize(pid)
    }

    fn ptrace_interrupt(&self, pid: u32, timeout: Duration) -> io::Result<()> {
        self.sim_ptrace_interrupt(pid, timeout)
    }

    fn ptrace_detach(&self, pid: u32) -> io::Result<()> {
        self.sim_ptrace_detach(pid)
    }

    fn caller_pid(&self) -> u32 {
        self.pid.0
    }

    fn process_status(&self, pid: u32) -> io::Result<ProcessStatus> {
        self.sim_process_status(pid)
    }

    fn process_fds(&self, pid: u32) -> io::Result<Vec<RawFd>> {
        self.sim_process_fds(pid)
    }

    fn frozen_cgroup(&self, pid: u32) -> io::Result<Option<FrozenCgroup>> {
        self.sim_frozen_cgroup(pid)
    }
}
