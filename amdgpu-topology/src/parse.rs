//! Reading a KFD topology tree (`/sys/class/kfd/kfd/topology` or a copy of
//! it) into a [`System`].
//!
//! The reader goes through a [`SysfsReader`] so tests can stage what sysfs
//! does to us (EPERM on cgroup-hidden nodes, nodes vanishing during a hot
//! unplug) without root tricks. Nodes the caller may not read are skipped and
//! reported, as the C plugin skips them; everything else that is wrong is an
//! error naming the file and line. This module never writes and never panics
//! on file contents.
//!
//! # Format rules
//!
//! A `properties` file is `key value` lines. The parser is as strict as the
//! C plugin on content (every line must be a key and one unsigned decimal
//! value; a malformed line fails the whole parse) and tolerant on layout:
//!
//! * keys are 1 to 64 characters of `[A-Za-z0-9_]`;
//! * values are decimal digits only (no sign, no hex), at most `u64::MAX`;
//! * key and value are separated by spaces or tabs; trailing spaces, tabs and
//!   a CR before the LF are accepted (copies of sysfs made on other systems
//!   carry them), and so is a missing final newline;
//! * blank lines, a third field, duplicate keys and empty files are errors;
//! * the keys in [`LIST_KEYS`] (`sibling_map`) take a comma-separated list of
//!   decimal numbers (one or more), kept verbatim as a list value.
//!
//! Not read: `nodes/N/perf/` and anything else the model has no place for.
//!
//! Single-value files (`gpu_id`, `generation_id`, `used_memory`) are one
//! decimal number with optional trailing whitespace. `name` is any UTF-8
//! text; one trailing newline is removed. Every file read is capped at
//! [`MAX_FILE_SIZE`] bytes.

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::model::{Indexed, Link, Node, Properties, System};

/// Where the kernel publishes the topology.
pub const DEFAULT_ROOT: &str = "/sys/class/kfd/kfd/topology";

/// The same tree under its device path.
pub const DEVICES_ROOT: &str = "/sys/devices/virtual/kfd/kfd/topology";

/// Largest file the parser reads (sysfs files are at most a page; fixtures
/// with many CPUs have long `sibling_map` lines, still far below this).
pub const MAX_FILE_SIZE: usize = 1 << 20;

/// Keys whose value is a comma-separated list of numbers, not one number.
pub const LIST_KEYS: &[&str] = &["sibling_map"];

/// Longest key the C plugin accepts (its `%64s`).
const MAX_KEY_LEN: usize = 64;

/// How many times [`parse`] re-reads the tree when `generation_id` changed
/// while it was reading.
const GENERATION_RETRIES: usize = 3;

/// A parsed topology with what had to be left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The readable part of the topology.
    pub system: System,
    /// Nodes that were skipped, in node order.
    pub skipped: Vec<Skipped>,
    /// Things worth knowing that did not stop the parse (missing `gpu_id`, ...).
    pub notes: Vec<Note>,
}

/// A node left out of the [`System`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The node id.
    pub node: u32,
    /// The file or directory whose read failed.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: SkipReason,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} skipped: {} ({})",
            self.node,
            self.reason,
            self.path.display()
        )
    }
}

/// Why a node was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum SkipReason {
    /// EPERM or EACCES: the device cgroup hides this GPU from us.
    AccessDenied,
    /// The node directory disappeared while it was being read (GPU removed).
    Vanished,
    /// The node directory exists but a file that must be there does not
    /// (`properties`, or the `properties` of a listed link, bank or cache).
    MissingFile,
    /// The node entry is not a directory.
    NotADirectory,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::AccessDenied => "access denied (hidden by the device cgroup?)",
            SkipReason::Vanished => "node disappeared while reading",
            SkipReason::MissingFile => "required file missing",
            SkipReason::NotADirectory => "not a directory",
        })
    }
}

