//! [`PagesSink`]: where a pages writer puts bytes, and the sinks that can
//! leave holes (a file, a buffer) or only write ([`Sequential`]).

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use super::PAGE_SIZE;
use crate::framing::HEADER_LEN;

/// Where a [`PagesWriter`](super::PagesWriter) puts bytes: a `Write` that may be able to skip
/// forward, leaving a hole that reads as zeros.
pub trait PagesSink: Write {
    /// Whether [`skip`](Self::skip) leaves holes; if not, the writer writes zeros.
    fn can_skip(&self) -> bool {
        false
    }

    /// Moves the write position `len` bytes forward without writing.
    /// Only called when [`can_skip`](Self::can_skip) is true.
    fn skip(&mut self, len: u64) -> io::Result<()> {
        write_zeros(self, len)
    }

    /// Called when the payload ended in a skip: makes the file exactly `len` bytes long.
    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        let _ = len;
        Ok(())
    }

    /// Whether [`rewrite_header`](Self::rewrite_header) works (a file or
    /// memory; never a stream).
    fn can_rewrite_header(&self) -> bool {
        false
    }

    /// Overwrites the first 8 bytes (the length header) once the payload's
    /// length is known ([`PagesWriter::set_filter`](super::PagesWriter::set_filter)).
    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        let _ = header;
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

fn write_zeros<W: Write + ?Sized>(w: &mut W, mut len: u64) -> io::Result<()> {
    static ZEROS: [u8; PAGE_SIZE as usize] = [0; PAGE_SIZE as usize];
    while len > 0 {
        let n = len.min(PAGE_SIZE) as usize;
        w.write_all(&ZEROS[..n])?;
        len -= n as u64;
    }
    Ok(())
}

/// A regular file: holes by seeking. It must be new or empty and positioned at
/// its start (skipped ranges keep whatever the file held before).
impl PagesSink for File {
    fn can_skip(&self) -> bool {
        true
    }

    fn skip(&mut self, len: u64) -> io::Result<()> {
        let delta = i64::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        self.seek(SeekFrom::Current(delta)).map(drop)
    }

    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }

    fn can_rewrite_header(&self) -> bool {
        true
    }

    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        self.write_all_at(&header, 0)
    }
}

impl<S: PagesSink + ?Sized> PagesSink for &mut S {
    fn can_skip(&self) -> bool {
        (**self).can_skip()
    }
    fn skip(&mut self, len: u64) -> io::Result<()> {
        (**self).skip(len)
    }
    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        (**self).set_final_len(len)
    }
    fn can_rewrite_header(&self) -> bool {
        (**self).can_rewrite_header()
    }
    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        (**self).rewrite_header(header)
    }
}

/// A sink that can only append (a pipe, CRIU's image streamer): zeros are written.
#[derive(Debug)]
pub struct Sequential<W>(pub W);

impl<W: Write> Write for Sequential<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: Write> PagesSink for Sequential<W> {}

impl PagesSink for Vec<u8> {
    fn can_rewrite_header(&self) -> bool {
        true
    }

    fn rewrite_header(&mut self, header: [u8; HEADER_LEN]) -> io::Result<()> {
        match self.get_mut(..HEADER_LEN) {
            Some(head) => {
                head.copy_from_slice(&header);
                Ok(())
            }
            None => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
    }
}
