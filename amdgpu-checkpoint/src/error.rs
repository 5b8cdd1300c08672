//! The error type of the plugin core: which step of which hook failed, with
//! the lower layer's error as the source, and the errno CRIU gets.
//!
//! This module never logs: the caller logs the error once, at the hook
//! boundary.

use std::ffi::c_int;
use std::fmt;
use std::io;
use std::path::PathBuf;

use amdgpu_image::ImageName;
use amdgpu_topology::checks::Reason;
use amdgpu_topology::device_map::DeviceMapError;
use amdgpu_topology::mapping::MapError;

/// A failure of a hook's work.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A KFD or render-node operation failed.
    #[error("{step}: {source}")]
    Kfd {
        /// What the plugin was doing.
        step: &'static str,
        /// The failed operation, with its errno.
        #[source]
        source: kfd::Error,
    },
    /// `PROCESS_INFO` could not pause the process: the kernel's eviction
    /// of its queues gave up waiting for a queue to be preempted (`ETIME`
    /// from `unmap_queues_cpsch`) and was rolled back, so the process was
    /// never paused and runs on.
    #[error(
        "pausing the process (CRIU_OP PROCESS_INFO): a GPU queue could not be \
         preempted in time (it did not reach a packet boundary within the kernel's \
         amdgpu.queue_preemption_timeout_ms: {source}); the process was not paused and keeps \
         running, and nothing of it was dumped: retry the dump, and look in the kernel log for \
         an unsuccessful queues preemption (the kernel may reset the GPU after one)"
    )]
    QueuePreemptionTimeout {
        /// The failed PROCESS_INFO, with its errno.
        #[source]
        source: kfd::Error,
    },
    /// The KFD interface is too old for checkpoint/restore.
    #[error("KFD interface {major}.{minor} does not support checkpoint/restore (need 1.8 or newer); update the kernel")]
    KfdTooOld {
        /// Reported major version.
        major: u32,
        /// Reported minor version.
        minor: u32,
    },
    /// The local KFD interface lacks what the images need, or the dumped
    /// state holds what no image can carry (see
    /// [`crate::kfd_version`]).
    #[error("{reason}")]
    KfdVersion {
        /// What is missing, naming both versions.
        reason: String,
    },
    /// A render node holds DRM buffers the kernel cannot list
    /// (no `AMDGPU_GEM_LIST_HANDLES`): a dump would lose them.
    #[error("{reason}")]
    Unlistable {
        /// Which file and why.
        reason: String,
    },
    /// No render node of a local GPU in this process's `/dev/dri` (see
    /// [`crate::render_node`]).
    #[error("{reason}")]
    RenderNodeMissing {
        /// The GPU and what was looked for.
        reason: String,
    },
    /// Reading or writing an image failed, or an image is malformed.
    #[error("{step}: {source}")]
    Image {
        /// What the plugin was doing.
        step: &'static str,
        /// The image error (names the file and field).
        #[source]
        source: amdgpu_image::Error,
    },
    /// The local topology could not be read.
    #[error("reading the local KFD topology at {root}: {source}")]
    Topology {
        /// The sysfs root that was parsed.
        root: String,
        /// What went wrong (boxed: it keeps every `Error` small).
        #[source]
        source: Box<TopologyError>,
    },
    /// A render node the process holds is the render node of no GPU of
    /// the local topology.
    #[error(
        "reading the local KFD topology at {root}: no GPU has render minor {minor} (renderD{minor})"
    )]
    NoGpuOfRenderMinor {
        /// The sysfs root that was parsed.
        root: String,
        /// The render node's minor.
        minor: u32,
    },
    /// The checkpointed GPUs cannot be mapped onto the local ones.
    #[error("cannot restore on this machine: {}", Joined(.problems))]
    Incompatible {
        /// Every problem found.
        problems: Vec<Incompatibility>,
    },
    /// The process uses a GPU the local topology does not list.
    #[error("the process uses GPU {gpu_id:#x}, which the topology at {} does not list", .root.display())]
    GpuNotInTopology {
        /// The GPU's actual gpu_id.
        gpu_id: u32,
        /// The sysfs root that was parsed.
        root: PathBuf,
    },
    /// The GPU mapping of a restore lacks a GPU of the image.
    #[error("the GPU mapping has no local GPU for checkpointed GPU {gpu_id:#x}")]
    GpuUnmapped {
        /// The checkpointed gpu_id.
        gpu_id: u32,
    },
    /// A local GPU the mapping chose is gone from the topology.
    #[error("local GPU {gpu_id:#x} vanished from the topology")]
    LocalGpuVanished {
        /// The local gpu_id.
        gpu_id: u32,
    },
    /// The kernel re-created another number of BOs than the image holds.
    #[error("CRIU_OP RESTORE returned {restored} BOs for {expected} in the image")]
    RestoredBoCount {
        /// BOs the kernel returned.
        restored: usize,
        /// BO entries of the image.
        expected: usize,
    },
    /// A BO with contents has no dma-buf to copy them through.
    #[error("BO {entry} on GPU {gpu_id:#x} has contents but {missing}")]
    BoWithoutDmabuf {
        /// The user gpu_id of its GPU.
        gpu_id: u32,
        /// Its bo entry index.
        entry: usize,
        /// Which dma-buf is missing (`the kernel exported no dma-buf`).
        missing: &'static str,
    },
    /// A BO's dma-buf is smaller than the BO.
    #[error("{bo} on GPU {gpu_id:#x}: the dma-buf has {have:#x} bytes, {size:#x} are expected")]
    DmabufTooSmall {
        /// The BO (`BO 3`, or its DRM pages file).
        bo: String,
        /// The GPU.
        gpu_id: u32,
        /// The dma-buf's size.
        have: u64,
        /// The BO's size.
        size: u64,
    },
    /// The BO contents a dump copied do not fit the image's bo entries.
    #[error(
        "the BO contents and the image disagree: {what} of bo entry {entry}{} (the image has \
         {count} bo entries)",
        if *.twice { " twice" } else { "" }
    )]
    ContentsMismatch {
        /// What was copied (`a checksum`, `chunk digests`, `chunk sources`).
        what: &'static str,
        /// The bo entry it names.
        entry: usize,
        /// Whether it came twice (else the entry is not in the image).
        twice: bool,
        /// Bo entries of the image.
        count: usize,
    },
    /// A DRM BO's copied contents are not those of exactly one BO.
    #[error("a DRM BO's contents were dumped without exactly one {what}")]
    DrmContents {
        /// What is not single (`checksum`, `list of chunk digests`).
        what: &'static str,
    },
    /// A BO too large for a pages file.
    #[error("{file}: a BO of {size:#x} bytes")]
    BoTooLarge {
        /// Its DRM pages file.
        file: String,
        /// Its size.
        size: u64,
    },
    /// A pages file the image names is not in the image set.
    #[error("{file} is missing")]
    PagesFileMissing {
        /// The pages file.
        file: String,
    },
    /// A DRM pages file whose layout holds no BO.
    #[error("{file}: a DRM pages layout without its BO")]
    EmptyDrmLayout {
        /// The DRM pages file.
        file: String,
    },
    /// A KFD file's contents were copied by a thread that panicked.
    #[error("file {id}: the transfer thread panicked; its image is not written")]
    TransferPanicked {
        /// CRIU's file id.
        id: u32,
    },
    /// amdgpu dma-bufs the dump met whose buffer no dumped KFD or
    /// render-node file holds.
    #[error(
        "amdgpu dma-bufs of no buffer of a dumped KFD or render-node file: {}",
        List(.files, |f: &u32| format!("file {f}"))
    )]
    OrphanDmabufs {
        /// CRIU's file ids of the dma-bufs.
        files: Vec<u32>,
    },
    /// DRM BOs imported from a buffer no dumped process exports.
    #[error(
        "DRM BOs imported from a buffer no dumped process holds (its exporter is outside the \
         dump): {}",
        List(.bos, |(file, handle): &(u32, u32)| format!("BO {handle} of file {file}"))
    )]
    ImportsFromOutside {
        /// Each BO: CRIU's file id of its render node, its GEM handle.
        bos: Vec<(u32, u32)>,
    },
    /// Render nodes the dump met but never wrote.
    #[error(
        "render nodes never written (the dump ended before they were): {}",
        List(.files, |(file, minor): &(u32, u32)| format!("file {file} (renderD{minor})"))
    )]
    RenderNodesUnwritten {
        /// Each render node: CRIU's file id, its render minor.
        files: Vec<(u32, u32)>,
    },
    /// An imported DRM BO whose buffer cannot be exported to be named.
    #[error(
        "the imported DRM BO {handle} of renderD{minor} (file {id}) cannot be exported, so its \
         buffer cannot be named"
    )]
    ImportUnexportable {
        /// CRIU's file id of the render node.
        id: u32,
        /// Its render minor.
        minor: u32,
        /// The BO's GEM handle.
        handle: u32,
    },
    /// A restored KFD file has no render file for a local GPU it uses.
    #[error("no render file for local GPU {gpu_id:#x}")]
    NoRenderFile {
        /// The local gpu_id.
        gpu_id: u32,
    },
    /// A render node's GPU is not among the GPUs of its task's restored
    /// KFD file.
    #[error(
        "render-node file {id}: the task's KFD file is restored but has no GPU {gpu_id:#x} \
         (renderD{minor})"
    )]
    RenderGpuNotRestored {
        /// CRIU's file id of the render node.
        id: u32,
        /// The checkpointed gpu_id of the render node.
        gpu_id: u32,
        /// Its checkpointed render minor.
        minor: u32,
    },
    /// A DRM BO with contents whose pages file the image does not name.
    #[error("render-node file {id}: BO {bo} has no pages file name")]
    DrmBoNoPagesFile {
        /// CRIU's file id of the render node.
        id: u32,
        /// The bo entry index.
        bo: usize,
    },
    /// A restored DRM BO with contents that has no dma-buf.
    #[error("render-node file {id}: BO {bo} not exported")]
    DrmBoNotExported {
        /// CRIU's file id of the render node.
        id: u32,
        /// The bo entry index.
        bo: usize,
    },
    /// A shared buffer could not be published to the other restored tasks.
    #[error("publishing buffer {key}: {source}")]
    Publish {
        /// The buffer's key.
        key: u32,
        /// Why.
        #[source]
        source: crate::handles::TableError,
    },
    /// An image references chunks stored elsewhere, and the images are
    /// read from a stream.
    #[error(
        "{image}: the image references chunks of its parent or of other images, which only an \
         image directory can resolve (not a stream)"
    )]
    ChunksNeedDirectory {
        /// The image (`file 5`).
        image: String,
    },
    /// A parent image listed a moment ago cannot be read.
    #[error("parent {name} vanished")]
    ParentVanished {
        /// The image.
        name: ImageName,
    },
    /// Parent images of more than one dump.
    #[error("parent {name} belongs to another dump than the other parent images")]
    ParentOfOtherDump {
        /// The image.
        name: ImageName,
    },
    /// A parent image's bo entry records chunks that do not fit it.
    #[error("parent {name}: bo entry {entry}: {source}")]
    ParentChunks {
        /// The image.
        name: ImageName,
        /// The bo entry index.
        entry: usize,
        /// What does not fit.
        #[source]
        source: amdgpu_image::ChunkFieldError,
    },
    /// A parallel restore command that is malformed or does not fit what
    /// came with it.
    #[error("parallel restore command: {0}")]
    ParallelCommand(#[from] crate::parallel::CommandError),
    /// A BO that a parallel restore command cannot describe.
    #[error("BO {entry} on GPU {gpu_id:#x} cannot be described to the main process")]
    BoUndescribable {
        /// The user gpu_id.
        gpu_id: u32,
        /// The bo entry index.
        entry: usize,
    },
    /// More BOs or GPUs than one parallel restore command carries.
    #[error("{entries} BOs on {gpus} GPUs are more than one command carries")]
    CommandTooLarge {
        /// BOs.
        entries: usize,
        /// GPUs.
        gpus: usize,
    },
    /// The parallel restore worker was started twice.
    #[error("the parallel restore worker was already started")]
    WorkerStarted,
    /// CRIU gives the plugin no images directory.
    #[error("CRIU offers no images directory (criu_get_image_dir)")]
    NoImagesDirectory,
    /// A host-side system call (fd duplication, shared memory) failed.
    #[error("{step}: {source}")]
    Io {
        /// What the plugin was doing.
        step: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A feature this build of the plugin does not implement. The only error
    /// answered with `-ENOTSUP`: CRIU then reports the file as one it cannot
    /// dump or restore, exactly as if no plugin had claimed it.
    #[error("{what} is not supported by this build of the plugin")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// A render node was written as a render-only image into CRIU's image
    /// stream (a CRIU without `DUMP_DEVICES_LATE`, where it could not
    /// wait for the dump's end), and a KFD file dumped later names its GPU:
    /// a stream takes an image once, so the image cannot be renamed.
    #[error(
        "renderD{minor} (file {id}) was streamed as a render-only image before a KFD file named \
         its GPU {gpu_id:#x}, and an image stream cannot take that image again: dump into an \
         image directory (no --stream), or use a CRIU with DUMP_DEVICES_LATE (newer than 4.2), \
         which writes render-only images once every file is dumped"
    )]
    StreamedRenderOnly {
        /// CRIU's file id of the render node.
        id: u32,
        /// Its render minor.
        minor: u32,
        /// The user gpu_id the KFD file gives its GPU.
        gpu_id: u32,
    },
    /// Moving BO contents between the GPU and an image failed.
    #[error("GPU {gpu_id:#x}: {step}: {reason}")]
    Transfer {
        /// The GPU whose contents were moving.
        gpu_id: u32,
        /// What was being done.
        step: &'static str,
        /// Why it failed.
        reason: String,
    },
}

