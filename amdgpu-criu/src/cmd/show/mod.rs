//! `amdgpu-criu show PATH [--json] [--details]`: what an image set holds,
//! for people.
//!
//! PATH is an image directory (CRIU's own images beside ours are skipped),
//! one amdgpu image file, or a Podman/CRI-O checkpoint archive (a tar,
//! plain, zstd- or gzip-compressed). For a set the text is a summary
//! (processes, GPUs with gpu_id and hive, BOs by domain with bytes, queues,
//! events, pages files and their real size on disk, the BO contents read
//! back against their digests as `verify` reads them); `--details` adds
//! every message in its own field order with ids in hex and flags decoded
//! (one file is always shown so). Each problem goes once to stderr. Exit 0
//! when everything was shown and sound, 1 when a file is damaged (or a
//! directory has no images), 2 when PATH cannot be read at all. `--json`
//! prints everything, machine readable.

mod archive;
mod detail;
use amdgpu_image::priv_data;
mod summary;

use std::fs::File;
use std::io::{Cursor, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use amdgpu_image::seal::{self, SealCheck};
use amdgpu_image::{
    decode_message_unchecked, read_payload_framed, CriuDmabufNode, CriuKfd, CriuRenderNode,
    ImageKind, ImageMessage, ImageName, ReadLimits, HEADER_LEN,
};
use serde::Serialize;
use serde_json::{json, Value};

pub(crate) use archive::is_archive;
use detail::Context;

/// Arguments of `show`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu show /var/lib/ckpt
  amdgpu-criu show --details /var/lib/ckpt | less
  amdgpu-criu show /var/lib/ckpt/amdgpu-kfd-1.img
  amdgpu-criu show checkpoint.tar.zst            # podman container checkpoint --export
  amdgpu-criu show checkpoint.tar.gz             # ... --compress gzip
  amdgpu-criu show --json /var/lib/ckpt > images.json   # attach to bug reports

Exit status: 0 shown and sound, 1 a damaged file (contents included) or no amdgpu images,
2 PATH unreadable")]
pub struct Args {
    /// An image directory, one amdgpu image file, or a Podman/CRI-O
    /// checkpoint archive (tar, plain, zstd- or gzip-compressed).
    pub path: PathBuf,
    /// Print JSON (`{"summary": {...}, "files": [...], "problems": [...]}`).
    #[arg(long)]
    pub json: bool,
    /// After a set's summary, print every message field by field (every
    /// BO, every device entry); one file is always shown in full.
    #[arg(long)]
    pub details: bool,
}

/// What one file holds.
#[derive(Clone, Debug)]
pub(crate) enum Loaded {
    Kfd(CriuKfd),
    Render(CriuRenderNode),
    Dmabuf(CriuDmabufNode),
    Pages { length_header: u64, payload: u64 },
}

/// One image file of the set.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub name: ImageName,
    /// Bytes of the file.
    pub len: u64,
    /// Bytes it takes on disk (holes are free); None inside an archive.
    pub disk: Option<u64>,
    pub loaded: Result<Loaded, String>,
    /// The message checksum's verdict (messages only).
    pub seal: Option<SealCheck>,
}

/// Where a file's bytes are.
pub(crate) enum Blob {
    /// A file on disk.
    Path(PathBuf),
    /// A file read from an archive: all of a message, the first bytes of a
    /// pages file; `len` is the file's whole length.
    Prefix { bytes: Vec<u8>, len: u64 },
}

