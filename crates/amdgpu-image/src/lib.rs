//! The image set of the amdgpu CRIU plugin: file names, framing, protobuf
//! messages, validated reads, streamed pages files and image stores.
//!
//! Images written by this crate are interchangeable with the ones of upstream
//! CRIU's C plugin: same [file names](name), the same 8-byte length header
//! ([framing]), the same protobuf tags ([messages]) and the same pages layout
//! ([pages]). What this crate adds (a producer marker, a format version and a
//! per-BO content [checksum]) lives in optional fields with tags of 100 and
//! above, which the C plugin's reader skips; images without them stay valid.
//!
//! Everything here is pure: no kernel access, no `unsafe`. Untrusted input
//! never panics and never sizes an allocation beyond what the input justifies;
//! errors name the file, the message, the entry and the field.
//!
//! Where to start:
//! - [`ImageName`]: the five image file names, formatted and parsed.
//! - [`read_message`] / [`write_message`] / [`FramedWriter`]: the framing.
//! - [`CriuKfd`], [`CriuRenderNode`], [`CriuDmabufNode`]: the messages, decoded
//!   with required-field checks by [`decode_message`].
//! - [`ValidatedKfd`], [`ValidatedRenderNode`], [`verify_set`]: validation.
//! - [`PagesWriter`], [`PagesReader`], [`PagesFile`], [`PagesLayout`]: pages files.
//! - [`ImageStore`] with [`DirStore`], [`StreamStore`] and [`MemStore`].
#![forbid(unsafe_code)]

pub mod checksum;
mod error;
pub mod framing;
#[doc(hidden)]
pub mod fuzz_support;
pub mod messages;
pub mod name;
pub mod pages;
#[doc(hidden)]
pub mod presence;
pub mod store;
pub mod validate;

pub use checksum::{content_checksum, ContentHasher};
pub use error::{Error, Problem};
pub use framing::{
    decode_message, encode_message, read_message, write_message, FramedWriter, ReadLimits,
    HEADER_LEN,
};
pub use messages::{
    flags, CriuDmabufNode, CriuKfd, CriuRenderNode, DevIolink, DrmBoEntry, DrmVmEntry,
    ImageMessage, KfdBoEntry, KfdDeviceEntry, FORMAT_VERSION, PRODUCER,
};
pub use name::{ImageKind, ImageName};
pub use pages::{
    PagesBo, PagesChunk, PagesFile, PagesLayout, PagesReader, PagesSink, PagesWriter, Sequential,
    WrittenPages, PAGE_SIZE,
};
pub use store::{DirStore, ImageStore, ImageWriter, MemStore, StreamMode, StreamStore};
pub use validate::{verify_set, SetReport, ValidatedKfd, ValidatedRenderNode};
