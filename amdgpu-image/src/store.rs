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

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Cursor, Read, Write};
use std::num::NonZeroU64;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::framing::{self, ReadLimits};
use crate::messages::ImageMessage;
use crate::pages::{PagesFile, PagesLayout, PagesReader, PagesSink, PagesWriter};
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

/// An image directory held open; see the module docs.
#[derive(Debug)]
pub struct DirStore {
    dir: File,
    base: PathBuf,
    shown: Option<String>,
}

/// The name of CRIU's link from an image directory to its parent's.
pub const PARENT_LINK: &str = "parent";

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl DirStore {
    /// Opens the directory at `path`.
    pub fn open_dir(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let dir = File::open(path).map_err(|e| Error::io(&shown, "open image directory", e))?;
        let meta = dir
            .metadata()
            .map_err(|e| Error::io(&shown, "stat image directory", e))?;
        if !meta.is_dir() {
            return Err(Error::io(
                &shown,
                "open image directory",
                io::Error::from(io::ErrorKind::NotADirectory),
            ));
        }
        let proc_path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let base = match fs::metadata(&proc_path) {
            Ok(m) if m.dev() == meta.dev() && m.ino() == meta.ino() => proc_path,
            _ => path.to_path_buf(),
        };
        Ok(Self {
            dir,
            base,
            shown: None,
        })
    }

    /// Takes over a directory fd (CRIU's `criu_get_image_dir()`, dup'ed).
    /// Needs `/proc/self/fd`.
    pub fn from_dir_fd(fd: OwnedFd) -> Result<Self, Error> {
        let dir = File::from(fd);
        let base = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let shown = base.display().to_string();
        let meta = fs::metadata(&base).map_err(|e| Error::io(&shown, "open image directory", e))?;
        if !meta.is_dir() {
            return Err(Error::io(
                &shown,
                "open image directory",
                io::Error::from(io::ErrorKind::NotADirectory),
            ));
        }
        Ok(Self {
            dir,
            base,
            shown: None,
        })
    }

    /// The same directory through a new descriptor (`dup`), for a writer
    /// on another thread that outlives this store; named as this one is.
    pub fn try_clone(&self) -> Result<Self, Error> {
        let dir = self
            .dir
            .try_clone()
            .map_err(|e| Error::io(self.shown(), "duplicate the image directory fd", e))?;
        let own_fd = PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()));
        // A base resolved through this store's own descriptor must follow
        // the new one: the old number closes with this store.
        let base = if self.base == own_fd {
            PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        } else {
            self.base.clone()
        };
        Ok(Self {
            dir,
            base,
            shown: Some(self.shown()),
        })
    }

    /// The held directory.
    pub fn dir(&self) -> &File {
        &self.dir
    }

    /// `(st_dev, st_ino)` of the held directory: what tells two paths (a
    /// `parent` link and its child, two levels of a chain) of the same
    /// directory apart from two directories.
    pub fn identity(&self) -> Result<(u64, u64), Error> {
        let meta = self
            .dir
            .metadata()
            .map_err(|e| Error::io(self.shown(), "stat the image directory", e))?;
        Ok((meta.dev(), meta.ino()))
    }

    /// The path files are resolved against.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The parent image set (CRIU's `parent` link, made by
    /// `--prev-images-dir`): `Ok(None)` without a link, an error naming the
    /// link and its target when the link is there but the parent is not
    /// (a missing parent is never taken for "no parent").
    pub fn parent(&self) -> Result<Option<DirStore>, Error> {
        let link = self.base.join(PARENT_LINK);
        match fs::symlink_metadata(&link) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(PARENT_LINK, "stat the parent link", e)),
            Ok(_) => {}
        }
        let shown = match fs::read_link(&link) {
            Ok(target) => format!("{PARENT_LINK} -> {}", target.display()),
            Err(_) => PARENT_LINK.to_owned(),
        };
        match Self::open_dir(&link) {
            Ok(mut dir) => {
                dir.shown = Some(shown);
                Ok(Some(dir))
            }
            Err(Error::Io { source, .. }) => Err(Error::Chain {
                file: shown,
                what: format!("the parent image directory cannot be opened: {source}"),
            }),
            Err(e) => Err(e),
        }
    }

    /// The same directory named `shown` in errors.
    pub(crate) fn named(mut self, shown: impl Into<String>) -> Self {
        self.shown = Some(shown.into());
        self
    }

    /// How errors name this directory: `parent -> ../1` for a parent
    /// reached through a link, else its path.
    pub fn shown(&self) -> String {
        self.shown
            .clone()
            .unwrap_or_else(|| self.base.display().to_string())
    }

    /// Files a writer of this store started and never committed
    /// (`.amdgpu-*.img.part-PID-N`), sorted: each one left over means a dump
    /// was interrupted (killed, Ctrl-C) before it finished, whatever the
    /// committed files say. The dumper also keeps one open per paused
    /// process until it unpauses it, so a dump killed before its end is
    /// never mistaken for a finished one.
    pub fn unfinished(&self) -> Result<Vec<String>, Error> {
        let entries = fs::read_dir(&self.base).map_err(|e| Error::Io {
            file: self.shown(),
            op: "list",
            source: e,
        })?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::Io {
                file: self.shown(),
                op: "list",
                source: e,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_unfinished_name(&name) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Creates an empty unfinished file for `name` (as [`DirStore::create`]
    /// names them, so [`DirStore::unfinished`] and `verify` report it) that
    /// is removed when the returned guard is dropped. The guard holds its
    /// own handle on the directory, so it outlives this store (and a store
    /// opened through `/proc/self/fd`). A process killed while holding it
    /// leaves the file: the mark of a dump that never finished.
    pub fn mark_unfinished(&self, name: &ImageName) -> Result<UnfinishedMark, Error> {
        let dir: OwnedFd = self
            .dir
            .try_clone()
            .map_err(|e| Error::io(name, "duplicate the directory handle", e))?
            .into();
        let file = format!(
            ".{name}.part-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        rustix::fs::openat(
            &dir,
            file.as_str(),
            rustix::fs::OFlags::WRONLY
                | rustix::fs::OFlags::CREATE
                | rustix::fs::OFlags::EXCL
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .map_err(|e| Error::io(name, "create the unfinished-dump mark", e.into()))?;
        Ok(UnfinishedMark { dir, file })
    }

    /// Opens `name` as a `File` (for [`PagesFile`]'s positional reads).
    pub fn open_file(&self, name: &ImageName) -> Result<Option<File>, Error> {
        match File::open(self.base.join(name.to_string())) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(name, "open", e)),
        }
    }
}

/// The mark of an unfinished dump ([`DirStore::mark_unfinished`]), removed
/// on drop.
#[derive(Debug)]
pub struct UnfinishedMark {
    dir: OwnedFd,
    file: String,
}

impl UnfinishedMark {
    /// The mark's file name in the images directory.
    pub fn file_name(&self) -> &str {
        &self.file
    }
}

impl Drop for UnfinishedMark {
    fn drop(&mut self) {
        // Best effort: a mark left behind makes the set read as unfinished,
        // the safe side.
        let _ = rustix::fs::unlinkat(&self.dir, self.file.as_str(), rustix::fs::AtFlags::empty());
    }
}

/// Whether `name` is a file [`DirStore::create`] made and never committed.
fn is_unfinished_name(name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|rest| rest.split_once(".part-"))
        .is_some_and(|(image, _)| ImageName::parse(image).is_ok())
}

