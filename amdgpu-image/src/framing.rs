//! The framing of every image file: an 8-byte little-endian payload length,
//! then one protobuf message or raw bytes.
//!
//! This is `size_t` in native byte order in the C plugin, i.e. a little-endian
//! u64 on the only architectures amdgpu runs on. Readers take the length from
//! the header and never seek or stat, so everything here works on pipes (CRIU's
//! image streamer). Payloads are read in pieces into a buffer that grows only
//! as bytes actually arrive: a header claiming 2^60 bytes fails as truncated
//! (or over the limit) without a large allocation.

use std::io::{self, Read, Write};

use crate::messages::ImageMessage;
use crate::presence::first_missing;
use crate::seal::{self, Coverage, SealCheck};
use crate::Error;

/// Length of the payload-length header.
pub const HEADER_LEN: usize = 8;

/// Upper bounds for message payloads, checked against the length header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimits {
    /// Largest message payload accepted, in bytes.
    pub max_message_len: u64,
}

impl Default for ReadLimits {
    /// 1 GiB: far above any real image (100,000 BOs take about 4 MiB), far below
    /// what would exhaust memory.
    fn default() -> Self {
        Self {
            max_message_len: 1 << 30,
        }
    }
}

/// Encodes a message as protobuf-c would (fields in tag order, required fields always).
pub fn encode_message<M: ImageMessage>(msg: &M) -> Vec<u8> {
    msg.encode_to_vec()
}

/// Encodes a message as [`write_message`] writes it: sealed with a fresh
/// [`message_checksum`](crate::seal) when it carries our producer marker or
/// a checksum already, as [`encode_message`] otherwise.
pub fn encode_for_writing<M: ImageMessage>(msg: &M) -> Vec<u8> {
    if msg.is_ours() || msg.message_checksum().is_some() {
        seal::encode_sealed(msg)
    } else {
        msg.encode_to_vec()
    }
}

/// Decodes a message payload, checks that every required field is present
/// and that its [`message_checksum`](crate::seal), if it has one, matches.
/// The returned message has the field cleared (it described the bytes).
pub fn decode_message<M: ImageMessage>(file: &str, payload: &[u8]) -> Result<M, Error> {
    decode_message_covered(file, payload).map(|(m, _)| m)
}

/// [`decode_message`], also telling whether a checksum covered the bytes.
pub fn decode_message_covered<M: ImageMessage>(
    file: &str,
    payload: &[u8],
) -> Result<(M, Coverage), Error> {
    let mut msg = decode_message_unchecked::<M>(file, payload)?;
    // The checksum describes the bytes, not the content: once checked it is
    // dropped, so a message read back equals the one written, and writing
    // it again seals it afresh.
    msg.set_message_checksum(None);
    match seal::check(payload) {
        SealCheck::Absent => Ok((msg, Coverage::NotCovered)),
        SealCheck::Match(_) => Ok((msg, Coverage::Verified)),
        SealCheck::Mismatch { recorded, actual } => Err(Error::MessageChecksum {
            file: file.to_owned(),
            message: M::PROTO_NAME,
            recorded,
            actual,
        }),
        SealCheck::Malformed(what) => Err(Error::MessageChecksumField {
            file: file.to_owned(),
            message: M::PROTO_NAME,
            what,
        }),
    }
}

/// Decodes a message payload and checks that every required field is
/// present, without checking its checksum (`show` displays damaged
/// messages with [`seal::check`]'s verdict beside them).
pub fn decode_message_unchecked<M: ImageMessage>(file: &str, payload: &[u8]) -> Result<M, Error> {
    let msg = M::decode(payload).map_err(|source| Error::Decode {
        file: file.to_owned(),
        message: M::PROTO_NAME,
        source,
    })?;
    if let Some(path) = first_missing(payload, M::SCHEMA) {
        return Err(Error::MissingField {
            file: file.to_owned(),
            path,
        });
    }
    Ok(msg)
}

/// Writes the 8-byte length header.
pub fn write_header<W: Write>(mut w: W, file: &str, len: u64) -> Result<(), Error> {
    w.write_all(&len.to_le_bytes())
        .map_err(|e| Error::io(file, "write length header", e))
}

/// Reads the 8-byte length header.
pub fn read_header<R: Read>(mut r: R, file: &str) -> Result<u64, Error> {
    let mut header = [0u8; HEADER_LEN];
    r.read_exact(&mut header)
        .map_err(|e| Error::io(file, "read length header", e))?;
    Ok(u64::from_le_bytes(header))
}

