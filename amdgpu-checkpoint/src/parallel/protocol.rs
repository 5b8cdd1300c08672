//! The wire format of parallel restore: what a restored task sends CRIU's
//! main process over one connection, and in which order.
//!
//! One connection carries one exchange: a 32-byte header (magic `AGPR`,
//! version, file id, counts), the GPU array, the BO entry array, then the
//! BOs' dma-bufs in batches ([`super::fdpass`]); or just the all-zero
//! header, which tells the worker to quit. Both ends run on one machine, so
//! integers are in native byte order.
//!
//! Decoding never trusts the peer: every count is bounded before it sizes
//! an allocation, every index and GPU reference is checked, and a bad
//! command is an error, never a panic. This module never copies BO contents
//! and never decides whether a connection may be served.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use amdgpu_image::pages::PagesBo;
use amdgpu_image::{PagesLayout, ValidatedKfd};
use kfd::RestoredBo;

use super::fdpass::{recv_fds, send_fds};
use super::SocketName;
use crate::error::Error;
use crate::transfer::GpuTarget;

/// The most GPUs one command names.
pub const MAX_GPUS: usize = 256;
/// The most BOs one command names.
pub const MAX_ENTRIES: usize = 1 << 20;
/// How long the worker waits for the rest of a command once connected.
const MAGIC: u32 = u32::from_le_bytes(*b"AGPR");
const VERSION: u32 = 1;
const HEADER_LEN: usize = 32;
const GPU_LEN: usize = 8;
const ENTRY_LEN: usize = 40;
const FLAG_CHECKSUM: u32 = 1;

/// One GPU of a command: which pages file, on which local render node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuRoute {
    /// The checkpointed (user) gpu_id: names the pages file.
    pub user_gpu_id: u32,
    /// The local render minor the worker copies through.
    pub render_minor: u32,
}

/// One BO of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The user gpu_id of the BO's pages file.
    pub gpu_id: u32,
    /// Index of the BO's dma-buf among the command's fds.
    pub fd_index: u32,
    /// The BO's index in the KFD image (names it in errors).
    pub bo_index: u32,
    /// Where the BO's bytes start in that GPU's pages file payload.
    pub offset: u64,
    /// The BO's size.
    pub size: u64,
    /// The checksum the KFD image records for the BO.
    pub checksum: Option<u64>,
}

/// What a restored task asks the main process to copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// CRIU's id of the KFD file (names the pages files).
    pub id: u32,
    /// The GPUs, in image order.
    pub gpus: Vec<GpuRoute>,
    /// The BOs with contents, grouped by GPU in `gpus` order, each GPU's in
    /// pages-file order.
    pub entries: Vec<Entry>,
    /// How many fds follow.
    pub fd_count: u32,
    /// The image's chunk size when its checksums are of format version 2
    /// (derived from chunk digests), 0 for version-1 checksums. Sent in
    /// the header's last 8 bytes (zero in commands of older plugins).
    pub chunk_size: u64,
}