/// Something the parse noticed that is not an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Note {
    /// A node without a `gpu_id` file (partial capture); `gpu_id` is `None`.
    MissingGpuId {
        /// The node id.
        node: u32,
    },
    /// A GPU node without a `mem_banks` directory: its VRAM size is unknown.
    MissingMemBanks {
        /// The node id.
        node: u32,
    },
    /// The tree has no `generation_id` file.
    MissingGenerationId,
    /// The tree has no `system_properties` file.
    MissingSystemProperties,
    /// A directory entry that is not a decimal number was ignored.
    IgnoredEntry {
        /// The entry.
        path: PathBuf,
    },
    /// `generation_id` changed during the read; the tree was read again.
    Reread {
        /// The generation seen before the read.
        before: u64,
        /// The generation seen after it.
        after: u64,
    },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::MissingGpuId { node } => write!(f, "node {node} has no gpu_id file"),
            Note::MissingMemBanks { node } => {
                write!(f, "GPU node {node} has no mem_banks: VRAM size unknown")
            }
            Note::MissingGenerationId => f.write_str("no generation_id file"),
            Note::MissingSystemProperties => f.write_str("no system_properties file"),
            Note::IgnoredEntry { path } => write!(f, "ignored {}", path.display()),
            Note::Reread { before, after } => write!(
                f,
                "topology changed while reading (generation {before} -> {after}); read again"
            ),
        }
    }
}

/// What is wrong with a line or a file's content.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyntaxError {
    /// The file is empty but must hold a value.
    Empty,
    /// A blank line inside a properties file.
    BlankLine,
    /// The bytes are not UTF-8.
    NotUtf8,
    /// A key that is too long or has characters outside `[A-Za-z0-9_]`.
    BadKey(String),
    /// A key without a value.
    MissingValue(String),
    /// More than one value on a line.
    TrailingText(String),
    /// A value that is not a decimal unsigned number.
    NotANumber(String),
    /// A decimal value larger than the field holds.
    Overflow(String),
    /// A key seen twice in one file.
    DuplicateKey(String),
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyntaxError::Empty => f.write_str("file is empty"),
            SyntaxError::BlankLine => f.write_str("blank line"),
            SyntaxError::NotUtf8 => f.write_str("not UTF-8 text"),
            SyntaxError::BadKey(k) => write!(f, "bad key {k:?}"),
            SyntaxError::MissingValue(k) => write!(f, "key {k:?} has no value"),
            SyntaxError::TrailingText(t) => write!(f, "unexpected text {t:?} after the value"),
            SyntaxError::NotANumber(v) => write!(f, "{v:?} is not an unsigned decimal number"),
            SyntaxError::Overflow(v) => write!(f, "{v} is out of range"),
            SyntaxError::DuplicateKey(k) => write!(f, "duplicate key {k:?}"),
        }
    }
}

/// Why a topology could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The root has no `nodes` directory.
    #[error("no KFD topology at {}: {} does not exist", .root.display(), .root.join("nodes").display())]
    NoTopology {
        /// The root that was tried.
        root: PathBuf,
    },
    /// A read failed for a reason other than the ones that skip a node.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file is larger than [`MAX_FILE_SIZE`].
    #[error("{} is larger than {limit} bytes", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap.
        limit: usize,
    },
    /// A file's content is malformed.
    #[error("{}:{line}: {reason}", .path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: SyntaxError,
    },
    /// `generation_id` kept changing while the tree was read.
    #[error("topology under {} kept changing while being read (generation_id {before} -> {after})", .root.display())]
    Unstable {
        /// The root.
        root: PathBuf,
        /// Generation before the last attempt.
        before: u64,
        /// Generation after it.
        after: u64,
    },
}

