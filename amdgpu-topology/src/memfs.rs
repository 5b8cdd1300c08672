//! An in-memory sysfs tree: a [`SysfsReader`] and [`SysfsWriter`] over a
//! map of paths, for tests, fuzzing and the simulator, where writing
//! thousands of small files to disk would only cost time.
//!
//! It models what the parser and the writer rely on (directories, files,
//! `NotFound`, `AlreadyExists`) and nothing else; it never touches the disk.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::parse::SysfsReader;
use crate::write::SysfsWriter;

/// One entry of a [`MemoryFs`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Dir,
    File(Vec<u8>),
}

/// A tree of directories and files held in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryFs {
    entries: BTreeMap<PathBuf, Entry>,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl MemoryFs {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every file with its contents, in path order.
    pub fn files(&self) -> impl Iterator<Item = (&Path, &[u8])> {
        self.entries.iter().filter_map(|(path, entry)| match entry {
            Entry::File(bytes) => Some((path.as_path(), bytes.as_slice())),
            Entry::Dir => None,
        })
    }

    /// The contents of file `path`.
    pub fn file(&self, path: &Path) -> Option<&[u8]> {
        match self.entries.get(path) {
            Some(Entry::File(bytes)) => Some(bytes),
            _ => None,
        }
    }

    /// Removes `path` and everything below it; whether anything was removed.
    pub fn remove(&mut self, path: &Path) -> bool {
        let doomed: Vec<PathBuf> = self
            .entries
            .range(path.to_owned()..)
            .map(|(p, _)| p)
            .take_while(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in &doomed {
            self.entries.remove(p);
        }
        !doomed.is_empty()
    }

    fn parent_is_dir(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => match self.entries.get(parent) {
                Some(Entry::Dir) => Ok(()),
                _ => Err(not_found(parent)),
            },
            _ => Ok(()),
        }
    }
}

impl SysfsReader for MemoryFs {
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        match self.entries.get(path) {
            Some(Entry::Dir) => {}
            Some(Entry::File(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", path.display()),
                ))
            }
            None => return Err(not_found(path)),
        }
        let names = self
            .entries
            .range(path.to_owned()..)
            .map(|(p, _)| p)
            .take_while(|p| p.starts_with(path))
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        Ok(names)
    }

    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        match self.entries.get(path) {
            Some(entry) => Ok(*entry == Entry::Dir),
            None => Err(not_found(path)),
        }
    }

    fn read(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        match self.entries.get(path) {
            Some(Entry::File(bytes)) => Ok(bytes[..bytes.len().min(limit)].to_vec()),
            Some(Entry::Dir) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", path.display()),
            )),
            None => Err(not_found(path)),
        }
    }
}

impl SysfsWriter for MemoryFs {
    fn create_dir_all(&mut self, path: &Path) -> io::Result<()> {
        let mut partial = PathBuf::new();
        for component in path.components() {
            partial.push(component);
            match self.entries.get(&partial) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotADirectory,
                        format!("{} is a file", partial.display()),
                    ))
                }
                None => {
                    self.entries.insert(partial.clone(), Entry::Dir);
                }
            }
        }
        Ok(())
    }

    fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        if self.entries.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        self.parent_is_dir(path)?;
        self.entries.insert(path.to_owned(), Entry::Dir);
        Ok(())
    }

    fn write_file(&mut self, path: &Path, contents: &[u8]) -> io::Result<()> {
        if let Some(Entry::Dir) = self.entries.get(path) {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory", path.display()),
            ));
        }
        self.parent_is_dir(path)?;
        self.entries
            .insert(path.to_owned(), Entry::File(contents.to_vec()));
        Ok(())
    }
}
