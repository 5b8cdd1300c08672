//! `amdgpu-criu verify DIR`: validate a whole image set, checksums included,
//! and list every problem. Exit 0 when clean, 1 when problems were found, 2
//! on usage or I/O errors. Reads only.
//!
//! Every message of our images carries a checksum of its own bytes
//! (`message_checksum`, tag 120), so a flipped byte anywhere in an image is
//! found; images without it (the C plugin's) are checked for consistency
//! only, and the report says which.

use std::path::PathBuf;
use std::process::ExitCode;

use amdgpu_image::{
    verify_set, CriuKfd, CriuRenderNode, DirStore, ImageKind, ImageName, ImageStore, Problem,
    ReadLimits, SetReport,
};
use serde_json::{json, Value};

use crate::out::plural;

/// Arguments of `verify`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu verify /var/lib/ckpt
  amdgpu-criu verify /var/lib/ckpt && criu restore -D /var/lib/ckpt
  amdgpu-criu verify --json /var/lib/ckpt | jq .problems
  amdgpu-criu verify /var/lib/kubelet/checkpoints/checkpoint-POD_NAMESPACE-CONTAINER-TIMESTAMP.tar

Exit status: 0 clean, 1 problems found, 2 unreadable or no amdgpu images")]
pub struct Args {
    /// The image directory, or a container checkpoint archive (`podman
    /// container checkpoint --export`, the kubelet's checkpoint API).
    pub dir: PathBuf,
    /// Print one JSON object (`clean`, `problems` each with `file`, `path`
    /// and `message`, the counts, `messages_not_covered`, `unfinished`).
    #[arg(long)]
    pub json: bool,
}

/// Runs `verify`.
pub fn run(args: Args) -> ExitCode {
    // A checkpoint archive is verified from its amdgpu files, unpacked.
    let unpacked = match super::unpacked::Unpacked::open(&args.dir, true) {
        Ok(unpacked) => unpacked,
        Err(e) => {
            eprintln!("amdgpu-criu verify: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match DirStore::open_dir(unpacked.dir()).and_then(|store| {
        let mut report = verify_set(&store, ReadLimits::default())?;
        report.problems.extend(device_mismatches(&store));
        Ok(report)
    }) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("amdgpu-criu verify: {e}");
            return ExitCode::from(2);
        }
    };
    // A dump writes each file as `.NAME.part-*` and renames it when done,
    // and keeps one open per paused process until it unpauses it: one left
    // over means the dump was interrupted (killed, Ctrl-C) and the set is
    // incomplete whatever the finished files say (`report.is_clean` is
    // false then).
    let unfinished = report.unfinished.clone();
    let empty = report.files == 0 && unfinished.is_empty();
    let clean = report.is_clean() && !empty;
    if args.json {
        println!("{:#}", to_json(&args, &report, &unfinished, clean));
    } else {
        print_text(&report, &unfinished);
    }
    if empty {
        eprintln!(
            "amdgpu-criu verify: {}: no amdgpu image files",
            args.dir.display()
        );
        return ExitCode::from(2);
    }
    if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Where a render-node image's GPU (its `device`, the checkpointing
