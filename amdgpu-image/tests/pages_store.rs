//! Pages files and image stores: what the writer produces reads back
//! identically (holes included), checksums catch corruption, and stores
//! never expose half-written images.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use amdgpu_image::fuzz_support::{sample_bo_bytes, write_sample_set, SampleSpec};
use amdgpu_image::{
    content_checksum, verify_set, CriuKfd, DirStore, Error, ImageName, ImageStore, ImageWriter,
    MemStore, PagesBo, PagesFile, PagesLayout, PagesReader, PagesWriter, ReadLimits, StreamMode,
    StreamStore, ValidatedKfd, PAGE_SIZE,
};

const P: usize = PAGE_SIZE as usize;

/// Three BOs: data with a zero run, all zeros, data ending in zeros.
fn bos() -> Vec<Vec<u8>> {
    let mut a = sample_bo_bytes(1, 5 * PAGE_SIZE);
    a[P..4 * P].fill(0);
    let b = vec![0u8; 16 * P];
    let mut c = sample_bo_bytes(2, 7 * PAGE_SIZE);
    c[2 * P..].fill(0);
    vec![a, b, c]
}

fn layout(bos: &[Vec<u8>], checksums: bool) -> PagesLayout {
    PagesLayout::new(
        bos.iter()
            .enumerate()
            .map(|(i, b)| PagesBo {
                entry: i * 2,
                size: b.len() as u64,
                checksum: checksums.then(|| content_checksum(b)),
            })
            .collect(),
    )
    .unwrap()
}

fn expected_file(bos: &[Vec<u8>]) -> Vec<u8> {
    let total: usize = bos.iter().map(Vec::len).sum();
    let mut out = (total as u64).to_le_bytes().to_vec();
    for b in bos {
        out.extend_from_slice(b);
    }
    out
}

/// Writes all BOs as one stream cut into pieces of `piece` bytes.
fn write_pieces<S: amdgpu_image::PagesSink>(w: &mut PagesWriter<S>, bos: &[Vec<u8>], piece: usize) {
    let all: Vec<u8> = bos.concat();
    for chunk in all.chunks(piece) {
        w.write(chunk).unwrap();
    }
}

#[test]
fn writer_leaves_holes_that_read_back_as_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    let bos = bos();
    for (n, piece) in [1000usize, P, 3 * P + 17, 1 << 20].into_iter().enumerate() {
        let name = ImageName::Pages {
            id: n as u32,
            gpu_id: 0xabcd,
        };
        let mut w = store.create_pages(&name, layout(&bos, false)).unwrap();
        write_pieces(&mut w, &bos, piece);
        let (sink, written) = w.finish().unwrap();
        sink.commit().unwrap();
        let on_disk = fs::read(dir.path().join(name.to_string())).unwrap();
        assert_eq!(on_disk, expected_file(&bos), "piece {piece}");
        assert!(
            written.hole_bytes >= 16 * PAGE_SIZE,
            "piece {piece}: {written:?}"
        );
        let expected: Vec<(usize, u64)> = bos
            .iter()
            .enumerate()
            .map(|(i, b)| (i * 2, content_checksum(b)))
            .collect();
        assert_eq!(written.checksums, expected);
        let meta = fs::metadata(dir.path().join(name.to_string())).unwrap();
        println!(
            "piece {piece}: {} bytes, {} allocated",
            meta.len(),
            meta.blocks() * 512
        );
    }
}

#[test]
fn file_ending_in_a_hole_has_the_right_length() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    let name = ImageName::Pages { id: 1, gpu_id: 1 };
    let bos = vec![vec![0u8; 10 * P]];
    let mut w = store.create_pages(&name, layout(&bos, false)).unwrap();
    write_pieces(&mut w, &bos, P);
    let (sink, written) = w.finish().unwrap();
    sink.commit().unwrap();
    // Only whole file blocks become holes: the 4088 bytes after the header are written.
    assert_eq!(written.hole_bytes, 9 * PAGE_SIZE);
    assert_eq!(
        fs::read(dir.path().join(name.to_string())).unwrap(),
        expected_file(&bos)
    );
}

