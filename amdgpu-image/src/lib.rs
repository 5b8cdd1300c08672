#![doc = include_str!("../README.md")]
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
mod validated;

pub use chain::{ChainReader, ChunkResolver, PieceSource};
pub use checksum::{content_checksum, ContentHasher};
pub use chunks::{BoChunks, ChecksumAlgo, ChunkFieldError, ChunkSource, Digest, CHUNK_SIZE};
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