/// Why a parallel restore command is malformed or does not fit what came
/// with it ([`Error::ParallelCommand`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// Fewer bytes than a header.
    #[error("{len} bytes, shorter than a header")]
    Short {
        /// Bytes received.
        len: usize,
    },
    /// A header without the protocol's magic.
    #[error("bad magic {magic:#x}")]
    BadMagic {
        /// The magic received.
        magic: u32,
    },
    /// A header of another protocol version.
    #[error("version {version}, expected {VERSION}")]
    Version {
        /// The version received.
        version: u32,
    },
    /// A chunk size no image records.
    #[error("{0}")]
    ChunkSize(amdgpu_image::ChunkFieldError),
    /// More GPUs than a command carries.
    #[error("{gpus} GPUs (at most {MAX_GPUS})")]
    TooManyGpus {
        /// GPUs announced.
        gpus: usize,
    },
    /// More BOs or fds than a command carries.
    #[error("{entries} BOs and {fds} fds (at most {MAX_ENTRIES})")]
    TooManyEntries {
        /// BOs announced.
        entries: usize,
        /// Fds announced.
        fds: u32,
    },
    /// A body of another length than its header announces.
    #[error("{len} body bytes, the header announces {want}")]
    BodyLength {
        /// Body bytes received.
        len: usize,
        /// Body bytes announced.
        want: usize,
    },
    /// A GPU listed twice.
    #[error("GPU {gpu_id:#x} listed twice")]
    GpuTwice {
        /// The user gpu_id.
        gpu_id: u32,
    },
    /// A BO on a GPU the command does not list.
    #[error("BO {bo} is on GPU {gpu_id:#x}, which the command does not list")]
    UnlistedGpu {
        /// The bo entry index.
        bo: u32,
        /// The user gpu_id.
        gpu_id: u32,
    },
    /// A BO whose fd index is beyond the fds of the command.
    #[error("BO {bo} uses fd {fd} of {count}")]
    FdIndex {
        /// The bo entry index.
        bo: u32,
        /// Its fd index.
        fd: u32,
        /// The command's fd count.
        count: u32,
    },
    /// A BO listed twice.
    #[error("BO {bo} listed twice")]
    BoTwice {
        /// The bo entry index.
        bo: u32,
    },
    /// BO sizes of one GPU whose sum overflows.
    #[error("the BO sizes of GPU {gpu_id:#x} overflow 64 bits")]
    SizeOverflow {
        /// The user gpu_id.
        gpu_id: u32,
    },
    /// A BO at another offset than its pages file holds it at.
    #[error(
        "BO {bo} of GPU {gpu_id:#x} at offset {offset:#x} of its pages file, which holds it at \
         {expected:#x}"
    )]
    Offset {
        /// The bo entry index.
        bo: u32,
        /// The user gpu_id.
        gpu_id: u32,
        /// The offset the command gives.
        offset: u64,
        /// The offset the pages file holds it at.
        expected: u64,
    },
    /// Another number of fds than the command announces.
    #[error("{received} fds received, {announced} announced")]
    FdCount {
        /// Fds received.
        received: usize,
        /// Fds announced.
        announced: u32,
    },
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_ne_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(b)
}

/// What a header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Header {
    Quit,
    Command {
        id: u32,
        gpus: usize,
        entries: usize,
        fds: u32,
        chunk_size: u64,
    },
}

fn decode_header(bytes: &[u8; HEADER_LEN]) -> Result<Header, Error> {
    if bytes.iter().all(|&b| b == 0) {
        return Ok(Header::Quit);
    }
    let (magic, version) = (u32_at(bytes, 0), u32_at(bytes, 4));
    if magic != MAGIC {
        return Err(CommandError::BadMagic { magic }.into());
    }
    if version != VERSION {
        return Err(CommandError::Version { version }.into());
    }
    let id = u32_at(bytes, 8);
    let gpus = u32_at(bytes, 12) as usize;
    let entries = u32_at(bytes, 16) as usize;
    let fds = u32_at(bytes, 20);
    let chunk_size = u64_at(bytes, 24);
    if chunk_size != 0 {
        amdgpu_image::chunks::check_chunk_size(chunk_size).map_err(CommandError::ChunkSize)?;
    }
    if gpus > MAX_GPUS {
        return Err(CommandError::TooManyGpus { gpus }.into());
    }
    if entries > MAX_ENTRIES || fds as usize > MAX_ENTRIES {
        return Err(CommandError::TooManyEntries { entries, fds }.into());
    }
    Ok(Header::Command {
        id,
        gpus,
        entries,
        fds,
        chunk_size,
    })
}