/// Why the local KFD topology could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// Its sysfs files do not parse.
    #[error("{0}")]
    Parse(#[from] amdgpu_topology::ParseError),
    /// Its nodes do not make a device topology.
    #[error("{0}")]
    Devices(#[from] amdgpu_topology::devices::DeviceError),
}

/// One reason the checkpointed GPUs cannot be restored on the local ones
/// ([`Error::Incompatible`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Incompatibility {
    /// The device map (`AMDGPU_DEVICE_MAP`) cannot be resolved against the
    /// two topologies.
    #[error("{0}")]
    DeviceMap(#[from] DeviceMapError),
    /// The topologies cannot be compared.
    #[error("{0}")]
    Mapping(#[from] MapError),
    /// A property or rule that fails (one of the mapping's reasons).
    #[error("{0}")]
    Mismatch(Reason),
    /// A render node of a task without a KFD image, recorded without its
    /// device entry (an image of the C plugin).
    #[error(
        "render-node file {id} (renderD{minor}) belongs to a task without a KFD image and \
         records no device entry (an image of the C plugin), so no local GPU can be chosen for it"
    )]
    RenderWithoutDevice {
        /// CRIU's file id.
        id: u32,
        /// Its checkpointed render minor.
        minor: u32,
    },
    /// The device map does not resolve for a render-only node.
    #[error("render-node file {id} (renderD{minor}): {source}")]
    RenderDeviceMap {
        /// CRIU's file id.
        id: u32,
        /// Its checkpointed render minor.
        minor: u32,
        /// Why.
        #[source]
        source: DeviceMapError,
    },
    /// The device map pins a render-only node to a local GPU that does
    /// not match it.
    #[error(
        "render-node file {id}: the device map pins renderD{minor} (GPU {gpu_id:#x}) to local \
         GPU {local_gpu:#x}, which cannot take it: {}",
        Joined(.mismatches)
    )]
    PinnedMismatch {
        /// CRIU's file id.
        id: u32,
        /// Its checkpointed render minor.
        minor: u32,
        /// Its checkpointed gpu_id.
        gpu_id: u32,
        /// The pinned local GPU.
        local_gpu: u32,
        /// What does not match.
        mismatches: Vec<Reason>,
    },
    /// The device map pins a render-only node to a local GPU that another
    /// checkpointed GPU of the task already uses.
    #[error(
        "render-node file {id}: the device map pins renderD{minor} (GPU {gpu_id:#x}) to local \
         GPU {local_gpu:#x}, which cannot take it: it already stands in for another \
         checkpointed GPU of this task"
    )]
    PinnedTaken {
        /// CRIU's file id.
        id: u32,
        /// Its checkpointed render minor.
        minor: u32,
        /// Its checkpointed gpu_id.
        gpu_id: u32,
        /// The pinned local GPU.
        local_gpu: u32,
    },
    /// No local GPU matches a render-only node.
    #[error(
        "render-node file {id}: no local GPU can stand in for renderD{minor} (GPU {gpu_id:#x}, \
         device {device_id:#x}){}",
        Closest(.closest)
    )]
    NoStandIn {
        /// CRIU's file id.
        id: u32,
        /// Its checkpointed render minor.
        minor: u32,
        /// Its checkpointed gpu_id.
        gpu_id: u32,
        /// Its PCI device id.
        device_id: u32,
        /// Why the closest local GPUs do not match (empty: no local GPU).
        closest: Vec<Reason>,
    },
    /// Every local GPU matching a render-only node stands in for another
    /// checkpointed GPU of the task.
    #[error(
        "render-node file {id}: every local GPU compatible with renderD{minor} ({}) already \
         stands in for another checkpointed GPU of this task",
        List(.compatible, |g: &u32| format!("{g:#x}"))
    )]
    AllTaken {
        /// CRIU's file id.
        id: u32,
        /// Its checkpointed render minor.
        minor: u32,
        /// The compatible local GPUs.
        compatible: Vec<u32>,
    },
}