/// The file system operations the parser needs. [`RealFs`] is the real one;
/// tests wrap it to inject errors.
pub trait SysfsReader {
    /// Names of the entries of directory `path` (any order).
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Whether `path` is a directory (following symlinks).
    fn is_dir(&self, path: &Path) -> io::Result<bool>;
    /// At most `limit` bytes from the start of file `path`.
    fn read(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>>;
}

/// [`SysfsReader`] over the real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl SysfsReader for RealFs {
    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(path)? {
            // Names that are not UTF-8 cannot be node or entry numbers.
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn is_dir(&self, path: &Path) -> io::Result<bool> {
        Ok(fs::metadata(path)?.is_dir())
    }

    fn read(&self, path: &Path, limit: usize) -> io::Result<Vec<u8>> {
        let file = fs::File::open(path)?;
        let mut buf = Vec::new();
        // sysfs reports st_size 4096 whatever the content; read instead.
        file.take(limit as u64).read_to_end(&mut buf)?;
        Ok(buf)
    }
}

/// Reads the topology under `root` (a directory holding `nodes/`, and
/// usually `generation_id` and `system_properties`).
pub fn parse(root: &Path) -> Result<Parsed, ParseError> {
    parse_with(&RealFs, root)
}

/// Reads this machine's topology from [`DEFAULT_ROOT`], or from
/// [`DEVICES_ROOT`] when the class symlink is missing (a sysfs mounted
/// without `/sys/class`, as in some containers).
pub fn parse_host() -> Result<Parsed, ParseError> {
    match parse(Path::new(DEFAULT_ROOT)) {
        Err(ParseError::NoTopology { .. }) if Path::new(DEVICES_ROOT).is_dir() => {
            parse(Path::new(DEVICES_ROOT))
        }
        other => other,
    }
}

/// [`parse`] through `reader`. When `generation_id` differs before and
/// after the read, the tree is read again (a few times at most).
pub fn parse_with(reader: &(impl SysfsReader + ?Sized), root: &Path) -> Result<Parsed, ParseError> {
    let mut rereads = Vec::new();
    let mut last = (0, 0);
    for _ in 0..=GENERATION_RETRIES {
        let before = read_generation(reader, root)?;
        let mut parsed = parse_once(reader, root)?;
        let after = read_generation(reader, root)?;
        match (before, after) {
            (Some(b), Some(a)) if a != b => {
                rereads.push(Note::Reread {
                    before: b,
                    after: a,
                });
                last = (b, a);
            }
            _ => {
                parsed.notes.splice(0..0, rereads);
                return Ok(parsed);
            }
        }
    }
    Err(ParseError::Unstable {
        root: root.to_owned(),
        before: last.0,
        after: last.1,
    })
}

fn read_generation(
    reader: &(impl SysfsReader + ?Sized),
    root: &Path,
) -> Result<Option<u64>, ParseError> {
    let path = root.join("generation_id");
    match read_file(reader, &path) {
        Ok(bytes) => Ok(Some(parse_u64_file(&bytes, &path)?)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ParseError::Io { path, source: e }),
    }
}

fn parse_once(reader: &(impl SysfsReader + ?Sized), root: &Path) -> Result<Parsed, ParseError> {
    let mut notes = Vec::new();
    let nodes_dir = root.join("nodes");
    let names = match reader.read_dir(&nodes_dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ParseError::NoTopology {
                root: root.to_owned(),
            })
        }
        Err(e) => {
            return Err(ParseError::Io {
                path: nodes_dir,
                source: e,
            })
        }
    };
    let ids = numbered_entries(&nodes_dir, names, &mut notes);

    let generation_id = read_generation(reader, root)?;
    if generation_id.is_none() {
        notes.push(Note::MissingGenerationId);
    }
    let sp_path = root.join("system_properties");
    let system_properties = match read_file(reader, &sp_path) {
        Ok(bytes) => Some(parse_properties(&bytes, &sp_path)?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            notes.push(Note::MissingSystemProperties);
            None
        }
        Err(e) => {
            return Err(ParseError::Io {
                path: sp_path,
                source: e,
            })
        }
    };

    let mut nodes = Vec::new();
    let mut skipped = Vec::new();
    for id in ids {
        let dir = nodes_dir.join(id.to_string());
        match read_node(reader, id, &dir, &mut notes)? {
            Ok(node) => nodes.push(node),
            Err((path, reason)) => skipped.push(Skipped {
                node: id,
                path,
                reason,
            }),
        }
    }
    Ok(Parsed {
        system: System {
            generation_id,
            system_properties,
            nodes,
        },
        skipped,
        notes,
    })
}