impl Command {
    /// The header and the two arrays, as sent (native byte order: both ends
    /// run on the same machine).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            HEADER_LEN + self.gpus.len() * GPU_LEN + self.entries.len() * ENTRY_LEN,
        );
        for v in [
            MAGIC,
            VERSION,
            self.id,
            self.gpus.len() as u32,
            self.entries.len() as u32,
            self.fd_count,
        ] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        out.extend_from_slice(&self.chunk_size.to_ne_bytes());
        for gpu in &self.gpus {
            out.extend_from_slice(&gpu.user_gpu_id.to_ne_bytes());
            out.extend_from_slice(&gpu.render_minor.to_ne_bytes());
        }
        for e in &self.entries {
            let flags = if e.checksum.is_some() {
                FLAG_CHECKSUM
            } else {
                0
            };
            for v in [e.gpu_id, e.fd_index, e.bo_index, flags] {
                out.extend_from_slice(&v.to_ne_bytes());
            }
            for v in [e.offset, e.size, e.checksum.unwrap_or(0)] {
                out.extend_from_slice(&v.to_ne_bytes());
            }
        }
        out
    }

    /// Decodes `bytes` (header and arrays); `Ok(None)` for the quit
    /// command. Every count, index and GPU reference is checked.
    pub fn decode(bytes: &[u8]) -> Result<Option<Command>, Error> {
        let header: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(CommandError::Short { len: bytes.len() })?;
        let Header::Command {
            id,
            gpus,
            entries,
            fds,
            chunk_size,
        } = decode_header(header)?
        else {
            return Ok(None);
        };
        let body = &bytes[HEADER_LEN..];
        let want = gpus * GPU_LEN + entries * ENTRY_LEN;
        if body.len() != want {
            return Err(CommandError::BodyLength {
                len: body.len(),
                want,
            }
            .into());
        }
        Command::decode_body(id, gpus, entries, fds, chunk_size, body).map(Some)
    }

    fn decode_body(
        id: u32,
        gpus: usize,
        entries: usize,
        fd_count: u32,
        chunk_size: u64,
        body: &[u8],
    ) -> Result<Command, Error> {
        let routes: Vec<GpuRoute> = (0..gpus)
            .map(|i| GpuRoute {
                user_gpu_id: u32_at(body, i * GPU_LEN),
                render_minor: u32_at(body, i * GPU_LEN + 4),
            })
            .collect();
        let base = gpus * GPU_LEN;
        let list: Vec<Entry> = (0..entries)
            .map(|i| {
                let at = base + i * ENTRY_LEN;
                let flags = u32_at(body, at + 12);
                Entry {
                    gpu_id: u32_at(body, at),
                    fd_index: u32_at(body, at + 4),
                    bo_index: u32_at(body, at + 8),
                    offset: u64_at(body, at + 16),
                    size: u64_at(body, at + 24),
                    checksum: (flags & FLAG_CHECKSUM != 0).then(|| u64_at(body, at + 32)),
                }
            })
            .collect();
        let command = Command {
            id,
            gpus: routes,
            entries: list,
            fd_count,
            chunk_size,
        };
        command.validate()?;
        Ok(command)
    }

    /// Checks the references inside the command: unique GPUs, entries on
    /// listed GPUs, fd indexes below the fd count, unique BO indexes.
    pub fn validate(&self) -> Result<(), Error> {
        let mut gpus = BTreeSet::new();
        for gpu in &self.gpus {
            if !gpus.insert(gpu.user_gpu_id) {
                return Err(CommandError::GpuTwice {
                    gpu_id: gpu.user_gpu_id,
                }
                .into());
            }
        }
        let mut bos = BTreeSet::new();
        for e in &self.entries {
            if !gpus.contains(&e.gpu_id) {
                return Err(CommandError::UnlistedGpu {
                    bo: e.bo_index,
                    gpu_id: e.gpu_id,
                }
                .into());
            }
            if e.fd_index >= self.fd_count {
                return Err(CommandError::FdIndex {
                    bo: e.bo_index,
                    fd: e.fd_index,
                    count: self.fd_count,
                }
                .into());
            }
            if !bos.insert(e.bo_index) {
                return Err(CommandError::BoTwice { bo: e.bo_index }.into());
            }
        }
        Ok(())
    }

    /// The pages layout of one GPU, after checking that every entry starts
    /// where the pages file holds it: offsets restart at 0 per GPU and
    /// follow each other without gaps.
    pub(super) fn layout_of(&self, gpu: u32) -> Result<(PagesLayout, BTreeMap<usize, u32>), Error> {
        let mine: Vec<&Entry> = self.entries.iter().filter(|e| e.gpu_id == gpu).collect();
        let layout = PagesLayout::new(
            mine.iter()
                .map(|e| PagesBo {
                    entry: e.bo_index as usize,
                    size: e.size,
                    checksum: e.checksum,
                })
                .collect(),
        )
        .ok_or(CommandError::SizeOverflow { gpu_id: gpu })?;
        let algo = if self.chunk_size == 0 {
            amdgpu_image::ChecksumAlgo::V1
        } else {
            amdgpu_image::ChecksumAlgo::V2 {
                chunk_size: self.chunk_size,
            }
        };
        let plain = layout.clone();
        let layout = layout.with_chunks(algo, Vec::new()).unwrap_or(plain);
        for (k, e) in mine.iter().enumerate() {
            let expected = layout.offset_of(k);
            if expected != Some(e.offset) {
                return Err(CommandError::Offset {
                    bo: e.bo_index,
                    gpu_id: gpu,
                    offset: e.offset,
                    expected: expected.unwrap_or(0),
                }
                .into());
            }
        }
        let fds = mine
            .iter()
            .map(|e| (e.bo_index as usize, e.fd_index))
            .collect();
        Ok((layout, fds))
    }
}

