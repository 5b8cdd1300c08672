//! The image set of the amdgpu CRIU plugin: file names, framing, protobuf
//! messages, validated reads, streamed pages files and image stores.
//!
//! Images written by this crate are interchangeable with the ones of upstream
//! CRIU's C plugin: same [file names](name), the same 8-byte length header
//! ([framing]), the same protobuf tags ([messages]) and the same pages layout
//! ([pages]). What this crate adds (a producer marker, a format version, a
//! per-BO content [checksum] and a per-message checksum, the [seal]) lives in optional fields with tags of 100 and
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
//! - With feature `topology`: `topology`, between device entries and
//!   `amdgpu-topology`'s device view (what restore maps onto the local GPUs).
//!
//! # Example
//!
//! Write the image set of a one-GPU process (its KFD image and the pages
//! file of its VRAM buffer, with a checksum), check the whole set, and read
//! the KFD image back validated, as restore does:
//!
//! ```
//! use amdgpu_image::{
//!     flags, verify_set, CriuKfd, ImageName, ImageStore, ImageWriter, KfdBoEntry,
//!     KfdDeviceEntry, MemStore, PagesBo, PagesLayout, ReadLimits, ValidatedKfd, PAGE_SIZE,
//! };
//!
//! let store = MemStore::new(); // or DirStore::open_dir(images_dir)?
//! let gpu_id = 0x4d2f;
//! let mut kfd = CriuKfd {
//!     pid: 4242,
//!     num_of_gpus: 1,
//!     num_of_cpus: 1,
//!     device_entries: vec![
//!         KfdDeviceEntry { node_id: 0, cpu_cores_count: 16, ..Default::default() },
//!         KfdDeviceEntry { node_id: 1, gpu_id, vendor_id: 0x1002, device_id: 0x740f, ..Default::default() },
//!     ],
//!     num_of_bos: 1,
//!     bo_entries: vec![KfdBoEntry {
//!         addr: 0x7f00_0000_0000,
//!         size: 2 * PAGE_SIZE,
//!         offset: 0,
//!         alloc_flags: flags::KFD_VRAM,
//!         gpu_id,
//!         handle: flags::NO_HANDLE,
//!         ..Default::default()
//!     }],
//!     ..Default::default()
//! };
//! kfd.mark_producer();
//!
//! // The GPU's pages file: BO contents in BO order; zero pages become holes.
//! let layout = PagesLayout::new(vec![PagesBo { entry: 0, size: 2 * PAGE_SIZE, checksum: None }])
//!     .expect("sizes fit in u64");
//! let pages = ImageName::Pages { id: 7, gpu_id };
//! assert_eq!(pages.to_string(), "amdgpu-pages-7-4d2f.img");
//! let mut writer = store.create_pages(&pages, layout)?;
//! writer.write(&vec![0xab; 2 * PAGE_SIZE as usize])?;
//! let (file, written) = writer.finish()?;
//! file.commit()?;
//! for (entry, checksum) in written.checksums {
//!     kfd.bo_entries[entry].content_checksum = Some(checksum);
//! }
//! store.write_message(&ImageName::Kfd { id: 7 }, &kfd)?;
//!
//! // Every message, every pages file and every checksum, with the
//! // references between files.
//! let report = verify_set(&store, ReadLimits::default())?;
//! assert!(report.is_clean(), "{:?}", report.problems);
//! assert_eq!(report.checksums_verified, 1);
//!
//! let msg: CriuKfd = store
//!     .read_message(&ImageName::Kfd { id: 7 }, ReadLimits::default())?
//!     .expect("written above");
//! let image = ValidatedKfd::new(7, msg)?;
//! assert_eq!(image.pages_files()[0].0, pages);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

#[cfg(feature = "archive")]
pub mod archive;
pub mod chain;
pub mod checksum;
pub mod chunks;
mod error;
pub mod framing;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz_support;
pub mod messages;
pub mod name;
pub mod pages;
#[doc(hidden)]
pub mod presence;
pub mod priv_data;
pub mod seal;
pub mod store;
#[cfg(feature = "topology")]
pub mod topology;
pub mod validate;

pub use chain::{ChainReader, ChunkResolver, PieceSource};
pub use checksum::{content_checksum, ContentHasher};
pub use chunks::{BoChunks, ChecksumAlgo, ChunkSource, Digest, CHUNK_SIZE};
pub use error::{Error, Problem};
pub use framing::{
    decode_message, decode_message_covered, decode_message_unchecked, encode_for_writing,
    encode_message, read_message, read_message_covered, read_payload_framed, write_message,
    FramedWriter, ReadLimits, HEADER_LEN,
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
pub use seal::Coverage;
pub use store::{
    DirStore, ImageStore, ImageWriter, MemStore, StreamMode, StreamStore, StreamWriter,
    UnfinishedMark, PARENT_LINK,
};
pub use validate::{verify_set, SetReport, ValidatedKfd, ValidatedRenderNode};