#[test]
fn sequential_sinks_get_the_same_bytes() {
    let bos = bos();
    let mut w =
        PagesWriter::new(Vec::new(), "amdgpu-pages-1-0001.img", layout(&bos, false)).unwrap();
    write_pieces(&mut w, &bos, 5000);
    let (bytes, written) = w.finish().unwrap();
    assert_eq!(written.hole_bytes, 0);
    assert_eq!(bytes, expected_file(&bos));
}

#[test]
fn writer_rejects_wrong_lengths() {
    let lay = PagesLayout::from_sizes([PAGE_SIZE, PAGE_SIZE]).unwrap();
    let mut w = PagesWriter::new(Vec::new(), "amdgpu-pages-1-0001.img", lay.clone()).unwrap();
    let err = w.write(&vec![1u8; 3 * P]).unwrap_err();
    assert!(matches!(err, Error::LengthMismatch { .. }), "{err}");
    w.write(&vec![1u8; P + 1]).unwrap();
    assert_eq!(w.current_bo(), Some(1));
    let err = w.finish().unwrap_err();
    assert_eq!(
        err.to_string(),
        "amdgpu-pages-1-0001.img: pages payload: announced 8192 bytes, got 4097"
    );
}

#[test]
fn empty_bos_and_empty_files() {
    let lay = PagesLayout::from_sizes([0, PAGE_SIZE, 0]).unwrap();
    let mut w = PagesWriter::new(Vec::new(), "x", lay.clone()).unwrap();
    w.write(&[7u8; P]).unwrap();
    let (bytes, written) = w.finish().unwrap();
    assert_eq!(written.checksums.len(), 3);
    assert_eq!(written.checksums[0].1, content_checksum(&[]));
    let mut r = PagesReader::new(&bytes[..], "x", lay).unwrap();
    let mut buf = vec![0u8; 100];
    let mut seen = Vec::new();
    while let Some(c) = r.read_chunk(&mut buf).unwrap() {
        seen.push((c.bo, c.len, c.last));
    }
    assert_eq!(seen.first(), Some(&(0, 0, true)));
    assert_eq!(seen.last(), Some(&(2, 0, true)));

    let (bytes, _) = PagesWriter::new(Vec::new(), "y", PagesLayout::default())
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(bytes, 0u64.to_le_bytes());
}

#[test]
fn reader_chunks_stay_inside_bos_and_verify_checksums() {
    let bos = bos();
    let file = expected_file(&bos);
    let mut r = PagesReader::new(&file[..], "amdgpu-pages-1-0001.img", layout(&bos, true)).unwrap();
    let mut buf = vec![0u8; 3 * P + 5];
    let mut rebuilt: Vec<Vec<u8>> = vec![Vec::new(); bos.len()];
    while let Some(c) = r.read_chunk(&mut buf).unwrap() {
        assert_eq!(c.offset as usize, rebuilt[c.bo].len());
        assert_eq!(c.entry, c.bo * 2);
        rebuilt[c.bo].extend_from_slice(&buf[..c.len]);
        assert_eq!(c.last, rebuilt[c.bo].len() == bos[c.bo].len());
    }
    assert_eq!(rebuilt, bos);
    r.finish().unwrap();

    // Finishing early names the BO; finishing at the end checks for trailing bytes.
    let mut r = PagesReader::new(&file[..], "f.img", layout(&bos, true)).unwrap();
    r.read_chunk(&mut buf).unwrap();
    let err = r.finish().unwrap_err();
    assert!(
        err.to_string()
            .contains("finished before the end of bo 0 (entry 0)"),
        "{err}"
    );
    let mut longer = file.clone();
    longer.push(1);
    let mut r = PagesReader::new(&longer[..], "f.img", layout(&bos, true)).unwrap();
    while r
        .read_chunk(&mut buf)
        .unwrap()
        .is_some_and(|c| !(c.bo == 2 && c.last))
    {}
    assert!(matches!(r.finish(), Err(Error::TrailingBytes { .. })));
}

