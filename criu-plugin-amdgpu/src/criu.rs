//! CRIU's services, looked up at run time.
//!
//! The `criu` executable is linked with `-rdynamic`, so its global functions
//! are visible to `dlsym(RTLD_DEFAULT, ...)` from a plugin it `dlopen`ed. The
//! plugin has no link-time dependency on any of them: the `.so` loads into any
//! host, and a service that is absent (older CRIU, no CRIU at all) is reported
//! as such and handled by the caller (see each method).
//!
//! Deliberately **not** used: CRIU's `opts` global. Reading `opts.stream`
//! would tie the plugin to the layout of `struct cr_options`, which changes
//! between releases. Streaming is detected from the image streamer's sockets
//! instead ([`Services::streaming`]).
//!
//! This module never interprets images and never talks to the kernel.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use crate::log::Level;

type PrintOnLevelFn = unsafe extern "C" fn(c_uint, *const c_char, ...);
type NoArgIntFn = unsafe extern "C" fn() -> c_int;
type IntIntFn = unsafe extern "C" fn(c_int) -> c_int;
type ImgStreamerOpenFn = unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
type AddInventoryPluginFn = unsafe extern "C" fn(*const c_char) -> c_int;
type CheckInventoryPluginFn = unsafe extern "C" fn(*const c_char, usize) -> bool;
type HasChildrenFn = unsafe extern "C" fn(*mut c_void) -> bool;
type GetOptionsFn = unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char) -> c_int;

/// At most this many plugin options are read (CRIU has no limit; a
/// command line with more is refused rather than read without bound).
pub const MAX_PLUGIN_OPTIONS: usize = 4096;
/// At most this many bytes of one plugin option are read.
pub const MAX_PLUGIN_OPTION_LEN: usize = 64 << 10;

/// The image streamer's socket at dump (criu/img-streamer.c).
pub const STREAMER_CAPTURE_SOCKET: &str = "streamer-capture.sock";
/// The image streamer's socket at restore.
pub const STREAMER_SERVE_SOCKET: &str = "streamer-serve.sock";

/// `O_DUMP` of CRIU (`O_WRONLY | O_CREAT | O_TRUNC`), the streamer's dump mode.
const O_DUMP: c_int = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
/// `O_RSTR` of CRIU (`O_RDONLY`), the streamer's restore mode.
const O_RSTR: c_int = libc::O_RDONLY;

/// Looks up `name` in the global scope of the process.
pub(crate) fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `name` is NUL-terminated; RTLD_DEFAULT searches the global
    // scope and dlsym has no other memory arguments.
    let ptr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!ptr.is_null()).then_some(ptr)
}

/// `RTLD_DL_SYMENT` of glibc's `dladdr1`.
const RTLD_DL_SYMENT: c_int = 1;

#[cfg(target_pointer_width = "64")]
type ElfSym = libc::Elf64_Sym;
#[cfg(target_pointer_width = "32")]
type ElfSym = libc::Elf32_Sym;

/// The ELF symbol size of CRIU's `cr_plugin_ctl`, if the process has one.
pub(crate) fn hook_table_size() -> Option<u64> {
    let addr = lookup(c"cr_plugin_ctl")?;
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::uninit();
    let mut sym: *mut c_void = std::ptr::null_mut();
    // SAFETY: `info` is writable storage for a Dl_info and `sym` for one
    // pointer, which is what dladdr1 fills with RTLD_DL_SYMENT.
    let found = unsafe { libc::dladdr1(addr, info.as_mut_ptr(), &mut sym, RTLD_DL_SYMENT) };
    if found == 0 || sym.is_null() {
        return None;
    }
    // SAFETY: with RTLD_DL_SYMENT a successful dladdr1 stores a pointer to
    // the symbol's entry in the object's (read-only, mapped) symbol table.
    let sym = unsafe { &*sym.cast::<ElfSym>() };
    #[allow(clippy::useless_conversion)] // u32 on 32-bit targets
    Some(u64::from(sym.st_size))
}