/// The command for the BOs of one restored KFD file: per GPU its pages
/// layout (offsets from 0 in that GPU's file), with the dma-bufs in entry
/// order.
pub fn build_command<'a>(
    image: &ValidatedKfd,
    gpus: &[GpuTarget],
    restored: &'a [RestoredBo],
) -> Result<(Command, Vec<BorrowedFd<'a>>), Error> {
    let mut command = Command {
        id: image.id(),
        gpus: Vec::with_capacity(gpus.len()),
        entries: Vec::new(),
        fd_count: 0,
        chunk_size: match image.checksum_algo() {
            amdgpu_image::ChecksumAlgo::V2 { chunk_size } => chunk_size,
            amdgpu_image::ChecksumAlgo::V1 => 0,
        },
    };
    let mut fds = Vec::new();
    for gpu in gpus {
        command.gpus.push(GpuRoute {
            user_gpu_id: gpu.user_gpu_id,
            render_minor: gpu.render_minor,
        });
        let layout = image.pages_layout(gpu.user_gpu_id);
        for (k, bo) in layout.bos().iter().enumerate() {
            let dmabuf = restored
                .get(bo.entry)
                .and_then(|r| r.dmabuf.as_ref())
                .ok_or(Error::BoWithoutDmabuf {
                    gpu_id: gpu.user_gpu_id,
                    entry: bo.entry,
                    missing: "RESTORE returned no dma-buf",
                })?;
            let (Ok(bo_index), Ok(fd_index), Some(offset)) = (
                u32::try_from(bo.entry),
                u32::try_from(fds.len()),
                layout.offset_of(k),
            ) else {
                return Err(Error::BoUndescribable {
                    gpu_id: gpu.user_gpu_id,
                    entry: bo.entry,
                });
            };
            command.entries.push(Entry {
                gpu_id: gpu.user_gpu_id,
                fd_index,
                bo_index,
                offset,
                size: bo.size,
                checksum: bo.checksum,
            });
            fds.push(dmabuf.as_fd());
        }
    }
    command.fd_count = fds.len() as u32;
    if command.entries.len() > MAX_ENTRIES || command.gpus.len() > MAX_GPUS {
        return Err(Error::CommandTooLarge {
            entries: command.entries.len(),
            gpus: command.gpus.len(),
        });
    }
    Ok((command, fds))
}

