//! The plugin as loaded into CRIU: one process-wide [`Plugin`] over the real
//! kernel ([`HostDriver`]) and CRIU's services ([`CriuServices`]), driven by
//! the hook trampolines of [`crate::abi`].
//!
//! The work is done by the driver-generic [`crate::core::plugin`]; this
//! module keeps it between calls and adapts CRIU's services (image directory
//! or image streamer, inventory, `find_unused_fd_pid`). Restored tasks are
//! forked from the main CRIU process and inherit a copy of this state.
//!
//! Never used outside CRIU's process roles: tests drive the core through the
//! emulator instead.

use std::ffi::c_int;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use amdgpu_image::{
    DirStore, ImageName, ImageStore, ImageWriter, PagesLayout, PagesReader, PagesSink, StreamMode,
    StreamStore, StreamWriter,
};
use amdgpu_topology::parse::DEFAULT_ROOT;
use kfd::{DeviceNumber, HostDriver};

use crate::abi::{host_profile, Stage, PLUGIN_NAME};
use crate::core::parallel::{Copier, ParallelFacts, SharedDriver};
use crate::core::plugin::{CriuHost, Plugin, PluginConfig};
pub use crate::core::plugin::{VmaUpdate, NOT_MINE};
use crate::core::Error;
use crate::criu::services;
use crate::options::Options;
use crate::{log_debug, log_error, log_info};

/// CRIU's services as the core sees them.
#[derive(Debug, Clone, Copy, Default)]
pub struct CriuServices;

/// How the real plugin opens a stream: CRIU's `img_streamer_open`.
pub type StreamOpen = fn(&str, StreamMode) -> io::Result<File>;

fn open_stream(name: &str, mode: StreamMode) -> io::Result<File> {
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

impl CriuHost for CriuServices {
    type Store = HostStore;

    fn image_store(&self, dump: bool) -> Result<HostStore, Error> {
        if services().streaming(dump) {
            return Ok(HostStore::Stream(StreamStore::new(
                open_stream as StreamOpen,
            )));
        }
        let own = services()
            .image_dir()
            .map_err(Error::io("duplicating CRIU's images directory fd"))?
            .ok_or_else(|| {
                Error::Inconsistent("CRIU offers no images directory (criu_get_image_dir)".into())
            })?;
        DirStore::from_dir_fd(own)
            .map(HostStore::Dir)
            .map_err(Error::image("opening the images directory"))
    }

    fn add_inventory_plugin(&self) -> io::Result<()> {
        services().add_inventory_plugin(PLUGIN_NAME).map(|_| ())
    }

    fn inventory_names_plugin(&self) -> bool {
        services().inventory_names_plugin(PLUGIN_NAME)
    }

    fn find_unused_fd(&self, pid: u32) -> Option<i32> {
        services().find_unused_fd(i32::try_from(pid).ok()?)
    }

    /// `getpid()`: in a restored task, the pid CRIU restored it under in
    /// its own pid namespace (CRIU's vpid when the tree has one namespace).
    fn current_pid(&self) -> Option<u32> {
        Some(std::process::id())
    }

    fn fdstore_add(&self, fd: BorrowedFd<'_>) -> io::Result<i32> {
        services().fdstore_add(std::os::fd::AsRawFd::as_raw_fd(&fd))
    }

    fn fdstore_get(&self, id: i32) -> io::Result<std::os::fd::OwnedFd> {
        services().fdstore_get(id)
    }

    fn parallel_facts(&self) -> ParallelFacts {
        let services = services();
        ParallelFacts {
            calls_post_forking: host_profile().has_post_forking(),
            single_process: services.root_has_children().map(|children| !children),
            streaming: services.streaming(false),
            run_id: services.run_id(),
            turned_off: matches!(
                std::env::var("AMDGPU_PLUGIN_PARALLEL_RESTORE").as_deref(),
                Ok("0") | Ok("no") | Ok("NO")
            ),
        }
    }

    fn copier(&self) -> Option<Copier> {
        let dir = match services().image_dir() {
            Ok(Some(dir)) => dir,
            Ok(None) => return None,
            Err(e) => {
                log_error!("parallel restore: cannot duplicate CRIU's images directory fd: {e}");
                return None;
            }
        };
        match DirStore::from_dir_fd(dir) {
            Ok(images) => Some(Copier {
                driver: SharedDriver::new(HostDriver),
                images,
            }),
            Err(e) => {
                log_error!("parallel restore: cannot open the images directory: {e}");
                None
            }
        }
    }
}

static RUNTIME: Mutex<Option<Plugin<HostDriver, CriuServices>>> = Mutex::new(None);

/// The state, even after a panic in an earlier hook: a half-finished dump
/// must still be able to unpause its processes.
fn state() -> MutexGuard<'static, Option<Plugin<HostDriver, CriuServices>>> {
    RUNTIME.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_plugin<T>(
    hook: &str,
    not_mine: T,
    f: impl FnOnce(&mut Plugin<HostDriver, CriuServices>) -> T,
) -> T {
    match state().as_mut() {
        Some(plugin) => f(plugin),
        None => {
            log_debug!("{hook} before init: not handled");
            not_mine
        }
    }
}

/// `init(stage)`.
pub fn init(raw_stage: c_int) -> c_int {
    let Some(stage) = Stage::from_raw(raw_stage) else {
        log_error!("init called with unknown stage {raw_stage}");
        return -libc::EINVAL;
    };
    let profile = host_profile();
    if let Some(value) = &profile.rejected_override {
        log_error!(
            "ignoring AMDGPU_PLUGIN_MAX_HOOKS={value:?}: expecting a number from {} to {}",
            crate::abi::MIN_MAX_HOOKS,
            crate::abi::HOOK_SLOTS
        );
    }
    log_debug!(
        "host profile: max_hooks {} ({:?})",
        profile.max_hooks,
        profile.basis
    );
    let (options, invalid) = Options::from_env();
    for problem in &invalid {
        log_error!("{problem}");
    }
    for line in options.describe() {
        log_info!("{line}");
    }
    let config = PluginConfig {
        topology_root: PathBuf::from(DEFAULT_ROOT),
        shm_dir: PathBuf::from("/dev/shm"),
        has_dump_devices_late: profile.has_dump_devices_late(),
        has_restore_retry: profile.restore_ext_file_has_retry(),
    };
    let plugin = Plugin::init(HostDriver, CriuServices, stage, config, options);
    *state() = Some(plugin);
    0
}

/// `exit(stage, ret)`.
pub fn exit(_raw_stage: c_int, ret: c_int) {
    if let Some(plugin) = state().take() {
        plugin.exit(ret);
    }
}

/// `HANDLE_DEVICE_VMA(fd, st)`.
pub fn handle_device_vma(_fd: c_int, st: &libc::stat) -> c_int {
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return NOT_MINE;
    }
    let dev = DeviceNumber {
        major: libc::major(st.st_rdev),
        minor: libc::minor(st.st_rdev),
    };
    with_plugin("HANDLE_DEVICE_VMA", NOT_MINE, |p| p.handle_device_vma(dev))
}