#[test]
fn reader_reports_corruption_truncation_and_bad_headers() {
    let bos = bos();
    let file = expected_file(&bos);
    let mut scratch = vec![0u8; 1 << 16];

    let mut corrupt = file.clone();
    corrupt[8 + bos[0].len() + 100] ^= 1;
    let err = PagesReader::new(&corrupt[..], "f.img", layout(&bos, true))
        .unwrap()
        .verify_all(&mut scratch)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ChecksumMismatch {
                bo: 1,
                entry: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("f.img: bo 1 (entry 2): content checksum"),
        "{err}"
    );
    // Without checksums in the image, the same bytes pass.
    PagesReader::new(&corrupt[..], "f.img", layout(&bos, false))
        .unwrap()
        .verify_all(&mut scratch)
        .unwrap();

    let err = PagesReader::new(&file[..file.len() - 1], "f.img", layout(&bos, true))
        .unwrap()
        .verify_all(&mut scratch)
        .unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err}");

    let mut longer = file.clone();
    longer.push(0);
    let err = PagesReader::new(&longer[..], "f.img", layout(&bos, true))
        .unwrap()
        .verify_all(&mut scratch)
        .unwrap_err();
    assert!(matches!(err, Error::TrailingBytes { .. }), "{err}");

    let mut bad_header = file.clone();
    bad_header[0] ^= 0x10;
    let err = PagesReader::new(&bad_header[..], "f.img", layout(&bos, true)).unwrap_err();
    assert!(matches!(err, Error::LengthMismatch { .. }), "{err}");
}

#[test]
fn positional_reads() {
    let dir = tempfile::tempdir().unwrap();
    let bos = bos();
    let path = dir.path().join("p.img");
    fs::write(&path, expected_file(&bos)).unwrap();
    let f = PagesFile::open(fs::File::open(&path).unwrap(), "p.img", layout(&bos, true)).unwrap();
    let mut buf = vec![0u8; 10];
    f.read_range(2, 5, &mut buf).unwrap();
    assert_eq!(buf, bos[2][5..15]);
    assert_eq!(&f.bo_bytes(0).unwrap()[..], &bos[0][..]);
    assert!(matches!(
        f.read_range(2, bos[2].len() as u64 - 5, &mut buf),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        f.read_range(3, 0, &mut buf),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        f.read_range(0, u64::MAX, &mut buf),
        Err(Error::OutOfRange { .. })
    ));

    let mut corrupt = expected_file(&bos);
    corrupt[9] ^= 0xff;
    fs::write(&path, &corrupt).unwrap();
    let f = PagesFile::open(fs::File::open(&path).unwrap(), "p.img", layout(&bos, true)).unwrap();
    assert!(matches!(
        f.bo_bytes(0),
        Err(Error::ChecksumMismatch { bo: 0, .. })
    ));

    fs::write(&path, &corrupt[..corrupt.len() - 1]).unwrap();
    let err =
        PagesFile::open(fs::File::open(&path).unwrap(), "p.img", layout(&bos, true)).unwrap_err();
    assert!(matches!(err, Error::Truncated { .. }), "{err}");
}

#[test]
fn dir_store_commits_atomically_with_mode_0600() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    let name = ImageName::Dmabuf { id: 4 };
    let mut w = store.create(&name).unwrap();
    w.write_all(b"partial").unwrap();
    assert!(
        store.open(&name).unwrap().is_none(),
        "visible before commit"
    );
    assert!(store.list().unwrap().is_empty(), "temporary file listed");
    drop(w);
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        0,
        "dropped writer left a file"
    );

    fs::write(dir.path().join("files.img"), b"not ours").unwrap();
    store
        .write_message(
            &name,
            &amdgpu_image::CriuDmabufNode {
                gem_handle: 9,
                ..Default::default()
            },
        )
        .unwrap();
    let mode = fs::metadata(dir.path().join(name.to_string()))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(store.list().unwrap(), vec![name]);
    let back: amdgpu_image::CriuDmabufNode = store
        .read_message(&name, ReadLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(back.gem_handle, 9);
}

