//! BO contents between GPU memory and pages files.
//!
//! One worker per GPU, all GPUs in parallel (`std::thread::scope`); each
//! worker streams the VRAM/GTT BOs of its GPU, in bucket order, into (dump)
//! or out of (restore) `amdgpu-pages-<id>-<user gpu_id>.img`, through the
//! staging buffers of [`crate::options::Staging`]. The pages writer of
//! `amdgpu-image` turns zero pages into holes and records a checksum per
//! BO, which the KFD image then carries.
//!
//! This module decides what moves where; the copy itself belongs to the
//! `kfd` crate's SDMA copy engine. It never parses image bytes.
//!
//! Its parts: `pool` (the staging buffers and GPU turns the transfers of
//! one dump share), `pipe` (one GPU's copy engine with its staging ring),
//! `dump` (BOs into pages files) and `restore` (pages files into BOs).

mod dump;
mod pipe;
mod pool;
mod restore;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use amdgpu_image::chunks::Digest;
use amdgpu_image::pages::WrittenPages;
use amdgpu_image::ChunkSource;

pub use dump::{content_bytes, dump_contents, dump_drm_bo};
pub use pool::{GpuTurn, StagingPool, SDMA_RINGS};
pub use restore::{restore_contents, restore_drm_bo, restore_pages};

/// CPU nanoseconds the transfer threads of this process used (dump and
/// restore workers, DRM BO copies), for [`transfer_cpu_time`].
static TRANSFER_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// CPU time the plugin's own transfer threads have used in this process so
/// far: the per-GPU workers that drain staging memory into pages files
/// (digests, zero detection, writes) or fill it from them, measured per
/// thread (`CLOCK_THREAD_CPUTIME_ID`). The copy engine's work (the SDMA,
/// on a real machine the GPU's; in `kfd-sim` its ring threads) is not in
/// it. Benchmarks read it before and after a dump or restore.
pub fn transfer_cpu_time() -> Duration {
    Duration::from_nanos(TRANSFER_CPU_NS.load(Ordering::Relaxed))
}

/// Runs `work` and adds the CPU time it took on this thread to
/// [`transfer_cpu_time`].
fn counting_cpu<T>(work: impl FnOnce() -> T) -> T {
    let start = crate::sys::thread_cpu_time();
    let out = work();
    let used = crate::sys::thread_cpu_time().saturating_sub(start);
    TRANSFER_CPU_NS.fetch_add(
        u64::try_from(used.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    out
}

/// One GPU of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuTarget {
    /// The id the process knows (names the pages file; BO buckets carry it).
    pub user_gpu_id: u32,
    /// The local GPU.
    pub local_gpu_id: u32,
    /// The local GPU's render minor.
    pub render_minor: u32,
}

/// The GPU a DRM BO's transfer runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrmDevice {
    /// The GPU's user id (names it in errors).
    pub gpu_id: u32,
    /// The local render minor the copy engine opens.
    pub render_minor: u32,
}

/// What the dump of BO contents produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContentReport {
    /// Bytes of BO contents dumped (the sum of the BO sizes).
    pub bytes: u64,
    /// Bytes the pages files hold (less than `bytes` when chunks were
    /// referenced from the parent or from elsewhere in the dump).
    pub stored_bytes: u64,
    /// `(bo entry index, checksum)` for every BO with contents.
    pub checksums: Vec<(usize, u64)>,
    /// `(bo entry index, chunk digests)` for every BO with contents.
    pub digests: Vec<(usize, Vec<Digest>)>,
    /// `(bo entry index, chunk sources)` for every BO with contents, when
    /// a [`ChunkPlan`](crate::incremental::ChunkPlan) decided.
    pub sources: Vec<(usize, Vec<ChunkSource>)>,
}

impl From<WrittenPages> for ContentReport {
    fn from(written: WrittenPages) -> Self {
        ContentReport {
            bytes: written.payload_len,
            stored_bytes: written.stored_len,
            checksums: written.checksums,
            digests: written.digests,
            sources: written.sources,
        }
    }
}