/// `DUMP_EXT_FILE(fd, id)`.
pub fn dump_ext_file(fd: BorrowedFd<'_>, id: c_int) -> c_int {
    with_plugin("DUMP_EXT_FILE", NOT_MINE, |p| p.dump_ext_file(fd, id))
}

/// `DUMP_DEVICES_LATE(pid)`.
pub fn dump_devices_late(pid: c_int) -> c_int {
    with_plugin("DUMP_DEVICES_LATE", NOT_MINE, |p| p.dump_devices_late(pid))
}

/// `RESTORE_INIT()`.
pub fn restore_init() -> c_int {
    with_plugin("RESTORE_INIT", NOT_MINE, |p| p.restore_init())
}

/// `POST_FORKING()`.
pub fn post_forking() -> c_int {
    with_plugin("POST_FORKING", NOT_MINE, |p| p.post_forking())
}

/// `RESTORE_EXT_FILE(id)`; the second value is `retry_needed` (asked for
/// only when the host has the retry protocol, see [`PluginConfig`]).
pub fn restore_ext_file(id: c_int) -> (c_int, bool) {
    with_plugin("RESTORE_EXT_FILE", (NOT_MINE, false), |p| {
        p.restore_ext_file(id)
    })
}

/// `UPDATE_VMA_MAP(path, addr, old_pgoff)`.
pub fn update_vma_map(path: &[u8], addr: u64, old_pgoff: u64) -> VmaUpdate {
    with_plugin("UPDATE_VMA_MAP", VmaUpdate::Errno(NOT_MINE), |p| {
        p.update_vma_map(path, addr, old_pgoff)
    })
}

/// `RESUME_DEVICES_LATE(pid)`.
pub fn resume_devices_late(pid: c_int) -> c_int {
    with_plugin("RESUME_DEVICES_LATE", NOT_MINE, |p| {
        p.resume_devices_late(pid)
    })
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
            println!("skipped: the file system of the temp dir stores no holes");
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