macro_rules! resolve {
    ($name:literal as $ty:ty) => {
        lookup($name).map(|ptr| {
            // SAFETY: CRIU defines this symbol as a function with exactly the
            // C signature `$ty` (criu/include/*.h); a host that exports the
            // same name with another type violates the plugin ABI, which no
            // loader can detect.
            unsafe { std::mem::transmute::<*mut c_void, $ty>(ptr) }
        })
    };
}

/// The CRIU services found in this process.
#[derive(Debug, Clone, Copy)]
pub struct Services {
    print_on_level: Option<PrintOnLevelFn>,
    get_image_dir: Option<NoArgIntFn>,
    img_streamer_open: Option<ImgStreamerOpenFn>,
    add_inventory_plugin: Option<AddInventoryPluginFn>,
    check_and_remove_inventory_plugin: Option<CheckInventoryPluginFn>,
    find_unused_fd_pid: Option<IntIntFn>,
    fdstore_add: Option<IntIntFn>,
    fdstore_get: Option<IntIntFn>,
    /// `set_fds_event(pid_t virt)` (files.c).
    set_fds_event: Option<IntIntFn>,
    /// `char criu_run_id[]` (util.c), the run's UUID.
    criu_run_id: Option<*mut c_void>,
    /// `struct pstree_item *root_item` (pstree.c).
    root_item: Option<*mut c_void>,
    has_children: Option<HasChildrenFn>,
    /// `criu_plugin_get_options` (criu#3138, CRIU after 4.2).
    get_options: Option<GetOptionsFn>,
}

// SAFETY: the raw pointers are addresses of CRIU globals, valid for the
// whole life of the process and only read (through `criu_run_id` and
// `root_has_children`), never written; sharing the addresses between
// threads is as safe as sharing the function pointers next to them.
unsafe impl Send for Services {}
// SAFETY: see `Send`: immutable addresses of process-lifetime globals.
unsafe impl Sync for Services {}

/// What a restore's inventory image says about a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InventoryGate {
    /// The inventory lists the plugin: the dump saved files only it
    /// restores.
    Lists,
    /// The inventory lists other plugins or none: nothing here needs it.
    Omits,
    /// No plugin list (images or CRIU older than v4.1): CRIU treats every
    /// plugin as needed.
    Predates,
}

/// The longest `criu_run_id` read (CRIU's is a 36-character UUID string
/// with its NUL).
const RUN_ID_MAX: usize = 37;

/// The services of this process, resolved on first use.
pub fn services() -> &'static Services {
    static SERVICES: OnceLock<Services> = OnceLock::new();
    SERVICES.get_or_init(Services::resolve)
}

impl Services {
    fn resolve() -> Services {
        Services {
            print_on_level: resolve!(c"print_on_level" as PrintOnLevelFn),
            get_image_dir: resolve!(c"criu_get_image_dir" as NoArgIntFn),
            img_streamer_open: resolve!(c"img_streamer_open" as ImgStreamerOpenFn),
            add_inventory_plugin: resolve!(c"add_inventory_plugin" as AddInventoryPluginFn),
            check_and_remove_inventory_plugin: resolve!(
                c"check_and_remove_inventory_plugin" as CheckInventoryPluginFn
            ),
            find_unused_fd_pid: resolve!(c"find_unused_fd_pid" as IntIntFn),
            fdstore_add: resolve!(c"fdstore_add" as IntIntFn),
            fdstore_get: resolve!(c"fdstore_get" as IntIntFn),
            set_fds_event: resolve!(c"set_fds_event" as IntIntFn),
            criu_run_id: lookup(c"criu_run_id"),
            root_item: lookup(c"root_item"),
            has_children: resolve!(c"has_children" as HasChildrenFn),
            get_options: resolve!(c"criu_plugin_get_options" as GetOptionsFn),
        }
    }