#[test]
fn dir_store_follows_the_held_directory() {
    let parent = tempfile::tempdir().unwrap();
    let a = parent.path().join("a");
    fs::create_dir(&a).unwrap();
    let store = DirStore::open_dir(&a).unwrap();
    fs::rename(&a, parent.path().join("b")).unwrap();
    let name = ImageName::Dmabuf { id: 1 };
    store
        .write_message(
            &name,
            &amdgpu_image::CriuDmabufNode {
                gem_handle: 1,
                ..Default::default()
            },
        )
        .unwrap();
    assert!(parent.path().join("b").join(name.to_string()).exists());

    let fd = fs::File::open(parent.path().join("b")).unwrap();
    let store = DirStore::from_dir_fd(fd.into()).unwrap();
    assert_eq!(store.list().unwrap(), vec![name]);

    // A clone made for another thread keeps working once the original
    // (whose descriptor named the directory) is closed.
    let clone = store.try_clone().unwrap();
    assert_eq!(clone.shown(), store.shown());
    drop(store);
    let elsewhere = std::thread::spawn(move || {
        let second = ImageName::Dmabuf { id: 8 };
        let msg = amdgpu_image::CriuDmabufNode {
            gem_handle: 8,
            ..Default::default()
        };
        clone.write_message(&second, &msg).unwrap();
        clone.list().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(elsewhere.len(), 2, "{elsewhere:?}");
    assert!(elsewhere.contains(&name));
}

#[test]
fn sample_set_verifies_clean_in_every_store_and_problems_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    let kfd = write_sample_set(&store, SampleSpec::default()).unwrap();
    let report = verify_set(&store, ReadLimits::default()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.files, 1 + 2 + 1 + 2 + 1);
    assert_eq!(report.checksums_verified, 6 + 2);
    assert!(kfd
        .bo_entries
        .iter()
        .filter(|b| b.has_contents())
        .all(|b| b.content_checksum.is_some()));

    let mem = MemStore::new();
    write_sample_set(&mem, SampleSpec::default()).unwrap();
    assert!(verify_set(&mem, ReadLimits::default()).unwrap().is_clean());
    for name in store.list().unwrap() {
        assert_eq!(
            fs::read(dir.path().join(name.to_string())).unwrap(),
            *mem.get(&name).unwrap(),
            "{name}"
        );
    }

    // Corrupt one BO byte, drop a pages file, add a stray one, dangle the dma-buf.
    let pages = ImageName::Pages {
        id: 1,
        gpu_id: 0x1111,
    };
    let mut bytes = (*mem.get(&pages).unwrap()).clone();
    bytes[8] ^= 0x80;
    mem.insert(pages, bytes);
    mem.remove(&ImageName::Pages {
        id: 1,
        gpu_id: 0x1000,
    });
    mem.insert(
        ImageName::Pages { id: 9, gpu_id: 1 },
        0u64.to_le_bytes().to_vec(),
    );
    mem.write_message(
        &ImageName::Dmabuf { id: 3 },
        &amdgpu_image::CriuDmabufNode {
            gem_handle: 77,
            ..Default::default()
        },
    )
    .unwrap();
    let report = verify_set(&mem, ReadLimits::default()).unwrap();
    let lines: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    // The missing KFD image could have held any handle: the dma-buf is
    // checked once it is gone.
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("amdgpu-pages-1-1111.img: bo 0 (entry 4): content checksum")),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&"amdgpu-pages-1-1000.img: missing (restore reads it)".to_string()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(
            &"amdgpu-kfd-9.img: missing (the process's bo list and gpus); referenced by 1 file: \
              amdgpu-pages-9-0001.img"
                .to_string()
        ),
        "{lines:#?}"
    );
    mem.remove(&ImageName::Pages { id: 9, gpu_id: 1 });
    let report = verify_set(&mem, ReadLimits::default()).unwrap();
    let lines: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("amdgpu-dmabuf_3.img: criu_dmabuf_node.gem_handle: 77")),
        "{lines:#?}"
    );
}

type StreamedFiles = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A fake image streamer: images are byte vectors, each open gets one end of
/// a socket pair (not seekable), a thread plays the streamer's side.
fn streamer(files: StreamedFiles) -> impl Fn(&str, StreamMode) -> io::Result<UnixStream> {
    move |name, mode| {
        let (ours, mut theirs) = UnixStream::pair()?;
        let files = Arc::clone(&files);
        let name = name.to_owned();
        match mode {
            StreamMode::Dump => {
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    theirs.read_to_end(&mut buf).unwrap();
                    files.lock().unwrap().push((name, buf));
                });
            }
            StreamMode::Restore => {
                let Some(bytes) = files
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|f| f.0 == name)
                    .map(|f| f.1.clone())
                else {
                    return Err(io::ErrorKind::NotFound.into());
                };
                std::thread::spawn(move || theirs.write_all(&bytes));
            }
        }
        Ok(ours)
    }
}

