//! `amdgpu-criu show DIR|FILE [--json]`: print every message of an image set
//! (or one image file), with proto field names as keys; pages files are shown
//! by their length header and size. Reads only; never validates (that is
//! `verify`).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use amdgpu_image::{
    read_message, CriuDmabufNode, CriuKfd, CriuRenderNode, DirStore, ImageKind, ImageMessage,
    ImageName, ImageStore, ReadLimits, HEADER_LEN,
};
use serde::Serialize;
use serde_json::{json, Value};

/// Arguments of `show`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu show /var/lib/ckpt
  amdgpu-criu show /var/lib/ckpt/amdgpu-kfd-7.img
  amdgpu-criu show --json /var/lib/ckpt > images.json   # attach to bug reports")]
pub struct Args {
    /// An image directory, or one amdgpu image file.
    pub path: PathBuf,
    /// Print JSON (`{"files": [...]}`) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `show`: 0 when every file was shown, 2 when one could not be read.
pub fn run(args: Args) -> ExitCode {
    let files = match collect(&args.path) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("amdgpu-criu show: {e}");
            return ExitCode::from(2);
        }
    };
    if files.is_empty() {
        eprintln!(
            "amdgpu-criu show: {}: no amdgpu image files",
            args.path.display()
        );
    }
    let failed = files.iter().any(|f| f.get("error").is_some());
    if args.json {
        println!("{:#}", json!({ "files": files }));
    } else {
        for f in &files {
            print_text(f);
        }
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// One JSON value per image file, in name order.
fn collect(path: &Path) -> Result<Vec<Value>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_dir() {
        let store = DirStore::open_dir(path).map_err(|e| e.to_string())?;
        let names = store.list().map_err(|e| e.to_string())?;
        Ok(names
            .iter()
            .map(|name| describe(name, store.open(name).map_err(|e| e.to_string())))
            .collect())
    } else {
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let name = ImageName::parse(file_name)
            .map_err(|e| format!("{e} (the kind of an image is told by its file name)"))?;
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(vec![describe(&name, Ok(Some(file)))])
    }
}

fn describe<R: Read>(name: &ImageName, src: Result<Option<R>, String>) -> Value {
    let file = name.to_string();
    let src = match src {
        Ok(Some(src)) => src,
        Ok(None) => return json!({ "file": file, "error": "vanished while listing" }),
        Err(e) => return json!({ "file": file, "error": e }),
    };
    match name.kind() {
        ImageKind::Kfd => message::<_, CriuKfd>(&file, src),
        ImageKind::RenderNode => message::<_, CriuRenderNode>(&file, src),
        ImageKind::Dmabuf => message::<_, CriuDmabufNode>(&file, src),
        ImageKind::Pages | ImageKind::DrmPages => pages(&file, src),
    }
}

fn message<R: Read, M: ImageMessage + Serialize>(file: &str, src: R) -> Value {
    match read_message::<_, M>(src, file, ReadLimits::default()) {
        Ok(m) => json!({ "file": file, "message": M::PROTO_NAME, "content": m }),
        Err(e) => json!({ "file": file, "message": M::PROTO_NAME, "error": e.to_string() }),
    }
}

fn pages<R: Read>(file: &str, mut src: R) -> Value {
    let mut header = [0u8; HEADER_LEN];
    if let Err(e) = src.read_exact(&mut header) {
        return json!({ "file": file, "error": format!("read length header: {e}") });
    }
    match std::io::copy(&mut src, &mut std::io::sink()) {
        Ok(payload) => json!({
            "file": file,
            "pages": { "length_header": u64::from_le_bytes(header), "payload_bytes": payload },
        }),
        Err(e) => json!({ "file": file, "error": format!("read pages: {e}") }),
    }
}

/// Fields shown in hexadecimal in text output (ids, addresses, flags).
const HEX_FIELDS: &[&str] = &[
    "gpu_id",
    "addr",
    "offset",
    "alloc_flags",
    "handle",
    "hive_id",
    "capability",
    "flags",
    "shared_mem_magic",
    "vendor_id",
    "device_id",
    "content_checksum",
    "gem_handle",
];

fn print_text(file: &Value) {
    let name = file.get("file").and_then(Value::as_str).unwrap_or("?");
    match (
        file.get("message"),
        file.get("content"),
        file.get("pages"),
        file.get("error"),
    ) {
        (_, _, _, Some(err)) => println!("{name}: error: {}", err.as_str().unwrap_or_default()),
        (Some(msg), Some(content), _, _) => {
            println!("{name} ({})", msg.as_str().unwrap_or_default());
            print_value(content, 1);
        }
        (_, _, Some(p), _) => {
            println!("{name} (pages)");
            print_value(p, 1);
        }
        _ => println!("{name}"),
    }
}

fn print_value(v: &Value, depth: usize) {
    let indent = "  ".repeat(depth);
    let Value::Object(map) = v else { return };
    for (key, value) in map {
        match value {
            Value::Array(items) if items.iter().all(Value::is_object) => {
                println!("{indent}{key}: {} entries", items.len());
                for (i, item) in items.iter().enumerate() {
                    println!("{indent}  [{i}]");
                    print_value(item, depth + 2);
                }
            }
            Value::Object(_) if value.get("len").is_some() => {
                let len = &value["len"];
                let hex = value["hex_prefix"].as_str().unwrap_or_default();
                println!(
                    "{indent}{key}: {len} bytes [{hex}{}]",
                    if len.as_u64() > Some(16) { "…" } else { "" }
                );
            }
            Value::Object(_) => {
                println!("{indent}{key}:");
                print_value(value, depth + 1);
            }
            Value::Number(n) if HEX_FIELDS.contains(&key.as_str()) => match n.as_u64() {
                Some(x) => println!("{indent}{key}: {x:#x}"),
                None => println!("{indent}{key}: {n}"),
            },
            Value::String(s) => println!("{indent}{key}: {s}"),
            other => println!("{indent}{key}: {other}"),
        }
    }
}