/// Runs `show`.
pub fn run(args: Args) -> ExitCode {
    let (files, where_) = match collect(&args.path) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("amdgpu-criu show: {e}");
            return ExitCode::from(2);
        }
    };
    let entries: Vec<Entry> = files
        .into_iter()
        .map(|(name, blob)| load(name, blob))
        .collect();
    let mut problems = problems(&entries);
    let single = where_.is_none();
    // A set's BO contents are read and checked against their digests, as
    // `verify` does: exit 0 says every file is sound.
    let checked_contents = if single || entries.is_empty() {
        None
    } else {
        match contents(&args.path, &problems) {
            Ok((checked, found)) => {
                problems.extend(found);
                Some(checked)
            }
            Err(e) => {
                problems.push(e);
                None
            }
        }
    };
    let summary = summary::Summary::of(&entries);
    if args.json {
        let files: Vec<Value> = entries.iter().map(to_json).collect();
        println!(
            "{:#}",
            json!({
                "path": args.path.display().to_string(),
                "summary": summary.to_json(),
                "files": files,
                "problems": problems,
            })
        );
    } else {
        let mut text = String::new();
        if !single {
            summary.print(
                &mut text,
                where_.as_deref().unwrap_or_default(),
                entries.len(),
            );
            if let Some(checked) = checked_contents {
                text.push_str(&format!("{checked}\n"));
            }
            if !entries.is_empty() && !args.details {
                text.push_str("(every message field by field: --details)\n");
            }
            if !entries.is_empty() && args.details {
                text.push_str("\ndetails\n");
            }
        }
        if single || args.details {
            for e in &entries {
                print_entry(&mut text, e);
            }
        }
        print_lines(&text);
    }
    for p in &problems {
        eprintln!("amdgpu-criu show: {p}");
    }
    if entries.is_empty() {
        eprintln!(
            "amdgpu-criu show: {}: no amdgpu image files",
            args.path.display()
        );
        return ExitCode::from(1);
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Prints `text` line by line (so a closed pipe ends us early).
fn print_lines(text: &str) {
    for line in text.lines() {
        println!("{line}");
    }
}

/// The image files at `path` and, for a set, how to name where they are.
#[allow(clippy::type_complexity)]
fn collect(path: &Path) -> Result<(Vec<(ImageName, Blob)>, Option<String>), String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("{}: {}", path.display(), crate::out::io_error(&e)))?;
    if meta.is_dir() {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))? {
            let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
            if let Some(name) = entry
                .file_name()
                .to_str()
                .and_then(|n| ImageName::parse(n).ok())
            {
                names.push((name, Blob::Path(entry.path())));
            }
        }
        names.sort_by_key(|(n, _)| *n);
        return Ok((names, Some(path.display().to_string())));
    }
    if is_archive(path).map_err(|e| format!("{}: {e}", path.display()))? {
        let files = archive::image_files(path).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok((
            files,
            Some(format!("{} (checkpoint archive)", path.display())),
        ));
    }
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let name = ImageName::parse(file_name).map_err(|e| {
        format!(
            "{e} (the kind of an image is told by its file name; \
             a checkpoint archive is a tar file)"
        )
    })?;
    Ok((vec![(name, Blob::Path(path.to_path_buf()))], None))
}

/// The set at `path` read through, BO contents against their digests and
/// render-node GPUs against the KFD images, as `verify` reads it: a line
/// saying what was checked, and the problems of files `shown` does not
/// already name.
fn contents(path: &Path, shown: &[String]) -> Result<(String, Vec<String>), String> {
    let unpacked = super::unpacked::Unpacked::open(path, true)?;
    let store = amdgpu_image::DirStore::open_dir(unpacked.dir()).map_err(|e| e.to_string())?;
    let mut report = amdgpu_image::verify_set(&store, ReadLimits::default())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    report
        .problems
        .extend(super::verify::device_mismatches(&store));
    let found: Vec<String> = report
        .problems
        .iter()
        .filter(|p| !shown.iter().any(|s| s.starts_with(&format!("{}:", p.file))))
        .map(ToString::to_string)
        .collect();
    let checked = format!(
        "contents: {} verified, {} read: {}",
        crate::out::plural(report.checksums_verified as u64, "BO checksum"),
        crate::out::human_bytes(report.bytes_read),
        if report.problems.is_empty() {
            "sound".to_owned()
        } else {
            format!(
                "{} (see the errors)",
                crate::out::plural(report.problems.len() as u64, "problem")
            )
        }
    );
    Ok((checked, found))
}

