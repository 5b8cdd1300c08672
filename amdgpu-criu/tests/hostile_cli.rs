//! Failures as a user meets them through the built `amdgpu-criu`:
//!
//! * `demo --inject OP[:N][=ERRNO]` rehearses a failure of every CRIU
//!   operation and of the device calls and kernel-internal points around
//!   them; each run exits 1 and prints the plugin's error line naming the
//!   operation and the errno the user would get.
//! * `verify` on damaged image sets (truncated, lying length headers, pages
//!   files too short or too long, flipped content bits, missing or stray
//!   pages files, gpu_ids that do not exist) exits 1 and prints a problem
//!   line starting with the damaged file's name; the clean set exits 0.

use std::path::Path;

use amdgpu_image::fuzz_support::{write_sample_set, SampleSpec};
use amdgpu_image::{DirStore, ImageName};

mod cli;
use cli::run;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn demo_inject_rehearses_every_criu_operation_failing() {
    // (fault, words the error line must hold, errno name)
    let cases = [
        (
            "CRIU_OP:PROCESS_INFO=EIO",
            "CRIU_OP PROCESS_INFO failed",
            "EIO",
        ),
        (
            "CRIU_OP:CHECKPOINT=ENOMEM",
            "CRIU_OP CHECKPOINT failed",
            "ENOMEM",
        ),
        ("CRIU_OP:UNPAUSE=EIO", "CRIU_OP UNPAUSE failed", "EIO"),
        ("CRIU_OP:RESTORE=EINVAL", "CRIU_OP RESTORE failed", "EINVAL"),
        ("CRIU_OP:RESUME=EIO", "CRIU_OP RESUME failed", "EIO"),
        ("GET_VERSION=ENODEV", "GET_VERSION failed", "ENODEV"),
        ("AMDGPU_CS:2=EIO", "AMDGPU_CS failed", "EIO"),
        (
            "AMDGPU_GEM_VA:3=EINVAL",
            "AMDGPU_GEM_VA MAP failed",
            "EINVAL",
        ),
        ("MMAP=ENOMEM", "mmap", "ENOMEM"),
        ("OPEN:2=EACCES", "open /dev/dri/renderD", "EACCES"),
        ("EVICT=ENOMEM", "CRIU_OP PROCESS_INFO failed", "ENOMEM"),
        (
            "DMABUF_EXPORT=ENOMEM",
            "CRIU_OP CHECKPOINT failed",
            "ENOMEM",
        ),
        ("SDMA_SHORT", "AMDGPU_WAIT_CS failed", "EIO"),
    ];
    let mut bad = Vec::new();
    for (fault, words, errno) in cases {
        let out = run(&[
            "demo",
            "--topology",
            "pcie-2gpu",
            "--workload",
            "basic",
            "--inject",
            fault,
        ]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if out.status.code() != Some(1) {
            bad.push(format!(
                "{fault}: exit {:?}\n{stdout}\n{stderr}",
                out.status
            ));
            continue;
        }
        let named = stderr
            .lines()
            .any(|l| l.contains("amdgpu_plugin: ") && l.contains(words) && l.contains(errno));
        if !named {
            bad.push(format!(
                "{fault}: no plugin line with {words:?} and {errno}:\n{stderr}"
            ));
        }
        if stdout.lines().any(|l| l.starts_with("verified:")) {
            bad.push(format!("{fault}: reported verified:\n{stdout}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

fn sample(dir: &Path) {
    let store = DirStore::open_dir(dir).unwrap();
    write_sample_set(
        &store,
        SampleSpec {
            id: 1,
            gpus: 2,
            bos_per_gpu: 2,
            bo_pages: 2,
        },
    )
    .unwrap();
}

fn set_len(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Edits the message of image `path` as a user crafting a damaged image
/// would: `decode`, change the JSON, `encode --no-validate` (which writes
/// what validation refuses, sealed afresh, with a warning).
fn edit_message(path: &Path, f: impl Fn(&mut serde_json::Value)) {
    let file = path.to_str().unwrap();
    let out = run(&["decode", file]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    f(&mut value["content"]);
    let json = path.with_extension("json");
    std::fs::write(&json, value.to_string()).unwrap();
    let out = run(&[
        "encode",
        "--no-validate",
        "-i",
        json.to_str().unwrap(),
        "-o",
        file,
    ]);
    std::fs::remove_file(&json).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

fn edit(path: &Path, f: impl Fn(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn verify_names_the_damaged_file_of_each_hostile_set() {
    let kfd = ImageName::Kfd { id: 1 }.to_string();
    let render = ImageName::RenderNode { id: 2 }.to_string();
    let pages = {
        let probe = tempfile::tempdir().unwrap();
        sample(probe.path());
        let mut names: Vec<String> = std::fs::read_dir(probe.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("amdgpu-pages-"))
            .collect();
        names.sort();
        names.remove(0)
    };
    let pages_len = {
        let probe = tempfile::tempdir().unwrap();
        sample(probe.path());
        std::fs::metadata(probe.path().join(&pages)).unwrap().len()
    };
    type Damage<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: Vec<(&str, &str, Damage)> = vec![
        (
            "kfd image cut in its header",
            &kfd,
            Box::new(|d| set_len(&d.join(&kfd), 5)),
        ),
        (
            "kfd image cut in its payload",
            &kfd,
            Box::new(|d| set_len(&d.join(&kfd), 40)),
        ),
        (
            "kfd header claims 2^62 bytes",
            &kfd,
            Box::new(|d| {
                edit(&d.join(&kfd), |b| {
                    b[..8].copy_from_slice(&(1u64 << 62).to_le_bytes())
                })
            }),
        ),
        (
            "pages file a page short",
            &pages,
            Box::new(|d| set_len(&d.join(&pages), pages_len - 4096)),
        ),
        (
            "pages file a byte too long",
            &pages,
            Box::new(|d| set_len(&d.join(&pages), pages_len + 1)),
        ),
        (
            "flipped content bit",
            &pages,
            Box::new(|d| edit(&d.join(&pages), |b| b[8 + 5] ^= 0x20)),
        ),
        (
            "pages file missing",
            &pages,
            Box::new(|d| std::fs::remove_file(d.join(&pages)).unwrap()),
        ),
        (
            "stray pages file",
            "amdgpu-pages-1-dead.img",
            Box::new(|d| {
                std::fs::copy(d.join(&pages), d.join("amdgpu-pages-1-dead.img"))
                    .map(drop)
                    .unwrap()
            }),
        ),
        (
            "render node on a gpu_id that does not exist",
            &render,
            Box::new(|d| {
                edit_message(&d.join(&render), |m| m["gpu_id"] = "0xdead".into());
            }),
        ),
        (
            "kfd image counting more BOs than it holds",
            &kfd,
            Box::new(|d| {
                edit_message(&d.join(&kfd), |m| m["num_of_bos"] = "99".into());
            }),
        ),
    ];

    let clean = tempfile::tempdir().unwrap();
    sample(clean.path());
    let out = run(&["verify", clean.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));

    let mut bad = Vec::new();
    for (case, file, damage) in &cases {
        let dir = tempfile::tempdir().unwrap();
        sample(dir.path());
        damage(dir.path());
        let out = run(&["verify", dir.path().to_str().unwrap()]);
        let stdout = text(&out.stdout);
        if out.status.code() != Some(1) {
            bad.push(format!("{case}: exit {:?}\n{stdout}", out.status));
            continue;
        }
        if !stdout
            .lines()
            .any(|l| l.starts_with(&format!("{file}: ")) || l.starts_with(&format!("{file} ")))
        {
            bad.push(format!("{case}: no problem line for {file}:\n{stdout}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

#[test]
fn encode_writes_a_message_restore_refuses_only_when_told() {
    let dir = tempfile::tempdir().unwrap();
    sample(dir.path());
    let kfd = dir.path().join(ImageName::Kfd { id: 1 }.to_string());
    let before = std::fs::read(&kfd).unwrap();
    let out = run(&["decode", kfd.to_str().unwrap()]);
    let mut value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    value["content"]["num_of_bos"] = "99".into();
    let json = dir.path().join("kfd.json");
    std::fs::write(&json, value.to_string()).unwrap();
    let (input, output) = (json.to_str().unwrap(), kfd.to_str().unwrap());

    let out = run(&["encode", "-i", input, "-o", output]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--no-validate writes it anyway"));
    assert_eq!(std::fs::read(&kfd).unwrap(), before, "nothing written");

    let out = run(&["encode", "--no-validate", "-i", input, "-o", output]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("amdgpu-criu encode: warning: "), "{err}");
    assert!(err.contains("restore will refuse it"), "{err}");
    assert_ne!(std::fs::read(&kfd).unwrap(), before);
    std::fs::remove_file(&json).unwrap();
    let out = run(&["verify", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
}