/// Writes one framed message (header and payload) and returns the payload
/// length. Messages with our producer marker are sealed
/// ([`encode_for_writing`]).
pub fn write_message<W: Write, M: ImageMessage>(
    mut w: W,
    file: &str,
    msg: &M,
) -> Result<u64, Error> {
    let payload = encode_for_writing(msg);
    let len = payload.len();
    let mut buf = Vec::with_capacity(HEADER_LEN + len);
    buf.extend_from_slice(&(len as u64).to_le_bytes());
    buf.extend_from_slice(&payload);
    w.write_all(&buf)
        .map_err(|e| Error::io(file, "write message", e))?;
    Ok(len as u64)
}

/// Reads one framed message from a file or a stream: the header, exactly the
/// announced payload, and end of input right after it.
pub fn read_message<R: Read, M: ImageMessage>(
    r: R,
    file: &str,
    limits: ReadLimits,
) -> Result<M, Error> {
    read_message_covered(r, file, limits).map(|(m, _)| m)
}

/// [`read_message`], also telling whether a checksum covered the message.
pub fn read_message_covered<R: Read, M: ImageMessage>(
    r: R,
    file: &str,
    limits: ReadLimits,
) -> Result<(M, Coverage), Error> {
    let payload = read_payload_framed(r, file, limits)?;
    decode_message_covered(file, &payload)
}

/// Reads one framed payload (header, exactly the announced bytes, end of
/// input) without decoding it.
pub fn read_payload_framed<R: Read>(
    mut r: R,
    file: &str,
    limits: ReadLimits,
) -> Result<Vec<u8>, Error> {
    let len = read_header(&mut r, file)?;
    if len > limits.max_message_len {
        return Err(Error::TooLarge {
            file: file.to_owned(),
            len,
            limit: limits.max_message_len,
        });
    }
    let payload = read_payload(&mut r, file, len)?;
    expect_end(&mut r, file, len)?;
    Ok(payload)
}

/// Reads exactly `len` payload bytes; the buffer grows only with the data.
pub(crate) fn read_payload<R: Read>(r: &mut R, file: &str, len: u64) -> Result<Vec<u8>, Error> {
    const FIRST_CHUNK: u64 = 64 << 10;
    let mut payload = Vec::with_capacity(len.min(FIRST_CHUNK) as usize);
    r.take(len)
        .read_to_end(&mut payload)
        .map_err(|e| Error::io(file, "read payload", e))?;
    if payload.len() as u64 != len {
        return Err(Error::Truncated {
            file: file.to_owned(),
            expected: len,
            actual: payload.len() as u64,
        });
    }
    Ok(payload)
}

/// Checks that nothing follows a `len`-byte payload.
pub(crate) fn expect_end<R: Read>(r: &mut R, file: &str, len: u64) -> Result<(), Error> {
    let mut probe = [0u8; 1];
    loop {
        match r.read(&mut probe) {
            Ok(0) => return Ok(()),
            Ok(_) => {
                return Err(Error::TrailingBytes {
                    file: file.to_owned(),
                    expected: len,
                })
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(file, "read past payload", e)),
        }
    }
}

/// A writer for a payload whose length is known before it is produced: it
/// writes the header first, then passes the payload through and checks on
/// [`finish`](Self::finish) that exactly the announced bytes were written.
#[derive(Debug)]
pub struct FramedWriter<W: Write> {
    inner: W,
    file: String,
    expected: u64,
    written: u64,
}

impl<W: Write> FramedWriter<W> {
    /// Writes the header announcing `len` payload bytes.
    pub fn new(mut inner: W, file: &str, len: u64) -> Result<Self, Error> {
        write_header(&mut inner, file, len)?;
        Ok(Self {
            inner,
            file: file.to_owned(),
            expected: len,
            written: 0,
        })
    }

    /// Payload bytes still expected.
    pub fn remaining(&self) -> u64 {
        self.expected - self.written
    }

    /// Checks that the whole payload was written, flushes and returns the sink.
    pub fn finish(mut self) -> Result<W, Error> {
        if self.written != self.expected {
            return Err(Error::LengthMismatch {
                file: self.file,
                what: "payload",
                expected: self.expected,
                actual: self.written,
            });
        }
        self.inner
            .flush()
            .map_err(|e| Error::io(&self.file, "flush", e))?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for FramedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.remaining() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: payload longer than the {} bytes announced",
                    self.file, self.expected
                ),
            ));
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
