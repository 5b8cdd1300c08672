//! Reading pages files around their holes and writing image files behind:
//! both change how bytes move, never which bytes. What a hole-skipping
//! reader delivers is bit-identical to a plain read, its checksums and
//! truncation checks still hold, and a written-behind file reads back
//! exactly as written.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use amdgpu_image::fuzz_support::sample_bo_bytes;
use amdgpu_image::pages::MIN_SKIPPED_HOLE;
use amdgpu_image::store::{DirWriter, WRITE_BEHIND_LAG, WRITE_BEHIND_STEP};
use amdgpu_image::{
    content_checksum, DirStore, Error, ImageName, ImageStore, ImageWriter, PagesBo, PagesLayout,
    PagesReader, PagesSink, PAGE_SIZE,
};

const P: usize = PAGE_SIZE as usize;
const NAME: ImageName = ImageName::Pages {
    id: 1,
    gpu_id: 0x1234,
};

/// BOs with every kind of run: data, short zero runs (read like data),
/// an all-zero BO longer than [`MIN_SKIPPED_HOLE`] (skipped), a size that
/// is not a page multiple, and a long zero tail (the file ends in a hole).
fn bos() -> Vec<Vec<u8>> {
    let mut a = sample_bo_bytes(1, 40 * PAGE_SIZE);
    a[3 * P..30 * P].fill(0);
    let b = vec![0u8; MIN_SKIPPED_HOLE as usize + 64 * P];
    let mut c = sample_bo_bytes(2, 9 * PAGE_SIZE + 100);
    c[P..5 * P + 7].fill(0);
    let mut d = sample_bo_bytes(3, MIN_SKIPPED_HOLE + 33 * PAGE_SIZE);
    d[2 * P..].fill(0);
    vec![a, b, c, d]
}

fn layout(bos: &[Vec<u8>]) -> PagesLayout {
    PagesLayout::new(
        bos.iter()
            .enumerate()
            .map(|(i, b)| PagesBo {
                entry: i,
                size: b.len() as u64,
                checksum: Some(content_checksum(b)),
            })
            .collect(),
    )
    .unwrap()
}

/// Writes `bos` as the pages file [`NAME`] of a directory store at `dir`.
fn write_set(dir: &Path, bos: &[Vec<u8>]) -> DirStore {
    let store = DirStore::open_dir(dir).unwrap();
    let mut w = store.create_pages(&NAME, layout(bos)).unwrap();
    for chunk in bos.concat().chunks(5000) {
        w.write(chunk).unwrap();
    }
    let (sink, written) = w.finish().unwrap();
    assert!(written.hole_bytes > 0);
    sink.commit().unwrap();
    store
}

/// Reads every chunk through `buf_len`-byte buffers; returns the bytes.
fn read_all<R: std::io::Read>(mut r: PagesReader<R>, buf_len: usize) -> Result<Vec<u8>, Error> {
    let mut buf = vec![0xa5u8; buf_len];
    let mut out = Vec::new();
    while let Some(chunk) = r.read_chunk(&mut buf)? {
        out.extend_from_slice(&buf[..chunk.len]);
        // Stale bytes of an earlier chunk must not leak into a hole's zeros.
        buf.fill(0xa5);
    }
    r.finish()?;
    Ok(out)
}

/// Whether the file system of `path` stored the file with holes.
fn has_holes(path: &Path) -> bool {
    let meta = fs::metadata(path).unwrap();
    meta.blocks() * 512 < meta.len()
}

fn hole_reader_reads_bit_identical_bytes(dir: &Path) {
    let bos = bos();
    let store = write_set(dir, &bos);
    let expected = bos.concat();
    for buf_len in [1000, P, 3 * P + 17, 1 << 20] {
        let r = store.open_pages(&NAME, layout(&bos)).unwrap().unwrap();
        assert_eq!(read_all(r, buf_len).unwrap(), expected, "buffer {buf_len}");
    }
    let mut r = store.open_pages(&NAME, layout(&bos)).unwrap().unwrap();
    let mut buf = vec![0u8; 1 << 20];
    while r.read_chunk(&mut buf).unwrap().is_some() {}
    if has_holes(&dir.join(NAME.to_string())) {
        // The zero BO and the zero tail were not read, the short runs were.
        let long_holes = 2 * MIN_SKIPPED_HOLE + 60 * PAGE_SIZE;
        assert!(r.hole_bytes() >= long_holes, "{}", r.hole_bytes());
        assert!(
            r.hole_bytes() < long_holes + 70 * PAGE_SIZE,
            "{}",
            r.hole_bytes()
        );
    } else {
        test_env::skip(format!(
            "the hole count: the file system of {dir:?} stored no holes"
        ));
    }
    r.finish().unwrap();
}

#[test]
fn hole_skipping_reader_delivers_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    hole_reader_reads_bit_identical_bytes(dir.path());
}

#[test]
fn hole_skipping_reader_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        test_env::skip("no /dev/shm");
        return;
    }
    let Ok(dir) = tempfile::tempdir_in(shm) else {
        test_env::skip("/dev/shm is not writable");
        return;
    };
    hole_reader_reads_bit_identical_bytes(dir.path());
}