/// Entry names that are canonical decimal numbers (as the kernel prints
/// them: no sign, no leading zeros), as sorted numbers; others noted.
fn numbered_entries(dir: &Path, names: Vec<String>, notes: &mut Vec<Note>) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::with_capacity(names.len());
    for name in names {
        let canonical = decimal(&name)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|id| id.to_string() == name);
        match canonical {
            Some(id) => ids.push(id),
            None => notes.push(Note::IgnoredEntry {
                path: dir.join(name),
            }),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Why a node is skipped: the path that failed and the reason.
type Skip = (PathBuf, SkipReason);

/// A read inside a node: a hard error, a skip of the node, or the value.
type Step<T> = Result<Result<T, Skip>, ParseError>;

/// Turns an I/O error inside a node into a skip or a hard error.
fn classify(
    reader: &(impl SysfsReader + ?Sized),
    node_dir: &Path,
    path: PathBuf,
    e: io::Error,
) -> Result<Skip, ParseError> {
    let denied = e.kind() == io::ErrorKind::PermissionDenied
        || matches!(e.raw_os_error(), Some(code) if code == EPERM || code == EACCES);
    if denied {
        return Ok((path, SkipReason::AccessDenied));
    }
    if e.kind() == io::ErrorKind::NotFound {
        let still_there = matches!(reader.is_dir(node_dir), Ok(true));
        let reason = if still_there {
            SkipReason::MissingFile
        } else {
            SkipReason::Vanished
        };
        return Ok((path, reason));
    }
    Err(ParseError::Io { path, source: e })
}

const EPERM: i32 = 1;
const EACCES: i32 = 13;

/// Reads an optional file: `Ok(None)` when it does not exist (but the node
/// does), `Err(skip)` when the node must be skipped.
fn read_optional(
    reader: &(impl SysfsReader + ?Sized),
    node_dir: &Path,
    path: PathBuf,
) -> Step<Option<Vec<u8>>> {
    match read_file(reader, &path) {
        Ok(bytes) => {
            check_size(&bytes, &path)?;
            Ok(Ok(Some(bytes)))
        }
        Err(e) => match classify(reader, node_dir, path, e)? {
            (_, SkipReason::MissingFile) => Ok(Ok(None)),
            skip => Ok(Err(skip)),
        },
    }
}

/// Reads a required file, or says why the node must be skipped.
fn read_required(
    reader: &(impl SysfsReader + ?Sized),
    node_dir: &Path,
    path: PathBuf,
) -> Step<Vec<u8>> {
    match read_file(reader, &path) {
        Ok(bytes) => {
            check_size(&bytes, &path)?;
            Ok(Ok(bytes))
        }
        Err(e) => Ok(Err(classify(reader, node_dir, path, e)?)),
    }
}

/// Lists an optional numbered subdirectory (`io_links`, ...).
fn list_optional(
    reader: &(impl SysfsReader + ?Sized),
    node_dir: &Path,
    dir: PathBuf,
    notes: &mut Vec<Note>,
) -> Step<Option<Vec<u32>>> {
    match reader.read_dir(&dir) {
        Ok(names) => Ok(Ok(Some(numbered_entries(&dir, names, notes)))),
        Err(e) => match classify(reader, node_dir, dir, e)? {
            (_, SkipReason::MissingFile) => Ok(Ok(None)),
            skip => Ok(Err(skip)),
        },
    }
}

/// Propagates a skip out of a node reader.
macro_rules! or_skip {
    ($e:expr) => {
        match $e? {
            Ok(v) => v,
            Err(skip) => return Ok(Err(skip)),
        }
    };
}

fn read_node(
    reader: &(impl SysfsReader + ?Sized),
    id: u32,
    dir: &Path,
    notes: &mut Vec<Note>,
) -> Step<Node> {
    match reader.is_dir(dir) {
        Ok(true) => {}
        Ok(false) => return Ok(Err((dir.to_owned(), SkipReason::NotADirectory))),
        Err(e) => return Ok(Err(classify(reader, dir, dir.to_owned(), e)?)),
    }
    let mut node_notes = Vec::new();

    let props_path = dir.join("properties");
    let properties = parse_properties(
        &or_skip!(read_required(reader, dir, props_path.clone())),
        &props_path,
    )?;

    let gpu_id_path = dir.join("gpu_id");
    let gpu_id = match or_skip!(read_optional(reader, dir, gpu_id_path.clone())) {
        Some(bytes) => Some(parse_u32_file(&bytes, &gpu_id_path)?),
        None => {
            node_notes.push(Note::MissingGpuId { node: id });
            None
        }
    };

    let name_path = dir.join("name");
    let name = match or_skip!(read_optional(reader, dir, name_path.clone())) {
        Some(bytes) => Some(parse_name(bytes, &name_path)?),
        None => None,
    };

    let mem_banks = or_skip!(read_indexed(reader, dir, "mem_banks", true, notes));
    let caches = or_skip!(read_indexed(reader, dir, "caches", false, notes));
    let io_links = or_skip!(read_links(reader, dir, "io_links", notes));
    let p2p_links = or_skip!(read_links(reader, dir, "p2p_links", notes));

    let node = Node {
        id,
        gpu_id,
        name,
        properties,
        mem_banks,
        caches,
        io_links,
        p2p_links,
    };
    if node.is_gpu() && node.mem_banks.is_none() {
        node_notes.push(Note::MissingMemBanks { node: id });
    }
    notes.extend(node_notes);
    Ok(Ok(node))
}

fn read_indexed(
    reader: &(impl SysfsReader + ?Sized),
    node_dir: &Path,
    sub: &str,
    with_used_memory: bool,
    notes: &mut Vec<Note>,
) -> Step<Option<Vec<Indexed>>> {
    let dir = node_dir.join(sub);
    let Some(indices) = or_skip!(list_optional(reader, node_dir, dir.clone(), notes)) else {
        return Ok(Ok(None));
    };
    let mut out = Vec::with_capacity(indices.len());
    for index in indices {
        let entry = dir.join(index.to_string());
        let path = entry.join("properties");
        let properties = parse_properties(
            &or_skip!(read_required(reader, node_dir, path.clone())),
            &path,
        )?;
        let used_memory = if with_used_memory {
            let path = entry.join("used_memory");
            match or_skip!(read_optional(reader, node_dir, path.clone())) {
                Some(bytes) => Some(parse_u64_file(&bytes, &path)?),
                None => None,
            }
        } else {
            None
        };
        out.push(Indexed {
            index,
            properties,
            used_memory,
        });
    }
    Ok(Ok(Some(out)))
}

fn read_links(
    reader: &(impl SysfsReader + ?Sized),
    node_dir: &Path,
    sub: &str,
    notes: &mut Vec<Note>,
) -> Step<Option<Vec<Link>>> {
    let dir = node_dir.join(sub);
    let Some(indices) = or_skip!(list_optional(reader, node_dir, dir.clone(), notes)) else {
        return Ok(Ok(None));
    };
    let mut out = Vec::with_capacity(indices.len());
    for index in indices {
        let path = dir.join(index.to_string()).join("properties");
        let properties = parse_properties(
            &or_skip!(read_required(reader, node_dir, path.clone())),
            &path,
        )?;
        out.push(Link { index, properties });
    }
    Ok(Ok(Some(out)))
}

/// Reads one more byte than the cap so an oversized file is detected.
fn read_file(reader: &(impl SysfsReader + ?Sized), path: &Path) -> io::Result<Vec<u8>> {
    reader.read(path, MAX_FILE_SIZE + 1)
}

fn check_size(bytes: &[u8], path: &Path) -> Result<(), ParseError> {
    if bytes.len() > MAX_FILE_SIZE {
        return Err(ParseError::TooLarge {
            path: path.to_owned(),
            limit: MAX_FILE_SIZE,
        });
    }
    Ok(())
}

fn syntax(path: &Path, line: usize, reason: SyntaxError) -> ParseError {
    ParseError::Syntax {
        path: path.to_owned(),
        line,
        reason,
    }
}

/// `Some(n)` when `s` is one or more ASCII digits fitting in u64.
fn decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses an unsigned decimal value, telling "not a number" from overflow.
fn number(s: &str) -> Result<u64, SyntaxError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SyntaxError::NotANumber(s.to_owned()));
    }
    s.parse().map_err(|_| SyntaxError::Overflow(s.to_owned()))
}

