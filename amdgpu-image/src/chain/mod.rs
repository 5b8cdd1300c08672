//! Chunks stored elsewhere: in the parent image sets (incremental dumps)
//! or once in the same set (deduplication), found by their digest.
//!
//! An image whose BO entries carry `chunk_sources` stores in its own pages
//! file only the chunks marked [`ChunkSource::Here`]; the others are found
//! by their XXH3-128 digest among the chunks stored:
//! - [`ChunkSource::Set`]: by another BO of the same image set (any KFD
//!   image, any GPU);
//! - [`ChunkSource::Parent`]: by the parent set (CRIU's `parent` link), or
//!   its parent, to any depth. Each set names itself with `dump_id`; an
//!   image that references its parent names the parent's `dump_id`, so a
//!   parent replaced by another dump is refused by name, as is a missing
//!   one. A changed parent is found by the digest every chunk is checked
//!   against when read.
//!
//! [`ChunkResolver`] indexes the stored chunks of a set and, when asked for
//! a parent chunk, of its parents (one level at a time, as far as needed).
//! A chain is followed at most [`MAX_CHAIN_DEPTH`] levels deep, and a level
//! met before (the same directory, or another directory holding the same
//! dump) ends it with [`Error::ParentLoop`]: a `parent` link to `.`, two
//! sets that are each other's parent, or a copy of a set among its own
//! ancestors would otherwise be followed until file descriptors or memory
//! run out.
//! [`ChainReader`] delivers one GPU's BOs in file order like a
//! [`PagesReader`], each chunk from wherever it is stored, every chunk
//! verified. Apart from [`flatten()`], which writes a standalone copy, this
//! module only reads.
//!
//! [`ChunkSource::Here`]: crate::chunks::ChunkSource::Here
//! [`ChunkSource::Set`]: crate::chunks::ChunkSource::Set
//! [`ChunkSource::Parent`]: crate::chunks::ChunkSource::Parent
//! [`PagesReader`]: crate::pages::PagesReader

mod flatten;
mod level;
mod reader;
mod resolver;
mod verify;

pub use flatten::{flatten, FlattenReport};
pub use reader::{ChainReader, PieceSource};
pub use resolver::{ChunkLocation, ChunkResolver, MAX_CHAIN_DEPTH};
pub use verify::{verify_references, ReferenceReport};

use crate::Error;

fn chain_error(file: impl std::fmt::Display, what: impl Into<String>) -> Error {
    Error::Chain {
        file: file.to_string(),
        what: what.into(),
    }
}
