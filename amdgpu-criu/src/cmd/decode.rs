//! `amdgpu-criu decode FILE` and `amdgpu-criu encode -o FILE`: an image
//! message as JSON and back, as `crit decode` / `crit encode` do for CRIU's
//! own images.
//!
//! `decode` writes everything, every `bytes` field (`priv_data`, the dump
//! ids, chunk digests and sources) as `{"len": n, "hex": "…"}` with every
//! byte (where `show --json` abbreviates them), so its output is
//! `encode`'s input. `encode` reads that JSON, refuses unknown and missing
//! fields, a message kind that does not match the output file's name and a
//! message validation rejects (what restore would refuse), and writes the
//! image atomically. A message with our producer marker is sealed afresh
//! (`message_checksum`): an edited image is a new image.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use amdgpu_image::messages::with_every_byte;
use amdgpu_image::seal::{self, SealCheck};
use amdgpu_image::{
    decode_message_unchecked, read_payload_framed, CriuDmabufNode, CriuKfd, CriuRenderNode,
    DirStore, ImageKind, ImageMessage, ImageName, ImageStore, ReadLimits, ValidatedKfd,
    ValidatedRenderNode,
};
use serde::Serialize;
use serde_json::{json, Value};

/// Arguments of `decode`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu decode /var/lib/ckpt/amdgpu-kfd-1.img > kfd.json
  amdgpu-criu decode /var/lib/ckpt/amdgpu-renderD-2.img | jq .content.device.hive_id

Exit status: 0 decoded, 1 decoded but the message checksum does not match, 2 unreadable")]
pub struct DecodeArgs {
    /// An amdgpu image file holding a message (kfd, renderD or dmabuf).
    pub file: PathBuf,
}

/// Arguments of `encode`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu decode /var/lib/ckpt/amdgpu-kfd-1.img > kfd.json
  $EDITOR kfd.json
  amdgpu-criu encode -i kfd.json -o /var/lib/ckpt/amdgpu-kfd-1.img && amdgpu-criu verify /var/lib/ckpt
  amdgpu-criu encode --no-validate -i kfd.json -o /tmp/test-set/amdgpu-kfd-1.img   # a test image

Exit status: 0 written, 1 the message is invalid (nothing written; --no-validate writes it with a warning), 2 unreadable input")]
pub struct EncodeArgs {
    /// The JSON `decode` wrote (`-` or absent: standard input).
    #[arg(short, long, value_name = "JSON")]
    pub input: Option<PathBuf>,
    /// The image file to write; its name tells the message kind
    /// (`amdgpu-kfd-<id>.img`, `amdgpu-renderD-<id>.img`,
    /// `amdgpu-dmabuf_<id>.img`).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Write the message even when restore would refuse it, warning about
    /// each problem (as `crit encode` writes what it is given): for
    /// crafting a damaged image to test with, never for a real checkpoint.
    #[arg(long)]
    pub no_validate: bool,
}

fn name_of(path: &Path) -> Result<ImageName, String> {
    let file = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let name = ImageName::parse(file)
        .map_err(|e| format!("{e} (the kind of an image is told by its file name)"))?;
    if !name.kind().holds_message() {
        return Err(format!(
            "{name}: a pages file holds raw BO contents, not a message; `amdgpu-criu show` \
             prints its length header"
        ));
    }
    Ok(name)
}

/// The message as JSON with every byte of every `bytes` field, ids and
/// 64-bit values as strings ([`json64`](crate::json64)).
fn full<M: Serialize>(msg: &M) -> Value {
    let mut value = with_every_byte(|| serde_json::to_value(msg)).unwrap_or(Value::Null);
    crate::json64::message_to_strings(&mut value);
    value
}

