//! A simulated process that uses GPUs only through render nodes: it never
//! opens `/dev/kfd`, as a graphics, video or Mesa-OpenCL application does.
//!
//! [`RenderOnly::launch`] opens one render node per requested GPU and, on
//! each, creates GEM BOs (alternately VRAM and GTT, of growing sizes), maps
//! each at its own GPU address with read/write permission and fills it
//! through a CPU mapping with a pattern unique to the GPU and BO.
//! [`RenderOnly::describe`] records what the process holds, contents
//! included; [`RenderOnly::verify`] checks a (restored) process's render
//! files against such a description: the same handles, sizes, domains, GPU
//! mappings and bytes. [`RenderOnly::touch`] writes through a BO, so a test
//! can show a restored process keeps working. This module never performs
//! CRIU ops itself.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use ::kfd::{GemCreate, GemHandle, RenderNode};
use amdgpu_topology::GpuId;
use kfd_sys::{
    AMDGPU_GEM_DOMAIN_GTT, AMDGPU_GEM_DOMAIN_VRAM, AMDGPU_VM_PAGE_READABLE,
    AMDGPU_VM_PAGE_WRITEABLE,
};

use super::WorkloadError;
use crate::{Pid, Sim, SimDriver};
use ::kfd::Errno;

/// Size unit of the BOs (GEM rounds sizes to pages).
const UNIT: u64 = 16 << 10;

/// Where the first BO of render file `gpu` is mapped on the GPU.
fn gpu_address(gpu: usize, bo: usize) -> u64 {
    (3u64 << 40) + (gpu as u64) * (1 << 32) + (bo as u64) * (1 << 24)
}

/// One DRM BO as the application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmBoDescription {
    /// Position of its render file in [`RenderOnly::render_fds`].
    pub file: usize,
    /// The GEM handle in that file.
    pub handle: u32,
    /// Size in bytes.
    pub size: u64,
    /// `AMDGPU_GEM_DOMAIN_*` it was created in.
    pub domains: u64,
    /// GPU address of its mapping.
    pub va: u64,
    /// The page-table bits of its mapping, as `GET_MAPPING_INFO` reports.
    pub mapping_flags: u64,
    /// Its bytes.
    pub contents: Vec<u8>,
}

/// A render-only application.
#[derive(Debug)]
pub struct RenderOnly {
    sim: Sim,
    pid: Pid,
    driver: SimDriver,
    renders: Vec<OwnedFd>,
    /// Per BO: its render file's position and its handle there.
    bos: Vec<(usize, GemHandle)>,
}

fn ioctl(pid: Pid, op: &'static str) -> impl Fn(::kfd::Error) -> WorkloadError {
    move |e| WorkloadError::Ioctl {
        pid,
        op,
        errno: Errno(e.errno()),
    }
}

impl RenderOnly {
    /// Spawns a process that opens the render node of each of `gpus` (in
    /// that order; a GPU may repeat, giving two files of one GPU) and
    /// creates `bos_per_file` BOs in each file.
    pub fn launch(
        sim: &Sim,
        gpus: &[GpuId],
        bos_per_file: usize,
    ) -> Result<RenderOnly, WorkloadError> {
        let pid = sim.spawn_process()?;
        let driver = sim.driver(pid);
        let mut app = RenderOnly {
            sim: sim.clone(),
            pid,
            driver: driver.clone(),
            renders: Vec::new(),
            bos: Vec::new(),
        };
        for &gpu in gpus {
            app.renders
                .push(super::open_render(sim, &driver, pid, gpu)?);
        }
        for file in 0..app.renders.len() {
            for bo in 0..bos_per_file {
                app.create_bo(file, bo)?;
            }
        }
        Ok(app)
    }

