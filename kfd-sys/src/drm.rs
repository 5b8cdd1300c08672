//! `drm.h` (libdrm's copy of the DRM core uapi): the subset a render-node user needs.
//!
//! Driver version query, GEM handle close, PRIME export/import, and the newer
//! `DRM_IOCTL_GEM_CHANGE_HANDLE` (not in the installed libdrm 2.4.114 header). Names
//! and layouts are those of the C header. This module holds data definitions only: it
//! must never perform an ioctl.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::ioctl::{_IOW, _IOWR};

/// ioctl type byte of DRM devices, `'d'`.
pub const DRM_IOCTL_BASE: u8 = b'd';
/// First driver-specific command number; driver ioctls use `DRM_COMMAND_BASE + nr`.
pub const DRM_COMMAND_BASE: u8 = 0x40;
/// One past the last driver-specific command number.
pub const DRM_COMMAND_END: u8 = 0xA0;

/// Arguments of [`DRM_IOCTL_VERSION`].
///
/// The string pointers and lengths are `char *` and `__kernel_size_t` in C, so they are
/// pointer-sized here. On 64-bit targets C leaves 4 bytes of padding after
/// `version_patchlevel`; Rust names them [`_pad0`](Self::_pad0).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_version {
    /// Driver major version (amdgpu: 3).
    pub version_major: i32,
    /// Driver minor version.
    pub version_minor: i32,
    /// Driver patch level.
    pub version_patchlevel: i32,
    /// Padding, implicit in C. Keep zero.
    #[cfg(target_pointer_width = "64")]
    pub _pad0: u32,
    /// Capacity of `name` (in); length of the driver name (out).
    pub name_len: usize,
    /// User pointer to the name buffer.
    pub name: usize,
    /// Capacity of `date` (in); length of the date (out).
    pub date_len: usize,
    /// User pointer to the date buffer.
    pub date: usize,
    /// Capacity of `desc` (in); length of the description (out).
    pub desc_len: usize,
    /// User pointer to the description buffer.
    pub desc: usize,
}

/// Arguments of [`DRM_IOCTL_GEM_CLOSE`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_gem_close {
    /// Handle of the object to close.
    pub handle: u32,
    /// Padding.
    pub pad: u32,
}

/// PRIME export flag: the dma-buf fd is opened read-write (`O_RDWR`).
pub const DRM_RDWR: u32 = libc::O_RDWR as u32;
/// PRIME export flag: the dma-buf fd is close-on-exec (`O_CLOEXEC`).
pub const DRM_CLOEXEC: u32 = libc::O_CLOEXEC as u32;

/// Arguments of [`DRM_IOCTL_PRIME_HANDLE_TO_FD`] and [`DRM_IOCTL_PRIME_FD_TO_HANDLE`].
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_prime_handle {
    /// GEM handle (in for export, out for import).
    pub handle: u32,
    /// `DRM_CLOEXEC | DRM_RDWR`; export only.
    pub flags: u32,
    /// dma-buf fd (out for export, in for import).
    pub fd: i32,
}

/// Arguments of [`DRM_IOCTL_GEM_CHANGE_HANDLE`] (newer than the installed header).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct drm_gem_change_handle {
    /// Current handle of the object.
    pub handle: u32,
    /// Handle the object should have afterwards.
    pub new_handle: u32,
}

/// Query the driver name and version.
pub const DRM_IOCTL_VERSION: u32 = _IOWR::<drm_version>(DRM_IOCTL_BASE, 0x00);
/// Close a GEM handle.
pub const DRM_IOCTL_GEM_CLOSE: u32 = _IOW::<drm_gem_close>(DRM_IOCTL_BASE, 0x09);
/// Export a GEM handle as a dma-buf fd.
pub const DRM_IOCTL_PRIME_HANDLE_TO_FD: u32 = _IOWR::<drm_prime_handle>(DRM_IOCTL_BASE, 0x2d);
/// Import a dma-buf fd as a GEM handle.
pub const DRM_IOCTL_PRIME_FD_TO_HANDLE: u32 = _IOWR::<drm_prime_handle>(DRM_IOCTL_BASE, 0x2e);
/// Move a GEM object to a caller-chosen handle (newer than the installed header; used
/// to give a restored BO its checkpointed handle).
pub const DRM_IOCTL_GEM_CHANGE_HANDLE: u32 = _IOWR::<drm_gem_change_handle>(DRM_IOCTL_BASE, 0xD2);

/// First DRM fake mmap offset handed out by the kernel on 64-bit (4 GiB; kernel-internal
/// `DRM_FILE_PAGE_OFFSET_START`). Render-node offsets never collide with `/dev/kfd`
/// offsets, which always have bit 46 or above set.
pub const DRM_FILE_PAGE_OFFSET_START: u64 = 0x1_0000_0000;
