//! Image file names, as the C plugin formats them, and parsing them back.
//!
//! | variant | name |
//! |---|---|
//! | [`ImageName::Kfd`] | `amdgpu-kfd-<id>.img` |
//! | [`ImageName::Pages`] | `amdgpu-pages-<id>-<gpu_id %04x>.img` |
//! | [`ImageName::RenderNode`] | `amdgpu-renderD-<id>.img` |
//! | [`ImageName::DrmPages`] | `amdgpu-drm-pages-<id>-<minor>-<bo index %04x>.img` |
//! | [`ImageName::Dmabuf`] | `amdgpu-dmabuf_<id>.img` |
//!
//! `<id>` is CRIU's ext-file id, which the C plugin receives as an `int` and
//! prints with `%d`: ids above `i32::MAX` therefore appear negative, and so
//! they do here. The C plugin formats DRM pages names into a 40-byte buffer,
//! which would cut names of absurdly large ids; this module does not imitate
//! that truncation (it cannot happen with kernel render minors and BO counts).
//!
//! Parsing accepts only the canonical spelling (what formatting produces), so
//! a parsed name always formats back to the same string. This module never
//! touches the filesystem.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// Which of the five kinds of image file a name denotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ImageKind {
    /// `amdgpu-kfd-<id>.img`: a [`CriuKfd`](crate::CriuKfd) message.
    Kfd,
    /// `amdgpu-pages-<id>-<gpu>.img`: raw VRAM/GTT contents of one GPU.
    Pages,
    /// `amdgpu-renderD-<id>.img`: a [`CriuRenderNode`](crate::CriuRenderNode) message.
    RenderNode,
    /// `amdgpu-drm-pages-<id>-<minor>-<bo>.img`: raw contents of one DRM BO.
    DrmPages,
    /// `amdgpu-dmabuf_<id>.img`: a [`CriuDmabufNode`](crate::CriuDmabufNode) message.
    Dmabuf,
}

impl ImageKind {
    /// Whether files of this kind hold a protobuf message (as opposed to raw pages).
    pub fn holds_message(self) -> bool {
        matches!(self, Self::Kfd | Self::RenderNode | Self::Dmabuf)
    }
}

/// The name of one file of an amdgpu image set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ImageName {
    /// `amdgpu-kfd-<id>.img`.
    Kfd {
        /// CRIU ext-file id of the `/dev/kfd` fd.
        id: u32,
    },
    /// `amdgpu-pages-<id>-<gpu_id %04x>.img`.
    Pages {
        /// CRIU ext-file id of the `/dev/kfd` fd whose image lists the BOs.
        id: u32,
        /// GPU id (the checkpointed, user-visible one on restore).
        gpu_id: u32,
    },
    /// `amdgpu-renderD-<id>.img`.
    RenderNode {
        /// CRIU ext-file id of the render-node fd.
        id: u32,
    },
    /// `amdgpu-drm-pages-<id>-<minor>-<bo %04x>.img`.
    DrmPages {
        /// CRIU ext-file id of the render-node fd.
        id: u32,
        /// Render minor at checkpoint time (128 for `renderD128`).
        minor: u32,
        /// Index of the BO in the render-node image's `bo_entries`.
        bo_index: u32,
    },
    /// `amdgpu-dmabuf_<id>.img`.
    Dmabuf {
        /// CRIU ext-file id of the dma-buf fd.
        id: u32,
    },
}

const KFD_PREFIX: &str = "amdgpu-kfd-";
const PAGES_PREFIX: &str = "amdgpu-pages-";
const RENDER_PREFIX: &str = "amdgpu-renderD-";
const DRM_PAGES_PREFIX: &str = "amdgpu-drm-pages-";
const DMABUF_PREFIX: &str = "amdgpu-dmabuf_";
const SUFFIX: &str = ".img";

impl ImageName {
    /// The kind of file this name denotes.
    pub fn kind(&self) -> ImageKind {
        match self {
            Self::Kfd { .. } => ImageKind::Kfd,
            Self::Pages { .. } => ImageKind::Pages,
            Self::RenderNode { .. } => ImageKind::RenderNode,
            Self::DrmPages { .. } => ImageKind::DrmPages,
            Self::Dmabuf { .. } => ImageKind::Dmabuf,
        }
    }

    /// The CRIU ext-file id the name carries.
    pub fn id(&self) -> u32 {
        match *self {
            Self::Kfd { id }
            | Self::Pages { id, .. }
            | Self::RenderNode { id }
            | Self::DrmPages { id, .. }
            | Self::Dmabuf { id } => id,
        }
    }

    /// Parses a file name; only the canonical spelling is accepted.
    pub fn parse(name: &str) -> Result<Self, Error> {
        let bad = |reason: &'static str| Error::BadName {
            name: name.to_owned(),
            reason,
        };
        let stem = name
            .strip_suffix(SUFFIX)
            .ok_or_else(|| bad("does not end in .img"))?;
        let parsed = if let Some(rest) = stem.strip_prefix(KFD_PREFIX) {
            Self::Kfd {
                id: parse_id(rest).ok_or_else(|| bad("bad ext-file id"))?,
            }
        } else if let Some(rest) = stem.strip_prefix(PAGES_PREFIX) {
            let (id, gpu) = split_signed_pair(rest).ok_or_else(|| bad("expected <id>-<gpu_id>"))?;
            Self::Pages {
                id: parse_id(id).ok_or_else(|| bad("bad ext-file id"))?,
                gpu_id: parse_hex(gpu).ok_or_else(|| bad("bad gpu id"))?,
            }
        } else if let Some(rest) = stem.strip_prefix(RENDER_PREFIX) {
            Self::RenderNode {
                id: parse_id(rest).ok_or_else(|| bad("bad ext-file id"))?,
            }
        } else if let Some(rest) = stem.strip_prefix(DRM_PAGES_PREFIX) {
            // The id may be negative, so split the two trailing fields from the right.
            let (head, bo) = rest
                .rsplit_once('-')
                .ok_or_else(|| bad("expected <id>-<minor>-<bo>"))?;
            let (id, minor) =
                split_signed_pair(head).ok_or_else(|| bad("expected <id>-<minor>-<bo>"))?;
            Self::DrmPages {
                id: parse_id(id).ok_or_else(|| bad("bad ext-file id"))?,
                minor: parse_id(minor).ok_or_else(|| bad("bad render minor"))?,
                bo_index: parse_hex(bo).ok_or_else(|| bad("bad bo index"))?,
            }
        } else if let Some(rest) = stem.strip_prefix(DMABUF_PREFIX) {
            Self::Dmabuf {
                id: parse_id(rest).ok_or_else(|| bad("bad ext-file id"))?,
            }
        } else {
            return Err(bad("not an amdgpu image name"));
        };
        if parsed.to_string() != name {
            return Err(bad("not in canonical form"));
        }
        Ok(parsed)
    }
}