#[test]
fn stream_store_dumps_and_restores_sequentially() {
    let files = Arc::new(Mutex::new(Vec::new()));
    let store = StreamStore::new(streamer(Arc::clone(&files)));
    assert!(store.list().is_err());
    let kfd_name = ImageName::Kfd { id: 1 };
    let bos = bos();
    let mut w = store
        .create_pages(
            &ImageName::Pages {
                id: 1,
                gpu_id: 0x1000,
            },
            layout(&bos, false),
        )
        .unwrap();
    write_pieces(&mut w, &bos, 10_000);
    let (sink, written) = w.finish().unwrap();
    sink.commit().unwrap();
    assert_eq!(written.hole_bytes, 0, "a stream cannot have holes");

    let mem = MemStore::new();
    let mut kfd = write_sample_set(
        &mem,
        SampleSpec {
            gpus: 1,
            ..SampleSpec::default()
        },
    )
    .unwrap();
    kfd.bo_entries.retain(|b| !b.has_contents());
    kfd.num_of_bos = kfd.bo_entries.len() as u64;
    store.write_message(&kfd_name, &kfd).unwrap();

    // The streamer threads finish on EOF; wait until both images arrived.
    for _ in 0..500 {
        if files.lock().unwrap().len() == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let back: CriuKfd = store
        .read_message(&kfd_name, ReadLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(back, kfd);
    ValidatedKfd::new(1, back).unwrap();
    assert!(store
        .read_message::<CriuKfd>(&ImageName::Kfd { id: 2 }, ReadLimits::default())
        .unwrap()
        .is_none());

    let src = store
        .open(&ImageName::Pages {
            id: 1,
            gpu_id: 0x1000,
        })
        .unwrap()
        .unwrap();
    let mut r = PagesReader::new(src, "pages", layout(&bos, true)).unwrap();
    let mut buf = vec![0u8; P];
    let mut all = Vec::new();
    while let Some(c) = r.read_chunk(&mut buf).unwrap() {
        all.extend_from_slice(&buf[..c.len]);
    }
    assert_eq!(all, bos.concat());
}

#[test]
fn pipelined_verification_finds_the_same_problems() {
    let bos = bos();
    let file = expected_file(&bos);
    // Scratch sizes: sequential (1 byte), two tiny buffers, two large ones.
    for scratch_len in [1usize, 2 * 1000, 2 * P + 2, 1 << 20] {
        let mut scratch = vec![0u8; scratch_len];
        PagesReader::new(&file[..], "f.img", layout(&bos, true))
            .unwrap()
            .verify_all_pipelined(&mut scratch)
            .unwrap();
        for (bo, at) in [(0usize, 8 + 5), (2, file.len() - 1)] {
            let mut corrupt = file.clone();
            corrupt[at] ^= 0x40;
            let err = PagesReader::new(&corrupt[..], "f.img", layout(&bos, true))
                .unwrap()
                .verify_all_pipelined(&mut scratch)
                .unwrap_err();
            assert!(
                matches!(err, Error::ChecksumMismatch { bo: b, .. } if b == bo),
                "scratch {scratch_len}: {err}"
            );
        }
        let err = PagesReader::new(&file[..file.len() - 10], "f.img", layout(&bos, true))
            .unwrap()
            .verify_all_pipelined(&mut scratch)
            .unwrap_err();
        assert!(
            matches!(err, Error::Truncated { actual, .. } if actual == file.len() as u64 - 18),
            "scratch {scratch_len}: {err}"
        );
    }
}

#[test]
fn a_broken_image_does_not_make_its_files_strays() {
    let mem = MemStore::new();
    write_sample_set(&mem, SampleSpec::default()).unwrap();
    // The kfd image loses its last byte: one problem, not one per pages file
    // or a dangling dma-buf.
    let kfd = ImageName::Kfd { id: 1 };
    let mut bytes = (*mem.get(&kfd).unwrap()).clone();
    bytes.pop();
    mem.insert(kfd, bytes);
    let report = verify_set(&mem, ReadLimits::default()).unwrap();
    let lines: Vec<String> = report.problems.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].starts_with("amdgpu-kfd-1.img: truncated"),
        "{lines:#?}"
    );
}
