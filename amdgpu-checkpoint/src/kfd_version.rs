//! KFD interface version gates: what an image records of the dump host's
//! KFD (`AMDKFD_IOC_GET_VERSION`), which interface a restore needs, and the
//! state a dump refuses because nothing can save it.
//!
//! # What is known of 1.19–1.23 (2026 kernels)
//!
//! The installed uapi header (`/usr/include/linux/kfd_ioctl.h`) stops at
//! 1.11 and the spec (`shared/spec/kernel.md`) at 1.18; ROCm's DKMS driver
//! reports up to 1.23. What those minors add is known only from the summary
//! of upstream's 2026 patches in issue 16, not from their code:
//! - **1.19** `AMDKFD_IOC_CREATE_PROCESS`: a second KFD context (a second
//!   `kfd_process`) on a `/dev/kfd` file of a process that has one.
//! - **1.22** a metadata ring size at queue creation (GC 12.1).
//! - **1.23** a profiler ioctl.
//!
//! Unknown, so not modelled as kernel behaviour anywhere here: the ioctl
//! numbers and argument layouts of these ioctls, whether `CRIU_OP` sees a
//! secondary context at all, what the CRIU private data of a queue with a
//! metadata ring looks like, and whether profiler state survives a
//! checkpoint. Where the plugin would have to rely on one of them it
//! refuses instead:
//! - at dump, a process with two `/dev/kfd` files on a KFD of 1.19 or later
//!   (either may carry a second context that no CRIU can save) is refused,
//!   before any image is written, and its process is left running;
//! - an image dumped on a KFD past 1.18 needs at least the dump host's
//!   minor at restore ([`required_minor`]): its private data may carry
//!   state (metadata rings, profiler sessions) an older kernel would
//!   misread. An image of 1.18 or older needs 1.8, the CRIU baseline;
//! - a major other than the dump host's is refused.
//!
//! Images without the version fields (other producers, older builds) are
//! restored as before: only the CRIU baseline is checked.

use kfd::Version;

use crate::error::Error;

/// The last KFD minor whose CRIU private data this plugin knows to be
/// shared by every later kernel it knows of (1.18, mainline in 2025).
pub const LAST_PLAIN_MINOR: u32 = 18;
/// `AMDKFD_IOC_CREATE_PROCESS`: a second KFD context per process.
pub const CREATE_PROCESS_MINOR: u32 = 19;
/// A metadata ring size at queue creation (GC 12.1).
pub const METADATA_RING_MINOR: u32 = 22;
/// A profiler ioctl.
pub const PROFILER_MINOR: u32 = 23;

/// The oldest KFD minor a restore of an image dumped on `dump` needs: the
/// CRIU baseline (1.8) for dumps on 1.18 or older, the dump host's own
/// minor past that (see the module notes).
pub fn required_minor(dump: Version) -> u32 {
    if dump.minor > LAST_PLAIN_MINOR {
        dump.minor
    } else {
        Version::MIN_CRIU.minor
    }
}

/// What an image says about the KFD that dumped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageKfd {
    /// The dump host's KFD interface version, when recorded.
    pub dumped_on: Option<Version>,
    /// The oldest minor a restore needs, when recorded.
    pub required_minor: Option<u32>,
}

impl ImageKfd {
    /// From the image's fields (`kfd_major_version`, `kfd_minor_version`,
    /// `kfd_required_minor`).
    pub fn from_fields(major: Option<u32>, minor: Option<u32>, required: Option<u32>) -> Self {
        ImageKfd {
            dumped_on: major
                .zip(minor)
                .map(|(major, minor)| Version { major, minor }),
            required_minor: required,
        }
    }

    /// Refuses a restore onto `local` when it lacks what the image needs,
    /// naming both versions.
    pub fn check_restore(&self, local: Version) -> Result<(), Error> {
        let dumped = self
            .dumped_on
            .map_or_else(|| "an unrecorded version".to_owned(), |v| v.to_string());
        if let Some(dump) = self.dumped_on {
            if dump.major != local.major {
                return Err(Error::KfdVersion {
                    reason: format!(
                        "the images were dumped on KFD interface {dump}, this kernel has {local}: \
                         another major version, whose CRIU data this plugin cannot carry over"
                    ),
                });
            }
        }
        if !local.supports_criu() {
            return Err(Error::KfdTooOld {
                major: local.major,
                minor: local.minor,
            });
        }
        let required = self.required_minor.unwrap_or(Version::MIN_CRIU.minor);
        if local.minor < required {
            return Err(Error::KfdVersion {
                reason: format!(
                    "the images need KFD interface {}.{required} or later (dumped on {dumped}); \
                     this kernel has {local}: restore on a kernel at least as new as the dump \
                     host's",
                    local.major
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> Version {
        Version { major: 1, minor }
    }

    #[test]
    fn a_dump_past_1_18_needs_its_own_minor() {
        assert_eq!(required_minor(v(8)), 8);
        assert_eq!(required_minor(v(18)), 8);
        assert_eq!(required_minor(v(19)), 19);
        assert_eq!(required_minor(v(23)), 23);
    }

    #[test]
    fn restores_are_refused_naming_both_versions() {
        let image = ImageKfd::from_fields(Some(1), Some(23), Some(23));
        let err = image.check_restore(v(18)).unwrap_err().to_string();
        assert!(
            err.contains("1.23 or later") && err.contains("dumped on 1.23"),
            "{err}"
        );
        assert!(err.contains("this kernel has 1.18"), "{err}");
        image.check_restore(v(23)).unwrap();
        image.check_restore(v(24)).unwrap();
        let err = image
            .check_restore(Version {
                major: 2,
                minor: 30,
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("1.23") && err.contains("2.30"), "{err}");
        // 1.18 images go anywhere CRIU works.
        let old = ImageKfd::from_fields(Some(1), Some(18), Some(8));
        old.check_restore(v(8)).unwrap();
        assert!(matches!(
            old.check_restore(v(7)),
            Err(Error::KfdTooOld { .. })
        ));
        // Images without the fields: the baseline only.
        ImageKfd::from_fields(None, None, None)
            .check_restore(v(9))
            .unwrap();
    }
}
