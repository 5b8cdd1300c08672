//! The file side of a restore alone: a pages file written through the
//! image store as a dump writes it, read back cold as the plugin's restore
//! reads it (checksums verified), against a plain read of the same file.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use amdgpu_image::{DirStore, ImageName, ImageStore};

use super::disk::drop_cache;
use super::error::{step, BenchError, Result};
use super::fill::{fill_chunk, Fill};
use super::{KFD_ID, RAW_IO};

/// The file side of a restore alone, against a raw read of the same file.
#[derive(Debug, Clone, Copy)]
pub struct RestoreReadFigures {
    /// Cold read of a pages file as restore reads it, bytes per second.
    pub pages_bps: f64,
    /// Cold plain read (8 MiB `read`s) of the same file, bytes per second.
    pub raw_bps: f64,
}

/// Writes a pages file of `bytes` dense bytes (BOs of `bo_bytes`, with
/// checksums) through a [`DirStore`] under `dir`, as a dump does, then reads
/// it cold the way the plugin's restore does (`ImageStore::open_pages`,
/// `read_chunk` into two alternating 32 MiB buffers, every checksum
/// verified) and cold with plain 8 MiB `read`s; removes it. No SDMA: this
/// is the restore's CPU and I/O cost outside the simulated copy engine.
pub fn restore_read(dir: &Path, bytes: u64, bo_bytes: u64) -> Result<RestoreReadFigures> {
    use amdgpu_image::{ImageWriter, PagesBo, PagesLayout};
    let images = tempfile::Builder::new()
        .prefix("restore-read-")
        .tempdir_in(dir)
        .map_err(step("creating an images directory"))?;
    let store = DirStore::open_dir(images.path()).map_err(step("opening the images"))?;
    let name = ImageName::Pages {
        id: KFD_ID,
        gpu_id: 1,
    };
    let sizes: Vec<u64> = (0..bytes.div_ceil(bo_bytes))
        .map(|n| (bytes - n * bo_bytes).min(bo_bytes))
        .collect();
    let sized = PagesLayout::from_sizes(sizes.iter().copied()).ok_or_else(|| BenchError::Step {
        step: "pages layout",
        reason: "sizes overflow".into(),
    })?;
    let mut writer = store
        .create_pages(&name, sized)
        .map_err(step("creating a pages file"))?;
    let mut chunk = vec![0u8; RAW_IO];
    for (n, &size) in sizes.iter().enumerate() {
        let mut offset = 0u64;
        while offset < size {
            let len = (size - offset).min(RAW_IO as u64) as usize;
            fill_chunk(
                &mut chunk[..len],
                (n as u64) << 32 | offset,
                offset,
                Fill::Dense,
            );
            writer
                .write(&chunk[..len])
                .map_err(step("writing a pages file"))?;
            offset += len as u64;
        }
    }
    let (sink, written) = writer.finish().map_err(step("finishing a pages file"))?;
    sink.commit().map_err(step("committing a pages file"))?;
    // The reader's layout carries the checksums the writer recorded.
    let layout = PagesLayout::new(
        sizes
            .iter()
            .zip(&written.checksums)
            .map(|(&size, &(entry, sum))| PagesBo {
                entry,
                size,
                checksum: Some(sum),
            })
            .collect(),
    )
    .ok_or_else(|| BenchError::Step {
        step: "pages layout",
        reason: "sizes overflow".into(),
    })?;
    let path = images.path().join(name.to_string());

    // Touched before the timing, like the raw read's buffer.
    let mut ring = [vec![1u8; 32 << 20], vec![1u8; 32 << 20]];
    drop_cache(&path)?;
    let start = Instant::now();
    let mut reader = store
        .open_pages(&name, layout)
        .map_err(step("opening the pages file"))?
        .ok_or_else(|| BenchError::Step {
            step: "opening the pages file",
            reason: "missing".into(),
        })?;
    let mut turn = 0;
    while reader
        .read_chunk(&mut ring[turn])
        .map_err(step("reading the pages file"))?
        .is_some()
    {
        turn ^= 1;
    }
    reader.finish().map_err(step("reading the pages file"))?;
    let pages = start.elapsed();

    drop_cache(&path)?;
    let start = Instant::now();
    let mut file = File::open(&path).map_err(step("opening the pages file"))?;
    while file
        .read(&mut chunk)
        .map_err(step("reading the pages file"))?
        > 0
    {}
    let raw = start.elapsed();
    Ok(RestoreReadFigures {
        pages_bps: bytes as f64 / pages.as_secs_f64(),
        raw_bps: bytes as f64 / raw.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn restore_read_reads_back_what_the_store_wrote() {
        // The read verifies every BO's checksum and the file's end, so a
        // reader that delivered other bytes than were written fails here.
        let dir = tempfile::tempdir().unwrap();
        let figures = restore_read(dir.path(), (16 << 20) + 4096, 4 << 20).unwrap();
        assert!(figures.pages_bps > 0.0 && figures.raw_bps > 0.0);
        // Nothing is left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