#[test]
fn hole_skipping_reader_still_finds_corruption_and_truncation() {
    let bos = bos();
    let dir = tempfile::tempdir().unwrap();
    let store = write_set(dir.path(), &bos);
    let path = dir.path().join(NAME.to_string());
    let pristine = fs::read(&path).unwrap();

    // A byte written into a hole of BO 1 (the all-zero BO): the checksum fails.
    let hole_offset = 8 + bos[0].len() as u64 + 10 * PAGE_SIZE + 3;
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[1], hole_offset).unwrap();
    drop(f);
    for verify in [
        PagesReader::verify_all_serial,
        PagesReader::verify_all_pipelined,
        PagesReader::verify_all,
    ] {
        let r = store.open_pages(&NAME, layout(&bos)).unwrap().unwrap();
        let err = verify(r, &mut vec![0u8; 1 << 20]).unwrap_err();
        assert!(
            matches!(err, Error::ChecksumMismatch { bo: 1, .. }),
            "{err}"
        );
    }

    // The file cut inside its trailing hole: truncation, not zeros.
    fs::write(&path, &pristine[..pristine.len() - 5 * P]).unwrap();
    let r = store.open_pages(&NAME, layout(&bos)).unwrap().unwrap();
    let err = read_all(r, 1 << 20).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err}");

    // A byte after the payload: trailing bytes.
    let mut longer = pristine.clone();
    longer.push(0);
    fs::write(&path, &longer).unwrap();
    let r = store.open_pages(&NAME, layout(&bos)).unwrap().unwrap();
    let err = read_all(r, 1 << 20).unwrap_err();
    assert!(matches!(err, Error::TrailingBytes { .. }), "{err}");

    // Restored: clean again.
    fs::write(&path, &pristine).unwrap();
    let r = store.open_pages(&NAME, layout(&bos)).unwrap().unwrap();
    r.verify_all(&mut vec![0u8; 1 << 20]).unwrap();
}

#[test]
fn open_pages_of_a_missing_file_is_none_and_checks_the_header() {
    let bos = bos();
    let dir = tempfile::tempdir().unwrap();
    let store = write_set(dir.path(), &bos);
    let other = ImageName::Pages { id: 2, gpu_id: 1 };
    assert!(store.open_pages(&other, layout(&bos)).unwrap().is_none());
    let shorter = layout(&bos[..2]);
    assert!(matches!(
        store.open_pages(&NAME, shorter),
        Err(Error::LengthMismatch { .. })
    ));
}

/// Writes `len` bytes of data (with zero runs skipped as holes) through a
/// directory store's writer in uneven pieces; returns the store (which
/// holds the directory the writer commits into), the writer and the bytes.
fn write_behind(dir: &Path, len: usize) -> (DirStore, DirWriter, Vec<u8>) {
    let store = DirStore::open_dir(dir).unwrap();
    let mut data = sample_bo_bytes(7, len as u64);
    let mut w = store.create(&NAME).unwrap();
    let mut at = 0;
    let mut turn = 0usize;
    while at < len {
        let n = [100_003, 1 << 20, 4096, 3 << 20][turn % 4].min(len - at);
        if turn % 7 == 3 {
            data[at..at + n].fill(0);
            w.skip(n as u64).unwrap();
        } else {
            w.write_all(&data[at..at + n]).unwrap();
        }
        at += n;
        turn += 1;
    }
    w.set_final_len(len as u64).unwrap();
    (store, w, data)
}

#[test]
fn written_behind_files_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let len = (5 * WRITE_BEHIND_LAG / 2) as usize + 12_345;
    let (_store, w, data) = write_behind(dir.path(), len);
    // Writeback was started for all but the last step's worth of bytes.
    assert!(
        w.writeback_started() + WRITE_BEHIND_STEP > len as u64,
        "{} of {len}",
        w.writeback_started()
    );
    w.commit().unwrap();
    assert_eq!(fs::read(dir.path().join(NAME.to_string())).unwrap(), data);
}

#[test]
fn small_files_are_not_written_behind() {
    let dir = tempfile::tempdir().unwrap();
    let len = (WRITE_BEHIND_STEP - 1) as usize;
    let (_store, w, data) = write_behind(dir.path(), len);
    assert_eq!(w.writeback_started(), 0);
    w.commit().unwrap();
    assert_eq!(fs::read(dir.path().join(NAME.to_string())).unwrap(), data);
}

#[test]
fn write_behind_on_tmpfs_reads_back_exactly() {
    let shm = Path::new("/dev/shm");
    let Some(dir) = shm
        .is_dir()
        .then(|| tempfile::tempdir_in(shm).ok())
        .flatten()
    else {
        test_env::skip("no writable /dev/shm");
        return;
    };
    let len = (2 * WRITE_BEHIND_STEP) as usize + 99;
    let (_store, w, data) = write_behind(dir.path(), len);
    w.commit().unwrap();
    assert_eq!(fs::read(dir.path().join(NAME.to_string())).unwrap(), data);
}
