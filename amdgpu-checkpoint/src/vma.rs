//! Mmap-offset translations for `UPDATE_VMA_MAP`.
//!
//! After `CRIU_OP RESTORE` every VRAM/GTT/doorbell/MMIO BO has a new mmap
//! offset. CRIU restores the task's device mappings from the saved path and
//! offset, so for each BO the restored task records `(GPU VA, old offset) →
//! (new offset, file)`; ROCm maps BOs at CPU VA == GPU VA, which makes the
//! pair a key CRIU can present. Render-node mappings also need a different
//! file: only the DRM file that owns the process VM may mmap its BOs, so CRIU
//! gets a `dup` of that file instead of reopening the saved path (which may
//! even name another GPU after remapping).
//!
//! This module only keeps and answers the table; it never maps anything.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// Which device a mapping path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappedDevice {
    /// `/dev/kfd` (doorbells, MMIO remap, events).
    Kfd,
    /// `/dev/dri/renderD<minor>`.
    Render,
}

/// Classifies a mapping path as CRIU saved it (duplicate slashes collapsed).
/// `None`: not a device of this plugin.
pub fn classify_path(path: &[u8]) -> Option<MappedDevice> {
    let mut clean = Vec::with_capacity(path.len());
    for &b in path {
        if !(b == b'/' && clean.last() == Some(&b'/')) {
            clean.push(b);
        }
    }
    if clean == b"/dev/kfd" {
        return Some(MappedDevice::Kfd);
    }
    let minor = clean.strip_prefix(b"/dev/dri/renderD")?;
    (!minor.is_empty() && minor.iter().all(u8::is_ascii_digit)).then_some(MappedDevice::Render)
}

/// One BO's translation.
#[derive(Debug, Clone)]
pub struct Translation {
    /// GPU (and CPU) virtual address of the BO.
    pub addr: u64,
    /// Mmap offset at checkpoint.
    pub old_offset: u64,
    /// Mmap offset after restore.
    pub new_offset: u64,
    /// For render-node mappings: the DRM file that owns the BO (shared by
    /// all BOs of one GPU).
    pub file: Option<Arc<OwnedFd>>,
}

/// What `UPDATE_VMA_MAP` should answer for one mapping.
#[derive(Debug)]
pub enum VmaAnswer<'a> {
    /// Map at `new_offset`; for render nodes through `file` (CRIU gets a
    /// `dup`), for `/dev/kfd` by reopening the path.
    Translated {
        /// The new offset.
        new_offset: u64,
        /// The file to hand to CRIU, if any.
        file: Option<BorrowedFd<'a>>,
    },
    /// Our device, but no BO at this address and offset (e.g. the events
    /// page): keep the saved offset.
    Unchanged,
    /// Not a device of this plugin.
    NotOurs,
}

/// The translations of one restored task.
#[derive(Debug, Default)]
pub struct VmaTranslations {
    entries: Vec<Translation>,
}

impl VmaTranslations {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one BO.
    pub fn push(&mut self, translation: Translation) {
        self.entries.push(translation);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Answers one `UPDATE_VMA_MAP` call.
    pub fn answer(&self, path: &[u8], addr: u64, old_offset: u64) -> VmaAnswer<'_> {
        let Some(device) = classify_path(path) else {
            return VmaAnswer::NotOurs;
        };
        let Some(entry) = self
            .entries
            .iter()
            .find(|e| e.addr == addr && e.old_offset == old_offset)
        else {
            return VmaAnswer::Unchanged;
        };
        let file = match device {
            MappedDevice::Kfd => None,
            MappedDevice::Render => entry.file.as_ref().map(|f| f.as_fd()),
        };
        VmaAnswer::Translated {
            new_offset: entry.new_offset,
            file,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_classified_after_collapsing_slashes() {
        assert_eq!(classify_path(b"/dev/kfd"), Some(MappedDevice::Kfd));
        assert_eq!(classify_path(b"//dev//kfd"), Some(MappedDevice::Kfd));
        assert_eq!(
            classify_path(b"/dev/dri//renderD129"),
            Some(MappedDevice::Render)
        );
        assert_eq!(classify_path(b"/dev/dri/renderD"), None);
        assert_eq!(classify_path(b"/dev/dri/card0"), None);
        assert_eq!(classify_path(b"/dev/kfd0"), None);
        assert_eq!(classify_path(b"/usr/lib/libc.so.6"), None);
    }

    #[test]
    fn answers_by_address_and_old_offset() {
        let file = Arc::new(OwnedFd::from(std::fs::File::open("/dev/null").unwrap()));
        let mut table = VmaTranslations::new();
        table.push(Translation {
            addr: 0x7000_0000,
            old_offset: 0x1_0000_0000,
            new_offset: 0x2_0000_0000,
            file: Some(file.clone()),
        });
        table.push(Translation {
            addr: 0x7100_0000,
            old_offset: 0x3000,
            new_offset: 0x5000,
            file: Some(file),
        });
        match table.answer(b"/dev/dri/renderD128", 0x7000_0000, 0x1_0000_0000) {
            VmaAnswer::Translated { new_offset, file } => {
                assert_eq!(new_offset, 0x2_0000_0000);
                assert!(file.is_some());
            }
            other => panic!("unexpected {other:?}"),
        }
        match table.answer(b"/dev/kfd", 0x7100_0000, 0x3000) {
            VmaAnswer::Translated { new_offset, file } => {
                assert_eq!(new_offset, 0x5000);
                assert!(file.is_none(), "kfd mappings reopen the path");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            table.answer(b"/dev/kfd", 0x7100_0000, 0x4000),
            VmaAnswer::Unchanged
        ));
        assert!(matches!(
            table.answer(b"/tmp/x", 0x7000_0000, 0x1_0000_0000),
            VmaAnswer::NotOurs
        ));
    }
}
