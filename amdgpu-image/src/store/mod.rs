//! Where image files live: [`ImageStore`] and its implementations.
//!
//! - [`DirStore`]: a directory held open; files are opened relative to the
//!   held directory (through `/proc/self/fd/<dirfd>/` when available, so a
//!   renamed or replaced path does not matter), created mode 0600 under a
//!   temporary name and renamed into place on [`ImageWriter::commit`]: an
//!   interrupted dump never leaves a complete-looking image, and dropping an
//!   uncommitted writer removes the temporary file. Pages files get holes.
//!   Large files are written behind (see [`DirWriter`]): every
//!   [`WRITE_BEHIND_STEP`] bytes the writer starts the writeback of what it
//!   just wrote and releases the cached pages of what it wrote
//!   [`WRITE_BEHIND_LAG`] bytes earlier, so the disk streams while the
//!   producer still copies, a later `fsync` has little left, and a dump
//!   of many GiB does not fill the page cache. Reads report holes
//!   ([`ImageStore::open_pages`]), so a restore does not read them.
//! - [`StreamStore`]: CRIU's image streamer (`--stream`): a caller-supplied
//!   open function (the plugin backs it with `img_streamer_open`), strictly
//!   sequential, so no holes and no listing.
//! - [`MemStore`]: in memory, for tests, fuzzing and tools.
//!
//! Every writer receives the 8-byte length header first and the payload after
//! it, so a known total can be announced before the payload streams. This
//! module never interprets file contents beyond that framing, and it never
//! asks the kernel for more than file I/O and hints about it.

mod dir;
mod dir_writer;
mod mem;
mod stream;

use std::io::{self, Read};

pub use dir::{DirStore, UnfinishedMark, PARENT_LINK};
pub use dir_writer::{DirWriter, WRITE_BEHIND_LAG, WRITE_BEHIND_STEP};
pub use mem::{MemBytes, MemStore, MemWriter};
pub use stream::{StreamMode, StreamStore, StreamWriter};

use crate::framing::{self, ReadLimits};
use crate::messages::ImageMessage;
use crate::pages::{PagesLayout, PagesReader, PagesSink, PagesWriter};
use crate::{Error, ImageName};

/// A writer for one image file; nothing is visible as a complete image
/// before [`commit`](Self::commit).
pub trait ImageWriter: PagesSink {
    /// Makes the file visible under its final name (flushes first).
    fn commit(self) -> io::Result<()>;
}

/// A place where the files of an image set are written and read.
pub trait ImageStore {
    /// Writer for one file.
    type Writer: ImageWriter;
    /// Reader for one file; sequential (a stream may not seek).
    type Reader: Read;

    /// Starts writing `name` (replacing it on commit).
    fn create(&self, name: &ImageName) -> Result<Self::Writer, Error>;

    /// Opens `name` for reading; `Ok(None)` if the store has no such file.
    fn open(&self, name: &ImageName) -> Result<Option<Self::Reader>, Error>;

    /// The amdgpu image files present, sorted; foreign files are ignored.
    /// Stores that cannot list (streams) return an `Unsupported` I/O error.
    fn list(&self) -> Result<Vec<ImageName>, Error>;

    /// Removes the committed file `name` (the plugin discards the images of
    /// a failed dump); `Ok(false)` when there is no such file. Stores that
    /// cannot take a file back (streams) answer an `Unsupported` I/O error.
    fn discard(&self, name: &ImageName) -> Result<bool, Error> {
        Err(Error::io(
            name,
            "discard",
            io::Error::from(io::ErrorKind::Unsupported),
        ))
    }

    /// Writes one framed message and commits it.
    fn write_message<M: ImageMessage>(&self, name: &ImageName, msg: &M) -> Result<(), Error> {
        let file = name.to_string();
        let mut w = self.create(name)?;
        framing::write_message(&mut w, &file, msg)?;
        w.commit().map_err(|e| Error::io(&file, "commit", e))
    }

    /// Reads and decodes one framed message; `Ok(None)` if the file is absent.
    fn read_message<M: ImageMessage>(
        &self,
        name: &ImageName,
        limits: ReadLimits,
    ) -> Result<Option<M>, Error> {
        let file = name.to_string();
        match self.open(name)? {
            None => Ok(None),
            Some(r) => framing::read_message(r, &file, limits).map(Some),
        }
    }

    /// [`read_message`](Self::read_message), also telling whether the
    /// message's checksum covered it.
    fn read_message_covered<M: ImageMessage>(
        &self,
        name: &ImageName,
        limits: ReadLimits,
    ) -> Result<Option<(M, crate::Coverage)>, Error> {
        let file = name.to_string();
        match self.open(name)? {
            None => Ok(None),
            Some(r) => framing::read_message_covered(r, &file, limits).map(Some),
        }
    }

    /// Starts a pages file for `layout`; after [`PagesWriter::finish`], commit
    /// the returned writer.
    fn create_pages(
        &self,
        name: &ImageName,
        layout: PagesLayout,
    ) -> Result<PagesWriter<Self::Writer>, Error> {
        let w = self.create(name)?;
        PagesWriter::new(w, &name.to_string(), layout)
    }

    /// Opens the pages file `name` for streaming with `layout` (its length
    /// header checked); `Ok(None)` if the file is absent. Stores whose files
    /// can have holes hand out a reader that knows them and does not read
    /// them ([`DirStore`]); the bytes it delivers are the same either way.
    fn open_pages(
        &self,
        name: &ImageName,
        layout: PagesLayout,
    ) -> Result<Option<PagesReader<Self::Reader>>, Error> {
        match self.open(name)? {
            None => Ok(None),
            Some(r) => PagesReader::new(r, &name.to_string(), layout).map(Some),
        }
    }

    /// Checks, without reading its contents, that the pages file `name`
    /// holds exactly `layout`: present (or absent while `layout` has no
    /// BOs), its length header equal to the layout's total and its size
    /// equal to the header's claim. `Ok(true)` when checked; `Ok(false)`
    /// from stores that cannot tell without consuming the file (streams:
    /// the reading finds it out). Restore calls this before it makes any
    /// kernel state, so a damaged set is refused before it costs anything.
    fn check_pages(&self, name: &ImageName, layout: &PagesLayout) -> Result<bool, Error> {
        let _ = (name, layout);
        Ok(false)
    }

    /// The store as an image directory, when it is one: parent chains and
    /// chunk references ([`crate::chain`]) need one (positional reads, a
    /// `parent` link). Streams and memory stores answer `None`.
    fn as_dir(&self) -> Option<&DirStore> {
        None
    }
}