fn is_list(s: &str) -> bool {
    s.split(',')
        .all(|item| !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit()))
}

/// Strips the line terminator leftovers the format tolerates.
fn trim_line_end(line: &str) -> &str {
    line.trim_end_matches([' ', '\t', '\r'])
}

/// Parses the content of a `properties` (or `system_properties`) file.
/// `path` only names the file in errors.
pub fn parse_properties(bytes: &[u8], path: &Path) -> Result<Properties, ParseError> {
    check_size(bytes, path)?;
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        syntax(path, line, SyntaxError::NotUtf8)
    })?;
    if text.is_empty() {
        return Err(syntax(path, 1, SyntaxError::Empty));
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut props = Properties::new();
    for (i, raw) in body.split('\n').enumerate() {
        let line_no = i + 1;
        let line = trim_line_end(raw);
        let mut fields = line.split([' ', '\t']).filter(|f| !f.is_empty());
        let Some(key) = fields.next() else {
            return Err(syntax(path, line_no, SyntaxError::BlankLine));
        };
        let key_ok = key.len() <= MAX_KEY_LEN
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && line.starts_with(key);
        if !key_ok {
            return Err(syntax(path, line_no, SyntaxError::BadKey(key.to_owned())));
        }
        let Some(value) = fields.next() else {
            return Err(syntax(
                path,
                line_no,
                SyntaxError::MissingValue(key.to_owned()),
            ));
        };
        if let Some(extra) = fields.next() {
            return Err(syntax(
                path,
                line_no,
                SyntaxError::TrailingText(extra.to_owned()),
            ));
        }
        if props.contains(key) {
            return Err(syntax(
                path,
                line_no,
                SyntaxError::DuplicateKey(key.to_owned()),
            ));
        }
        if LIST_KEYS.contains(&key) {
            if !is_list(value) {
                return Err(syntax(
                    path,
                    line_no,
                    SyntaxError::NotANumber(value.to_owned()),
                ));
            }
            props.set_list(key, value);
        } else {
            let n = number(value).map_err(|reason| syntax(path, line_no, reason))?;
            props.set(key, n);
        }
    }
    Ok(props)
}