/// machine's description of the GPU) differs from the KFD image's entry for
/// the same GPU (the one its `gpu_id` names): both were written from one
/// topology by one dump, so a difference is damage the checksums did not
/// see (an image edited through a JSON reader that rounds large numbers,
/// then encoded again). Images that cannot be read are `verify_set`'s to
/// report.
pub(crate) fn device_mismatches(store: &DirStore) -> Vec<Problem> {
    let Ok(names) = store.list() else {
        return Vec::new();
    };
    let read = |name: &ImageName| -> Option<Value> {
        let value = match name.kind() {
            ImageKind::Kfd => serde_json::to_value(
                store
                    .read_message::<CriuKfd>(name, ReadLimits::default())
                    .ok()??,
            ),
            ImageKind::RenderNode => serde_json::to_value(
                store
                    .read_message::<CriuRenderNode>(name, ReadLimits::default())
                    .ok()??,
            ),
            _ => return None,
        };
        value.ok()
    };
    let kfd: Vec<(ImageName, Value)> = names
        .iter()
        .filter(|n| n.kind() == ImageKind::Kfd)
        .filter_map(|n| Some((*n, read(n)?)))
        .collect();
    let mut problems = Vec::new();
    for name in names.iter().filter(|n| n.kind() == ImageKind::RenderNode) {
        let Some(render) = read(name) else { continue };
        let (Some(gpu), Some(device)) = (render["gpu_id"].as_u64(), render.get("device")) else {
            continue;
        };
        if gpu == 0 {
            continue; // render-only: no KFD image describes its GPU
        }
        for (kfd_name, image) in &kfd {
            let Some(entry) = image["device_entries"]
                .as_array()
                .and_then(|all| all.iter().find(|e| e["gpu_id"].as_u64() == Some(gpu)))
            else {
                continue;
            };
            let Some(fields) = device.as_object() else {
                continue;
            };
            for (field, value) in fields {
                if matches!(field.as_str(), "node_id" | "gpu_id") || entry.get(field) == Some(value)
                {
                    continue;
                }
                let theirs = entry.get(field).cloned().unwrap_or(Value::Null);
                problems.push(Problem::new(
                    name,
                    format!("device.{field}"),
                    format!(
                        "{} here, {} in {kfd_name}'s entry for GPU {}: the two images were \
                         written together and must agree; the set was edited or damaged \
                         after the dump (re-copy it from where it was written)",
                        shown(field, value),
                        shown(field, &theirs),
                        crate::out::gpu_id(gpu as u32),
                    ),
                ));
            }
        }
    }
    problems
}

/// Message field `field`'s value as `decode` shows it (ids in hex).
fn shown(field: &str, value: &Value) -> String {
    let mut one = json!({ field: value });
    crate::json64::message_to_strings(&mut one);
    match &one[field] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_text(report: &SetReport, unfinished: &[String]) {
    for name in unfinished {
        println!(
            "incomplete image set: {name} was never finished (the dump was interrupted); \
             do not restore from this directory"
        );
    }
    for problem in &report.problems {
        println!("{problem}");
    }
    if report.files == 0 && unfinished.is_empty() {
        return;
    }
    if !report.messages_not_covered.is_empty() {
        println!(
            "not covered: {} {} no message checksum (images of the C plugin or of an \
             older amdgpu-criu-rs), so only their consistency was checked: {}",
            plural(report.messages_not_covered.len() as u64, "message"),
            if report.messages_not_covered.len() == 1 {
                "carries"
            } else {
                "carry"
            },
            report.messages_not_covered.join(", ")
        );
    }
    let summary = format!(
        "{}, {} read ({} bytes), {} verified, {} of {} covered by a checksum",
        plural(report.files as u64, "file"),
        plural(report.bos_read as u64, "bo"),
        report.bytes_read,
        plural(report.checksums_verified as u64, "content checksum"),
        report.messages_covered,
        plural(
            (report.messages_covered + report.messages_not_covered.len()) as u64,
            "message"
        ),
    );
    if !unfinished.is_empty() {
        println!(
            "{summary}: incomplete, {} unfinished {}, {}",
            unfinished.len(),
            if unfinished.len() == 1 {
                "file"
            } else {
                "files"
            },
            plural(report.problems.len() as u64, "problem")
        );
    } else if report.is_clean() {
        println!("{summary}: clean");
    } else {
        println!(
            "{summary}: {}",
            plural(report.problems.len() as u64, "problem")
        );
    }
}

fn to_json(
    args: &Args,
    report: &SetReport,
    unfinished: &[String],
    clean: bool,
) -> serde_json::Value {
    json!({
        "dir": args.dir.display().to_string(),
        "clean": clean,
        "files": report.files,
        "bos_read": report.bos_read,
        "bytes_read": report.bytes_read,
        "content_checksums_verified": report.checksums_verified,
        "messages_covered": report.messages_covered,
        "messages_not_covered": report.messages_not_covered,
        "unfinished": unfinished,
        "problems": report.problems.iter().map(|p| json!({
            "file": p.file,
            // The field inside the file's message; null for the file as a whole.
            "path": (!p.path.is_empty()).then_some(&p.path),
            "message": p.message,
        })).collect::<Vec<_>>(),
    })
}
