//! Parallel restore: the restored task hands its BO contents to CRIU's main
//! process, which copies them in the background while the task restores the
//! rest of its state.
//!
//! Roles and order (a single-process tree, CRIU with `POST_FORKING`):
//!
//! 1. `init(RESTORE)`, main process: [`ParallelRestore::plan`] decides and
//!    binds a listening `AF_UNIX` stream socket under the abstract name
//!    `\0/criu-amdgpu-parallel-<run id>` (CRIU's `criu_run_id`, or a random
//!    UUID-like string when CRIU has none).
//! 2. `POST_FORKING`, main process: [`ParallelRestore::start`] starts the
//!    worker thread (asynchronous signals blocked, so CRIU's `SIGCHLD`
//!    handling stays on CRIU's thread). It accepts one connection per KFD
//!    file and copies each command's BOs from the pages files into the
//!    dma-bufs that came with it, one copy engine per GPU, all GPUs in
//!    parallel, through the same pipeline as the in-task restore
//!    ([`crate::transfer::restore_pages`], checksums verified).
//! 3. `RESTORE_EXT_FILE`, restored task: after `CRIU_OP RESTORE`,
//!    [`hand_off`] connects and sends the [`Command`] and the BOs' dma-bufs
//!    (`SCM_RIGHTS`), then returns without waiting for the copy.
//! 4. `RESUME_DEVICES_LATE`, main process: [`ParallelRestore::finish`] sends
//!    the quit command (an all-zero header), joins the worker and reports
//!    every failed copy; the caller resumes the process only when there was
//!    none.
//!
//! Fixed compared with the C plugin (plugins/amdgpu, HEAD):
//! - offsets in a command are 64-bit and restart at 0 for every GPU's pages
//!   file (the C plugin sums them across GPUs, so every GPU after the first
//!   read the wrong bytes), and the worker checks each one against the pages
//!   layout before copying;
//! - every send and receive loops until complete (`write_all`/`read_exact`,
//!   fds in batches of at most [`FDS_PER_MESSAGE`]);
//! - a command without BOs is served like any other: only the explicit quit
//!   header ends the worker (the C worker stopped at the first command with
//!   no fds), and a failed command does not stop the worker either;
//! - a failed copy is never silent: [`ParallelRestore::finish`] returns it and
//!   the process is not resumed;
//! - a connection from another user id is refused (`SO_PEERCRED`), and a
//!   connection that stalls times out instead of hanging the restore.
//!
//! Caveat: the name is abstract, so it lives in CRIU's network namespace. A
//! task restored into a new network namespace cannot reach it; such restores
//! must not use parallel restore (CRIU creates the task's namespaces before
//! `RESTORE_EXT_FILE`; the plugin cannot tell from the pstree).
//!
//! This module never decides whether the images are compatible or how BOs
//! are re-created: the task has done that before it hands off. It never
//! reads a stream (a stream cannot be read by two processes), and never
//! touches CRIU's symbols (the host passes what CRIU says).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_void;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use amdgpu_image::pages::PagesBo;
use amdgpu_image::{DirStore, ImageName, PagesLayout, ValidatedKfd};
use kfd::{DeviceNumber, Driver, FdKind, RestoredBo};

use crate::error::Error;
use crate::options::Options;
use crate::transfer::{self, GpuTarget};

/// The most fds one `sendmsg` carries (CRIU's `CR_SCM_MAX_FD`).
pub const FDS_PER_MESSAGE: usize = 252;
/// The most GPUs one command names.
pub const MAX_GPUS: usize = 256;
/// The most BOs one command names.
pub const MAX_ENTRIES: usize = 1 << 20;
/// How long the worker waits for the rest of a command once connected.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

const MAGIC: u32 = u32::from_le_bytes(*b"AGPR");
const VERSION: u32 = 1;
const HEADER_LEN: usize = 32;
const GPU_LEN: usize = 8;
const ENTRY_LEN: usize = 40;
const FLAG_CHECKSUM: u32 = 1;