/// The single value of a one-number file, trailing whitespace allowed.
fn single_value(bytes: &[u8], path: &Path) -> Result<u64, ParseError> {
    check_size(bytes, path)?;
    let text = std::str::from_utf8(bytes).map_err(|_| syntax(path, 1, SyntaxError::NotUtf8))?;
    let value = text.trim_end_matches([' ', '\t', '\r', '\n']);
    if value.is_empty() {
        return Err(syntax(path, 1, SyntaxError::Empty));
    }
    if value.contains('\n') {
        return Err(syntax(
            path,
            2,
            SyntaxError::TrailingText(value.lines().nth(1).unwrap_or_default().to_owned()),
        ));
    }
    number(value).map_err(|reason| syntax(path, 1, reason))
}

/// Parses a one-number u64 file (`generation_id`, `used_memory`).
pub fn parse_u64_file(bytes: &[u8], path: &Path) -> Result<u64, ParseError> {
    single_value(bytes, path)
}

/// Parses a one-number u32 file (`gpu_id`).
pub fn parse_u32_file(bytes: &[u8], path: &Path) -> Result<u32, ParseError> {
    let value = single_value(bytes, path)?;
    u32::try_from(value).map_err(|_| syntax(path, 1, SyntaxError::Overflow(value.to_string())))
}

/// Parses a `name` file: UTF-8, one trailing newline removed.
fn parse_name(bytes: Vec<u8>, path: &Path) -> Result<String, ParseError> {
    let mut name = String::from_utf8(bytes).map_err(|_| syntax(path, 1, SyntaxError::NotUtf8))?;
    if name.ends_with('\n') {
        name.pop();
    }
    Ok(name)
}

#[cfg(test)]
mod tests;
