//! [`DirWriter`]: a file being written into a [`DirStore`], written behind
//! (writeback started and cached pages released as it grows) by a flusher
//! thread.
//!
//! [`DirStore`]: super::DirStore

use std::fs::{self, File};
use std::io::{self, Write};
use std::num::NonZeroU64;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::ImageWriter;
use crate::pages::PagesSink;

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

/// A file being written into a [`DirStore`](super::DirStore), written behind
/// (module docs).
#[derive(Debug)]
pub struct DirWriter {
    file: File,
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
    behind: WriteBehind,
}

impl DirWriter {
    /// A writer into `file`, created as `temp` and renamed to `target` on
    /// commit (removed on drop before that).
    pub(super) fn new(file: File, temp: PathBuf, target: PathBuf) -> Self {
        Self {
            file,
            temp,
            target,
            committed: false,
            behind: WriteBehind::default(),
        }
    }

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