    /// CRIU's plugin options (`--plugin-option PLUGIN.NAME=VALUE`, every
    /// plugin's, in order), copied: the array is CRIU's own and a parser
    /// such as `getopt_long` permutes it in place, so it is read once and
    /// never handed to anything that writes. `Ok(None)` when CRIU predates
    /// the service (the environment alone configures the plugin then).
    pub fn plugin_options(&self) -> std::io::Result<Option<Vec<String>>> {
        let Some(get) = self.get_options else {
            return Ok(None);
        };
        let mut argc: c_int = 0;
        let mut argv: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: both out-pointers point at locals that live across the
        // call; CRIU writes the count and its array's address there.
        let ret = unsafe { get(&mut argc, &mut argv) };
        if ret < 0 {
            return Err(std::io::Error::other(format!(
                "criu_plugin_get_options failed ({ret})"
            )));
        }
        let count = usize::try_from(argc).map_err(|_| {
            std::io::Error::other(format!("criu_plugin_get_options: negative count {argc}"))
        })?;
        if count == 0 {
            return Ok(Some(Vec::new()));
        }
        if argv.is_null() || count > MAX_PLUGIN_OPTIONS {
            return Err(std::io::Error::other(format!(
                "criu_plugin_get_options: {count} options at {argv:p}"
            )));
        }
        let mut options = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: CRIU's array holds `argc` entries (`count < argc`
            // checked above, and null was refused).
            let entry = unsafe { argv.add(i).read() };
            if entry.is_null() {
                continue;
            }
            let mut bytes = Vec::new();
            for k in 0..=MAX_PLUGIN_OPTION_LEN {
                // SAFETY: each entry is a NUL-terminated string of CRIU's;
                // reading stops at its NUL (or at the length bound, which a
                // well-formed entry never reaches).
                let byte = unsafe { entry.cast::<u8>().add(k).read() };
                if byte == 0 {
                    break;
                }
                if k == MAX_PLUGIN_OPTION_LEN {
                    return Err(std::io::Error::other(format!(
                        "criu_plugin_get_options: option {i} is longer than {MAX_PLUGIN_OPTION_LEN} bytes"
                    )));
                }
                bytes.push(byte);
            }
            options.push(String::from_utf8_lossy(&bytes).into_owned());
        }
        Ok(Some(options))
    }

    /// CRIU's `criu_run_id` (the UUID naming this CRIU run), when CRIU has
    /// one and it is set: at most 36 printable characters before its NUL.
    pub fn run_id(&self) -> Option<String> {
        let base = self.criu_run_id?.cast::<u8>();
        let mut id = Vec::with_capacity(RUN_ID_MAX);
        for i in 0..RUN_ID_MAX {
            // SAFETY: `criu_run_id` is a char array of RUN_ID_MAX bytes in
            // CRIU (`RUN_ID_HASH_LENGTH`, 37); the loop never reads past it
            // and stops at the NUL.
            let byte = unsafe { base.add(i).read() };
            if byte == 0 {
                break;
            }
            id.push(byte);
        }
        if id.is_empty() || id.len() == RUN_ID_MAX || !id.iter().all(u8::is_ascii_graphic) {
            return None;
        }
        String::from_utf8(id).ok()
    }

    /// Whether the root of the process tree being restored has children
    /// (`has_children(root_item)`); `None` when CRIU lacks either symbol or
    /// has no tree yet.
    pub fn root_has_children(&self) -> Option<bool> {
        let has_children = self.has_children?;
        let slot = self.root_item?.cast::<*mut c_void>();
        // SAFETY: `root_item` is a global pointer variable of CRIU; its
        // address stays valid and holds a (possibly null) pointer.
        let root = unsafe { slot.read() };
        if root.is_null() {
            return None;
        }
        // SAFETY: `root` is CRIU's pstree root, a live `struct pstree_item`
        // once the tree is read (before `init(RESTORE)` calls this), and
        // `has_children` only reads its children list.
        Some(unsafe { has_children(root) })
    }

    /// Whether this process is CRIU (it offers `criu_get_image_dir`, the one
    /// documented plugin API).
    pub fn in_criu(&self) -> bool {
        self.get_image_dir.is_some()
    }

    /// Prints `prefix` (the level's tag and the plugin prefix, see
    /// [`crate::log::line_start`]) + `text` through CRIU's `print_on_level`. Returns
    /// false when CRIU's logger is not available.
    pub fn print(&self, level: Level, prefix: &str, text: &str) -> bool {
        let Some(print_on_level) = self.print_on_level else {
            return false;
        };
        let mut line = String::with_capacity(prefix.len() + text.len() + 1);
        line.push_str(prefix);
        // An interior NUL would cut the line short; make it visible instead.
        line.extend(text.chars().map(|c| if c == '\0' { '?' } else { c }));
        line.push('\n');
        let Ok(line) = CString::new(line) else {
            return false;
        };
        // SAFETY: print_on_level is printf-like; the format "%s" consumes
        // exactly one argument, a NUL-terminated string that outlives the call.
        unsafe { print_on_level(level as c_uint, c"%s".as_ptr(), line.as_ptr()) };
        true
    }

    /// `criu_get_image_dir()`: CRIU's service fd of the images directory,
    /// borrowed (CRIU owns it). `None` outside CRIU.
    pub fn image_dir_fd(&self) -> Option<c_int> {
        let get = self.get_image_dir?;
        // SAFETY: criu_get_image_dir takes no arguments.
        let fd = unsafe { get() };
        (fd >= 0).then_some(fd)
    }

    /// A duplicate of CRIU's images directory fd, owned by the caller.
    /// `Ok(None)` outside CRIU.
    pub fn image_dir(&self) -> std::io::Result<Option<OwnedFd>> {
        let Some(fd) = self.image_dir_fd() else {
            return Ok(None);
        };
        // SAFETY: CRIU keeps its images directory service fd open for the
        // whole run; the borrow only lives for the duplication below.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        borrowed.try_clone_to_owned().map(Some)
    }

    /// Whether CRIU runs with `--stream`: the image streamer's socket for
    /// this direction exists in the images directory and CRIU offers
    /// `img_streamer_open`. `AMDGPU_PLUGIN_STREAM=1`/`0` overrides the
    /// detection.
    pub fn streaming(&self, dump: bool) -> bool {
        match std::env::var("AMDGPU_PLUGIN_STREAM").as_deref() {
            Ok("1") | Ok("yes") | Ok("YES") => return true,
            Ok("0") | Ok("no") | Ok("NO") => return false,
            _ => {}
        }
        if self.img_streamer_open.is_none() {
            return false;
        }
        let Some(dir) = self.image_dir_fd() else {
            return false;
        };
        let socket = if dump {
            STREAMER_CAPTURE_SOCKET
        } else {
            STREAMER_SERVE_SOCKET
        };
        let path = format!("/proc/self/fd/{dir}/{socket}");
        std::fs::symlink_metadata(path).is_ok_and(|meta| {
            use std::os::unix::fs::FileTypeExt;
            meta.file_type().is_socket()
        })
    }

    /// `img_streamer_open(name, O_DUMP or O_RSTR)`: a pipe to the image
    /// streamer for one image. `Err(ENOSYS)` when CRIU has no streamer;
    /// `Err(ENOENT)` at restore when the image does not exist.
    pub fn streamer_open(&self, name: &str, dump: bool) -> std::io::Result<OwnedFd> {
        let open = self
            .img_streamer_open
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOSYS))?;
        let name =
            CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        let mode = if dump { O_DUMP } else { O_RSTR };
        // SAFETY: the name is NUL-terminated and CRIU only reads it (the
        // parameter lacks `const` in CRIU's prototype only).
        let fd = unsafe { open(name.as_ptr().cast_mut(), mode) };
        if fd == -libc::ENOENT {
            return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
        }
        if fd < 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        // SAFETY: on success img_streamer_open returns a new pipe fd that
        // the caller owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `add_inventory_plugin(name)`: records the plugin in the inventory so
    /// a restore loads it. `Ok(false)` when CRIU predates inventory gating
    /// (v4.1).
    pub fn add_inventory_plugin(&self, name: &CStr) -> std::io::Result<bool> {
        let Some(add) = self.add_inventory_plugin else {
            return Ok(false);
        };
        // SAFETY: `name` is NUL-terminated and CRIU copies it.
        let ret = unsafe { add(name.as_ptr()) };
        if ret != 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        Ok(true)
    }

    /// What the inventory of the images being restored says about the
    /// plugin `name`, through `check_and_remove_inventory_plugin(name, len)`
    /// (which also takes `name` off CRIU's list of plugins still missing).
    ///
    /// CRIU answers true for every name when the inventory has no plugin
    /// list at all (images of CRIU before v4.1), so a name no plugin has is
    /// asked first: true for it means the list is absent. CRIU before v4.1
    /// has no such service: [`InventoryGate::Predates`].
    pub fn inventory_gate(&self, name: &CStr) -> InventoryGate {
        let Some(check) = self.check_and_remove_inventory_plugin else {
            return InventoryGate::Predates;
        };
        let ask = |name: &CStr| {
            // SAFETY: `name` is NUL-terminated and exactly `len` bytes long
            // before its NUL; CRIU compares at most `len` bytes.
            unsafe { check(name.as_ptr(), name.to_bytes().len()) }
        };
        // No plugin is called this: the prefix compare of a listed name
        // never matches it, so it is true only for images without a list.
        if ask(c"amdgpu_plugin inventory probe: no plugin has this name") {
            return InventoryGate::Predates;
        }
        if ask(name) {
            InventoryGate::Lists
        } else {
            InventoryGate::Omits
        }
    }

    /// Whether the inventory of the images being restored names this plugin,
    /// or predates inventory gating (then CRIU treats every plugin as
    /// needed, and so does this).
    pub fn inventory_names_plugin(&self, name: &CStr) -> bool {
        self.inventory_gate(name) != InventoryGate::Omits
    }

    /// `find_unused_fd_pid(pid)`: the lowest fd number above every fd the
    /// restored task `pid` will own. `None` when CRIU lacks the service or
    /// answers an error.
    pub fn find_unused_fd(&self, pid: i32) -> Option<c_int> {
        let find = self.find_unused_fd_pid?;
        // SAFETY: find_unused_fd_pid takes a pid by value.
        let fd = unsafe { find(pid) };
        (fd > 0).then_some(fd)
    }

    /// `set_fds_event(pid)`: wakes restored task `pid` (its pid in the
    /// restored tree, which CRIU must know: CRIU stops on a pid it does not
    /// know) if it sleeps waiting for a file. Nothing without the service.
    pub fn set_fds_event(&self, pid: u32) {
        let (Some(set), Ok(pid)) = (self.set_fds_event, c_int::try_from(pid)) else {
            return;
        };
        // SAFETY: set_fds_event takes a pid by value; the callers pass only
        // pids of restored tasks, which recorded themselves as waiters.
        unsafe { set(pid) };
    }

    /// `fdstore_add(fd)`: parks a duplicate of `fd` in CRIU's fd store and
    /// returns its id.
    pub fn fdstore_add(&self, fd: c_int) -> std::io::Result<c_int> {
        let add = self
            .fdstore_add
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOSYS))?;
        // SAFETY: fdstore_add takes an fd by value and sends a copy of it.
        let id = unsafe { add(fd) };
        if id < 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(id)
    }

    /// `fdstore_get(id)`: a new fd for the file parked under `id`.
    pub fn fdstore_get(&self, id: c_int) -> std::io::Result<OwnedFd> {
        let get = self
            .fdstore_get
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOSYS))?;
        // SAFETY: fdstore_get takes an id by value.
        let fd = unsafe { get(id) };
        if fd < 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOENT));
        }
        // SAFETY: on success fdstore_get returns a new fd owned by the caller.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}
