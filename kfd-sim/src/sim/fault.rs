//! Fault injection: make the Nth call of a named operation fail.
//!
//! A [`FaultSpec`] names an operation, the 1-based call number at which it
//! fires (once), and the errno it produces. The textual form, accepted by
//! [`FaultSpec::from_str`](std::str::FromStr) and used by the CLI's
//! `--inject`, is `OP[:N][=ERRNO]`:
//!
//! * `OP` is an ioctl name with or without its prefix (`AMDKFD_IOC_CRIU_OP`,
//!   `CRIU_OP`, `DRM_IOCTL_AMDGPU_CS`, `AMDGPU_CS`), a CRIU sub-operation
//!   (`CRIU_OP:PROCESS_INFO`, `CRIU_OP:CHECKPOINT`, `CRIU_OP:UNPAUSE`,
//!   `CRIU_OP:RESTORE`, `CRIU_OP:RESUME`), or one of the internal points
//!   `OPEN` (a device open), `MMAP` (a device mmap), `DMABUF_EXPORT` (each
//!   dma-buf the kernel creates: CHECKPOINT, RESTORE, EXPORT_DMABUF, PRIME),
//!   `EVICT` (one device's queue eviction in PROCESS_INFO or RESTORE; `EIO`
//!   is tolerated as the kernel tolerates a hung GPU, other errors roll the
//!   call's evictions back), `RESTORE_QUEUES` (UNPAUSE's queue restore) and
//!   `SDMA_SHORT` (an SDMA copy moves only part of its bytes and its fence
//!   reports the error).
//! * `N` (default 1) counts calls of that operation after the fault is armed.
//! * `ERRNO` is a name (`EIO`, `ENOMEM`, ...) or a number; default `EIO`
//!   (`ENOMEM` for `MMAP`).
//!
//! Examples: `CRIU_OP:CHECKPOINT=EIO`, `AMDGPU_CS:3=ENOMEM`, `MMAP`.
//! The simulator's ioctl entry points check the armed faults
//! (`crate::kernel::fault`); a fault never decides what a failure does
//! beyond returning the errno. This module gives the kernel's fault code
//! the ioctl names of the handlers' tables, as data.

pub use crate::kernel::fault::{FaultKind, FaultParseError, FaultSpec};

/// Every operation a fault can target, in normalised form: the KFD and
/// render-node ioctls the simulator handles, the CRIU sub-operations and
/// the internal points. Sorted, without duplicates.
pub fn known_operations() -> Vec<String> {
    crate::kernel::fault::operations(
        crate::amdkfd::ioctl_names()
            .into_iter()
            .chain(crate::drm::ioctl_names()),
    )
}

impl FaultSpec {
    /// Parses `spec` like [`FromStr`](std::str::FromStr) and also refuses an
    /// operation the simulator never checks (a typo, or a name of another
    /// driver), whose fault could never fire. The error lists the valid
    /// operations.
    pub fn parse_known(spec: &str) -> Result<FaultSpec, FaultParseError> {
        FaultSpec::parse_among(spec, known_operations())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_operations_the_simulator_checks_are_known() {
        let known = known_operations();
        for op in [
            "CRIU_OP:CHECKPOINT",
            "ALLOC_MEMORY_OF_GPU",
            "AMDGPU_CS",
            "AMDGPU_GEM_LIST_HANDLES",
            "SDMA_SHORT",
            "MMAP",
        ] {
            assert!(known.iter().any(|k| k == op), "{op} missing from {known:?}");
        }
        for spec in [
            "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU:2=ENOMEM",
            "drm_ioctl_amdgpu_cs:3",
            "mmap",
        ] {
            assert!(FaultSpec::parse_known(spec).is_ok(), "{spec}");
        }
        for spec in ["FOO", "CRIU_OP_CHECKPOINT=EIO", "ALLOC_MEMORY=ENOMEM"] {
            let err = FaultSpec::parse_known(spec).unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, FaultParseError::UnknownOp { .. })
                    && text.contains("valid operations: ")
                    && text.contains("CRIU_OP:CHECKPOINT"),
                "{spec}: {text}"
            );
        }
    }
}
