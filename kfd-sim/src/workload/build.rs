//! The process builder: a workload sets itself up as a ROCm application
//! does (allocations, mappings, queues, events, SVM ranges, shared
//! dma-bufs), through its own driver and raw KFD ioctls.

use super::state::{allocs, control_alloc, find, splitmix, write8, KIB, MIB};
use super::*;
use crate::hw::bo::Backing;

impl Workload {
    pub(super) fn ioctl<T>(
        &self,
        request: u32,
        arg: &mut T,
        op: &'static str,
    ) -> Result<(), WorkloadError>
    where
        T: IntoBytes + FromBytes + Immutable + KnownLayout,
    {
        let fd = self.kfd.as_ref().ok_or(WorkloadError::Attached(self.pid))?;
        kioctl(&self.driver, fd.as_fd(), request, arg, op)
    }

    /// The gpu_ids the process sees (GET_PROCESS_APERTURES_NEW).
    pub(super) fn gpu_ids(&self) -> Result<Vec<GpuId>, WorkloadError> {
        let mut q = kfd_ioctl_get_process_apertures_new_args::default();
        self.ioctl(
            AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
            &mut q,
            "GET_PROCESS_APERTURES_NEW",
        )?;
        let mut list = vec![kfd_process_device_apertures::default(); q.num_of_nodes as usize];
        q.kfd_process_device_apertures_ptr = list.as_mut_ptr() as u64;
        self.ioctl(
            AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
            &mut q,
            "GET_PROCESS_APERTURES_NEW",
        )?;
        Ok(list[..q.num_of_nodes as usize]
            .iter()
            .map(|a| a.gpu_id)
            .collect())
    }

    pub(super) fn next_va(&mut self, gpu: GpuId, size: u64) -> u64 {
        let slot = self.va_next.entry(gpu).or_insert(1 << 40);
        let va = *slot;
        *slot += size.div_ceil(2 * MIB).max(1) * 2 * MIB;
        va
    }

