//! The crate's error type and validation problems.

use std::fmt;
use std::io;

/// Everything that can go wrong reading or writing images.
///
/// Each variant names the file (image name) it concerns; message-level errors
/// also name the field path (`criu_kfd.bo_entries[17].size`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file name that is not one of the amdgpu image names.
    #[error("{name}: {reason}")]
    BadName {
        /// The offending name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// An I/O operation on an image file failed.
    #[error("{file}: {op}: {source}")]
    Io {
        /// Image file name.
        file: String,
        /// What was being done ("read length header", "write payload", ...).
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The file ended before the length its header announced.
    #[error(
        "{file}: truncated: the length header announces {expected} bytes, only {actual} follow"
    )]
    Truncated {
        /// Image file name.
        file: String,
        /// Payload length from the header.
        expected: u64,
        /// Bytes actually present.
        actual: u64,
    },
    /// Bytes follow the payload the length header announced.
    #[error(
        "{file}: trailing bytes after the {expected}-byte payload the length header announces"
    )]
    TrailingBytes {
        /// Image file name.
        file: String,
        /// Payload length from the header.
        expected: u64,
    },
    /// A length header beyond the configured limit for this kind of image.
    #[error("{file}: length header of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Image file name.
        file: String,
        /// Length from the header.
        len: u64,
        /// The limit in force.
        limit: u64,
    },
    /// The protobuf payload does not decode.
    #[error(
        "{file}: damaged: its {message} message does not decode ({source}); copy the image set \
         again from where it was written, or run `amdgpu-criu verify` on it to see every problem"
    )]
    Decode {
        /// Image file name.
        file: String,
        /// Proto message name (`criu_kfd`).
        message: &'static str,
        /// prost's description, with its own field path.
        #[source]
        source: prost::DecodeError,
    },
    /// A proto2 `required` field is absent from the payload.
    #[error("{file}: {path}: required field missing")]
    MissingField {
        /// Image file name.
        file: String,
        /// Field path (`criu_kfd.bo_entries[17].size`).
        path: String,
    },
    /// A message's bytes do not match its recorded `message_checksum`.
    #[error("{file}: {message}: message checksum mismatch: the bytes hash to {actual:#018x}, the image records {recorded:#018x} (the file was changed or damaged after the dump)")]
    MessageChecksum {
        /// Image file name.
        file: String,
        /// Proto message name.
        message: &'static str,
        /// Value recorded in the message (tag 120).
        recorded: u64,
        /// Checksum of the bytes read.
        actual: u64,
    },
    /// The `message_checksum` field itself is malformed.
    #[error("{file}: {message}: {what}")]
    MessageChecksumField {
        /// Image file name.
        file: String,
        /// Proto message name.
        message: &'static str,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A writer received more or fewer bytes than it announced.
    #[error("{file}: {what}: announced {expected} bytes, got {actual}")]
    LengthMismatch {
        /// Image file name.
        file: String,
        /// What was being written.
        what: &'static str,
        /// Announced length.
        expected: u64,
        /// Bytes supplied.
        actual: u64,
    },
    /// A BO's contents do not match the checksum recorded at dump time.
    #[error("{file}: bo {bo} (entry {entry}): content checksum {actual:#018x} does not match the recorded {expected:#018x}")]
    ChecksumMismatch {
        /// Pages file name.
        file: String,
        /// Index of the BO within the pages file.
        bo: usize,
        /// Index of the BO entry in its message (`bo_entries[entry]`).
        entry: usize,
        /// Recorded checksum.
        expected: u64,
        /// Checksum of the bytes read.
        actual: u64,
    },
    /// A chunk's bytes do not match the digest recorded at dump time.
    #[error("{file}: bo {bo} (entry {entry}): chunk {chunk}: digest {actual:#034x} does not match the recorded {expected:#034x}")]
    ChunkMismatch {
        /// File the chunk was read from.
        file: String,
        /// Index of the BO within the pages file.
        bo: usize,
        /// Index of the BO entry in its message (`bo_entries[entry]`).
        entry: usize,
        /// Index of the chunk within the BO (or within the BO's chunks
        /// that file holds).
        chunk: usize,
        /// Recorded digest.
        expected: u128,
        /// Digest of the bytes read.
        actual: u128,
    },
    /// A chunk that an image set references from its parent chain (or
    /// from elsewhere in the set) cannot be found or trusted there.
    #[error("{file}: {what}")]
    Chain {
        /// The image (or directory) concerned.
        file: String,
        /// What is wrong, naming the parent where it concerns one.
        what: String,
    },
    /// An image of a set whose `dump_id` differs from its other images':
    /// images of two dumps mixed in one directory.
    #[error(
        "{file}: dump_id {} differs from the other images' {} (images of two dumps mixed)",
        HexId(.dump_id.as_deref()),
        HexId(.others.as_deref())
    )]
    MixedDumps {
        /// The image.
        file: String,
        /// Its `dump_id` (`None`: absent).
        dump_id: Option<Box<[u8]>>,
        /// The `dump_id` of the set's other images.
        others: Option<Box<[u8]>>,
    },
    /// An image of a set names another parent dump than its other images.
    #[error("{file}: names another parent than the other images")]
    MixedParents {
        /// The image.
        file: String,
    },
    /// A parent chain that comes back to an image set it already read: a
    /// `parent` link to the set itself or to one of its children, or a
    /// copy of a set among its own ancestors. Followed, it would never end.
    #[error(
        "{dir}: the parent chain loops: this is level {level} of the chain again (the same {same}); \
         an image set's parents must end in a full dump: fix the `parent` links"
    )]
    ParentLoop {
        /// The parent that closes the loop, as reached (`parent -> ../1`).
        dir: String,
        /// The level of the chain it repeats (0 = the set itself).
        level: usize,
        /// How it was recognised: `directory` or `dump_id`.
        same: &'static str,
    },
    /// A parent chain longer than [`MAX_CHAIN_DEPTH`](crate::chain::MAX_CHAIN_DEPTH)
    /// levels: refused before its parents hold every file descriptor.
    #[error(
        "{dir}: the parent chain is deeper than {limit} image sets; flatten a shorter part of \
         it (`amdgpu-criu flatten`) and dump against that"
    )]
    ChainTooDeep {
        /// The set whose parent would be one level too many.
        dir: String,
        /// The bound.
        limit: usize,
    },
    /// A read outside a BO or a pages file.
    #[error("{file}: {what}")]
    OutOfRange {
        /// Pages file name.
        file: String,
        /// What was asked.
        what: String,
    },
    /// A message or image set failed validation.
    #[error("{}", Problems(.0))]
    Invalid(Vec<Problem>),
}

