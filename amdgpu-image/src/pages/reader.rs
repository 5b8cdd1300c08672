//! [`PagesReader`]: streams a pages file from any `Read` in chunks that never
//! straddle two BOs, verifying checksums, optionally skipping holes.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::sync::{mpsc, OnceLock};

use super::holes::{fd_extent, fd_skip, Extent, Holes};
use super::layout::PagesLayout;
use crate::chunks::{BoHasher, Digest};
use crate::framing::{expect_end, read_header, HEADER_LEN};
use crate::Error;

/// A piece of one BO handed out by [`PagesReader::read_chunk`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagesChunk {
    /// Index of the BO in the layout.
    pub bo: usize,
    /// Index of the BO in its message's `bo_entries`.
    pub entry: usize,
    /// Offset of the piece within the BO.
    pub offset: u64,
    /// Bytes placed at the start of the caller's buffer.
    pub len: usize,
    /// Whether this piece completes the BO (its checksum, if any, was verified).
    pub last: bool,
}

/// Whether more than one CPU is available (the answer is kept).
fn parallel() -> bool {
    static PARALLEL: OnceLock<bool> = OnceLock::new();
    *PARALLEL.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Scratch below this size is verified on one thread (hand-offs would cost
/// more than the overlap gains).
const PIPELINE_MIN_SCRATCH: usize = 256 << 10;

/// Streams a pages file from any `Read`, verifying checksums; see the module docs.
#[derive(Debug)]
pub struct PagesReader<R: Read> {
    src: R,
    file: String,
    layout: PagesLayout,
    bo: usize,
    bo_read: u64,
    hasher: BoHasher,
    /// Chunks of the current BO whose digest was compared already.
    chunks_checked: usize,
    verify: bool,
    ended: bool,
    /// File offset of the next byte of `src` (header included).
    pos: u64,
    holes: Option<Holes<R>>,
    hole_bytes: u64,
}

impl<R: Read + AsFd> PagesReader<R> {
    /// The same reader, in the same position, over `wrap(source)` (a
    /// caller's enum of sources, say); hole skipping, if on, carries over.
    pub fn map_source<T: Read + AsFd>(self, wrap: impl FnOnce(R) -> T) -> PagesReader<T> {
        PagesReader {
            src: wrap(self.src),
            file: self.file,
            layout: self.layout,
            bo: self.bo,
            bo_read: self.bo_read,
            hasher: self.hasher,
            chunks_checked: self.chunks_checked,
            verify: self.verify,
            ended: self.ended,
            pos: self.pos,
            holes: self.holes.map(|h| Holes {
                probe: fd_extent::<T>,
                skip: fd_skip::<T>,
                current: h.current,
            }),
            hole_bytes: self.hole_bytes,
        }
    }

    /// Skips the file's holes instead of reading them (module docs). Where
    /// the file system cannot tell holes (or a probe fails: a pipe, for
    /// one), the reader reads as before.
    pub fn skipping_holes(mut self) -> Self {
        self.holes = Some(Holes {
            probe: fd_extent::<R>,
            skip: fd_skip::<R>,
            current: Extent {
                hole: false,
                end: 0,
            },
        });
        self
    }
}

impl<R: Read> PagesReader<R> {
    /// Reads the length header and checks it against the layout's total.
    pub fn new(mut src: R, file: &str, layout: PagesLayout) -> Result<Self, Error> {
        let len = read_header(&mut src, file)?;
        if len != layout.total_len() {
            return Err(Error::LengthMismatch {
                file: file.to_owned(),
                what: "length header against the sizes of the bos it holds",
                expected: layout.total_len(),
                actual: len,
            });
        }
        Ok(Self {
            src,
            file: file.to_owned(),
            bo: 0,
            bo_read: 0,
            hasher: BoHasher::new(layout.algo()),
            chunks_checked: 0,
            layout,
            verify: true,
            ended: false,
            pos: HEADER_LEN as u64,
            holes: None,
            hole_bytes: 0,
        })
    }

    /// Payload bytes delivered so far from holes, without reading them.
    pub fn hole_bytes(&self) -> u64 {
        self.hole_bytes
    }

    /// Fills `dst` from the source, holes with zeros without reading them;
    /// returns the bytes filled (fewer only at the end of the input) and how
    /// many of them came from holes.
    fn fill(&mut self, dst: &mut [u8]) -> io::Result<(usize, usize)> {
        let Some(holes) = self.holes.as_mut() else {
            let got = read_full(&mut self.src, dst)?;
            self.pos += got as u64;
            return Ok((got, 0));
        };
        let (mut got, mut zeros) = (0usize, 0usize);
        while got < dst.len() {
            if self.pos >= holes.current.end {
                match (holes.probe)(&mut self.src, self.pos) {
                    Ok(extent) if extent.end > self.pos => holes.current = extent,
                    // The file system cannot say (or says nonsense): read.
                    _ => {
                        self.holes = None;
                        let n = read_full(&mut self.src, &mut dst[got..])?;
                        self.pos += n as u64;
                        return Ok((got + n, zeros));
                    }
                }
            }
            let n = (holes.current.end - self.pos).min((dst.len() - got) as u64) as usize;
            let piece = &mut dst[got..got + n];
            if holes.current.hole {
                (holes.skip)(&mut self.src, n as u64)?;
                piece.fill(0);
                zeros += n;
                self.hole_bytes += n as u64;
            } else {
                let r = read_full(&mut self.src, piece)?;
                if r < n {
                    self.pos += r as u64;
                    return Ok((got + r, zeros));
                }
            }
            got += n;
            self.pos += n as u64;
        }
        Ok((got, zeros))
    }

    /// Turns checksum verification off (it is on by default when the layout has checksums).
    pub fn without_verification(mut self) -> Self {
        self.verify = false;
        self
    }

    /// The layout being read.
    pub fn layout(&self) -> &PagesLayout {
        &self.layout
    }

    /// Reads the next piece of the current BO into `buf` (at most `buf.len()`
    /// bytes, never past the BO's end). Returns `None` once every BO was read
    /// and the input ends right after the payload.
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> Result<Option<PagesChunk>, Error> {
        Ok(self.next_piece(buf, true)?.map(|(chunk, _)| chunk))
    }

    /// Reads the next piece; hashes and verifies it when `hash` is set.
    /// Also says whether the whole piece came from holes (is zero).
    fn next_piece(
        &mut self,
        buf: &mut [u8],
        hash: bool,
    ) -> Result<Option<(PagesChunk, bool)>, Error> {
        let Some(bo) = self.layout.bos().get(self.bo).copied() else {
            if !self.ended {
                expect_end(&mut self.src, &self.file, self.layout.total_len())?;
                self.ended = true;
            }
            return Ok(None);
        };
        let want = (bo.size - self.bo_read).min(buf.len() as u64) as usize;
        if want == 0 && bo.size > 0 {
            return Err(Error::OutOfRange {
                file: self.file.clone(),
                what: "read_chunk with an empty buffer".into(),
            });
        }
        let dst = &mut buf[..want];
        let (got, zeros) = self
            .fill(dst)
            .map_err(|e| Error::io(&self.file, "read pages", e))?;
        let zero = want > 0 && zeros == want;
        if got < want {
            let offset = self.layout.offset_of(self.bo).unwrap_or(0) + self.bo_read;
            return Err(Error::Truncated {
                file: self.file.clone(),
                expected: self.layout.total_len(),
                actual: offset + got as u64,
            });
        }
        let checks = hash && self.verify && self.layout.verifies(self.bo);
        if checks {
            if zero {
                self.hasher.update_zeros(want as u64);
            } else {
                self.hasher.update(&dst[..want]);
            }
            self.check_chunks(false)?;
        }
        let chunk = PagesChunk {
            bo: self.bo,
            entry: bo.entry,
            offset: self.bo_read,
            len: want,
            last: false,
        };
        self.bo_read += want as u64;
        if self.bo_read < bo.size {
            return Ok(Some((chunk, zero)));
        }
        let hasher = std::mem::replace(&mut self.hasher, BoHasher::new(self.layout.algo()));
        if checks {
            let (actual, digests) = hasher.finish();
            self.chunks_checked = self.chunks_checked.min(digests.len());
            self.compare_digests(&digests)?;
            if let Some(expected) = bo.checksum.filter(|&e| e != actual) {
                return Err(Error::ChecksumMismatch {
                    file: self.file.clone(),
                    bo: self.bo,
                    entry: bo.entry,
                    expected,
                    actual,
                });
            }
        }
        self.chunks_checked = 0;
        self.bo += 1;
        self.bo_read = 0;
        Ok(Some((
            PagesChunk {
                last: true,
                ..chunk
            },
            zero,
        )))
    }

    /// Compares the chunk digests completed so far with the recorded ones.
    fn check_chunks(&mut self, _last: bool) -> Result<(), Error> {
        if let BoHasher::V2(h) = &self.hasher {
            if h.digests().len() > self.chunks_checked {
                let digests = h.digests().to_vec();
                return self.compare_digests(&digests);
            }
        }
        Ok(())
    }

    fn compare_digests(&mut self, digests: &[Digest]) -> Result<(), Error> {
        let Some(expected) = self.layout.expected_digests(self.bo) else {
            return Ok(());
        };
        let entry = self.layout.bos().get(self.bo).map_or(0, |b| b.entry);
        for (k, actual) in digests.iter().enumerate().skip(self.chunks_checked) {
            let want = expected.get(k).copied();
            if want != Some(*actual) {
                return Err(Error::ChunkMismatch {
                    file: self.file.clone(),
                    bo: self.bo,
                    entry,
                    chunk: k,
                    expected: want.unwrap_or(0),
                    actual: *actual,
                });
            }
        }
        self.chunks_checked = digests.len();
        Ok(())
    }

    /// Ends reading: every BO must have been read in full (so every checksum
    /// was verified) and the input must end right after the payload.
    pub fn finish(mut self) -> Result<(), Error> {
        if let Some(bo) = self.layout.bos().get(self.bo) {
            return Err(Error::OutOfRange {
                file: self.file.clone(),
                what: format!(
                    "finished before the end of bo {} (entry {}): {} of {} bytes read",
                    self.bo, bo.entry, self.bo_read, bo.size
                ),
            });
        }
        while self.next_piece(&mut [], true)?.is_some() {}
        Ok(())
    }

    /// Reads the whole file through `scratch`, verifying lengths and
    /// checksums: with [`verify_all_pipelined`](Self::verify_all_pipelined)
    /// when more than one CPU is available and `scratch` holds at least
    /// 256 KiB, else with [`verify_all_serial`](Self::verify_all_serial).
    pub fn verify_all(self, scratch: &mut [u8]) -> Result<(), Error> {
        if parallel() && scratch.len() >= PIPELINE_MIN_SCRATCH {
            self.verify_all_pipelined(scratch)
        } else {
            self.verify_all_serial(scratch)
        }
    }

    /// Reads the whole file through `scratch` on this thread, verifying
    /// lengths and checksums.
    pub fn verify_all_serial(mut self, scratch: &mut [u8]) -> Result<(), Error> {
        while self.read_chunk(scratch)?.is_some() {}
        Ok(())
    }

    /// Like [`verify_all_serial`](Self::verify_all_serial), but `scratch` is
    /// split into two buffers: this thread reads into one while a second
    /// (scoped) thread hashes the other, so verification runs at the speed
    /// of the slower of the two instead of their sum. Worth it when a core
    /// is idle; on one CPU the hand-offs make it slower.
    pub fn verify_all_pipelined(mut self, scratch: &mut [u8]) -> Result<(), Error> {
        let hashing = self.verify && (0..self.layout.bos().len()).any(|i| self.layout.verifies(i));
        if !hashing || scratch.len() < 2 {
            return self.verify_all_serial(scratch);
        }
        let half = scratch.len() / 2;
        let (a, b) = scratch.split_at_mut(half);
        let checked = self.layout.clone();
        let file = self.file.clone();
        std::thread::scope(|scope| {
            let (to_hasher, pieces) = mpsc::sync_channel::<(&mut [u8], PagesChunk, bool)>(1);
            let (to_reader, free) = mpsc::sync_channel::<&mut [u8]>(2);
            // Both buffers start free; the channel has room for both.
            let _ = to_reader.send(a);
            let _ = to_reader.send(b);
            let hasher = scope.spawn(move || -> Result<(), Error> {
                let algo = checked.algo();
                let mut h = BoHasher::new(algo);
                for (buf, chunk, zero) in pieces {
                    if !checked.verifies(chunk.bo) {
                        let _ = to_reader.send(buf);
                        continue;
                    }
                    if zero {
                        h.update_zeros(chunk.len as u64);
                    } else {
                        h.update(&buf[..chunk.len]);
                    }
                    if chunk.last {
                        let (actual, digests) =
                            std::mem::replace(&mut h, BoHasher::new(algo)).finish();
                        if let Some(expected) = checked.expected_digests(chunk.bo) {
                            for (k, d) in digests.iter().enumerate() {
                                if expected.get(k) != Some(d) {
                                    return Err(Error::ChunkMismatch {
                                        file,
                                        bo: chunk.bo,
                                        entry: chunk.entry,
                                        chunk: k,
                                        expected: expected.get(k).copied().unwrap_or(0),
                                        actual: *d,
                                    });
                                }
                            }
                        }
                        let recorded = checked.bos().get(chunk.bo).and_then(|b| b.checksum);
                        if let Some(expected) = recorded.filter(|&e| e != actual) {
                            return Err(Error::ChecksumMismatch {
                                file,
                                bo: chunk.bo,
                                entry: chunk.entry,
                                expected,
                                actual,
                            });
                        }
                    }
                    // The reader may have stopped on an error; then nobody waits for the buffer.
                    let _ = to_reader.send(buf);
                }
                Ok(())
            });
            let read_result = loop {
                // The hasher returned early (a mismatch) when no buffer comes back.
                let Ok(buf) = free.recv() else { break Ok(()) };
                match self.next_piece(buf, false) {
                    Ok(Some((chunk, zero))) => {
                        if to_hasher.send((buf, chunk, zero)).is_err() {
                            break Ok(());
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            drop(to_hasher);
            let hash_result = hasher
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            // A checksum mismatch comes before any later read error.
            hash_result.and(read_result)
        })
    }
}

/// Reads until `dst` is full or the input ends; returns the bytes read.
fn read_full<R: Read>(src: &mut R, dst: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < dst.len() {
        match src.read(&mut dst[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