    /// ALLOC_MEMORY_OF_GPU + MAP_MEMORY_TO_GPU on `map_on`; returns the handle.
    pub fn alloc(
        &mut self,
        gpu: GpuId,
        size: u64,
        flags: u32,
        map_on: &[GpuId],
    ) -> Result<u64, WorkloadError> {
        let (va, mmap_offset) = if flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR != 0 {
            let addr = self.cpu_memory(size as usize)?;
            (addr, addr)
        } else {
            (self.next_va(gpu, size), 0)
        };
        let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            handle: 0,
            mmap_offset,
            gpu_id: gpu,
            flags,
        };
        self.ioctl(
            AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
            &mut a,
            "ALLOC_MEMORY_OF_GPU",
        )?;
        if !map_on.is_empty() {
            self.map(a.handle, map_on)?;
        }
        Ok(a.handle)
    }

    /// MAP_MEMORY_TO_GPU of `handle` on `gpus`.
    pub fn map(&self, handle: u64, gpus: &[GpuId]) -> Result<(), WorkloadError> {
        let ids = gpus.to_vec();
        let mut m = kfd_ioctl_map_memory_to_gpu_args {
            handle,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: ids.len() as u32,
            n_success: 0,
        };
        self.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut m, "MAP_MEMORY_TO_GPU")
    }

    pub(super) fn doorbell_slice(&self, gpu: GpuId) -> u64 {
        self.sim
            .shared
            .gpus
            .iter()
            .find(|g| g.id() == gpu)
            .map_or(8192, |g| g.doorbell_slice)
    }

    pub(super) fn create_queue(
        &mut self,
        gpu: GpuId,
        user_type: u32,
        rings: u64,
        index: u64,
    ) -> Result<u32, WorkloadError> {
        let ring = rings + index * 64 * KIB;
        let compute =
            user_type == KFD_IOC_QUEUE_TYPE_COMPUTE_AQL || user_type == KFD_IOC_QUEUE_TYPE_COMPUTE;
        let mut q = kfd_ioctl_create_queue_args {
            ring_base_address: ring,
            write_pointer_address: ring + 32 * KIB,
            read_pointer_address: ring + 32 * KIB + 8,
            ring_size: (32 * KIB) as u32,
            gpu_id: gpu,
            queue_type: user_type,
            queue_percentage: 100,
            queue_priority: 7,
            eop_buffer_address: if compute { ring + 40 * KIB } else { 0 },
            eop_buffer_size: if compute { 4 * KIB } else { 0 },
            ctx_save_restore_address: if compute { ring + 48 * KIB } else { 0 },
            ctx_save_restore_size: if compute { (16 * KIB) as u32 } else { 0 },
            ctl_stack_size: if compute { (4 * KIB) as u32 } else { 0 },
            ..Default::default()
        };
        self.ioctl(AMDKFD_IOC_CREATE_QUEUE, &mut q, "CREATE_QUEUE")?;
        Ok(q.queue_id)
    }

    pub(super) fn create_event(&self, event_page: u64) -> Result<u32, WorkloadError> {
        let mut e = kfd_ioctl_create_event_args {
            event_page_offset: event_page,
            event_type: KFD_IOC_EVENT_SIGNAL,
            auto_reset: 1,
            ..Default::default()
        };
        self.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut e, "CREATE_EVENT")?;
        Ok(e.event_id)
    }

    pub(super) fn svm_range(&self, start: u64, size: u64, gpu: GpuId) -> Result<(), WorkloadError> {
        #[repr(C)]
        #[derive(FromBytes, IntoBytes, Immutable, KnownLayout)]
        struct SvmArgs {
            head: kfd_ioctl_svm_args,
            attrs: [kfd_ioctl_svm_attribute; 2],
        }
        let mut a = SvmArgs {
            head: kfd_ioctl_svm_args {
                start_addr: start,
                size,
                op: KFD_IOCTL_SVM_OP_SET_ATTR,
                nattr: 2,
                attrs: [],
            },
            attrs: [
                kfd_ioctl_svm_attribute {
                    r#type: KFD_IOCTL_SVM_ATTR_ACCESS,
                    value: gpu,
                },
                kfd_ioctl_svm_attribute {
                    r#type: KFD_IOCTL_SVM_ATTR_PREFERRED_LOC,
                    value: gpu,
                },
            ],
        };
        let request = _IOC(
            _IOC_READ | _IOC_WRITE,
            AMDKFD_IOCTL_BASE,
            0x20,
            std::mem::size_of::<SvmArgs>(),
        );
        self.ioctl(request, &mut a, "SVM")
    }

    pub(super) fn build(&mut self, profile: &Profile, gpus: &[GpuId]) -> Result<(), WorkloadError> {
        const VRAM: u32 = KFD_IOC_ALLOC_MEM_FLAGS_VRAM
            | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
            | KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;
        const GTT: u32 = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
        const USERPTR: u32 = KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
        let (n_bos, max_bo, compute_q, sdma_q, events, userptrs, svm) = match *profile {
            Profile::Basic => (0usize, 0u64, 1u64, 0u64, 1usize, 1usize, false),
            Profile::PyTorchLike {
                bos_per_gpu,
                max_bo_bytes,
            } => (bos_per_gpu, max_bo_bytes.max(4 * KIB), 8, 2, 16, 4, true),
            Profile::TensorFlowLike { bo_bytes } => (6, bo_bytes.max(4 * KIB), 2, 4, 4, 0, false),
            Profile::DataParallel { .. } => (2, 0, 2, 0, 2, 0, false),
        };
        let first = gpus.first().copied();
        for &gpu in gpus {
            let own = [gpu];
            // The event signal page lives in a GTT BO of the first GPU.
            let event_page = if Some(gpu) == first {
                self.alloc(gpu, 64 * KIB, GTT, &own)?
            } else {
                0
            };
            let doorbells = self.doorbell_slice(gpu);
            self.alloc(
                gpu,
                doorbells,
                KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                &own,
            )?;
            self.alloc(
                gpu,
                4 * KIB,
                KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
                &own,
            )?;
            match profile {
                Profile::Basic => {
                    let vram = self.alloc(gpu, 64 * KIB, VRAM, &own)?;
                    self.fill(vram, 64 * KIB)?;
                    let gtt = self.alloc(gpu, 16 * KIB, GTT, &own)?;
                    self.fill(gtt, 8 * KIB)?;
                }
                Profile::PyTorchLike { .. } => {
                    let levels = (max_bo / (4 * KIB)).max(1).ilog2() as usize + 1;
                    for i in 0..n_bos {
                        let size = ((4 * KIB) << (i % levels)).min(max_bo);
                        let gtt = i % 3 == 2;
                        let mut flags = if gtt { GTT } else { VRAM };
                        if i % 5 == 4 {
                            flags &= !KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
                        }
                        let map_on: &[GpuId] = if i % 7 == 6 { gpus } else { &own };
                        let handle = self.alloc(gpu, size, flags, map_on)?;
                        let used = match (gtt, i % 4 == 3) {
                            (true, _) => size / 2,
                            (false, true) => 0,
                            (false, false) => size,
                        };
                        self.fill(handle, used)?;
                    }
                }
                Profile::TensorFlowLike { .. } => {
                    for i in 0..n_bos {
                        let handle = self.alloc(gpu, max_bo, VRAM, &own)?;
                        self.fill(handle, if i + 1 < n_bos { max_bo } else { 0 })?;
                    }
                    for _ in 0..2 {
                        let handle = self.alloc(gpu, 2 * MIB, GTT, &own)?;
                        self.fill(handle, MIB)?;
                    }
                }
                Profile::DataParallel {
                    weights_bytes,
                    activations_bytes,
                } => {
                    let weights = (*weights_bytes).max(4 * KIB).next_multiple_of(4 * KIB);
                    let handle = self.alloc(gpu, weights, VRAM, &own)?;
                    // The same seed in every replica: identical weights.
                    self.fill_seeded(handle, weights, DATA_PARALLEL_WEIGHTS_SEED)?;
                    let activations = (*activations_bytes).max(4 * KIB).next_multiple_of(4 * KIB);
                    let handle = self.alloc(gpu, activations, VRAM, &own)?;
                    // Seeded by the handle, which names the process's
                    // GPU: each replica's activations differ, and a twin
                    // launched on the same GPU has the same ones.
                    self.fill(handle, activations)?;
                }
            }
            for _ in 0..userptrs {
                let size = if matches!(profile, Profile::Basic) {
                    16 * KIB
                } else {
                    64 * KIB
                };
                self.alloc(gpu, size, USERPTR, &own)?;
            }
            let n_queues = compute_q + sdma_q;
            let rings_handle = self.alloc(gpu, n_queues * 64 * KIB, GTT, &own)?;
            let rings = self.va_of(rings_handle)?;
            for i in 0..compute_q {
                self.create_queue(gpu, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL, rings, i)?;
            }
            for i in 0..sdma_q {
                let ty = if i % 2 == 0 {
                    KFD_IOC_QUEUE_TYPE_SDMA
                } else {
                    KFD_IOC_QUEUE_TYPE_SDMA_XGMI
                };
                self.create_queue(gpu, ty, rings, compute_q + i)?;
            }
            for e in 0..events {
                self.create_event(if e == 0 { event_page } else { 0 })?;
            }
            if svm {
                let len = 256 * KIB;
                let start = self.cpu_memory(len as usize)?;
                self.svm_range(start, len, gpu)?;
            }
        }
        // The step counter is the first word of the first data BO: it
        // starts at 0 whatever the fill put there.
        let st = self.sim.lock();
        let list = allocs(&st, self.pid)?;
        let control = control_alloc(&st, self.pid, &list)?;
        write8(&st, self.pid, control, 0, 0)
    }

    /// Fills the first `used` bytes of VRAM/GTT BO `handle` with
    /// incompressible bytes (a splitmix stream seeded by the handle), as the
    /// application's data would be; the rest stays untouched (zero).
    pub(super) fn fill(&self, handle: u64, used: u64) -> Result<(), WorkloadError> {
        self.fill_seeded(handle, used, handle)
    }

    /// [`Workload::fill`] with the stream seeded by `seed` (equal seeds
    /// give equal bytes, whatever the BO).
    pub(super) fn fill_seeded(
        &self,
        handle: u64,
        used: u64,
        seed: u64,
    ) -> Result<(), WorkloadError> {
        const CHUNK: u64 = MIB;
        let mut buf = Vec::new();
        let mut offset = 0;
        while offset < used {
            let len = (used - offset).min(CHUNK);
            buf.clear();
            let first_word = offset / 8;
            buf.extend(
                (0..len.div_ceil(8))
                    .flat_map(|w| splitmix(seed.rotate_left(40) ^ (first_word + w)).to_le_bytes()),
            );
            buf.truncate(len as usize);
            self.write_bo(handle, offset, &buf)?;
            offset += len;
        }
        Ok(())
    }

    /// Allocates `len` bytes of CPU memory where [`CpuMemory`] says.
    pub(super) fn cpu_memory(&self, len: usize) -> Result<u64, SimError> {
        match self.memory {
            CpuMemory::Simulator => self.sim.alloc_host_memory(len),
            CpuMemory::Process => self.sim.alloc_host_memory_for(self.pid, len),
        }
    }

    pub(super) fn va_of(&self, handle: u64) -> Result<u64, WorkloadError> {
        let st = self.sim.lock();
        allocs(&st, self.pid)?
            .iter()
            .find(|a| a.handle == handle)
            .map(|a| a.va)
            .ok_or(WorkloadError::Memory {
                pid: self.pid,
                handle,
                errno: Errno(libc::EINVAL),
            })
    }

    /// Exports allocation `handle` (EXPORT_DMABUF) and imports the dma-buf
    /// into `other` (IMPORT_DMABUF on its first GPU, mapped there); returns
    /// the handle in `other`. The dma-buf fd is closed afterwards, so the two
    /// processes share one BO.
    pub fn share_with(&self, handle: u64, other: &mut Workload) -> Result<u64, WorkloadError> {
        let mut e = kfd_ioctl_export_dmabuf_args {
            handle,
            flags: libc::O_RDWR as u32 | libc::O_CLOEXEC as u32,
            dmabuf_fd: 0,
        };
        self.ioctl(AMDKFD_IOC_EXPORT_DMABUF, &mut e, "EXPORT_DMABUF")?;
        // SAFETY: EXPORT_DMABUF succeeded, so `dmabuf_fd` is a new fd we own.
        let dmabuf =
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(e.dmabuf_fd as i32) };
        let gpu = *other
            .va_next
            .keys()
            .next()
            .ok_or(WorkloadError::Attached(other.pid))?;
        let size = {
            let st = self.sim.lock();
            st.bos
                .lookup_dmabuf(e.dmabuf_fd as i32)
                .ok()
                .and_then(|id| st.bos.get(id))
                .map_or(0, |b| b.size)
        };
        let va = other.next_va(gpu, size.max(4 * KIB));
        let mut i = kfd_ioctl_import_dmabuf_args {
            va_addr: va,
            handle: 0,
            gpu_id: gpu,
            dmabuf_fd: std::os::fd::AsRawFd::as_raw_fd(&dmabuf) as u32,
        };
        other.ioctl(AMDKFD_IOC_IMPORT_DMABUF, &mut i, "IMPORT_DMABUF")?;
        drop(dmabuf);
        other.map(i.handle, &[gpu])?;
        Ok(i.handle)
    }

    /// Launches one process per GPU of the machine with `profile` (a
    /// data-parallel job: [`Profile::DataParallel`] gives every process the
    /// same weights). Each process opens every GPU, as the ROCm runtime
    /// does, and allocates and queues work only on its own (as
    /// `HIP_VISIBLE_DEVICES` or `torch.cuda.set_device` make it).
    pub fn launch_data_parallel(
        sim: &Sim,
        profile: &Profile,
    ) -> Result<Vec<Workload>, WorkloadError> {
        let gpus: Vec<GpuId> = sim.shared.gpus.iter().map(|g| g.id()).collect();
        let mut all = Vec::with_capacity(gpus.len());
        for gpu in gpus {
            let pid = sim.spawn_process()?;
            all.push(Workload::launch_on(
                sim,
                pid,
                profile,
                CpuMemory::Simulator,
                Some(gpu),
            )?);
        }
        Ok(all)
    }

    /// Launches `n` processes with `profile` and shares the first VRAM BO of
    /// the first process with every other one through a dma-buf.
    pub fn launch_sharing(
        sim: &Sim,
        n: usize,
        profile: &Profile,
    ) -> Result<Vec<Workload>, WorkloadError> {
        let mut all = Vec::new();
        for _ in 0..n {
            all.push(Workload::launch(sim, profile)?);
        }
        if let Some((first, rest)) = all.split_first_mut() {
            let shared = {
                let st = sim.lock();
                allocs(&st, first.pid)?
                    .into_iter()
                    .find(|a| a.flags & KFD_IOC_ALLOC_MEM_FLAGS_VRAM != 0)
                    .map(|a| a.handle)
                    .ok_or(WorkloadError::NoMemory(first.pid))?
            };
            for other in rest {
                first.share_with(shared, other)?;
            }
        }
        Ok(all)
    }

    /// Writes `data` into allocation `handle` at `offset`, as the application
    /// (or its GPU kernels) would.
    pub fn write_bo(&self, handle: u64, offset: u64, data: &[u8]) -> Result<(), WorkloadError> {
        let st = self.sim.lock();
        let a = find(&st, self.pid, handle)?;
        let err = |errno| WorkloadError::Memory {
            pid: self.pid,
            handle,
            errno,
        };
        match st.bos.get(a.bo).map(|b| &b.backing) {
            Some(Backing::Memory(m)) => m.write_at(offset, data).map_err(err),
            Some(Backing::UserPtr { addr, space, .. }) => {
                let written = offset.saturating_add(data.len() as u64) <= a.size
                    && match *space {
                        crate::kernel::Space::Local => st.write_host(addr + offset, data),
                        // A remote client's own memory.
                        crate::kernel::Space::Remote(pid) => {
                            crate::kernel::remote_write(pid, addr + offset, data).is_ok()
                        }
                    };
                if !written {
                    return Err(err(Errno(libc::EFAULT)));
                }
                Ok(())
            }
            _ => Err(err(Errno(libc::EINVAL))),
        }
    }

    /// Reads `len` bytes of allocation `handle` at `offset`.
    pub fn read_bo(&self, handle: u64, offset: u64, len: usize) -> Result<Vec<u8>, WorkloadError> {
        let st = self.sim.lock();
        let a = find(&st, self.pid, handle)?;
        let err = |errno| WorkloadError::Memory {
            pid: self.pid,
            handle,
            errno,
        };
        match st.bos.get(a.bo).map(|b| &b.backing) {
            Some(Backing::Memory(m)) => {
                let mut buf = vec![0u8; len];
                m.read_at(offset, &mut buf).map_err(err)?;
                Ok(buf)
            }
            Some(Backing::UserPtr { addr, space, .. })
                if offset.saturating_add(len as u64) <= a.size =>
            {
                match *space {
                    crate::kernel::Space::Local => st.read_host(addr + offset, len),
                    // A remote client's own memory.
                    crate::kernel::Space::Remote(pid) => {
                        let mut buf = vec![0u8; len];
                        crate::kernel::remote_read(pid, addr + offset, &mut buf)
                            .ok()
                            .map(|()| buf)
                    }
                }
                .ok_or(err(Errno(libc::EFAULT)))
            }
            _ => Err(err(Errno(libc::EINVAL))),
        }
    }
}