impl ImageStore for DirStore {
    type Writer = DirWriter;
    type Reader = File;

    fn create(&self, name: &ImageName) -> Result<DirWriter, Error> {
        let target = self.base.join(name.to_string());
        let temp = self.base.join(format!(
            ".{name}.part-{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| Error::io(name, "create", e))?;
        Ok(DirWriter {
            file,
            temp,
            target,
            committed: false,
            behind: WriteBehind::default(),
        })
    }

    fn open(&self, name: &ImageName) -> Result<Option<File>, Error> {
        self.open_file(name)
    }

    fn open_pages(
        &self,
        name: &ImageName,
        layout: PagesLayout,
    ) -> Result<Option<PagesReader<File>>, Error> {
        let Some(file) = self.open_file(name)? else {
            return Ok(None);
        };
        // A hint: the file is read once, front to back (larger readahead).
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Sequential);
        PagesReader::new(file, &name.to_string(), layout).map(|r| Some(r.skipping_holes()))
    }

    fn as_dir(&self) -> Option<&DirStore> {
        Some(self)
    }

    fn check_pages(&self, name: &ImageName, layout: &PagesLayout) -> Result<bool, Error> {
        match self.open_file(name)? {
            Some(file) => PagesFile::open(file, &name.to_string(), layout.clone()).map(|_| true),
            None if layout.bos().is_empty() => Ok(true),
            None => Err(Error::io(
                name,
                "open",
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "missing: it holds the contents of {} bos",
                        layout.bos().len()
                    ),
                ),
            )),
        }
    }

    fn discard(&self, name: &ImageName) -> Result<bool, Error> {
        match fs::remove_file(self.base.join(name.to_string())) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(name, "discard", e)),
        }
    }

    fn list(&self) -> Result<Vec<ImageName>, Error> {
        let shown = self.base.display().to_string();
        let mut names = Vec::new();
        for entry in
            fs::read_dir(&self.base).map_err(|e| Error::io(&shown, "list image directory", e))?
        {
            let entry = entry.map_err(|e| Error::io(&shown, "list image directory", e))?;
            if let Some(name) = entry
                .file_name()
                .to_str()
                .and_then(|n| ImageName::parse(n).ok())
            {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
}

/// A [`DirWriter`] starts the writeback of what it wrote every this many bytes.
pub const WRITE_BEHIND_STEP: u64 = 8 << 20;

/// How far behind the write position a [`DirWriter`] releases cached pages
/// (their writeback started [`WRITE_BEHIND_LAG`] / [`WRITE_BEHIND_STEP`]
/// steps earlier, so it is usually complete).
pub const WRITE_BEHIND_LAG: u64 = 32 << 20;

/// Write-behind state of a [`DirWriter`]; see the module docs.
///
/// Both steps are `posix_fadvise(POSIX_FADV_DONTNEED)` on a range: Linux
/// starts the (asynchronous, `WB_SYNC_NONE`) writeback of the range's dirty
/// pages and drops its clean ones, which is `sync_file_range(
/// SYNC_FILE_RANGE_WRITE)` plus the release, without `unsafe`. Pages still
/// under writeback when released stay cached (clean, reclaimable). On file
/// systems without writeback (tmpfs) the hint does nothing.
///
/// Starting writeback can block (block allocation, a full device queue), so
/// the hints go to a flusher thread of the file (a duplicate of its fd) over
/// a channel of [`FLUSH_QUEUE`] ranges: the writer keeps copying while the
/// disk is fed, and stalls only when the flusher is that many steps behind,
/// which bounds the dirty page cache of the file. Without a thread (the
/// spawn or the fd duplication failed) the writer gives the hints itself.
/// A hint never fails a write: a refused one turns write-behind off.
#[derive(Debug)]
struct WriteBehind {
    /// File offset of the writer (end of the last write or skip).
    pos: u64,
    /// Writeback was started (or handed to the flusher) before this offset.
    started: u64,
    /// Cached pages before this offset were released (or handed over).
    released: u64,
    enabled: bool,
    flusher: Option<Flusher>,
    /// The flusher could not be started: hints are given by the writer.
    inline: bool,
}

/// Ranges a [`DirWriter`]'s flusher may have queued before the writer waits.
const FLUSH_QUEUE: usize = 4;

/// The thread that gives a file's write-behind hints.
#[derive(Debug)]
struct Flusher {
    ranges: mpsc::SyncSender<(u64, u64)>,
    thread: JoinHandle<()>,
}

impl Flusher {
    fn spawn(file: &File) -> io::Result<Flusher> {
        let file = file.try_clone()?;
        let (ranges, queue) = mpsc::sync_channel::<(u64, u64)>(FLUSH_QUEUE);
        let thread = std::thread::Builder::new()
            .name("image-writeback".into())
            .spawn(move || {
                for (offset, len) in queue {
                    // A hint: a refused one costs speed or memory, never data.
                    let _ = dont_need(&file, offset, len);
                }
            })?;
        Ok(Flusher { ranges, thread })
    }

    /// Waits until every queued hint was given.
    fn stop(self) {
        drop(self.ranges);
        // The thread only gives hints; a panic there changes nothing written.
        let _ = self.thread.join();
    }
}

impl Default for WriteBehind {
    fn default() -> Self {
        Self {
            pos: 0,
            started: 0,
            released: 0,
            enabled: true,
            flusher: None,
            inline: false,
        }
    }
}

impl WriteBehind {
    /// The writer moved `by` bytes forward in `file`.
    fn advance(&mut self, file: &File, by: u64) {
        self.pos = self.pos.saturating_add(by);
        if !self.enabled || self.pos - self.started < WRITE_BEHIND_STEP {
            return;
        }
        if self.flusher.is_none() && !self.inline {
            self.flusher = Flusher::spawn(file).ok();
            // Without a thread, hints are given inline from now on.
            self.inline = self.flusher.is_none();
        }
        let release_to = self.pos.saturating_sub(WRITE_BEHIND_LAG);
        let mut ranges = vec![(self.started, self.pos - self.started)];
        if release_to > self.released {
            ranges.push((self.released, release_to - self.released));
        }
        for (offset, len) in ranges {
            let handed = match &self.flusher {
                Some(f) => f.ranges.send((offset, len)).is_ok(),
                None => false,
            };
            if !handed && dont_need(file, offset, len).is_err() {
                self.enabled = false;
                return;
            }
        }
        self.started = self.pos;
        self.released = self.released.max(release_to);
    }

    /// Ends write-behind: every hint given, the flusher gone.
    fn stop(&mut self) {
        if let Some(f) = self.flusher.take() {
            f.stop();
        }
    }
}

/// `posix_fadvise(fd, offset, len, POSIX_FADV_DONTNEED)`.
fn dont_need(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let Some(len) = NonZeroU64::new(len) else {
        return Ok(());
    };
    rustix::fs::fadvise(
        file.as_fd(),
        offset,
        Some(len),
        rustix::fs::Advice::DontNeed,
    )
    .map_err(io::Error::from)
}

/// A file being written into a [`DirStore`], written behind (module docs).
#[derive(Debug)]
pub struct DirWriter {
    file: File,
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
    behind: WriteBehind,
}

impl DirWriter {
    /// Bytes from the file's start whose writeback this writer started (or
    /// handed to its flusher thread): 0 for files shorter than
    /// [`WRITE_BEHIND_STEP`] and after a refused hint.
    pub fn writeback_started(&self) -> u64 {
        self.behind.started
    }
}

impl Write for DirWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.behind.advance(&self.file, n as u64);
        Ok(n)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        // In steps, so the writeback of a large buffer's start begins
        // while its end is still being copied.
        for piece in buf.chunks(WRITE_BEHIND_STEP as usize) {
            self.file.write_all(piece)?;
            self.behind.advance(&self.file, piece.len() as u64);
        }
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl PagesSink for DirWriter {
    fn can_skip(&self) -> bool {
        true
    }
    fn skip(&mut self, len: u64) -> io::Result<()> {
        self.file.skip(len)?;
        self.behind.advance(&self.file, len);
        Ok(())
    }
    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
    fn can_rewrite_header(&self) -> bool {
        true
    }
    fn rewrite_header(&mut self, header: [u8; crate::HEADER_LEN]) -> io::Result<()> {
        self.file.rewrite_header(header)
    }
}

impl ImageWriter for DirWriter {
    fn commit(mut self) -> io::Result<()> {
        self.behind.stop();
        self.file.flush()?;
        fs::rename(&self.temp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for DirWriter {
    fn drop(&mut self) {
        self.behind.stop();
        if !self.committed {
            // Best effort: an error here leaves a dot-file no reader takes for an image.
            let _ = fs::remove_file(&self.temp);
        }
    }
}

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

type MemFiles = Arc<Mutex<BTreeMap<ImageName, Arc<Vec<u8>>>>>;

/// Image files in memory; clones share the same files.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    files: MemFiles,
}

fn lock(files: &MemFiles) -> MutexGuard<'_, BTreeMap<ImageName, Arc<Vec<u8>>>> {
    // A panic elsewhere while holding the lock leaves the map consistent.
    files
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts a file's raw bytes (header included).
    pub fn insert(&self, name: ImageName, bytes: Vec<u8>) {
        lock(&self.files).insert(name, Arc::new(bytes));
    }

    /// A file's raw bytes.
    pub fn get(&self, name: &ImageName) -> Option<Arc<Vec<u8>>> {
        lock(&self.files).get(name).cloned()
    }

    /// Removes a file.
    pub fn remove(&self, name: &ImageName) -> Option<Arc<Vec<u8>>> {
        lock(&self.files).remove(name)
    }
}

impl ImageStore for MemStore {
    type Writer = MemWriter;
    type Reader = Cursor<MemBytes>;

    fn create(&self, name: &ImageName) -> Result<MemWriter, Error> {
        Ok(MemWriter {
            files: Arc::clone(&self.files),
            name: *name,
            buf: Vec::new(),
        })
    }

    fn open(&self, name: &ImageName) -> Result<Option<Self::Reader>, Error> {
        Ok(self.get(name).map(|bytes| Cursor::new(MemBytes(bytes))))
    }

    fn discard(&self, name: &ImageName) -> Result<bool, Error> {
        Ok(lock(&self.files).remove(name).is_some())
    }

    fn list(&self) -> Result<Vec<ImageName>, Error> {
        Ok(lock(&self.files).keys().copied().collect())
    }
}

/// Shared bytes of a [`MemStore`] file.
#[derive(Clone, Debug)]
pub struct MemBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for MemBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A file being written into a [`MemStore`].
#[derive(Debug)]
pub struct MemWriter {
    files: MemFiles,
    name: ImageName,
    buf: Vec<u8>,
}

impl Write for MemWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl PagesSink for MemWriter {
    fn can_rewrite_header(&self) -> bool {
        true
    }
    fn rewrite_header(&mut self, header: [u8; crate::HEADER_LEN]) -> io::Result<()> {
        self.buf.rewrite_header(header)
    }
}

impl ImageWriter for MemWriter {
    fn commit(self) -> io::Result<()> {
        lock(&self.files).insert(self.name, Arc::new(self.buf));
        Ok(())
    }
}
