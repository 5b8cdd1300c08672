//! `verify`, `show` and `check` against damage the BO content checksums
//! cannot see: bytes of the messages themselves (caught by the per-message
//! checksum, tag 120) and whole images deleted (named as missing, with what
//! references them). Images without the checksum (the C plugin's) still
//! verify, and the report says they are not covered.

use std::fs;
use std::path::Path;

use amdgpu_image::fuzz_support::{write_sample_set, SampleSpec};
use amdgpu_image::{
    decode_message_unchecked, encode_message, CriuKfd, CriuRenderNode, DirStore, ImageName,
    ImageStore, ReadLimits, HEADER_LEN,
};

mod cli;
use cli::run;

fn sample_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    write_sample_set(&store, SampleSpec::default()).unwrap();
    dir
}

fn file(dir: &Path, name: ImageName) -> std::path::PathBuf {
    dir.join(name.to_string())
}

fn verify(dir: &Path) -> (Option<i32>, String) {
    let out = run(&["verify", dir.to_str().unwrap()]);
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

const KFD: ImageName = ImageName::Kfd { id: 1 };

#[test]
fn flipped_bytes_in_priv_data_are_caught_by_verify_show_and_check() {
    let dir = sample_dir();
    let path = file(dir.path(), KFD);
    let mut bytes = fs::read(&path).unwrap();
    // The sample's priv_data is 0, 1, 2, ... 63; flip 4 bytes inside it.
    let at = bytes
        .windows(16)
        .position(|w| w == (0u8..16).collect::<Vec<_>>())
        .expect("priv_data in the image");
    for b in &mut bytes[at + 20..at + 24] {
        *b ^= 0xff;
    }
    fs::write(&path, &bytes).unwrap();

    let (code, text) = verify(dir.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.starts_with("amdgpu-kfd-1.img: criu_kfd: message checksum mismatch"),
        "{text}"
    );
    assert!(text.ends_with(": 1 problem\n"), "{text}");

    let out = run(&["show", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("amdgpu-kfd-1.img: message checksum mismatch"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let out = run(&[
        "check",
        dir.path().to_str().unwrap(),
        "--builtin",
        "mi210-8gpu-2hive",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("amdgpu-kfd-1.img") && err.contains("message checksum mismatch"),
        "{err}"
    );

    // What restore reads goes through the same check.
    let store = DirStore::open_dir(dir.path()).unwrap();
    let e = store
        .read_message::<CriuKfd>(&KFD, ReadLimits::default())
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("amdgpu-kfd-1.img: criu_kfd: message checksum mismatch"),
        "{e}"
    );
}

/// Rewrites `name` with `edit` applied to its message, keeping the checksum
/// it was sealed with (as an edit of the file's bytes would).
fn edit_keeping_checksum<M>(dir: &Path, name: ImageName, edit: impl FnOnce(&mut M))
where
    M: amdgpu_image::ImageMessage,
{
    let path = file(dir, name);
    let bytes = fs::read(&path).unwrap();
    let mut msg: M = decode_message_unchecked(&name.to_string(), &bytes[HEADER_LEN..]).unwrap();
    assert!(msg.message_checksum().is_some(), "{name} is sealed");
    edit(&mut msg);
    let payload = encode_message(&msg);
    let mut out = (payload.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&payload);
    fs::write(&path, out).unwrap();
}

#[test]
fn a_changed_wave_front_size_is_caught() {
    let dir = sample_dir();
    edit_keeping_checksum::<CriuKfd>(dir.path(), KFD, |m| {
        assert_eq!(m.device_entries[1].wave_front_size, 0);
        m.device_entries[1].wave_front_size = 7;
    });
    let (code, text) = verify(dir.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.starts_with("amdgpu-kfd-1.img: criu_kfd: message checksum mismatch"),
        "{text}"
    );
    // The same in the render node and dma-buf images.
    let dir = sample_dir();
    edit_keeping_checksum::<CriuRenderNode>(dir.path(), ImageName::RenderNode { id: 2 }, |m| {
        m.drm_render_minor += 1;
    });
    let (code, text) = verify(dir.path());
    assert_eq!(code, Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("amdgpu-renderD-2.img: criu_render_node: message checksum mismatch"),
        "{text}"
    );
}

#[test]
fn a_deleted_kfd_image_is_named_with_what_references_it() {
    let dir = sample_dir();
    fs::remove_file(file(dir.path(), KFD)).unwrap();
    let (code, text) = verify(dir.path());
    assert_eq!(code, Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "amdgpu-kfd-1.img: missing (the process's bo list and gpus); referenced by 2 files: \
         amdgpu-pages-1-1000.img, amdgpu-pages-1-1111.img",
        "{text}"
    );
    assert!(!text.contains("not referenced"), "{text}");
}

#[test]
fn a_deleted_render_image_is_named_with_what_references_it() {
    let dir = sample_dir();
    fs::remove_file(file(dir.path(), ImageName::RenderNode { id: 2 })).unwrap();
    let (code, text) = verify(dir.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.starts_with(
            "amdgpu-renderD-2.img: missing (the render node's bo list); referenced by 2 files: \
             amdgpu-drm-pages-2-"
        ),
        "{text}"
    );
}

#[test]
fn a_deleted_render_image_without_bos_is_missed_by_its_process() {
    // The demo's process opens the render node of each of its 8 GPUs; the
    // render images hold no BOs, so no pages file references them.
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let out = run(&[
        "demo",
        "--workload",
        "basic",
        "--dir",
        images.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, text) = verify(&images);
    assert_eq!(code, Some(0), "{text}");
    let render = file(&images, ImageName::RenderNode { id: 3 });
    let msg: CriuRenderNode = DirStore::open_dir(&images)
        .unwrap()
        .read_message(&ImageName::RenderNode { id: 3 }, ReadLimits::default())
        .unwrap()
        .unwrap();
    assert!(msg.bo_entries.is_empty());
    fs::remove_file(render).unwrap();
    let (code, text) = verify(&images);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.starts_with(&format!(
            "amdgpu-renderD-?.img (gpu {:#x}, renderD{}): missing: amdgpu-kfd-1.img (pid ",
            msg.gpu_id, msg.drm_render_minor
        )),
        "{text}"
    );
    assert!(
        text.contains("and its other 7 gpus have a render node image"),
        "{text}"
    );
}

#[test]
fn c_plugin_images_verify_and_are_said_not_covered() {
    let dir = sample_dir();
    let store = DirStore::open_dir(dir.path()).unwrap();
    // The C plugin writes neither our producer marker nor the checksum.
    let mut kfd: CriuKfd = store
        .read_message(&KFD, ReadLimits::default())
        .unwrap()
        .unwrap();
    kfd.producer = None;
    kfd.format_version = None;
    store.write_message(&KFD, &kfd).unwrap();
    let raw = fs::read(file(dir.path(), KFD)).unwrap();
    assert_eq!(&raw[HEADER_LEN..], encode_message(&kfd), "written unsealed");

    let (code, text) = verify(dir.path());
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("not covered: 1 message carries no message checksum"),
        "{text}"
    );
    assert!(text.contains(": amdgpu-kfd-1.img\n"), "{text}");
    assert!(
        text.ends_with("2 of 3 messages covered by a checksum: clean\n"),
        "{text}"
    );

    let out = run(&["verify", "--json", dir.path().to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean"], true);
    assert_eq!(v["messages_covered"], 2);
    assert_eq!(v["messages_not_covered"][0], "amdgpu-kfd-1.img");
}

#[test]
fn verify_json_lists_problems_with_their_fields() {
    let dir = sample_dir();
    fs::remove_file(file(dir.path(), KFD)).unwrap();
    let out = run(&["verify", "--json", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean"], false);
    assert_eq!(v["problems"][0]["file"], "amdgpu-kfd-1.img");
    // A problem of the file as a whole has no field path.
    assert_eq!(v["problems"][0]["path"], serde_json::Value::Null);
    assert!(v["problems"][0]["message"]
        .as_str()
        .unwrap()
        .starts_with("missing"));
}

#[test]
fn closed_pipes_end_quietly() {
    let dir = sample_dir();
    let dir = dir.path().to_str().unwrap();
    for args in [
        &["show", dir][..],
        &["verify", dir],
        &["topology", "--builtin", "mi300x-64"],
    ] {
        cli::into_closed_pipe(args);
    }
}