/// Runs `decode`.
pub fn run_decode(args: DecodeArgs) -> ExitCode {
    // A file that is not there is that, whatever its name.
    if let Err(e) = std::fs::metadata(&args.file) {
        eprintln!(
            "amdgpu-criu decode: {}: {}",
            args.file.display(),
            crate::out::io_error(&e)
        );
        return ExitCode::from(2);
    }
    let name = match name_of(&args.file) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("amdgpu-criu decode: {e}");
            return ExitCode::from(2);
        }
    };
    let file = name.to_string();
    let payload = match std::fs::File::open(&args.file)
        .map_err(|e| format!("{}: {e}", args.file.display()))
        .and_then(|f| {
            read_payload_framed(f, &file, ReadLimits::default()).map_err(|e| e.to_string())
        }) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("amdgpu-criu decode: {e}");
            return ExitCode::from(2);
        }
    };
    let decoded = match name.kind() {
        ImageKind::Kfd => decode_message_unchecked::<CriuKfd>(&file, &payload)
            .map(|m| (CriuKfd::PROTO_NAME, full(&m))),
        ImageKind::RenderNode => decode_message_unchecked::<CriuRenderNode>(&file, &payload)
            .map(|m| (CriuRenderNode::PROTO_NAME, full(&m))),
        _ => decode_message_unchecked::<CriuDmabufNode>(&file, &payload)
            .map(|m| (CriuDmabufNode::PROTO_NAME, full(&m))),
    };
    let (proto, content) = match decoded {
        Ok(d) => d,
        Err(e) => {
            eprintln!("amdgpu-criu decode: {e}");
            return ExitCode::from(2);
        }
    };
    let check = seal::check(&payload);
    let status = match check {
        SealCheck::Match(_) => "verified",
        SealCheck::Absent => "not_covered",
        SealCheck::Mismatch { .. } => "mismatch",
        SealCheck::Malformed(_) => "malformed",
    };
    println!(
        "{:#}",
        json!({ "file": file, "message": proto, "message_checksum": status, "content": content })
    );
    match check {
        SealCheck::Mismatch { recorded, actual } => {
            eprintln!(
                "amdgpu-criu decode: {file}: message checksum mismatch: the bytes hash to \
                 {actual:#018x}, the image records {recorded:#018x}"
            );
            ExitCode::from(1)
        }
        SealCheck::Malformed(what) => {
            eprintln!("amdgpu-criu decode: {file}: {what}");
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Why an `encode` stopped: bad input (2) or an invalid message (1).
enum Refusal {
    Input(String),
    Invalid(Vec<String>),
}

fn parse<M: ImageMessage + serde::de::DeserializeOwned>(
    content: &Value,
    file: &str,
) -> Result<M, Refusal> {
    let mut content = content.clone();
    // What decode adds beside the fields: nothing to read back.
    if let Some(map) = content.as_object_mut() {
        map.remove("message_checksum");
    }
    crate::json64::message_from_strings(&mut content)
        .map_err(|e| Refusal::Input(format!("{file}: {}: {e}", M::PROTO_NAME)))?;
    serde_json::from_value::<M>(content)
        .map_err(|e| Refusal::Input(format!("{file}: {}: {e}", M::PROTO_NAME)))
}

/// Writes the message `json_text` holds into `out`; with `validate` off,
/// what validation finds goes into the returned warnings instead.
fn encode(
    json_text: &str,
    out: &Path,
    validate: bool,
) -> Result<(ImageName, Vec<String>), Refusal> {
    let name = name_of(out).map_err(Refusal::Input)?;
    let file = name.to_string();
    let v: Value = serde_json::from_str(json_text)
        .map_err(|e| Refusal::Input(format!("the input is not JSON: {e}")))?;
    let content = v.get("content").ok_or_else(|| {
        Refusal::Input("the input has no \"content\" (write it with `amdgpu-criu decode`)".into())
    })?;
    let expected = match name.kind() {
        ImageKind::Kfd => CriuKfd::PROTO_NAME,
        ImageKind::RenderNode => CriuRenderNode::PROTO_NAME,
        _ => CriuDmabufNode::PROTO_NAME,
    };
    if let Some(message) = v.get("message").and_then(Value::as_str) {
        if message != expected {
            return Err(Refusal::Input(format!(
                "the input is a {message}, but {file} holds a {expected}"
            )));
        }
    }
    let dir = match out.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.to_path_buf(),
        None => PathBuf::from("."),
    };
    let store = DirStore::open_dir(&dir).map_err(|e| Refusal::Input(e.to_string()))?;
    let mut warnings = Vec::new();
    let mut problems = |ps: Vec<amdgpu_image::Problem>| -> Result<(), Refusal> {
        let found: Vec<String> = ps.iter().map(ToString::to_string).collect();
        if found.is_empty() {
            Ok(())
        } else if validate {
            Err(Refusal::Invalid(found))
        } else {
            warnings.extend(found);
            Ok(())
        }
    };
    let written = match name.kind() {
        ImageKind::Kfd => {
            let m: CriuKfd = parse(content, &file)?;
            problems(ValidatedKfd::problems(name.id(), &m))?;
            store.write_message(&name, &m)
        }
        ImageKind::RenderNode => {
            let m: CriuRenderNode = parse(content, &file)?;
            problems(ValidatedRenderNode::problems(name.id(), &m))?;
            store.write_message(&name, &m)
        }
        _ => {
            let m: CriuDmabufNode = parse(content, &file)?;
            store.write_message(&name, &m)
        }
    };
    written.map_err(|e| Refusal::Input(e.to_string()))?;
    Ok((name, warnings))
}

/// Runs `encode`.
pub fn run_encode(args: EncodeArgs) -> ExitCode {
    let mut text = String::new();
    let read = match args.input.as_deref() {
        None => std::io::stdin().read_to_string(&mut text).map(|_| ()),
        Some(p) if p == Path::new("-") => std::io::stdin().read_to_string(&mut text).map(|_| ()),
        Some(p) => std::fs::read_to_string(p).map(|t| text = t),
    };
    if let Err(e) = read {
        let input = args
            .input
            .as_deref()
            .map_or_else(|| "standard input".to_owned(), |p| p.display().to_string());
        eprintln!("amdgpu-criu encode: {input}: {e}");
        return ExitCode::from(2);
    }
    match encode(&text, &args.output, !args.no_validate) {
        Ok((name, warnings)) => {
            for w in &warnings {
                eprintln!("amdgpu-criu encode: warning: {w}");
            }
            if !warnings.is_empty() {
                eprintln!(
                    "amdgpu-criu encode: warning: {} written as given (--no-validate): restore \
                     will refuse it",
                    args.output.display()
                );
            }
            println!("wrote {} ({name})", args.output.display());
            ExitCode::SUCCESS
        }
        Err(Refusal::Input(e)) => {
            eprintln!("amdgpu-criu encode: {e}");
            ExitCode::from(2)
        }
        Err(Refusal::Invalid(problems)) => {
            for p in &problems {
                eprintln!("amdgpu-criu encode: {p}");
            }
            eprintln!(
                "amdgpu-criu encode: {} not written: restore would refuse it (--no-validate \
                 writes it anyway, to craft a damaged image for a test)",
                args.output.display()
            );
            ExitCode::from(1)
        }
    }
}