/// Splits `"<a>-<b>"` where `a` and `b` are `%d` numbers (either may be negative).
fn split_signed_pair(s: &str) -> Option<(&str, &str)> {
    let start = usize::from(s.starts_with('-'));
    let pos = s.get(start..)?.find('-')? + start;
    Some((&s[..pos], &s[pos + 1..]))
}

/// Parses a `%d`-formatted int, mapping negative values to the same bits as C.
fn parse_id(s: &str) -> Option<u32> {
    if s.is_empty() || s.starts_with('+') {
        return None;
    }
    s.parse::<i32>().ok().map(|v| v as u32)
}

fn parse_hex(s: &str) -> Option<u32> {
    if s.is_empty() || s.starts_with('+') {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

impl FromStr for ImageName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Self::parse(s)
    }
}

impl fmt::Display for ImageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `%d` of a C int: ids with the top bit set print negative.
        let d = |v: u32| v as i32;
        match *self {
            Self::Kfd { id } => write!(f, "{KFD_PREFIX}{}{SUFFIX}", d(id)),
            Self::Pages { id, gpu_id } => write!(f, "{PAGES_PREFIX}{}-{gpu_id:04x}{SUFFIX}", d(id)),
            Self::RenderNode { id } => write!(f, "{RENDER_PREFIX}{}{SUFFIX}", d(id)),
            Self::DrmPages {
                id,
                minor,
                bo_index,
            } => {
                write!(
                    f,
                    "{DRM_PAGES_PREFIX}{}-{}-{bo_index:04x}{SUFFIX}",
                    d(id),
                    d(minor)
                )
            }
            Self::Dmabuf { id } => write!(f, "{DMABUF_PREFIX}{}{SUFFIX}", d(id)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_c_plugin() {
        assert_eq!(ImageName::Kfd { id: 5 }.to_string(), "amdgpu-kfd-5.img");
        assert_eq!(
            ImageName::Pages {
                id: 5,
                gpu_id: 0x1a2
            }
            .to_string(),
            "amdgpu-pages-5-01a2.img"
        );
        assert_eq!(
            ImageName::Pages {
                id: 7,
                gpu_id: 0xdead_beef
            }
            .to_string(),
            "amdgpu-pages-7-deadbeef.img"
        );
        assert_eq!(
            ImageName::RenderNode { id: 12 }.to_string(),
            "amdgpu-renderD-12.img"
        );
        assert_eq!(
            ImageName::DrmPages {
                id: 12,
                minor: 128,
                bo_index: 0x1f
            }
            .to_string(),
            "amdgpu-drm-pages-12-128-001f.img"
        );
        assert_eq!(
            ImageName::Dmabuf { id: 3 }.to_string(),
            "amdgpu-dmabuf_3.img"
        );
        assert_eq!(
            ImageName::Kfd { id: u32::MAX }.to_string(),
            "amdgpu-kfd--1.img"
        );
    }

    #[test]
    fn parses_back_every_kind() {
        let names = [
            ImageName::Kfd { id: 0 },
            ImageName::Kfd { id: 0x8000_0000 },
            ImageName::Pages {
                id: 5,
                gpu_id: 0x1a2,
            },
            ImageName::Pages {
                id: u32::MAX,
                gpu_id: u32::MAX,
            },
            ImageName::RenderNode { id: 12 },
            ImageName::DrmPages {
                id: 12,
                minor: 128,
                bo_index: 0x1f,
            },
            ImageName::DrmPages {
                id: u32::MAX,
                minor: u32::MAX,
                bo_index: 0,
            },
            ImageName::Dmabuf { id: 3 },
        ];
        for n in names {
            assert_eq!(ImageName::parse(&n.to_string()).unwrap(), n, "{n}");
        }
    }

    #[test]
    fn rejects_non_canonical_and_foreign_names() {
        for bad in [
            "amdgpu-kfd-05.img",
            "amdgpu-kfd-+5.img",
            "amdgpu-kfd-5",
            "amdgpu-kfd-.img",
            "amdgpu-pages-5-1a2.img",
            "amdgpu-pages-5-01A2.img",
            "amdgpu-pages-5.img",
            "amdgpu-drm-pages-1-2.img",
            "amdgpu-dmabuf-3.img",
            "files.img",
            "amdgpu-kfd-99999999999.img",
        ] {
            assert!(ImageName::parse(bad).is_err(), "{bad}");
        }
        let err = ImageName::parse("amdgpu-kfd-05.img")
            .unwrap_err()
            .to_string();
        assert!(err.contains("amdgpu-kfd-05.img"), "{err}");
    }
}
