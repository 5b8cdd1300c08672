//! Shared helpers for the render-node tests: a simulator with chosen GPU
//! generations, typed ioctls through `kfd::Driver`, page-aligned host
//! buffers, and the small GEM/VA/CS sequences an SDMA copier issues.
#![allow(dead_code)]

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use kfd::Driver;
use kfd_sim::{Sim, SimConfig, SimDriver};
use kfd_sys as k;

/// A simulator with `gpus` synthetic GPUs whose `gfx_target_version` is
/// `gfx` (e.g. 90010 for gfx90a, 80003 for a pre-AI Polaris).
pub fn sim_with(gpus: usize, gfx: u64) -> Sim {
    sim_with_config(gpus, gfx, SimConfig::default())
}

/// Like [`sim_with`], with a configuration.
pub fn sim_with_config(gpus: usize, gfx: u64, config: SimConfig) -> Sim {
    let mut system = kfd_sim::synthetic_system(gpus);
    for node in system.nodes.iter_mut().filter(|n| n.is_gpu()) {
        node.properties.set("gfx_target_version", gfx);
    }
    Sim::new(system, config).expect("synthetic topology builds a simulator")
}

/// One process with an open render node of GPU `index`.
pub struct Render {
    pub sim: Sim,
    pub drv: SimDriver,
    pub fd: OwnedFd,
}

/// Opens the render node of GPU `index` as a new process of `sim`.
pub fn open_render(sim: &Sim, index: usize) -> Render {
    let pid = sim.spawn_process().expect("spawn");
    let drv = sim.driver(pid);
    let fd = open_again(sim, &drv, index);
    Render {
        sim: sim.clone(),
        drv,
        fd,
    }
}

/// Another open of GPU `index`'s render node by the same process.
pub fn open_again(sim: &Sim, drv: &SimDriver, index: usize) -> OwnedFd {
    let gpu = &sim.gpus()[index];
    let path = sim.render_path(gpu.gpu_id).expect("render path");
    drv.open(&path, libc::O_RDWR | libc::O_CLOEXEC)
        .expect("open render node")
}

/// A simulator with one gfx90a-like GPU and its render node open.
pub fn render() -> Render {
    open_render(&sim_with(1, 90010), 0)
}

/// `ioctl(fd, request, arg)` through the driver. `T` is a plain `repr(C)`
/// argument (no implicit padding) at least as large as the request says.
pub fn ioctl<T>(drv: &SimDriver, fd: &OwnedFd, request: u32, arg: &mut T) -> io::Result<c_int> {
    assert!(
        k::_IOC_SIZE(request) <= std::mem::size_of_val(arg),
        "argument smaller than the request's size"
    );
    // SAFETY: `arg` is a live, writable value at least `_IOC_SIZE(request)`
    // bytes long, and every user pointer the tests put inside it points at
    // memory that outlives the call.
    unsafe { drv.ioctl(fd.as_fd(), u64::from(request), (arg as *mut T).cast()) }
}

/// The errno of a failed call (panics on success).
pub fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
    r.expect_err("the call should fail")
        .raw_os_error()
        .expect("an os error")
}

/// Page-aligned anonymous host memory (what userptr BOs wrap). The
/// simulated device only writes it during a submission the test waits for
/// before reading.
pub struct HostBuf {
    map: kfd::AnonymousMapping,
}

impl HostBuf {
    /// `len` bytes (a page multiple) filled by `fill(index)`.
    pub fn new(len: usize, fill: impl Fn(usize) -> u8) -> HostBuf {
        let mut buf = HostBuf {
            map: kfd::AnonymousMapping::private(len).expect("mmap of a host buffer"),
        };
        for (i, b) in buf.bytes_mut().iter_mut().enumerate() {
            *b = fill(i);
        }
        buf
    }

    /// The address as a user pointer.
    pub fn addr(&self) -> u64 {
        self.map.addr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_slice()
    }

    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.map.as_mut_slice()
    }
}

