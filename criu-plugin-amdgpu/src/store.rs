//! CRIU's image storage as one [`ImageStore`]: the images directory
//! (`criu_get_image_dir()`) or, with `criu --stream`, CRIU's image streamer
//! (`img_streamer_open()`), chosen per hook.
//!
//! Generic over how a stream is opened, so the CRIU host emulator serves the
//! same store from its own streamer.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use amdgpu_image::{
    DirStore, ImageName, ImageStore, ImageWriter, PagesLayout, PagesReader, PagesSink, StreamMode,
    StreamStore, StreamWriter,
};

use crate::criu::services;

/// How the real plugin opens a stream: CRIU's `img_streamer_open`.
pub type StreamOpen = fn(&str, StreamMode) -> io::Result<File>;

pub(crate) fn open_stream(name: &str, mode: StreamMode) -> io::Result<File> {
    services()
        .streamer_open(name, mode == StreamMode::Dump)
        .map(File::from)
}

/// The images directory, or CRIU's image streamer with `--stream`; `O`
/// opens a stream by file name (CRIU's `img_streamer_open` in the real
/// plugin, the emulator's streamer in tests).
#[derive(Debug)]
pub enum HostStore<O = StreamOpen> {
    /// `criu_get_image_dir()`.
    Dir(DirStore),
    /// `img_streamer_open()`.
    Stream(StreamStore<O>),
}

/// A writer of either store.
#[derive(Debug)]
pub enum HostWriter {
    /// Into the images directory.
    Dir(<DirStore as ImageStore>::Writer),
    /// Into the streamer.
    Stream(StreamWriter<File>),
}

/// A reader of either store.
#[derive(Debug)]
pub enum HostReader {
    /// From the images directory.
    Dir(<DirStore as ImageStore>::Reader),
    /// From the streamer (a pipe).
    Stream(File),
}

impl Write for HostWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            HostWriter::Dir(w) => w.write(buf),
            HostWriter::Stream(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            HostWriter::Dir(w) => w.flush(),
            HostWriter::Stream(w) => w.flush(),
        }
    }
}

impl PagesSink for HostWriter {
    fn can_skip(&self) -> bool {
        match self {
            HostWriter::Dir(w) => w.can_skip(),
            HostWriter::Stream(w) => w.can_skip(),
        }
    }
    fn skip(&mut self, len: u64) -> io::Result<()> {
        match self {
            HostWriter::Dir(w) => w.skip(len),
            HostWriter::Stream(w) => w.skip(len),
        }
    }
    fn set_final_len(&mut self, len: u64) -> io::Result<()> {
        match self {
            HostWriter::Dir(w) => w.set_final_len(len),
            HostWriter::Stream(w) => w.set_final_len(len),
        }
    }
    fn can_rewrite_header(&self) -> bool {
        match self {
            HostWriter::Dir(w) => w.can_rewrite_header(),
            HostWriter::Stream(w) => w.can_rewrite_header(),
        }
    }
    fn rewrite_header(&mut self, header: [u8; amdgpu_image::HEADER_LEN]) -> io::Result<()> {
        match self {
            HostWriter::Dir(w) => w.rewrite_header(header),
            HostWriter::Stream(w) => w.rewrite_header(header),
        }
    }
}

impl ImageWriter for HostWriter {
    fn commit(self) -> io::Result<()> {
        match self {
            HostWriter::Dir(w) => w.commit(),
            HostWriter::Stream(w) => w.commit(),
        }
    }
}

impl AsFd for HostReader {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            HostReader::Dir(r) => r.as_fd(),
            HostReader::Stream(r) => r.as_fd(),
        }
    }
}

impl Read for HostReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            HostReader::Dir(r) => r.read(buf),
            HostReader::Stream(r) => r.read(buf),
        }
    }
}

