//! [`MemStore`]: image files in memory, for tests, fuzzing and tools.

use std::collections::BTreeMap;
use std::io::{self, Cursor, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{ImageStore, ImageWriter};
use crate::pages::PagesSink;
use crate::{Error, ImageName};

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
