//! Guest memory the host has taken back, and how a timed phase is kept from
//! paying for it.
//!
//! This machine is a virtual machine whose balloon device does free page
//! reporting (`virtio_balloon` with `VIRTIO_BALLOON_F_REPORTING`, kernel
//! `page_reporting.page_reporting_order=11`): about two seconds after
//! blocks of 8 MiB of guest memory become free, the guest reports them and
//! the host discards their backing. The next guest touch of such a page
//! faults in the host (allocate, zero) while the guest thread that touched
//! it is running, so the guest counts that time as CPU time of the touching
//! thread, inside whatever instruction touched it. A cold file read fills
//! newly allocated page-cache folios (large folios, taken from exactly
//! those free high-order blocks), so its `copy_to_user` pays it: a plain
//! 8 MiB `read` of a 1 GiB file measured 0.09–0.17 CPU-s/GiB right after
//! the file's own pages were dropped and 1.5–2.4 CPU-s/GiB when the drop
//! was six seconds earlier (same file, same buffer). Writes into the page
//! cache, the simulator's BO memory and fresh staging memory pay it alike.
//! Which phase of a run pays it, and how much, depends on how long the
//! memory it allocates has been free: no property of the code measured,
//! and nothing a machine without a reporting balloon pays.
//!
//! [`Primer`] takes it out of every timed phase alike, raw and plugin: a
//! ballast file is read through the page cache and dropped right before the
//! phase, so the high-order free blocks the phase allocates from were just
//! backed again (untimed). Anonymous memory does not do it: freed 4 KiB
//! pages do not make the high-order blocks a file read takes its folios
//! from (measured: no change).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::transfer::{drop_cache, BenchError, Result};

fn step<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> BenchError {
    move |e| BenchError::Step {
        step: what,
        reason: e.to_string(),
    }
}

/// A ballast file that backs the guest's free memory again; see the module
/// docs. Removed on drop.
#[derive(Debug)]
pub struct Primer {
    path: PathBuf,
    len: u64,
}

/// Size of the ballast's reads and writes.
const IO: usize = 8 << 20;

impl Primer {
    /// Writes a ballast of `len` bytes (rounded up to 8 MiB) into `dir`,
    /// `fsync`ed and dropped from the page cache.
    pub fn new(dir: &Path, len: u64) -> Result<Primer> {
        let path = dir.join("primer-ballast.bin");
        let mut buf = vec![0u8; IO];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i as u8) | 1;
        }
        let mut file = File::create(&path).map_err(step("creating the ballast"))?;
        let mut written = 0u64;
        while written < len {
            file.write_all(&buf).map_err(step("writing the ballast"))?;
            written += IO as u64;
        }
        file.sync_all().map_err(step("fsync of the ballast"))?;
        drop(file);
        let primer = Primer { path, len: written };
        drop_cache(&primer.path)?;
        Ok(primer)
    }

    /// Reads the first `bytes` of the ballast (at most its length) through
    /// the page cache, then drops them: that much free memory is backed by
    /// the host again. Call right before the timed phase, untimed.
    pub fn prime(&self, bytes: u64) -> Result<()> {
        let mut file = File::open(&self.path).map_err(step("opening the ballast"))?;
        let mut buf = vec![0u8; IO];
        let want = bytes.min(self.len);
        let mut read = 0u64;
        while read < want {
            let n = file.read(&mut buf).map_err(step("reading the ballast"))?;
            if n == 0 {
                break;
            }
            read += n as u64;
        }
        drop(file);
        drop_cache(&self.path)
    }
}

impl Drop for Primer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