/// A [`Driver`] shared with the worker thread, which outlives any borrow of
/// the hook that starts it.
#[derive(Clone)]
pub struct SharedDriver(Arc<dyn Driver + 'static>);

impl SharedDriver {
    /// Shares `driver`.
    pub fn new(driver: impl Driver + 'static) -> Self {
        SharedDriver(Arc::new(driver))
    }
}

impl std::fmt::Debug for SharedDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedDriver")
    }
}

impl Driver for SharedDriver {
    fn open(&self, path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
        self.0.open(path, flags)
    }

    unsafe fn ioctl(
        &self,
        fd: BorrowedFd<'_>,
        request: u64,
        arg: *mut c_void,
    ) -> io::Result<libc::c_int> {
        // SAFETY: the caller upholds `Driver::ioctl`'s contract, which is the
        // inner driver's contract unchanged.
        unsafe { self.0.ioctl(fd, request, arg) }
    }

    unsafe fn mmap(
        &self,
        addr: *mut c_void,
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: BorrowedFd<'_>,
        offset: u64,
    ) -> io::Result<NonNull<c_void>> {
        // SAFETY: the caller upholds `Driver::mmap`'s contract, passed on
        // unchanged.
        unsafe { self.0.mmap(addr, len, prot, flags, fd, offset) }
    }

    unsafe fn munmap(&self, addr: NonNull<c_void>, len: usize) -> io::Result<()> {
        // SAFETY: the caller upholds `Driver::munmap`'s contract, passed on
        // unchanged.
        unsafe { self.0.munmap(addr, len) }
    }

    fn fd_kind(&self, fd: BorrowedFd<'_>) -> io::Result<FdKind> {
        self.0.fd_kind(fd)
    }

    fn device_number(&self, path: &Path) -> io::Result<DeviceNumber> {
        self.0.device_number(path)
    }

    fn read_sysfs(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        self.0.read_sysfs(path, limit)
    }
}

/// What CRIU says about a restore, for the choice of parallel restore
/// (asked once, in the main process at `init(RESTORE)`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParallelFacts {
    /// CRIU calls `POST_FORKING` (`max_hooks >= 13`, CRIU v4.2 and later).
    pub calls_post_forking: bool,
    /// Whether the process tree is a single process (the pstree root has
    /// no children); `None` when CRIU does not say.
    pub single_process: Option<bool>,
    /// The images come from CRIU's image streamer (`--stream`).
    pub streaming: bool,
    /// CRIU's `criu_run_id`, when it has one.
    pub run_id: Option<String>,
    /// The user turned parallel restore off
    /// (`AMDGPU_PLUGIN_PARALLEL_RESTORE=0`).
    pub turned_off: bool,
}

impl ParallelFacts {
    /// Why parallel restore cannot be used, or `None` when it can.
    pub fn refusal(&self) -> Option<&'static str> {
        if self.turned_off {
            Some("turned off by AMDGPU_PLUGIN_PARALLEL_RESTORE=0")
        } else if !self.calls_post_forking {
            Some("this CRIU has no POST_FORKING hook (needs CRIU v4.2 or later)")
        } else if self.single_process != Some(true) {
            Some(match self.single_process {
                Some(_) => "the process tree has more than one process",
                None => "CRIU does not say whether the process tree is a single process",
            })
        } else if self.streaming {
            Some("the images come from the image streamer, which one process reads in order")
        } else {
            None
        }
    }
}

/// What the worker copies with: its own driver (in CRIU's main process)
/// and the images directory.
#[derive(Debug)]
pub struct Copier {
    /// The main process's driver; the worker opens private render nodes
    /// through it.
    pub driver: SharedDriver,
    /// The images directory (never a stream).
    pub images: DirStore,
}

/// The abstract socket name of one restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketName(String);

impl SocketName {
    /// `/criu-amdgpu-parallel-<run id>` (the leading NUL of the abstract
    /// namespace is implied); a random UUID-like id when CRIU gives none or
    /// one with characters other than letters, digits and `-`.
    pub fn for_run(run_id: Option<&str>) -> SocketName {
        let id = match run_id {
            Some(id)
                if !id.is_empty()
                    && id.len() <= 64
                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
            {
                id.to_owned()
            }
            _ => random_run_id(),
        };
        SocketName(format!("/criu-amdgpu-parallel-{id}"))
    }