/// A short file's explanation, or None when it is long enough to hold a header.
fn too_short(len: u64) -> Option<String> {
    match len {
        0 => Some(
            "empty file (0 bytes), not an image: the dump that wrote it failed or the disk was \
             full"
                .into(),
        ),
        n if n < HEADER_LEN as u64 => Some(format!(
            "{n} bytes, shorter than the {HEADER_LEN}-byte length header: not an image"
        )),
        _ => None,
    }
}

fn load(name: ImageName, blob: Blob) -> Entry {
    let file = name.to_string();
    let (len, disk) = match &blob {
        Blob::Path(p) => match std::fs::metadata(p) {
            Ok(m) => (m.len(), Some(m.blocks() * 512)),
            Err(e) => {
                return Entry {
                    name,
                    len: 0,
                    disk: None,
                    loaded: Err(format!("{file}: {e}")),
                    seal: None,
                }
            }
        },
        Blob::Prefix { len, .. } => (*len, None),
    };
    let mut entry = Entry {
        name,
        len,
        disk,
        loaded: Err(String::new()),
        seal: None,
    };
    if let Some(why) = too_short(len) {
        entry.loaded = Err(format!("{file}: {why}"));
        return entry;
    }
    if !name.kind().holds_message() {
        entry.loaded = pages(&file, &blob, len);
        return entry;
    }
    let limits = ReadLimits::default();
    let payload = match &blob {
        Blob::Path(p) => File::open(p)
            .map_err(|e| format!("{file}: {e}"))
            .and_then(|f| read_payload_framed(f, &file, limits).map_err(|e| e.to_string())),
        Blob::Prefix { bytes, .. } => {
            read_payload_framed(Cursor::new(bytes), &file, limits).map_err(|e| e.to_string())
        }
    };
    let payload = match payload {
        Ok(p) => p,
        Err(e) => {
            entry.loaded = Err(e);
            return entry;
        }
    };
    entry.seal = Some(seal::check(&payload));
    entry.loaded = match name.kind() {
        ImageKind::Kfd => decode::<CriuKfd>(&file, &payload).map(Loaded::Kfd),
        ImageKind::RenderNode => decode::<CriuRenderNode>(&file, &payload).map(Loaded::Render),
        _ => decode::<CriuDmabufNode>(&file, &payload).map(Loaded::Dmabuf),
    };
    if entry.loaded.is_err() {
        entry.seal = None;
    }
    entry
}

fn decode<M: ImageMessage>(file: &str, payload: &[u8]) -> Result<M, String> {
    decode_message_unchecked::<M>(file, payload).map_err(|e| e.to_string())
}

fn pages(file: &str, blob: &Blob, len: u64) -> Result<Loaded, String> {
    let mut header = [0u8; HEADER_LEN];
    match blob {
        Blob::Path(p) => File::open(p)
            .and_then(|mut f| f.read_exact(&mut header))
            .map_err(|e| format!("{file}: read length header: {e}"))?,
        Blob::Prefix { bytes, .. } => match bytes.get(..HEADER_LEN) {
            Some(h) => header.copy_from_slice(h),
            None => return Err(format!("{file}: shorter than the length header")),
        },
    }
    let length_header = u64::from_le_bytes(header);
    let payload = len - HEADER_LEN as u64;
    if payload != length_header {
        return Err(format!(
            "{file}: the length header announces {length_header} bytes of contents, {payload} follow"
        ));
    }
    Ok(Loaded::Pages {
        length_header,
        payload,
    })
}

/// Every problem, once each, naming its file once.
fn problems(entries: &[Entry]) -> Vec<String> {
    let mut out = Vec::new();
    for e in entries {
        match (&e.loaded, e.seal) {
            (Err(msg), _) => out.push(msg.clone()),
            (Ok(_), Some(SealCheck::Mismatch { recorded, actual })) => out.push(format!(
                "{}: message checksum mismatch: the bytes hash to {actual:#018x}, the image \
                 records {recorded:#018x} (changed or damaged after the dump; the contents \
                 shown may be wrong)",
                e.name
            )),
            (Ok(_), Some(SealCheck::Malformed(what))) => out.push(format!("{}: {what}", e.name)),
            _ => {}
        }
    }
    out
}