/// A dump id in hex, `absent` for none.
struct HexId<'a>(Option<&'a [u8]>);

impl fmt::Display for HexId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("absent"),
            Some(bytes) => bytes.iter().try_for_each(|b| write!(f, "{b:02x}")),
        }
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl Error {
    pub(crate) fn io(file: impl fmt::Display, op: &'static str, source: io::Error) -> Self {
        Self::Io {
            file: file.to_string(),
            op,
            source,
        }
    }
}

/// One problem found by validation: which file, which field, what is wrong.
///
/// Displays as `amdgpu-kfd-5.img: criu_kfd.bo_entries[17].size: <message>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Image file name.
    pub file: String,
    /// Field path inside the file's message, empty for file-level problems.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl Problem {
    /// A problem with a field of a message.
    pub fn new(
        file: impl fmt::Display,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            file: file.to_string(),
            path: path.into(),
            message: message.into(),
        }
    }

    /// Turns an error of reading a file into a problem of that file.
    pub fn from_error(file: impl fmt::Display, err: &Error) -> Self {
        let file = file.to_string();
        let text = err.to_string();
        // Errors already start with the file name; do not repeat it.
        let message = text
            .strip_prefix(&format!("{file}: "))
            .map(str::to_owned)
            .unwrap_or(text);
        Self {
            file,
            path: String::new(),
            message,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.path, self.message)
        }
    }
}