impl<O> ImageStore for HostStore<O>
where
    O: Fn(&str, StreamMode) -> io::Result<File>,
{
    type Writer = HostWriter;
    type Reader = HostReader;

    fn create(&self, name: &ImageName) -> Result<HostWriter, amdgpu_image::Error> {
        match self {
            HostStore::Dir(s) => s.create(name).map(HostWriter::Dir),
            HostStore::Stream(s) => s.create(name).map(HostWriter::Stream),
        }
    }

    fn open(&self, name: &ImageName) -> Result<Option<HostReader>, amdgpu_image::Error> {
        match self {
            HostStore::Dir(s) => s.open(name).map(|r| r.map(HostReader::Dir)),
            HostStore::Stream(s) => s.open(name).map(|r| r.map(HostReader::Stream)),
        }
    }

    fn list(&self) -> Result<Vec<ImageName>, amdgpu_image::Error> {
        match self {
            HostStore::Dir(s) => s.list(),
            HostStore::Stream(s) => s.list(),
        }
    }

    fn discard(&self, name: &ImageName) -> Result<bool, amdgpu_image::Error> {
        match self {
            HostStore::Dir(s) => s.discard(name),
            HostStore::Stream(s) => s.discard(name),
        }
    }

    fn check_pages(
        &self,
        name: &ImageName,
        layout: &PagesLayout,
    ) -> Result<bool, amdgpu_image::Error> {
        match self {
            HostStore::Dir(s) => s.check_pages(name, layout),
            HostStore::Stream(s) => s.check_pages(name, layout),
        }
    }

    fn as_dir(&self) -> Option<&DirStore> {
        match self {
            HostStore::Dir(s) => Some(s),
            HostStore::Stream(_) => None,
        }
    }

    fn open_pages(
        &self,
        name: &ImageName,
        layout: PagesLayout,
    ) -> Result<Option<PagesReader<HostReader>>, amdgpu_image::Error> {
        match self {
            HostStore::Dir(s) => Ok(s
                .open_pages(name, layout)?
                .map(|r| r.map_source(HostReader::Dir))),
            HostStore::Stream(s) => Ok(s
                .open_pages(name, layout)?
                .map(|r| r.map_source(HostReader::Stream))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use amdgpu_image::pages::MIN_SKIPPED_HOLE;
    use amdgpu_image::{content_checksum, PagesBo};
    use std::os::unix::fs::MetadataExt;

    /// The store CRIU's images directory becomes hands out pages readers
    /// that skip holes, as the directory store's own do.
    #[test]
    fn the_hosts_directory_store_skips_holes() {
        let dir = tempfile::tempdir().unwrap();
        let name = ImageName::Pages {
            id: 1,
            gpu_id: 0x1234,
        };
        let mut bo = vec![0u8; (4 * MIN_SKIPPED_HOLE) as usize];
        bo[..4096].fill(7);
        let layout = PagesLayout::new(vec![PagesBo {
            entry: 0,
            size: bo.len() as u64,
            checksum: Some(content_checksum(&bo)),
        }])
        .unwrap();
        let store: HostStore = HostStore::Dir(DirStore::open_dir(dir.path()).unwrap());
        let mut w = store.create_pages(&name, layout.clone()).unwrap();
        w.write(&bo).unwrap();
        let (sink, _) = w.finish().unwrap();
        sink.commit().unwrap();
        let meta = std::fs::metadata(dir.path().join(name.to_string())).unwrap();
        if meta.blocks() * 512 >= meta.len() {
            test_env::skip("the file system of the temp dir stores no holes");
            return;
        }
        assert!(store.check_pages(&name, &layout).unwrap());
        let mut r = store.open_pages(&name, layout).unwrap().expect("present");
        let mut buf = vec![0xa5u8; 1 << 20];
        let mut back = Vec::new();
        while let Some(chunk) = r.read_chunk(&mut buf).unwrap() {
            back.extend_from_slice(&buf[..chunk.len]);
        }
        assert!(r.hole_bytes() > 0, "the holes were read");
        r.finish().unwrap();
        assert!(back == bo, "contents differ");
    }
}
