//! What a process-listing tool reads about the simulated processes, laid
//! out as the kernel lays it out: the per-process KFD sysfs
//! (`/sys/class/kfd/kfd/proc/<pid>/`, `kfd_process.c`) and, under a `/proc`
//! stand-in, each process's `comm`, `fd/` links and the DRM `fdinfo` of its
//! render files.
//!
//! The kernel's files are live; [`Sim::write_proc_files`] writes a snapshot
//! of the simulated state into a scratch directory (removed when the
//! returned [`ProcFiles`] is dropped). Per KFD process, in `proc/<pid>/`:
//!
//! - `vram_<gpu_id>`: the VRAM the process allocated on the GPU, bytes
//!   (`"%llu\n"`); `<gpu_id>` is the device's id in decimal (`%u`).
//! - `sdma_<gpu_id>`: SDMA activity in microseconds; the simulator does not
//!   time its copy engines, so `0`.
//! - `stats_<gpu_id>/evicted_ms`: time the process's queues spent evicted;
//!   `0` (the simulator keeps no clock).
//! - `queues/<queue_id>/{size,type,gpuid}`: ring size (`%llu`), kernel queue
//!   type (`%d`: 0 compute, 1 SDMA, 4 SDMA-XGMI) and device id (`%u`),
//!   without trailing newlines as the kernel prints them.
//!
//! `pasid` (the kernel's address-space id) is not written: the simulator
//! has no PASIDs. In the `/proc` stand-in, `<pid>/comm`, `<pid>/fd/<n>`
//! (symlinks to `/dev/kfd` and `/dev/dri/renderD<minor>`) and, for render
//! fds, `<pid>/fdinfo/<n>` with `drm-driver`, `drm-client-id` and
//! `drm-memory-{vram,gtt,cpu}` in KiB: every BO the file's VM holds, its
//! GEM handles' and, when the file is a KFD process's compute VM, the KFD
//! allocations on that GPU (as amdgpu counts a VM's BOs).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use kfd_sys::{
    KFD_IOC_ALLOC_MEM_FLAGS_GTT, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
};

use super::Sim;
use crate::hw::bo::Domain;
use crate::kernel::OpenFile;

/// A written snapshot; the files go away when it is dropped.
#[derive(Debug)]
pub struct ProcFiles {
    dir: tempfile::TempDir,
}

impl ProcFiles {
    /// The stand-in for `/sys/class/kfd/kfd` (holding `proc/`).
    pub fn kfd_root(&self) -> PathBuf {
        self.dir.path().join("sys/class/kfd/kfd")
    }

    /// The stand-in for `/proc`.
    pub fn proc_root(&self) -> PathBuf {
        self.dir.path().join("proc")
    }
}

fn write(path: &Path, text: impl AsRef<[u8]>) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, text)
}

impl Sim {
    /// Writes the per-process KFD sysfs and the `/proc` files of every
    /// simulated process that has opened `/dev/kfd` or a render node.
    pub fn write_proc_files(&self) -> io::Result<ProcFiles> {
        let dir = crate::kernel::scratch::run_dir()
            .and_then(|run| tempfile::Builder::new().prefix("proc").tempdir_in(run))?;
        let files = ProcFiles { dir };
        let kfd_proc = files.kfd_root().join("proc");
        fs::create_dir_all(&kfd_proc)?;
        let proc_root = files.proc_root();
        let shared = &*self.shared;
        let st = self.lock();
        let mut client_id = 0u64;
        for (pid, process) in &st.processes {
            let pid_dir = proc_root.join(pid.to_string());
            let mut opened_any = false;
            for (fd, key) in &process.fds {
                let Some(file) = st.files.get(key) else {
                    continue;
                };
                opened_any = true;
                let target = match file {
                    OpenFile::Kfd(_) => "/dev/kfd".to_owned(),
                    OpenFile::Render(r) => {
                        format!("/dev/dri/renderD{}", shared.gpus[r.gpu].info.render_minor)
                    }
                };
                let link = pid_dir.join("fd").join(fd.to_string());
                fs::create_dir_all(pid_dir.join("fd"))?;
                std::os::unix::fs::symlink(&target, &link)?;
                let OpenFile::Render(render) = file else {
                    continue;
                };
                // The BOs of the file's VM: its GEM handles' and, for a KFD
                // compute VM, the process's allocations on that GPU.
                let mut bos = BTreeSet::new();
                bos.extend(render.drm.handles.values().map(|h| h.bo));
                let (mut vram, mut gtt, mut cpu) = (0u64, 0u64, 0u64);
                for id in &bos {
                    if let Some(bo) = st.bos.get(*id) {
                        match bo.domain {
                            Domain::Vram => vram += bo.size,
                            Domain::Gtt => gtt += bo.size,
                            Domain::UserPtr => cpu += bo.size,
                            Domain::Doorbell | Domain::Mmio => {}
                        }
                    }
                }
                if let Some(owner) = render.kfd_vm_owner {
                    let pdd = st
                        .processes
                        .get(&owner)
                        .and_then(|p| p.kfd.as_ref())
                        .and_then(|k| k.pdds.iter().find(|d| d.drm_file == Some(*key)));
                    for mem in pdd.iter().flat_map(|d| d.idr.values()) {
                        if !bos.insert(mem.bo) {
                            continue;
                        }
                        if mem.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0 {
                            vram += mem.size;
                        } else if mem.flags & KFD_IOC_ALLOC_MEM_FLAGS_GTT != 0 {
                            gtt += mem.size;
                        } else if mem.flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
                            cpu += mem.size;
                        }
                    }
                }
                client_id += 1;
                write(
                    &pid_dir.join("fdinfo").join(fd.to_string()),
                    format!(
                        "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-client-id:\t{client_id}\n\
                         drm-memory-vram:\t{} KiB\ndrm-memory-gtt: \t{} KiB\ndrm-memory-cpu: \t{} KiB\n",
                        vram / 1024,
                        gtt / 1024,
                        cpu / 1024
                    ),
                )?;
            }
            if opened_any || process.kfd.is_some() {
                write(&pid_dir.join("comm"), format!("{}\n", process.comm))?;
            }
            let Some(kfd) = &process.kfd else {
                continue;
            };
            let dir = kfd_proc.join(pid.to_string());
            fs::create_dir_all(dir.join("queues"))?;
            for pdd in &kfd.pdds {
                let id = shared.gpus[pdd.gpu].id();
                write(
                    &dir.join(format!("vram_{id}")),
                    format!("{}\n", pdd.vram_usage),
                )?;
                write(&dir.join(format!("sdma_{id}")), "0\n")?;
                write(&dir.join(format!("stats_{id}/evicted_ms")), "0\n")?;
            }
            for q in kfd.queues.values() {
                let Some(pdd) = kfd.pdds.get(q.pdd) else {
                    continue;
                };
                let qdir = dir.join("queues").join(q.q_id.to_string());
                write(&qdir.join("size"), q.ring_size.to_string())?;
                write(&qdir.join("type"), q.ktype.to_string())?;
                write(&qdir.join("gpuid"), shared.gpus[pdd.gpu].id().to_string())?;
            }
        }
        drop(st);
        Ok(files)
    }
}
