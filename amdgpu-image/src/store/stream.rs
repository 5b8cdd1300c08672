//! [`StreamStore`]: images through CRIU's image streamer, one strictly
//! sequential stream per file (no holes, no listing).

use std::io::{self, Read, Write};

use super::{ImageStore, ImageWriter};
use crate::pages::PagesSink;
use crate::{Error, ImageName};

/// Direction of a streamer open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamMode {
    /// Writing images (CRIU's `O_DUMP`).
    Dump,
    /// Reading images (CRIU's `O_RSTR`).
    Restore,
}

/// Images through a sequential stream per file; see the module docs.
pub struct StreamStore<F> {
    open: F,
}

impl<F> std::fmt::Debug for StreamStore<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamStore").finish_non_exhaustive()
    }
}

impl<F, S> StreamStore<F>
where
    F: Fn(&str, StreamMode) -> io::Result<S>,
    S: Read + Write,
{
    /// A store whose files are opened by `open(name, mode)`; an open for
    /// [`StreamMode::Restore`] failing with `NotFound` means the image is absent.
    pub fn new(open: F) -> Self {
        Self { open }
    }
}

impl<F, S> ImageStore for StreamStore<F>
where
    F: Fn(&str, StreamMode) -> io::Result<S>,
    S: Read + Write,
{
    type Writer = StreamWriter<S>;
    type Reader = S;

    fn create(&self, name: &ImageName) -> Result<StreamWriter<S>, Error> {
        let s = (self.open)(&name.to_string(), StreamMode::Dump)
            .map_err(|e| Error::io(name, "open stream", e))?;
        Ok(StreamWriter(s))
    }

    fn open(&self, name: &ImageName) -> Result<Option<S>, Error> {
        match (self.open)(&name.to_string(), StreamMode::Restore) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(name, "open stream", e)),
        }
    }

    fn list(&self) -> Result<Vec<ImageName>, Error> {
        Err(Error::io(
            "image stream",
            "list",
            io::Error::from(io::ErrorKind::Unsupported),
        ))
    }
}

/// A file being written into a [`StreamStore`]: append only.
#[derive(Debug)]
pub struct StreamWriter<S>(S);

impl<S: Write> Write for StreamWriter<S> {
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

impl<S: Write> PagesSink for StreamWriter<S> {}

impl<S: Write> ImageWriter for StreamWriter<S> {
    fn commit(mut self) -> io::Result<()> {
        self.0.flush()
    }
}
