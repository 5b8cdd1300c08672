//! Image figures: decoding and validating a large `criu_kfd`, and verifying
//! a pages file with checksums against a plain read of the same file.
//!
//! Used by the criterion bench `image` and by report binaries, which print
//! [`ImageFigures`] as `image_decode_ms=…` and `pages_verify_vs_raw=…`.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::time::{Duration, Instant};

use amdgpu_image::{
    content_checksum, decode_message, encode_message, flags, CriuKfd, DevIolink, Error, KfdBoEntry,
    KfdDeviceEntry, PagesBo, PagesLayout, PagesReader, PagesWriter, ValidatedKfd, PAGE_SIZE,
};

/// A `criu_kfd` with `bos` BO entries spread over 8 GPUs, checksums set.
pub fn kfd_with_bos(bos: usize) -> CriuKfd {
    let gpus = 8u32;
    let mut devices = vec![KfdDeviceEntry {
        node_id: 0,
        cpu_cores_count: 96,
        iolinks: (1..=gpus)
            .map(|n| DevIolink {
                r#type: 2,
                node_to_id: n,
            })
            .collect(),
        ..Default::default()
    }];
    for g in 0..gpus {
        devices.push(KfdDeviceEntry {
            node_id: g + 1,
            gpu_id: 0x1000 + g,
            simd_count: 304,
            drm_render_minor: 128 + g,
            hive_id: 0x1234_5678,
            vram_size: 192 << 30,
            iolinks: (0..=gpus)
                .filter(|&n| n != g + 1)
                .map(|n| DevIolink {
                    r#type: 11,
                    node_to_id: n,
                })
                .collect(),
            ..Default::default()
        });
    }
    let bo_entries: Vec<KfdBoEntry> = (0..bos as u64)
        .map(|i| {
            let vram = i % 3 != 0;
            KfdBoEntry {
                addr: 0x7f00_0000_0000 + i * (2 << 20),
                size: if vram { 2 << 20 } else { PAGE_SIZE },
                offset: 0x1_0000_0000 + i * PAGE_SIZE,
                alloc_flags: if vram {
                    flags::KFD_VRAM | 0x8000_0000
                } else {
                    flags::KFD_GTT
                },
                gpu_id: 0x1000 + (i % u64::from(gpus)) as u32,
                handle: if i % 5 == 0 {
                    i as u32
                } else {
                    flags::NO_HANDLE
                },
                content_checksum: Some(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                ..Default::default()
            }
        })
        .collect();
    let mut kfd = CriuKfd {
        pid: 1234,
        num_of_gpus: gpus,
        num_of_cpus: 1,
        device_entries: devices,
        num_of_bos: bo_entries.len() as u64,
        bo_entries,
        num_of_objects: 64,
        shared_mem_size: 4096,
        shared_mem_magic: 0xcafe,
        priv_data: vec![0x5a; 256 << 10],
        producer: None,
        format_version: None,
        kfd_major_version: None,
        kfd_minor_version: None,
        kfd_required_minor: None,
        message_checksum: None,
        ..Default::default()
    };
    kfd.mark_producer();
    kfd
}

/// Decodes (with required-field checks) and validates an encoded `criu_kfd`.
pub fn decode_and_validate(payload: &[u8]) -> Result<ValidatedKfd, Error> {
    let kfd: CriuKfd = decode_message("amdgpu-kfd-1.img", payload)?;
    ValidatedKfd::new(1, kfd)
}

/// Writes a pages file of `bos` BOs of `bo_size` bytes of non-zero data and
/// returns its layout with checksums.
pub fn write_pages_file(path: &Path, bos: usize, bo_size: usize) -> Result<PagesLayout, Error> {
    let mut data = vec![0u8; bo_size];
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8 | 1;
    }
    let sum = content_checksum(&data);
    let layout = PagesLayout::new(
        (0..bos)
            .map(|entry| PagesBo {
                entry,
                size: bo_size as u64,
                checksum: Some(sum),
            })
            .collect(),
    )
    .ok_or_else(|| Error::OutOfRange {
        file: path.display().to_string(),
        what: "too large".into(),
    })?;
    let file = File::create(path).map_err(|e| Error::Io {
        file: path.display().to_string(),
        op: "create",
        source: e,
    })?;
    let mut w = PagesWriter::new(file, "bench pages", layout.clone())?;
    for _ in 0..bos {
        w.write(&data)?;
    }
    w.finish()?;
    Ok(layout)
}

/// Reads a file to its end through `buf`, returning the bytes read.
pub fn raw_read(path: &Path, buf: &mut [u8]) -> io::Result<u64> {
    let mut f = File::open(path)?;
    let mut total = 0u64;
    loop {
        match f.read(buf)? {
            0 => return Ok(total),
            n => total += n as u64,
        }
    }
}

/// Reads a pages file through [`PagesReader::verify_all`], verifying every
/// checksum the way the reader chooses (pipelined when more than one CPU is
/// available, as `amdgpu-criu verify` and the plugin get it).
pub fn verify_pages(path: &Path, layout: &PagesLayout, buf: &mut [u8]) -> Result<u64, Error> {
    open_pages(path, layout)?.verify_all(buf)?;
    Ok(layout.total_len())
}

/// Like [`verify_pages`] with [`PagesReader::verify_all_serial`]: reads and
/// hashes on this thread.
pub fn verify_pages_serial(
    path: &Path,
    layout: &PagesLayout,
    buf: &mut [u8],
) -> Result<u64, Error> {
    open_pages(path, layout)?.verify_all_serial(buf)?;
    Ok(layout.total_len())
}