    fn node(&self, file: usize) -> RenderNode<SimDriver, BorrowedFd<'_>> {
        RenderNode::from_fd(self.driver.clone(), self.renders[file].as_fd())
    }

    fn create_bo(&mut self, file: usize, index: usize) -> Result<(), WorkloadError> {
        let pid = self.pid;
        let size = UNIT * (index as u64 + 1);
        let domains = if index.is_multiple_of(2) {
            AMDGPU_GEM_DOMAIN_VRAM
        } else {
            AMDGPU_GEM_DOMAIN_GTT
        };
        let node = self.node(file);
        let handle = node
            .gem_create(&GemCreate {
                size,
                alignment: 4096,
                domains: u64::from(domains),
                flags: 0,
            })
            .map_err(ioctl(pid, "AMDGPU_GEM_CREATE"))?;
        let va = gpu_address(file, index);
        node.gem_va_map(
            handle,
            va,
            0,
            size,
            AMDGPU_VM_PAGE_READABLE | AMDGPU_VM_PAGE_WRITEABLE,
        )
        .map_err(ioctl(pid, "AMDGPU_GEM_VA"))?;
        let pattern: Vec<u8> = (0..size as usize)
            .map(|b| (b.wrapping_mul(file + 7) ^ (index * 31 + b / 4096)) as u8)
            .collect();
        write_through(&node, pid, handle, 0, &pattern)?;
        self.bos.push((file, handle));
        Ok(())
    }

    /// The process.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Its render-node fds, in launch order.
    pub fn render_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.renders.iter().map(|f| f.as_fd()).collect()
    }

    /// What the process holds, contents included.
    pub fn describe(&self) -> Result<Vec<DrmBoDescription>, WorkloadError> {
        let fds = self.render_fds();
        self.bos
            .iter()
            .map(|&(file, handle)| describe_bo(&self.driver, self.pid, fds[file], file, handle))
            .collect()
    }

    /// Checks that the render files `fds` of process `pid` (in the
    /// checkpointed process's file order) hold every BO of `expected`: the
    /// same handle, size, domains, GPU mapping and bytes.
    pub fn verify(
        sim: &Sim,
        pid: Pid,
        fds: &[BorrowedFd<'_>],
        expected: &[DrmBoDescription],
    ) -> Result<(), WorkloadError> {
        let driver = sim.driver(pid);
        let mut differences = Vec::new();
        for want in expected {
            let Some(&fd) = fds.get(want.file) else {
                differences.push(format!("render file {} is missing", want.file));
                continue;
            };
            match describe_bo(&driver, pid, fd, want.file, GemHandle(want.handle)) {
                Ok(got) if got == *want => {}
                Ok(got) => {
                    let same_bytes = got.contents == want.contents;
                    differences.push(format!(
                        "file {} bo {}: va {:#x}/{:#x}, flags {:#x}/{:#x}, contents {}",
                        want.file,
                        want.handle,
                        got.va,
                        want.va,
                        got.mapping_flags,
                        want.mapping_flags,
                        if same_bytes { "equal" } else { "differ" }
                    ));
                }
                Err(e) => differences.push(format!("file {} bo {}: {e}", want.file, want.handle)),
            }
        }
        if differences.is_empty() {
            Ok(())
        } else {
            Err(WorkloadError::Mismatch { pid, differences })
        }
    }

    /// Writes `bytes` at `offset` into BO `handle` of render file `file` of
    /// process `pid` through a CPU mapping of `fd`, as the application
    /// would (also after a restore, through the restored file).
    pub fn touch(
        sim: &Sim,
        pid: Pid,
        fd: BorrowedFd<'_>,
        handle: u32,
        offset: usize,
        bytes: &[u8],
    ) -> Result<(), WorkloadError> {
        let node = RenderNode::from_fd(sim.driver(pid), fd);
        write_through(&node, pid, GemHandle(handle), offset, bytes)
    }

    /// Ends the process.
    pub fn exit(mut self) -> Result<(), WorkloadError> {
        self.renders.clear();
        self.sim.exit_process(self.pid)?;
        Ok(())
    }
}

