//! Seek errors while writing and reading pages files (upstream's 2026 fixes,
//! criu#3015, found seek errors ignored in the C plugin): a failed seek is
//! an error naming the file, never a pages file reported as written or a
//! read reported as verified.

use std::io::{self, Write};

use amdgpu_image::{PagesBo, PagesLayout, PagesReader, PagesSink, PagesWriter};

/// A sink that says it can leave holes, whose every seek fails as `lseek`
/// on a pipe does (`ESPIPE`).
struct FailingSeeks {
    bytes: Vec<u8>,
    seeks: usize,
}

impl Write for FailingSeeks {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl PagesSink for FailingSeeks {
    fn can_skip(&self) -> bool {
        true
    }

    fn skip(&mut self, _len: u64) -> io::Result<()> {
        self.seeks += 1;
        Err(io::Error::from_raw_os_error(ESPIPE))
    }
}

/// `ESPIPE` on Linux (asm-generic/errno-base.h).
const ESPIPE: i32 = 29;

#[test]
fn a_failed_seek_over_a_hole_fails_the_write_naming_the_file() {
    // One BO of 4 MiB: 1 MiB of data, then zeros the writer turns into a hole.
    let size = 4u64 << 20;
    let layout = PagesLayout::from_sizes([size]).unwrap();
    let sink = FailingSeeks {
        bytes: Vec::new(),
        seeks: 0,
    };
    let mut writer = PagesWriter::new(sink, "amdgpu-pages-1-1a2b.img", layout).unwrap();
    let mut data = vec![0u8; size as usize];
    for (i, b) in data[..1 << 20].iter_mut().enumerate() {
        *b = (i % 251) as u8 + 1;
    }
    let result = writer.write(&data).and_then(|()| writer.finish().map(drop));
    let err = result.expect_err("a seek that fails cannot leave a written pages file");
    let text = err.to_string();
    assert!(text.contains("amdgpu-pages-1-1a2b.img"), "{text}");
    assert!(
        text.to_lowercase().contains("seek") || text.contains("os error 29"),
        "the error says what failed: {text}"
    );
}

/// A pages file of one 3 MiB BO, mostly zeros, and the layout that
/// verifies it.
fn sparse_pages() -> (Vec<u8>, PagesLayout) {
    let size = 3u64 << 20;
    let layout = PagesLayout::from_sizes([size]).unwrap();
    let mut bytes = Vec::new();
    let mut writer = PagesWriter::new(&mut bytes, "amdgpu-pages-1-1a2b.img", layout).unwrap();
    let mut data = vec![0u8; size as usize];
    data[5] = 7;
    data[(size - 1) as usize] = 9;
    writer.write(&data).unwrap();
    let (_, written) = writer.finish().unwrap();
    let layout = PagesLayout::new(vec![PagesBo {
        entry: 0,
        size,
        checksum: Some(written.checksums[0].1),
    }])
    .unwrap();
    (bytes, layout)
}

fn through_pipe(bytes: Vec<u8>) -> (std::io::PipeReader, std::thread::JoinHandle<io::Result<()>>) {
    let (rx, mut tx) = std::io::pipe().unwrap();
    (rx, std::thread::spawn(move || tx.write_all(&bytes)))
}

#[test]
fn a_pages_file_read_through_a_pipe_is_read_and_verified() {
    let (bytes, layout) = sparse_pages();
    let (rx, feeder) = through_pipe(bytes);
    let reader = PagesReader::new(rx, "amdgpu-pages-1-1a2b.img", layout).unwrap();
    let mut scratch = vec![0u8; 1 << 20];
    reader.verify_all(&mut scratch).unwrap();
    feeder.join().unwrap().unwrap();
}

#[test]
fn probing_holes_on_a_pipe_reads_every_byte_instead() {
    // `skipping_holes` asks lseek(SEEK_DATA/SEEK_HOLE) where the holes
    // are, which a pipe cannot answer (ESPIPE). The reader must not trust
    // such a probe: a pipe has no size, so the whole payload is read and
    // verified, holes included.
    let (bytes, layout) = sparse_pages();
    let (rx, feeder) = through_pipe(bytes);
    let mut reader = PagesReader::new(rx, "amdgpu-pages-1-1a2b.img", layout)
        .unwrap()
        .skipping_holes();
    let mut buf = vec![0u8; 1 << 20];
    let mut seen = Vec::new();
    while let Some(chunk) = reader.read_chunk(&mut buf).unwrap() {
        seen.extend_from_slice(&buf[..chunk.len]);
    }
    assert_eq!(reader.hole_bytes(), 0, "nothing was taken for a hole");
    reader.finish().unwrap();
    assert_eq!(seen.len(), 3 << 20);
    assert_eq!((seen[5], seen[(3 << 20) - 1]), (7, 9));
    assert_eq!(seen.iter().filter(|b| **b != 0).count(), 2);
    feeder.join().unwrap().unwrap();
}