/// Like [`verify_pages`] with [`PagesReader::verify_all_pipelined`]: reads of
/// `buf.len() / 2` bytes, hashed on a second thread.
pub fn verify_pages_pipelined(
    path: &Path,
    layout: &PagesLayout,
    buf: &mut [u8],
) -> Result<u64, Error> {
    open_pages(path, layout)?.verify_all_pipelined(buf)?;
    Ok(layout.total_len())
}

fn open_pages(path: &Path, layout: &PagesLayout) -> Result<PagesReader<File>, Error> {
    let f = File::open(path).map_err(|e| Error::Io {
        file: path.display().to_string(),
        op: "open",
        source: e,
    })?;
    PagesReader::new(f, "bench pages", layout.clone())
}

/// Figures of one measurement run.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageFigures {
    /// Milliseconds to decode and validate a `criu_kfd` of 100,000 BOs (best of runs).
    pub image_decode_ms: f64,
    /// Encoded size of that image, bytes.
    pub image_bytes: usize,
    /// Pages verification throughput, GB/s (best of runs).
    pub pages_verify_gbps: f64,
    /// Plain read throughput of the same file, GB/s (best of runs).
    pub raw_read_gbps: f64,
    /// `pages_verify_gbps / raw_read_gbps` (the reader's own choice of path).
    pub pages_verify_vs_raw: f64,
    /// The same ratio with reading and hashing on one thread.
    pub pages_verify_serial_vs_raw: f64,
    /// The same ratio for the two-thread (read while hashing) verification.
    pub pages_verify_pipelined_vs_raw: f64,
    /// In-memory checksum throughput, GB/s.
    pub checksum_gbps: f64,
}

/// The shortest of `runs` runs of `f`, each checked: the first failure
/// ends the measurement (a run that stopped at an error is not a fast
/// one).
fn best_of<T, E>(runs: usize, mut f: impl FnMut() -> Result<T, E>) -> Result<(Duration, T), E> {
    let t = Instant::now();
    let mut out = f()?;
    let mut best = t.elapsed();
    for _ in 1..runs {
        let t = Instant::now();
        out = f()?;
        best = best.min(t.elapsed());
    }
    Ok((best, out))
}

/// Measures the image figures, using `dir` for a 256 MiB pages file
/// (removed again, also when a step fails).
pub fn measure(dir: &Path) -> Result<ImageFigures, Error> {
    let path = dir.join("amdgpu-pages-1-1000.img");
    let figures = measure_with(&path);
    let _ = std::fs::remove_file(&path);
    figures
}

fn measure_with(path: &Path) -> Result<ImageFigures, Error> {
    let payload = encode_message(&kfd_with_bos(100_000));
    let (decode, _) = best_of(5, || decode_and_validate(&payload))?;

    let layout = write_pages_file(path, 128, 2 << 20)?;
    // Reads of 1 MiB every way (the pipelined verification splits its
    // scratch in two halves: one is read while the other is hashed).
    let mut buf = vec![0u8; 1 << 20];
    let mut pipelined_buf = vec![0u8; 2 << 20];
    let bytes = layout.total_len() as f64;
    let io = |e| Error::Io {
        file: path.display().to_string(),
        op: "read",
        source: e,
    };
    // Warm the page cache, then interleave the two kinds of runs.
    raw_read(path, &mut buf).map_err(io)?;
    let mut raw = Duration::MAX;
    let mut verify = Duration::MAX;
    let mut pipelined = Duration::MAX;
    let mut serial = Duration::MAX;
    for _ in 0..5 {
        let (t, _) = best_of(1, || raw_read(path, &mut buf)).map_err(io)?;
        raw = raw.min(t);
        let (t, _) = best_of(1, || verify_pages(path, &layout, &mut buf))?;
        verify = verify.min(t);
        let (t, _) = best_of(1, || {
            verify_pages_pipelined(path, &layout, &mut pipelined_buf)
        })?;
        pipelined = pipelined.min(t);
        let (t, _) = best_of(1, || verify_pages_serial(path, &layout, &mut buf))?;
        serial = serial.min(t);
    }
    let (cs, _) = best_of(5, || Ok::<_, Error>(content_checksum(&buf)))?;

    let gbps = |d: Duration, n: f64| n / d.as_secs_f64() / 1e9;
    Ok(ImageFigures {
        image_decode_ms: decode.as_secs_f64() * 1e3,
        image_bytes: payload.len(),
        pages_verify_gbps: gbps(verify, bytes),
        raw_read_gbps: gbps(raw, bytes),
        pages_verify_vs_raw: raw.as_secs_f64() / verify.as_secs_f64(),
        pages_verify_serial_vs_raw: raw.as_secs_f64() / serial.as_secs_f64(),
        pages_verify_pipelined_vs_raw: raw.as_secs_f64() / pipelined.as_secs_f64(),
        checksum_gbps: gbps(cs, buf.len() as f64),
    })
}

impl std::fmt::Display for ImageFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "image_decode_ms={:.2}", self.image_decode_ms)?;
        writeln!(f, "image_bytes={}", self.image_bytes)?;
        writeln!(f, "pages_verify_gbps={:.2}", self.pages_verify_gbps)?;
        writeln!(f, "raw_read_gbps={:.2}", self.raw_read_gbps)?;
        writeln!(f, "pages_verify_vs_raw={:.3}", self.pages_verify_vs_raw)?;
        writeln!(
            f,
            "pages_verify_serial_vs_raw={:.3}",
            self.pages_verify_serial_vs_raw
        )?;
        writeln!(
            f,
            "pages_verify_pipelined_vs_raw={:.3}",
            self.pages_verify_pipelined_vs_raw
        )?;
        write!(f, "checksum_gbps={:.2}", self.checksum_gbps)
    }
}