fn seal_text(seal: Option<SealCheck>) -> &'static str {
    match seal {
        Some(SealCheck::Match(_)) => "verified",
        Some(SealCheck::Absent) => "not covered",
        Some(SealCheck::Mismatch { .. }) => "MISMATCH",
        Some(SealCheck::Malformed(_)) => "malformed",
        None => "-",
    }
}

fn print_entry(out: &mut String, e: &Entry) {
    use std::fmt::Write as _;
    let file = e.name.to_string();
    match &e.loaded {
        Err(_) => {
            let _ = writeln!(out, "{file}: unreadable (see the error)");
        }
        Ok(Loaded::Pages {
            length_header,
            payload,
        }) => {
            let disk = e
                .disk
                .map(|d| format!(", {} on disk", crate::out::human_bytes(d)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{file} (pages): {} of BO contents (length header {length_header}, \
                 {payload} bytes follow){disk}",
                crate::out::human_bytes(*payload)
            );
        }
        Ok(loaded) => {
            let (proto, ctx, value) = match loaded {
                Loaded::Kfd(m) => (CriuKfd::PROTO_NAME, Context::Kfd, detail::ordered(m)),
                Loaded::Render(m) => (
                    CriuRenderNode::PROTO_NAME,
                    Context::Render,
                    detail::ordered(m),
                ),
                Loaded::Dmabuf(m) => (
                    CriuDmabufNode::PROTO_NAME,
                    Context::Dmabuf,
                    detail::ordered(m),
                ),
                Loaded::Pages { .. } => unreachable!("handled above"),
            };
            let _ = writeln!(
                out,
                "{file} ({proto}, {} bytes, message checksum {})",
                e.len,
                seal_text(e.seal)
            );
            if let detail::Ordered::Map(fields) = value {
                detail::print_map(out, ctx, &fields, 1);
            }
        }
    }
}

fn content<M: Serialize>(m: &M) -> Value {
    let mut value = serde_json::to_value(m).unwrap_or(Value::Null);
    crate::json64::message_to_strings(&mut value);
    value
}

fn to_json(e: &Entry) -> Value {
    let file = e.name.to_string();
    let mut v = match &e.loaded {
        Err(msg) => json!({ "file": file, "error": msg }),
        Ok(Loaded::Pages {
            length_header,
            payload,
        }) => json!({
            "file": file,
            "pages": { "length_header": length_header, "payload_bytes": payload },
        }),
        Ok(Loaded::Kfd(m)) => {
            let objects = priv_data::objects(
                &m.priv_data,
                u64::from(m.num_of_gpus),
                m.num_of_bos,
                m.num_of_objects,
            );
            json!({
                "file": file,
                "message": CriuKfd::PROTO_NAME,
                "content": content(m),
                "priv_data_objects": objects,
            })
        }
        Ok(Loaded::Render(m)) => {
            json!({ "file": file, "message": CriuRenderNode::PROTO_NAME, "content": content(m) })
        }
        Ok(Loaded::Dmabuf(m)) => {
            json!({ "file": file, "message": CriuDmabufNode::PROTO_NAME, "content": content(m) })
        }
    };
    if let Value::Object(map) = &mut v {
        map.insert("bytes".into(), json!(e.len));
        if let Some(d) = e.disk {
            map.insert("disk_bytes".into(), json!(d));
        }
        if let Some(s) = e.seal {
            map.insert(
                "message_checksum".into(),
                json!(match s {
                    SealCheck::Match(_) => "verified",
                    SealCheck::Absent => "not_covered",
                    SealCheck::Mismatch { .. } => "mismatch",
                    SealCheck::Malformed(_) => "malformed",
                }),
            );
        }
    }
    v
}