/// A CPU mapping of a BO through the render node.
pub struct CpuMap<'a> {
    drv: &'a SimDriver,
    ptr: NonNull<std::ffi::c_void>,
    len: usize,
}

impl CpuMap<'_> {
    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes until dropped.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len) }
    }

    /// The mapped bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, shared and writable; `&mut self` is the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.len) }
    }
}

impl Drop for CpuMap<'_> {
    fn drop(&mut self) {
        // SAFETY: the mapping came from `Driver::mmap` and no slice outlives `self`.
        unsafe { self.drv.munmap(self.ptr, self.len) }.expect("munmap");
    }
}

impl Render {
    /// `ioctl` on this render fd.
    pub fn ioctl<T>(&self, request: u32, arg: &mut T) -> io::Result<c_int> {
        ioctl(&self.drv, &self.fd, request, arg)
    }

    /// GEM_CREATE; returns the handle.
    pub fn gem_create(&self, size: u64, domains: u32, flags: u64) -> io::Result<u32> {
        let mut a = k::drm_amdgpu_gem_create_in {
            bo_size: size,
            alignment: 4096,
            domains: domains.into(),
            domain_flags: flags,
        };
        self.ioctl(k::DRM_IOCTL_AMDGPU_GEM_CREATE, &mut a)?;
        // out.handle overlays the low half of bo_size.
        Ok(a.bo_size as u32)
    }

    /// GEM_USERPTR with libdrm's flags (ANONONLY | REGISTER | VALIDATE).
    pub fn userptr(&self, buf: &HostBuf) -> io::Result<u32> {
        let mut a = k::drm_amdgpu_gem_userptr {
            addr: buf.addr(),
            size: buf.len() as u64,
            flags: k::AMDGPU_GEM_USERPTR_ANONONLY
                | k::AMDGPU_GEM_USERPTR_REGISTER
                | k::AMDGPU_GEM_USERPTR_VALIDATE,
            handle: 0,
        };
        self.ioctl(k::DRM_IOCTL_AMDGPU_GEM_USERPTR, &mut a)?;
        Ok(a.handle)
    }

    /// GEM_MMAP; returns the fake offset.
    pub fn mmap_offset(&self, handle: u32) -> io::Result<u64> {
        let mut a = k::drm_amdgpu_gem_mmap_in { handle, _pad: 0 };
        self.ioctl(k::DRM_IOCTL_AMDGPU_GEM_MMAP, &mut a)?;
        Ok(u64::from(a.handle) | (u64::from(a._pad) << 32))
    }