/// Connects to CRIU's main process at `socket`. Fails when the caller
/// cannot reach it: the socket is abstract, so a task restored into
/// another network namespace (a container's) finds nothing there.
pub fn connect(socket: &SocketName) -> io::Result<UnixStream> {
    UnixStream::connect_addr(&socket.addr()?)
}

/// Connects to `socket` and sends `command` followed by `fds`.
pub fn send_command(
    socket: &SocketName,
    command: &Command,
    fds: &[BorrowedFd<'_>],
) -> Result<(), Error> {
    let stream = connect(socket).map_err(Error::io(format!(
        "connecting to CRIU's main process at {socket}"
    )))?;
    send_command_on(stream, command, fds)
}

/// Sends `command` followed by `fds` on a connection [`connect`] made.
pub fn send_command_on(
    mut stream: UnixStream,
    command: &Command,
    fds: &[BorrowedFd<'_>],
) -> Result<(), Error> {
    stream
        .write_all(&command.encode())
        .map_err(Error::io("sending the parallel restore command"))?;
    send_fds(stream.as_fd(), fds).map_err(Error::io("sending the BOs' dma-bufs"))?;
    Ok(())
}

/// A command with its fds.
pub(super) type Received = (Command, Vec<OwnedFd>);
/// A failed receive: the file id when the header named it, and why.
pub(super) type ReceiveError = (Option<u32>, Error);

/// The worker's end of one exchange: a command and its fds, or `None`
/// for the quit header.
pub(super) fn read_command(stream: &mut UnixStream) -> Result<Option<Received>, ReceiveError> {
    let mut header = [0u8; HEADER_LEN];
    stream
        .read_exact(&mut header)
        .map_err(|e| (None, Error::io("receiving a parallel restore header")(e)))?;
    let (id, gpus, entries, fds, chunk_size) =
        match decode_header(&header).map_err(|e| (None, e))? {
            Header::Quit => return Ok(None),
            Header::Command {
                id,
                gpus,
                entries,
                fds,
                chunk_size,
            } => (id, gpus, entries, fds, chunk_size),
        };
    let mut body = vec![0u8; gpus * GPU_LEN + entries * ENTRY_LEN];
    stream.read_exact(&mut body).map_err(|e| {
        (
            Some(id),
            Error::io(format!("receiving the command of file {id}"))(e),
        )
    })?;
    let command = Command::decode_body(id, gpus, entries, fds, chunk_size, &body)
        .map_err(|e| (Some(id), e))?;
    let fds = recv_fds(stream.as_fd(), fds as usize).map_err(|e| {
        (
            Some(id),
            Error::io(format!("receiving the dma-bufs of file {id}"))(e),
        )
    })?;
    Ok(Some((command, fds)))
}

/// Connects to `socket` and sends the quit command (an all-zero header).
pub(super) fn send_quit(socket: &SocketName) -> io::Result<()> {
    socket
        .addr()
        .and_then(|addr| UnixStream::connect_addr(&addr))
        .and_then(|mut s| s.write_all(&[0u8; HEADER_LEN]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Command {
        Command {
            id: 7,
            gpus: vec![
                GpuRoute {
                    user_gpu_id: 0x1111,
                    render_minor: 128,
                },
                GpuRoute {
                    user_gpu_id: 0x2222,
                    render_minor: 129,
                },
            ],
            entries: vec![
                Entry {
                    gpu_id: 0x1111,
                    fd_index: 0,
                    bo_index: 0,
                    offset: 0,
                    size: 4096,
                    checksum: Some(5),
                },
                Entry {
                    gpu_id: 0x1111,
                    fd_index: 1,
                    bo_index: 2,
                    offset: 4096,
                    size: 1 << 33,
                    checksum: None,
                },
                Entry {
                    gpu_id: 0x2222,
                    fd_index: 2,
                    bo_index: 3,
                    offset: 0,
                    size: 8192,
                    checksum: Some(9),
                },
            ],
            fd_count: 3,
            chunk_size: 0,
        }
    }

    #[test]
    fn commands_round_trip_and_quit_is_all_zero() {
        let c = sample();
        assert_eq!(Command::decode(&c.encode()).unwrap(), Some(c));
        assert_eq!(Command::decode(&[0u8; HEADER_LEN]).unwrap(), None);
    }

    #[test]
    fn the_chunk_size_travels_and_picks_the_checksum_algorithm() {
        let mut c = sample();
        c.chunk_size = 2 << 20;
        let back = Command::decode(&c.encode()).unwrap().unwrap();
        assert_eq!(back, c);
        let (layout, _) = back.layout_of(0x2222).unwrap();
        assert_eq!(
            layout.algo(),
            amdgpu_image::ChecksumAlgo::V2 {
                chunk_size: 2 << 20
            }
        );
        let (layout, _) = sample().layout_of(0x2222).unwrap();
        assert_eq!(layout.algo(), amdgpu_image::ChecksumAlgo::V1);
        // A chunk size no image has is refused.
        c.chunk_size = 3000;
        let err = Command::decode(&c.encode()).unwrap_err().to_string();
        assert!(err.contains("power of two"), "{err}");
    }

    #[test]
    fn a_command_without_bos_is_not_quit() {
        let c = Command {
            id: 1,
            gpus: vec![],
            entries: vec![],
            fd_count: 0,
            chunk_size: 0,
        };
        assert_eq!(Command::decode(&c.encode()).unwrap(), Some(c));
    }

    #[test]
    fn offsets_restart_per_gpu_and_are_checked() {
        let c = sample();
        let (layout, fds) = c.layout_of(0x2222).unwrap();
        assert_eq!(layout.total_len(), 8192);
        assert_eq!(fds.get(&3), Some(&2));
        let (layout, _) = c.layout_of(0x1111).unwrap();
        assert_eq!(layout.total_len(), 4096 + (1 << 33));
        // The C plugin's running sum across GPUs.
        let mut bad = sample();
        bad.entries[2].offset = 4096 + (1 << 33);
        let err = bad.layout_of(0x2222).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ParallelCommand(CommandError::Offset {
                    bo: 3,
                    gpu_id: 0x2222,
                    offset: 0x2_0000_1000,
                    expected: 0,
                    ..
                })
            ),
            "{err:?}"
        );
        let err = err.to_string();
        assert!(
            err.starts_with("parallel restore command: BO 3 of GPU 0x2222"),
            "{err}"
        );
    }

    #[test]
    fn hostile_commands_are_refused_without_panic() {
        let good = sample().encode();
        for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN + 3, good.len() - 1] {
            assert!(Command::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 1;
        assert!(matches!(
            Command::decode(&bad_magic),
            Err(Error::ParallelCommand(CommandError::BadMagic { magic })) if magic == MAGIC ^ 1
        ));
        let mut huge = good.clone();
        huge[16..20].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(Command::decode(&huge).is_err());
        let mut c = sample();
        c.entries[1].fd_index = 3;
        assert!(Command::decode(&c.encode()).is_err());
        let mut c = sample();
        c.entries[1].gpu_id = 0x3333;
        assert!(Command::decode(&c.encode()).is_err());
        let mut c = sample();
        c.entries[2].bo_index = 0;
        assert!(Command::decode(&c.encode()).is_err());
        let mut c = sample();
        c.gpus[1].user_gpu_id = 0x1111;
        assert!(Command::decode(&c.encode()).is_err());
    }
}
