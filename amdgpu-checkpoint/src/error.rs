//! The error type of the plugin core: which step of which hook failed, with
//! the lower layer's error as the source, and the errno CRIU gets.
//!
//! This module never logs: the caller logs the error once, at the hook
//! boundary.

use std::ffi::c_int;
use std::io;

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
    #[error("reading the local KFD topology at {root}: {reason}")]
    Topology {
        /// The sysfs root that was parsed.
        root: String,
        /// What went wrong.
        reason: String,
    },
    /// The checkpointed GPUs cannot be mapped onto the local ones.
    #[error("cannot restore on this machine: {reasons}")]
    Incompatible {
        /// Every reason, joined.
        reasons: String,
    },
    /// The process's KFD state contradicts the local topology.
    #[error("{0}")]
    Inconsistent(String),
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
            Error::Incompatible { .. } => libc::ENODEV,
            Error::Inconsistent(_) => libc::EINVAL,
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