    /// Maps `len` bytes of BO `handle` into this process.
    pub fn cpu_map(&self, handle: u32, len: usize) -> CpuMap<'_> {
        let offset = self.mmap_offset(handle).expect("GEM_MMAP");
        // SAFETY: no MAP_FIXED: the kernel picks an unused range.
        let ptr = unsafe {
            self.drv.mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd.as_fd(),
                offset,
            )
        }
        .expect("mmap of a BO");
        CpuMap {
            drv: &self.drv,
            ptr,
            len,
        }
    }

    /// GEM_VA with `op` and `flags`.
    pub fn va(
        &self,
        op: u32,
        handle: u32,
        va: u64,
        offset: u64,
        size: u64,
        flags: u32,
    ) -> io::Result<c_int> {
        let mut a = k::drm_amdgpu_gem_va {
            handle,
            _pad: 0,
            operation: op,
            flags,
            va_address: va,
            offset_in_bo: offset,
            map_size: size,
        };
        self.ioctl(k::DRM_IOCTL_AMDGPU_GEM_VA, &mut a)
    }

    /// GEM_VA MAP with R|W|X, as libdrm does.
    pub fn map(&self, handle: u32, va: u64, size: u64) -> io::Result<c_int> {
        let rwx =
            k::AMDGPU_VM_PAGE_READABLE | k::AMDGPU_VM_PAGE_WRITEABLE | k::AMDGPU_VM_PAGE_EXECUTABLE;
        self.va(k::AMDGPU_VA_OP_MAP, handle, va, 0, size, rwx)
    }

    /// GEM_CLOSE.
    pub fn close(&self, handle: u32) -> io::Result<c_int> {
        let mut a = k::drm_gem_close { handle, pad: 0 };
        self.ioctl(k::DRM_IOCTL_GEM_CLOSE, &mut a)
    }

    /// CTX ALLOC; returns the context id.
    pub fn ctx_alloc(&self) -> io::Result<u32> {
        let mut a = k::drm_amdgpu_ctx_in {
            op: k::AMDGPU_CTX_OP_ALLOC_CTX,
            ..Default::default()
        };
        self.ioctl(k::DRM_IOCTL_AMDGPU_CTX, &mut a)?;
        Ok(a.op)
    }

    /// CS with one IB chunk (DMA, instance 0, `ring`) and `bo_list`.
    pub fn submit(
        &self,
        ctx: u32,
        bo_list: u32,
        ib_va: u64,
        ib_bytes: u32,
        ring: u32,
    ) -> io::Result<u64> {
        let mut ib = k::drm_amdgpu_cs_chunk_ib {
            va_start: ib_va,
            ib_bytes,
            ip_type: k::AMDGPU_HW_IP_DMA,
            ring,
            ..Default::default()
        };
        let chunk = k::drm_amdgpu_cs_chunk {
            chunk_id: k::AMDGPU_CHUNK_ID_IB,
            length_dw: (std::mem::size_of::<k::drm_amdgpu_cs_chunk_ib>() / 4) as u32,
            chunk_data: (&mut ib as *mut k::drm_amdgpu_cs_chunk_ib) as u64,
        };
        self.submit_chunks(ctx, bo_list, &[chunk])
    }

    /// CS with arbitrary chunks; returns the sequence number.
    pub fn submit_chunks(
        &self,
        ctx: u32,
        bo_list: u32,
        chunks: &[k::drm_amdgpu_cs_chunk],
    ) -> io::Result<u64> {
        let pointers: Vec<u64> = chunks
            .iter()
            .map(|c| c as *const k::drm_amdgpu_cs_chunk as u64)
            .collect();
        let mut a = k::drm_amdgpu_cs_in {
            ctx_id: ctx,
            bo_list_handle: bo_list,
            num_chunks: chunks.len() as u32,
            flags: 0,
            chunks: pointers.as_ptr() as u64,
        };
        self.ioctl(k::DRM_IOCTL_AMDGPU_CS, &mut a)?;
        Ok(u64::from(a.ctx_id) | (u64::from(a.bo_list_handle) << 32))
    }

    /// WAIT_CS on DMA `ring`; returns the status (0 done, 1 busy).
    pub fn wait(&self, ctx: u32, ring: u32, seq: u64, timeout: u64) -> io::Result<u64> {
        let mut a = k::drm_amdgpu_wait_cs_in {
            handle: seq,
            timeout,
            ip_type: k::AMDGPU_HW_IP_DMA,
            ip_instance: 0,
            ring,
            ctx_id: ctx,
        };
        self.ioctl(k::DRM_IOCTL_AMDGPU_WAIT_CS, &mut a)?;
        Ok(a.handle)
    }
}

/// SDMA packet builders (kernel.md §4.4).
pub mod packet {
    /// LINEAR COPY of `bytes` from `src` to `dst`, COUNT encoded per family.
    pub fn copy(ai_or_later: bool, src: u64, dst: u64, bytes: u32) -> [u32; 7] {
        let count = if ai_or_later { bytes - 1 } else { bytes };
        [
            1,
            count,
            0,
            src as u32,
            (src >> 32) as u32,
            dst as u32,
            (dst >> 32) as u32,
        ]
    }

    /// Pads an IB with NOPs to a multiple of 8 dwords.
    pub fn pad(ib: &mut Vec<u32>) {
        while !ib.len().is_multiple_of(8) {
            ib.push(0);
        }
    }

    /// The IB as bytes.
    pub fn bytes(ib: &[u32]) -> Vec<u8> {
        ib.iter().flat_map(|d| d.to_le_bytes()).collect()
    }
}