    /// The name without the leading NUL.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn addr(&self) -> io::Result<SocketAddr> {
        SocketAddr::from_abstract_name(self.0.as_bytes())
    }
}

impl std::fmt::Display for SocketName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "@{}", self.0)
    }
}

/// 36 characters in the form of a UUID, from `/dev/urandom` (or the clock
/// and pid when it cannot be read).
fn random_run_id() -> String {
    let mut bytes = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes[..12].copy_from_slice(&nanos.to_le_bytes()[..12]);
        bytes[12..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

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
}

fn protocol(what: impl Into<String>) -> Error {
    Error::Inconsistent(format!("parallel restore command: {}", what.into()))
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
    },
}

fn decode_header(bytes: &[u8; HEADER_LEN]) -> Result<Header, Error> {
    if bytes.iter().all(|&b| b == 0) {
        return Ok(Header::Quit);
    }
    let (magic, version) = (u32_at(bytes, 0), u32_at(bytes, 4));
    if magic != MAGIC {
        return Err(protocol(format!("bad magic {magic:#x}")));
    }
    if version != VERSION {
        return Err(protocol(format!("version {version}, expected {VERSION}")));
    }
    let id = u32_at(bytes, 8);
    let gpus = u32_at(bytes, 12) as usize;
    let entries = u32_at(bytes, 16) as usize;
    let fds = u32_at(bytes, 20);
    if u64_at(bytes, 24) != 0 {
        return Err(protocol("reserved header bytes are not zero"));
    }
    if gpus > MAX_GPUS {
        return Err(protocol(format!("{gpus} GPUs (at most {MAX_GPUS})")));
    }
    if entries > MAX_ENTRIES || fds as usize > MAX_ENTRIES {
        return Err(protocol(format!(
            "{entries} BOs and {fds} fds (at most {MAX_ENTRIES})"
        )));
    }
    Ok(Header::Command {
        id,
        gpus,
        entries,
        fds,
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
        out.extend_from_slice(&0u64.to_ne_bytes());
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
            .ok_or_else(|| protocol(format!("{} bytes, shorter than a header", bytes.len())))?;
        let Header::Command {
            id,
            gpus,
            entries,
            fds,
        } = decode_header(header)?
        else {
            return Ok(None);
        };
        let body = &bytes[HEADER_LEN..];
        let want = gpus * GPU_LEN + entries * ENTRY_LEN;
        if body.len() != want {
            return Err(protocol(format!(
                "{} body bytes, the header announces {want}",
                body.len()
            )));
        }
        Command::decode_body(id, gpus, entries, fds, body).map(Some)
    }

    fn decode_body(
        id: u32,
        gpus: usize,
        entries: usize,
        fd_count: u32,
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
                return Err(protocol(format!("GPU {:#x} listed twice", gpu.user_gpu_id)));
            }
        }
        let mut bos = BTreeSet::new();
        for e in &self.entries {
            if !gpus.contains(&e.gpu_id) {
                return Err(protocol(format!(
                    "BO {} is on GPU {:#x}, which the command does not list",
                    e.bo_index, e.gpu_id
                )));
            }
            if e.fd_index >= self.fd_count {
                return Err(protocol(format!(
                    "BO {} uses fd {} of {}",
                    e.bo_index, e.fd_index, self.fd_count
                )));
            }
            if !bos.insert(e.bo_index) {
                return Err(protocol(format!("BO {} listed twice", e.bo_index)));
            }
        }
        Ok(())
    }

    /// The pages layout of one GPU, after checking that every entry starts
    /// where the pages file holds it: offsets restart at 0 per GPU and
    /// follow each other without gaps.
    fn layout_of(&self, gpu: u32) -> Result<(PagesLayout, BTreeMap<usize, u32>), Error> {
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
        .ok_or_else(|| protocol(format!("the BO sizes of GPU {gpu:#x} overflow 64 bits")))?;
        for (k, e) in mine.iter().enumerate() {
            let expected = layout.offset_of(k);
            if expected != Some(e.offset) {
                return Err(protocol(format!(
                    "BO {} of GPU {gpu:#x} at offset {:#x} of its pages file, which holds it at {:#x}",
                    e.bo_index,
                    e.offset,
                    expected.unwrap_or(0)
                )));
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
                .ok_or_else(|| {
                    Error::Inconsistent(format!(
                        "BO {} on GPU {:#x} has contents but RESTORE returned no dma-buf",
                        bo.entry, gpu.user_gpu_id
                    ))
                })?;
            let (Ok(bo_index), Ok(fd_index), Some(offset)) = (
                u32::try_from(bo.entry),
                u32::try_from(fds.len()),
                layout.offset_of(k),
            ) else {
                return Err(Error::Inconsistent(format!(
                    "BO {} on GPU {:#x} cannot be described to the main process",
                    bo.entry, gpu.user_gpu_id
                )));
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
        return Err(Error::Inconsistent(format!(
            "{} BOs on {} GPUs are more than one command carries",
            command.entries.len(),
            command.gpus.len()
        )));
    }
    Ok((command, fds))
}

/// In the restored task: sends the command for a restored KFD file and the
/// BOs' dma-bufs to the main process; returns the bytes it will copy. The
/// task does not wait for the copy (`RESUME_DEVICES_LATE` does).
pub fn hand_off(
    socket: &SocketName,
    image: &ValidatedKfd,
    gpus: &[GpuTarget],
    restored: &[RestoredBo],
) -> Result<u64, Error> {
    let (command, fds) = build_command(image, gpus, restored)?;
    let bytes: u64 = command.entries.iter().map(|e| e.size).sum();
    send_command(socket, &command, &fds)?;
    log::info!(
        "file {}: {} BOs ({bytes} bytes) on {} GPUs handed to CRIU's main process ({socket})",
        command.id,
        command.entries.len(),
        command.gpus.len()
    );
    Ok(bytes)
}

/// Connects to `socket` and sends `command` followed by `fds`.
pub fn send_command(
    socket: &SocketName,
    command: &Command,
    fds: &[BorrowedFd<'_>],
) -> Result<(), Error> {
    let addr = socket
        .addr()
        .map_err(Error::io(format!("naming socket {socket}")))?;
    let mut stream = UnixStream::connect_addr(&addr).map_err(Error::io(format!(
        "connecting to CRIU's main process at {socket} (a task in another network namespace cannot)"
    )))?;
    stream
        .write_all(&command.encode())
        .map_err(Error::io("sending the parallel restore command"))?;
    send_fds(stream.as_fd(), fds).map_err(Error::io("sending the BOs' dma-bufs"))?;
    Ok(())
}

fn retry_eintr(mut f: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let ret = f();
        if ret >= 0 {
            return Ok(ret as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Sends `fds` over `sock` with `SCM_RIGHTS`, at most [`FDS_PER_MESSAGE`]
/// per message, each message carrying one data byte.
pub fn send_fds(sock: BorrowedFd<'_>, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    for batch in fds.chunks(FDS_PER_MESSAGE) {
        let raw: Vec<libc::c_int> = batch.iter().map(|f| f.as_raw_fd()).collect();
        let payload = std::mem::size_of_val(raw.as_slice()) as libc::c_uint;
        // SAFETY: CMSG_SPACE is arithmetic on its argument only.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        // u64 elements keep the buffer aligned for cmsghdr.
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` writable bytes, enough for
        // one header with `payload` bytes of data (CMSG_SPACE), so
        // CMSG_FIRSTHDR is non-null and CMSG_DATA has room for `raw`.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr(),
                libc::CMSG_DATA(cmsg).cast::<libc::c_int>(),
                raw.len(),
            );
        }
        // SAFETY: `msg` points at the iovec and control buffer above, alive
        // for the call; the fds in it are open (borrowed).
        let sent =
            retry_eintr(|| unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) })?;
        if sent != 1 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "sendmsg sent no byte with the fds",
            ));
        }
    }
    Ok(())
}

/// Receives exactly `count` fds sent by [`send_fds`] from `sock`.
pub fn recv_fds(sock: BorrowedFd<'_>, count: usize) -> io::Result<Vec<OwnedFd>> {
    let mut out: Vec<OwnedFd> = Vec::with_capacity(count);
    while out.len() < count {
        let want = (count - out.len()).min(FDS_PER_MESSAGE);
        let payload = (want * std::mem::size_of::<libc::c_int>()) as libc::c_uint;
        // SAFETY: CMSG_SPACE is arithmetic on its argument only.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        let mut control = vec![0u64; space.div_ceil(8)];
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: `msg` points at a 1-byte buffer and a control buffer of
        // `space` bytes, both alive and writable for the call.
        let got = retry_eintr(|| unsafe {
            libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC)
        })?;
        // Take ownership of every received fd first, so none leaks on error.
        let mut batch = Vec::new();
        // SAFETY: recvmsg filled `msg.msg_control` with `msg_controllen`
        // bytes of well-formed control messages; the CMSG_* walk stays
        // inside it, and each SCM_RIGHTS payload holds new fds we own.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                    let n = len / std::mem::size_of::<libc::c_int>();
                    for i in 0..n {
                        let fd = std::ptr::read_unaligned(data.cast::<libc::c_int>().add(i));
                        batch.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if got == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the peer closed after {} of {count} fds", out.len()),
            ));
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "more fds than announced (control data truncated)",
            ));
        }
        if batch.is_empty() || batch.len() > want {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a message with {} fds, expected 1 to {want}", batch.len()),
            ));
        }
        out.extend(batch);
    }
    Ok(out)
}

/// The uid of the peer of `sock` (`SO_PEERCRED`).
fn peer_uid(sock: BorrowedFd<'_>) -> io::Result<libc::uid_t> {
    // SAFETY: ucred is plain data; all-zero is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let ret = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// What one served command did.
#[derive(Debug)]
pub struct CommandOutcome {
    /// The KFD file id, when the header could be read.
    pub id: Option<u32>,
    /// Bytes copied, or why the command failed.
    pub result: Result<u64, Error>,
}

/// Everything the worker did.
#[derive(Debug, Default)]
pub struct WorkerReport {
    /// One outcome per command received, in arrival order.
    pub commands: Vec<CommandOutcome>,
}

impl WorkerReport {
    /// Bytes copied by the successful commands.
    pub fn bytes(&self) -> u64 {
        self.commands
            .iter()
            .filter_map(|c| c.result.as_ref().ok())
            .sum()
    }

    /// The failed commands.
    pub fn failures(&self) -> impl Iterator<Item = (Option<u32>, &Error)> {
        self.commands
            .iter()
            .filter_map(|c| c.result.as_ref().err().map(|e| (c.id, e)))
    }
}

enum Served {
    Quit,
    Outcome(CommandOutcome),
}

/// A command with its fds.
type Received = (Command, Vec<OwnedFd>);
/// A failed receive: the file id when the header named it, and why.
type ReceiveError = (Option<u32>, Error);

fn read_command(stream: &mut UnixStream) -> Result<Option<Received>, ReceiveError> {
    let mut header = [0u8; HEADER_LEN];
    stream
        .read_exact(&mut header)
        .map_err(|e| (None, Error::io("receiving a parallel restore header")(e)))?;
    let (id, gpus, entries, fds) = match decode_header(&header).map_err(|e| (None, e))? {
        Header::Quit => return Ok(None),
        Header::Command {
            id,
            gpus,
            entries,
            fds,
        } => (id, gpus, entries, fds),
    };
    let mut body = vec![0u8; gpus * GPU_LEN + entries * ENTRY_LEN];
    stream.read_exact(&mut body).map_err(|e| {
        (
            Some(id),
            Error::io(format!("receiving the command of file {id}"))(e),
        )
    })?;
    let command = Command::decode_body(id, gpus, entries, fds, &body).map_err(|e| (Some(id), e))?;
    let fds = recv_fds(stream.as_fd(), fds as usize).map_err(|e| {
        (
            Some(id),
            Error::io(format!("receiving the dma-bufs of file {id}"))(e),
        )
    })?;
    Ok(Some((command, fds)))
}

fn serve(stream: &mut UnixStream, copier: &Copier, options: &Options) -> Served {
    match read_command(stream) {
        Ok(None) => Served::Quit,
        Ok(Some((command, fds))) => {
            let id = command.id;
            let result = copy_command(copier, &command, &fds, options);
            match &result {
                Ok(bytes) => log::info!(
                    "parallel restore: file {id}: {bytes} bytes of {} BOs copied",
                    command.entries.len()
                ),
                Err(e) => log::error!("parallel restore: file {id}: {e}"),
            }
            Served::Outcome(CommandOutcome {
                id: Some(id),
                result,
            })
        }
        Err((id, e)) => {
            log::error!("parallel restore: {e}");
            Served::Outcome(CommandOutcome { id, result: Err(e) })
        }
    }
}

/// Copies the BOs of `command` from their pages files into `fds`: one copy
/// engine per GPU, all GPUs in parallel; returns the bytes copied.
pub fn copy_command(
    copier: &Copier,
    command: &Command,
    fds: &[OwnedFd],
    options: &Options,
) -> Result<u64, Error> {
    if fds.len() != command.fd_count as usize {
        return Err(protocol(format!(
            "{} fds received, {} announced",
            fds.len(),
            command.fd_count
        )));
    }
    command.validate()?;
    let mut plans = Vec::with_capacity(command.gpus.len());
    for gpu in &command.gpus {
        let (layout, fd_of) = command.layout_of(gpu.user_gpu_id)?;
        plans.push((*gpu, layout, fd_of));
    }
    let results: Vec<Result<u64, Error>> = std::thread::scope(|scope| {
        let workers: Vec<_> = plans
            .into_iter()
            .map(|(gpu, layout, fd_of)| {
                scope.spawn(move || {
                    let name = ImageName::Pages {
                        id: command.id,
                        gpu_id: gpu.user_gpu_id,
                    };
                    let dmabuf_of = |entry: usize| {
                        fd_of
                            .get(&entry)
                            .and_then(|&i| fds.get(i as usize))
                            .map(|f| f.as_fd())
                    };
                    transfer::restore_pages(
                        &copier.driver,
                        &copier.images,
                        &name,
                        layout,
                        gpu.user_gpu_id,
                        gpu.render_minor,
                        options,
                        &dmabuf_of,
                    )
                })
            })
            .collect();
        workers
            .into_iter()
            .zip(&command.gpus)
            .map(|(worker, gpu)| {
                worker.join().unwrap_or_else(|_| {
                    Err(Error::Transfer {
                        gpu_id: gpu.user_gpu_id,
                        step: "parallel restore worker",
                        reason: "the copy thread panicked".into(),
                    })
                })
            })
            .collect()
    });
    let mut bytes = 0;
    for result in results {
        bytes += result?;
    }
    Ok(bytes)
}

fn worker_loop(listener: UnixListener, copier: Copier, options: Options) -> WorkerReport {
    // SAFETY: geteuid has no arguments and cannot fail.
    let own_uid = unsafe { libc::geteuid() };
    let mut report = WorkerReport::default();
    loop {
        let mut stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log::error!("parallel restore: accepting a connection failed: {e}");
                report.commands.push(CommandOutcome {
                    id: None,
                    result: Err(Error::io("accepting a parallel restore connection")(e)),
                });
                return report;
            }
        };
        match peer_uid(stream.as_fd()) {
            // Restored tasks run with CRIU's credentials until the restorer
            // blob switches them, long after RESTORE_EXT_FILE.
            Ok(uid) if uid == own_uid => {}
            Ok(uid) => {
                log::warn!("parallel restore: refused a connection from uid {uid}");
                continue;
            }
            Err(e) => {
                log::warn!("parallel restore: refused a connection without credentials: {e}");
                continue;
            }
        }
        if let Err(e) = stream.set_read_timeout(Some(COMMAND_TIMEOUT)) {
            log::warn!("parallel restore: cannot bound the wait for a command: {e}");
        }
        match serve(&mut stream, &copier, &options) {
            Served::Quit => {
                log::debug!("parallel restore: worker told to quit");
                return report;
            }
            Served::Outcome(outcome) => report.commands.push(outcome),
        }
    }
}

/// Asynchronous signals the worker thread blocks: CRIU handles them (above
/// all `SIGCHLD` of the restored tasks) on its own thread.
fn worker_signal_mask() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigfillset/sigdelset initialise and
    // edit it in place.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sync in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(&mut set, sync);
        }
        set
    }
}

fn spawn_worker(
    listener: UnixListener,
    copier: Copier,
    options: Options,
) -> io::Result<JoinHandle<WorkerReport>> {
    let block = worker_signal_mask();
    // SAFETY: sigset_t is plain data; pthread_sigmask writes the old mask.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both sets are valid; this changes only the calling thread's
    // mask, which the new thread inherits and which is restored below.
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    let spawned = std::thread::Builder::new()
        .name("amdgpu-parallel".into())
        .spawn(move || worker_loop(listener, copier, options));
    // SAFETY: `old` is the mask read above; restoring it is always valid.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    spawned
}

/// Parallel restore in CRIU's main process: the socket from `init`, then
/// the worker from `POST_FORKING` to `RESUME_DEVICES_LATE`. Dropping it
/// stops the worker.
#[derive(Debug)]
pub struct ParallelRestore {
    socket: SocketName,
    listener: Option<UnixListener>,
    worker: Option<JoinHandle<WorkerReport>>,
}

impl ParallelRestore {
    /// At `init(RESTORE)`: parallel restore when `facts` allow it and the
    /// socket can be bound; otherwise `None` (the tasks restore their BO
    /// contents themselves). The choice is logged.
    pub fn plan(facts: &ParallelFacts) -> Option<ParallelRestore> {
        if let Some(reason) = facts.refusal() {
            log::info!("parallel restore disabled: {reason}");
            return None;
        }
        let socket = SocketName::for_run(facts.run_id.as_deref());
        let bound = socket
            .addr()
            .and_then(|addr| UnixListener::bind_addr(&addr));
        match bound {
            Ok(listener) => {
                log::info!("parallel restore enabled: BO contents are copied by CRIU's main process (socket {socket})");
                Some(ParallelRestore {
                    socket,
                    listener: Some(listener),
                    worker: None,
                })
            }
            Err(e) => {
                log::warn!(
                    "parallel restore disabled: cannot listen on {socket}: {e}; the tasks restore their BO contents"
                );
                None
            }
        }
    }

    /// The socket the tasks send to.
    pub fn socket(&self) -> &SocketName {
        &self.socket
    }

    /// Whether the worker runs.
    pub fn running(&self) -> bool {
        self.worker.is_some()
    }

    /// At `POST_FORKING`: starts the worker.
    pub fn start(&mut self, copier: Copier, options: Options) -> Result<(), Error> {
        let listener = self.listener.take().ok_or_else(|| {
            Error::Inconsistent("the parallel restore worker was already started".into())
        })?;
        let worker = spawn_worker(listener, copier, options)
            .map_err(Error::io("starting the parallel restore worker"))?;
        self.worker = Some(worker);
        log::debug!("parallel restore worker started on {}", self.socket);
        Ok(())
    }

    /// Stops the worker (the quit command, then a join) and returns what it
    /// did; `None` when it was not running.
    pub fn finish(&mut self) -> Option<Result<WorkerReport, Error>> {
        let worker = self.worker.take()?;
        // Commands already sent are queued before this connection, so the
        // worker serves them first. A worker that already ended (its accept
        // failed) refuses the connection; the join below reports why.
        let quit = self
            .socket
            .addr()
            .and_then(|addr| UnixStream::connect_addr(&addr))
            .and_then(|mut s| s.write_all(&[0u8; HEADER_LEN]));
        if let Err(e) = quit {
            log::debug!("parallel restore: quit command not delivered: {e}");
            if !worker.is_finished() {
                // Without the quit command the worker would wait forever.
                return Some(Err(Error::io(format!(
                    "telling the parallel restore worker on {} to quit",
                    self.socket
                ))(e)));
            }
        }
        Some(worker.join().map_err(|_| Error::Transfer {
            gpu_id: 0,
            step: "parallel restore worker",
            reason: "the worker thread panicked".into(),
        }))
    }
}

impl Drop for ParallelRestore {
    fn drop(&mut self) {
        match self.finish() {
            None | Some(Ok(_)) => {}
            Some(Err(e)) => log::error!("parallel restore: {e}"),
        }
    }
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
        }
    }

    #[test]
    fn commands_round_trip_and_quit_is_all_zero() {
        let c = sample();
        assert_eq!(Command::decode(&c.encode()).unwrap(), Some(c));
        assert_eq!(Command::decode(&[0u8; HEADER_LEN]).unwrap(), None);
    }

    #[test]
    fn a_command_without_bos_is_not_quit() {
        let c = Command {
            id: 1,
            gpus: vec![],
            entries: vec![],
            fd_count: 0,
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
        let err = bad.layout_of(0x2222).unwrap_err().to_string();
        assert!(err.contains("BO 3 of GPU 0x2222"), "{err}");
    }

    #[test]
    fn hostile_commands_are_refused_without_panic() {
        let good = sample().encode();
        for cut in [0, 1, HEADER_LEN - 1, HEADER_LEN + 3, good.len() - 1] {
            assert!(Command::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 1;
        assert!(Command::decode(&bad_magic).is_err());
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

    #[test]
    fn parallel_restore_needs_every_fact() {
        let ok = ParallelFacts {
            calls_post_forking: true,
            single_process: Some(true),
            streaming: false,
            run_id: None,
            turned_off: false,
        };
        assert_eq!(ok.refusal(), None);
        let refused = [
            ParallelFacts {
                calls_post_forking: false,
                ..ok.clone()
            },
            ParallelFacts {
                single_process: Some(false),
                ..ok.clone()
            },
            ParallelFacts {
                single_process: None,
                ..ok.clone()
            },
            ParallelFacts {
                streaming: true,
                ..ok.clone()
            },
            ParallelFacts {
                turned_off: true,
                ..ok.clone()
            },
        ];
        for facts in refused {
            assert!(facts.refusal().is_some(), "{facts:?}");
        }
        assert!(ParallelRestore::plan(&ParallelFacts::default()).is_none());
    }

    #[test]
    fn socket_names_use_the_run_id_or_a_random_one() {
        let id = "0f6a3c1e-1b2c-4d5e-8f90-123456789abc";
        let name = SocketName::for_run(Some(id));
        assert_eq!(name.as_str(), format!("/criu-amdgpu-parallel-{id}"));
        assert_eq!(name.as_str().len(), 22 + 36);
        let a = SocketName::for_run(None);
        let b = SocketName::for_run(Some("bad id/../x"));
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 22 + 36);
    }

    #[test]
    fn fds_cross_a_socket_in_batches() {
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<std::fs::File> = (0..FDS_PER_MESSAGE + 3)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        let borrowed: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let got = std::thread::scope(|scope| {
            let sender = scope.spawn(|| send_fds(a.as_fd(), &borrowed));
            let got = recv_fds(b.as_fd(), files.len()).unwrap();
            sender.join().unwrap().unwrap();
            got
        });
        assert_eq!(got.len(), files.len());
        use std::os::unix::fs::MetadataExt;
        let null = std::fs::metadata("/dev/null").unwrap().rdev();
        for fd in got {
            assert_eq!(std::fs::File::from(fd).metadata().unwrap().rdev(), null);
        }
        // A peer that closes early is an error, not a hang.
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(recv_fds(b.as_fd(), 1).is_err());
    }
}