fn write_through<F: AsFd>(
    node: &RenderNode<SimDriver, F>,
    pid: Pid,
    handle: GemHandle,
    offset: usize,
    bytes: &[u8],
) -> Result<(), WorkloadError> {
    let mmap_offset = node
        .gem_mmap_offset(handle)
        .map_err(ioctl(pid, "AMDGPU_GEM_MMAP"))?;
    let len = offset + bytes.len();
    let mut map = node
        .mmap(mmap_offset, len, libc::PROT_READ | libc::PROT_WRITE)
        .map_err(ioctl(pid, "mmap of a DRM BO"))?;
    map.write(offset, bytes)
        .map_err(ioctl(pid, "writing a DRM BO"))
}

fn describe_bo(
    driver: &SimDriver,
    pid: Pid,
    fd: BorrowedFd<'_>,
    file: usize,
    handle: GemHandle,
) -> Result<DrmBoDescription, WorkloadError> {
    let node = RenderNode::from_fd(driver.clone(), fd);
    let listed = node
        .gem_list_handles()
        .map_err(ioctl(pid, "AMDGPU_GEM_LIST_HANDLES"))?;
    let entry = listed
        .iter()
        .find(|e| e.gem_handle == handle.0)
        .ok_or(WorkloadError::Memory {
            pid,
            handle: handle.0.into(),
            errno: Errno(libc::ENOENT),
        })?;
    let vms = node
        .gem_mapping_info(handle)
        .map_err(ioctl(pid, "AMDGPU_GEM_OP(GET_MAPPING_INFO)"))?;
    let (va, mapping_flags) = vms.first().map_or((0, 0), |vm| (vm.addr, vm.flags));
    let mmap_offset = node
        .gem_mmap_offset(handle)
        .map_err(ioctl(pid, "AMDGPU_GEM_MMAP"))?;
    let map = node
        .mmap(mmap_offset, entry.size as usize, libc::PROT_READ)
        .map_err(ioctl(pid, "mmap of a DRM BO"))?;
    let mut contents = vec![0u8; entry.size as usize];
    map.read(0, &mut contents)
        .map_err(ioctl(pid, "reading a DRM BO"))?;
    Ok(DrmBoDescription {
        file,
        handle: handle.0,
        size: entry.size,
        domains: entry.preferred_domains,
        va,
        mapping_flags,
        contents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimConfig;
    use ::kfd::Driver;

    #[test]
    fn describes_and_verifies_its_bos_and_notices_a_change() {
        let sim = Sim::synthetic(2, SimConfig::default()).unwrap();
        let gpus: Vec<GpuId> = sim.gpus().iter().map(|g| g.gpu_id).collect();
        let app = RenderOnly::launch(&sim, &gpus, 3).unwrap();
        assert!(sim.driver(app.pid()).fd_kind(app.render_fds()[0]).is_ok());
        let described = app.describe().unwrap();
        assert_eq!(described.len(), 6);
        assert!(described
            .iter()
            .all(|b| b.va != 0 && b.contents.len() as u64 == b.size));
        assert_eq!(
            described
                .iter()
                .filter(|b| b.domains == u64::from(AMDGPU_GEM_DOMAIN_VRAM))
                .count(),
            4
        );
        RenderOnly::verify(&sim, app.pid(), &app.render_fds(), &described).unwrap();

        let bo = &described[4];
        RenderOnly::touch(
            &sim,
            app.pid(),
            app.render_fds()[bo.file],
            bo.handle,
            5,
            &[0xee],
        )
        .unwrap();
        let err = RenderOnly::verify(&sim, app.pid(), &app.render_fds(), &described).unwrap_err();
        assert!(err.to_string().contains("contents differ"), "{err}");
        let err =
            RenderOnly::verify(&sim, app.pid(), &app.render_fds()[..1], &described).unwrap_err();
        assert!(
            err.to_string().contains("render file 1 is missing"),
            "{err}"
        );
        app.exit().unwrap();
    }
}
