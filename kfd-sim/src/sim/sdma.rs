//! The [`Sim`] API over the GPUs' SDMA engines (`crate::hw::sdma`, driven
//! by the DRM half): their statistics and copy rates, for tests and
//! benchmarks.

use amdgpu_topology::GpuId;

use super::Sim;
use crate::hw::sdma::SdmaStats;

impl Sim {
    /// What the SDMA engines of the GPU with (actual) `gpu_id` did so far:
    /// jobs, failed jobs, bytes copied and GPU VM faults (count, first and
    /// last faulting address). `None` for an unknown gpu_id.
    pub fn sdma_stats(&self, gpu_id: GpuId) -> Option<SdmaStats> {
        let gpu = self.shared.gpus.iter().find(|g| g.id() == gpu_id)?;
        Some(gpu.drm.sdma.stats())
    }

    /// The most host memory that GEM userptr BOs on the render node of the
    /// GPU with (actual) `gpu_id` pinned at once since the simulator started,
    /// in bytes: the peak staging memory of SDMA copy engines (KFD userptr
    /// allocations are not counted). `None` for an unknown gpu_id.
    pub fn gem_userptr_peak_bytes(&self, gpu_id: GpuId) -> Option<u64> {
        let gpu = self.shared.gpus.iter().find(|g| g.id() == gpu_id)?;
        Some(
            gpu.drm
                .userptr_peak
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Limits every SDMA ring of every GPU to `bytes_per_second` (`None`:
    /// unlimited, the default): a GPU copying on two rings moves twice the
    /// rate. For benchmarks of copy pipelines.
    pub fn set_sdma_bandwidth(&self, bytes_per_second: Option<u64>) {
        for gpu in &self.shared.gpus {
            gpu.drm.sdma.set_bandwidth(bytes_per_second);
        }
    }

    /// Limits the SDMA rings of each GPU together to `bytes_per_second`
    /// (`None`: unlimited, the default), whatever number of rings its copies
    /// use; the per-ring limit ([`Sim::set_sdma_bandwidth`]) applies as
    /// well. For benchmarks that compare copy strategies using different
    /// numbers of rings at one GPU rate.
    pub fn set_sdma_gpu_bandwidth(&self, bytes_per_second: Option<u64>) {
        for gpu in &self.shared.gpus {
            gpu.drm.sdma.set_gpu_bandwidth(bytes_per_second);
        }
    }
}