/// Items joined with `; `.
struct Joined<'a, T>(&'a [T]);

impl<T: fmt::Display> fmt::Display for Joined<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

/// Items, each shown by a function, joined with `, `.
struct List<'a, T, F>(&'a [T], F);

impl<T, F: Fn(&T) -> String> fmt::Display for List<'_, T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&(self.1)(item))?;
        }
        Ok(())
    }
}

/// `: ` and the reasons, or ` (no local GPU)` without any.
struct Closest<'a>(&'a [Reason]);

impl fmt::Display for Closest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str(" (no local GPU)")
        } else {
            write!(f, ": {}", Joined(self.0))
        }
    }
}

impl Error {
    /// A mapper of a `kfd` failure during `step` (for `map_err`).
    pub fn kfd(step: &'static str) -> impl FnOnce(kfd::Error) -> Error {
        move |source| Error::Kfd { step, source }
    }

    /// A mapper of an image failure during `step` (for `map_err`).
    pub fn image(step: &'static str) -> impl FnOnce(amdgpu_image::Error) -> Error {
        move |source| Error::Image { step, source }
    }

    /// A mapper of an I/O failure during `step` (for `map_err`).
    pub fn io(step: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let step = step.into();
        move |source| Error::Io { step, source }
    }

    /// The negative errno CRIU gets. Never `-ENOTSUP` except for
    /// [`Error::Unsupported`]: an error means the object was ours and
    /// handling it failed.
    pub fn errno(&self) -> c_int {
        let errno = match self {
            Error::Unsupported { .. } => return -libc::ENOTSUP,
            Error::Kfd { source, .. } | Error::QueuePreemptionTimeout { source, .. } => {
                source.errno()
            }
            Error::KfdTooOld { .. } => libc::EPROTONOSUPPORT,
            Error::KfdVersion { .. } => libc::EPROTONOSUPPORT,
            Error::RenderNodeMissing { .. } => libc::ENOENT,
            Error::Unlistable { .. } => libc::ENOSYS,
            Error::Image { source, .. } => match source {
                amdgpu_image::Error::Io { source, .. } => {
                    source.raw_os_error().unwrap_or(libc::EIO)
                }
                _ => libc::EINVAL,
            },
            Error::Topology { .. } => libc::ENODEV,
            Error::NoGpuOfRenderMinor { .. } => libc::ENODEV,
            Error::Incompatible { .. } => libc::ENODEV,
            Error::GpuNotInTopology { .. }
            | Error::GpuUnmapped { .. }
            | Error::LocalGpuVanished { .. }
            | Error::RestoredBoCount { .. }
            | Error::BoWithoutDmabuf { .. }
            | Error::DmabufTooSmall { .. }
            | Error::ContentsMismatch { .. }
            | Error::DrmContents { .. }
            | Error::BoTooLarge { .. }
            | Error::PagesFileMissing { .. }
            | Error::EmptyDrmLayout { .. }
            | Error::TransferPanicked { .. }
            | Error::OrphanDmabufs { .. }
            | Error::ImportsFromOutside { .. }
            | Error::RenderNodesUnwritten { .. }
            | Error::ImportUnexportable { .. }
            | Error::NoRenderFile { .. }
            | Error::RenderGpuNotRestored { .. }
            | Error::DrmBoNoPagesFile { .. }
            | Error::DrmBoNotExported { .. }
            | Error::Publish { .. }
            | Error::ChunksNeedDirectory { .. }
            | Error::ParentVanished { .. }
            | Error::ParentOfOtherDump { .. }
            | Error::ParentChunks { .. }
            | Error::ParallelCommand(_)
            | Error::BoUndescribable { .. }
            | Error::CommandTooLarge { .. }
            | Error::WorkerStarted
            | Error::NoImagesDirectory => libc::EINVAL,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Transfer { .. } => libc::EIO,
            Error::StreamedRenderOnly { .. } => libc::ESPIPE,
        };
        if errno == libc::ENOTSUP || errno <= 0 {
            -libc::EIO
        } else {
            -errno
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_never_map_to_enotsup() {
        let e = Error::Io {
            step: "x".into(),
            source: io::Error::from_raw_os_error(libc::ENOTSUP),
        };
        assert_eq!(e.errno(), -libc::EIO);
        let e = Error::Io {
            step: "x".into(),
            source: io::Error::from_raw_os_error(libc::EBADF),
        };
        assert_eq!(e.errno(), -libc::EBADF);
        assert_eq!(
            Error::KfdTooOld { major: 1, minor: 6 }.errno(),
            -libc::EPROTONOSUPPORT
        );
    }
}
