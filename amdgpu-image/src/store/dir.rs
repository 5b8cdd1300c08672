//! [`DirStore`]: an image directory held open, files created under a
//! temporary name and renamed into place on commit, and the mark of an
//! unfinished dump.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::dir_writer::DirWriter;
use super::ImageStore;
use crate::pages::{PagesFile, PagesLayout, PagesReader};
use crate::{Error, ImageName};

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
        Ok(DirWriter::new(file, temp, target))
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
