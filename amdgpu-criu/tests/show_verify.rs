//! `show` and `verify` on image sets written with amdgpu-image, through the
//! built binary.

use std::fs;
use std::path::Path;

use amdgpu_image::fuzz_support::{write_sample_set, SampleSpec};
use amdgpu_image::{CriuKfd, DirStore, ImageName, ImageStore};

mod cli;
use cli::run;

fn sample_dir() -> (tempfile::TempDir, CriuKfd) {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    let kfd = write_sample_set(&store, SampleSpec::default()).unwrap();
    (dir, kfd)
}

fn path(dir: &Path, name: ImageName) -> String {
    dir.join(name.to_string()).to_str().unwrap().to_owned()
}

#[test]
fn show_json_uses_proto_field_names() {
    let (dir, kfd) = sample_dir();
    let out = run(&["show", "--json", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 7);
    let k = files
        .iter()
        .find(|f| f["file"] == "amdgpu-kfd-1.img")
        .unwrap();
    assert_eq!(k["message"], "criu_kfd");
    let c = &k["content"];
    assert_eq!(c["pid"], 4242);
    // 64-bit fields as strings, ids and checksums in hex (as decode).
    assert_eq!(c["num_of_bos"], kfd.num_of_bos.to_string());
    assert_eq!(
        c["device_entries"][1]["gpu_id"],
        format!("{:#06x}", kfd.device_entries[1].gpu_id)
    );
    assert_eq!(c["device_entries"][0]["iolinks"][0]["type"], 2);
    assert_eq!(
        c["bo_entries"][0]["content_checksum"],
        format!("{:#x}", kfd.bo_entries[0].content_checksum.unwrap())
    );
    assert_eq!(c["priv_data"]["len"], 64);
    assert_eq!(
        c["priv_data"]["hex_prefix"],
        "000102030405060708090a0b0c0d0e0f"
    );
    assert_eq!(c["producer"], amdgpu_image::PRODUCER);
    let p = files
        .iter()
        .find(|f| f["file"] == "amdgpu-pages-1-1000.img")
        .unwrap();
    assert_eq!(p["pages"]["length_header"], 3 * 4 * 4096);
    assert_eq!(p["pages"]["payload_bytes"], 3 * 4 * 4096);
    let r = files
        .iter()
        .find(|f| f["file"] == "amdgpu-renderD-2.img")
        .unwrap();
    assert_eq!(
        r["content"]["bo_entries"][0]["vm_entries"][0]["flags"],
        "0xe"
    );
    let d = files
        .iter()
        .find(|f| f["file"] == "amdgpu-dmabuf_3.img")
        .unwrap();
    assert_eq!(d["content"]["gem_handle"], 2);
}

#[test]
fn show_text_of_one_file() {
    let (dir, _) = sample_dir();
    let out = run(&["show", &path(dir.path(), ImageName::Kfd { id: 1 })]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // One file: no summary, the message in field (tag) order.
    assert!(
        text.starts_with(
            "amdgpu-kfd-1.img (criu_kfd, 725 bytes, message checksum verified)\n  pid: 4242\n  \
             num_of_gpus: 2\n  num_of_cpus: 1\n  device_entries: 3 entries\n"
        ),
        "{text}"
    );
    assert!(text.contains("  bo_entries: 8 entries\n"), "{text}");
    assert!(
        text.contains(", alloc_flags 0x2 (GTT), gpu_id 0x1000, handle none, content_checksum 0x"),
        "{text}"
    );
    assert!(
        text.contains("  priv_data: 64 bytes [000102030405060708090a0b0c0d0e0f…]\n"),
        "{text}"
    );
    assert!(
        text.contains("iolinks: type 2 (PCIe) node_to_id 1"),
        "{text}"
    );
}

#[test]
fn show_reports_unreadable_files_and_bad_paths() {
    let (dir, _) = sample_dir();
    fs::write(
        dir.path().join("amdgpu-renderD-2.img"),
        [5, 0, 0, 0, 0, 0, 0, 0, 1],
    )
    .unwrap();
    let out = run(&["show", "--details", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    // Once, on stderr, the file named once.
    assert_eq!(
        err,
        "amdgpu-criu show: amdgpu-renderD-2.img: truncated: the length header announces 5 \
         bytes, only 1 follow\n"
    );
    assert!(text.contains("amdgpu-renderD-2.img: unreadable"), "{text}");
    assert!(text.contains("amdgpu-kfd-1.img (criu_kfd, "), "{text}");

    // A zero-length file says so.
    fs::write(dir.path().join("amdgpu-renderD-2.img"), []).unwrap();
    let out = run(&["show", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("amdgpu-renderD-2.img: empty file (0 bytes), not an image"),
        "{err}"
    );
    assert!(!err.contains("failed to fill whole buffer"), "{err}");
    let out = run(&["show", "--json", dir.path().to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["problems"][0]
        .as_str()
        .unwrap()
        .starts_with("amdgpu-renderD-2.img: empty file"));

    // A directory without images.
    let empty = tempfile::tempdir().unwrap();
    let out = run(&["show", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no amdgpu image files"));

    let other = dir.path().join("notes.txt");
    fs::write(&other, "x").unwrap();
    let out = run(&["show", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(
        "notes.txt: does not end in .img (the kind of an image is told by its file name; a \
         checkpoint archive is a tar file)"
    ));
}

#[test]
fn verify_says_an_interrupted_dump_is_incomplete() {
    let (dir, _) = sample_dir();
    // What a dump killed mid-file leaves: the file it was writing.
    std::fs::write(
        dir.path().join(".amdgpu-pages-1-0002.img.part-4242-7"),
        b"partial",
    )
    .unwrap();
    let out = run(&["verify", dir.path().to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("incomplete image set: .amdgpu-pages-1-0002.img.part-4242-7")
            && text.contains(": incomplete, 1 unfinished file"),
        "{text}"
    );
}

#[test]
fn verify_clean_set_exits_0() {
    let (dir, _) = sample_dir();
    let out = run(&["verify", dir.path().to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        text,
        "7 files, 8 bos read (110592 bytes), 8 content checksums verified, 3 of 3 messages \
         covered by a checksum: clean\n"
    );
}

#[test]
fn verify_lists_each_problem_and_exits_1() {
    let (dir, kfd) = sample_dir();
    let store = DirStore::open_dir(dir.path()).unwrap();
    // A flipped byte in a BO, and a kfd image whose BO count lies.
    let pages = path(
        dir.path(),
        ImageName::Pages {
            id: 1,
            gpu_id: 0x1111,
        },
    );
    let mut bytes = fs::read(&pages).unwrap();
    bytes[100] ^= 1;
    fs::write(&pages, bytes).unwrap();
    let mut bad = kfd.clone();
    bad.num_of_bos += 1;
    store
        .write_message(&ImageName::Kfd { id: 7 }, &bad)
        .unwrap();

    let out = run(&["verify", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with(
            "amdgpu-kfd-7.img: criu_kfd.num_of_bos: is 9 but the image has 8 bo entries"
        ),
        "{text}"
    );
    assert!(
        lines[1].starts_with("amdgpu-pages-1-1111.img: bo 0 (entry 4): content checksum"),
        "{text}"
    );
    assert!(lines[2].ends_with(": 2 problems"), "{text}");
}

#[test]
fn verify_usage_and_io_errors_exit_2() {
    let out = run(&["verify", "/nonexistent/amdgpu-images"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/amdgpu-images"));
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        run(&["verify", empty.path().to_str().unwrap()])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["verify"]).status.code(), Some(2));
}

/// A render-only set: one render-node image with `gpu_id` 0 and the GPU's
/// device entry (tag 102), one VRAM BO with its drm-pages file.
fn render_only_dir(minor_in_device: u32) -> tempfile::TempDir {
    use amdgpu_image::{
        flags, CriuRenderNode, DevIolink, DrmBoEntry, DrmVmEntry, ImageWriter, KfdDeviceEntry,
        PagesLayout,
    };
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    let size = 2 * 4096u64;
    let name = ImageName::DrmPages {
        id: 5,
        minor: 129,
        bo_index: 0,
    };
    let mut w = store
        .create_pages(&name, PagesLayout::from_sizes([size]).unwrap())
        .unwrap();
    let bytes: Vec<u8> = (0..size).map(|b| (b % 251) as u8).collect();
    w.write(&bytes).unwrap();
    let (sink, written) = w.finish().unwrap();
    sink.commit().unwrap();
    let mut rn = CriuRenderNode {
        gpu_id: 0,
        id: 5,
        drm_render_minor: 129,
        num_of_bos: 1,
        bo_entries: vec![DrmBoEntry {
            addr: 0x30_0000_0000,
            size,
            offset: 0x11_0000,
            alignment: 1,
            preferred_domains: flags::GEM_DOMAIN_VRAM,
            handle: 1,
            num_of_vms: 1,
            vm_entries: vec![DrmVmEntry {
                addr: 0x30_0000_0000,
                size,
                offset: 0,
                flags: 0x60,
            }],
            content_checksum: written.checksums.first().map(|c| c.1),
            ..Default::default()
        }],
        producer: None,
        format_version: None,
        message_checksum: None,
        device: Some(KfdDeviceEntry {
            node_id: 2,
            gpu_id: 0xbeef,
            simd_count: 208,
            device_id: 0x740f,
            vendor_id: 4098,
            drm_render_minor: minor_in_device,
            vram_size: 64 << 30,
            iolinks: vec![DevIolink {
                r#type: 2,
                node_to_id: 0,
            }],
            ..Default::default()
        }),
        kfd_pids: Vec::new(),
        ..Default::default()
    };
    rn.mark_producer();
    store
        .write_message(&ImageName::RenderNode { id: 5 }, &rn)
        .unwrap();
    dir
}

#[test]
fn show_and_verify_a_render_only_set() {
    let dir = render_only_dir(129);
    let out = run(&["show", "--json", dir.path().to_str().unwrap()]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["file"] == "amdgpu-renderD-5.img")
        .unwrap();
    assert_eq!(r["content"]["gpu_id"], "0x0000");
    assert_eq!(r["content"]["device"]["gpu_id"], "0xbeef");
    assert_eq!(r["content"]["device"]["drm_render_minor"], 129);
    assert_eq!(r["content"]["device"]["iolinks"][0]["node_to_id"], 0);

    let out = run(&["show", &path(dir.path(), ImageName::RenderNode { id: 5 })]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("  gpu_id: 0x0000\n"), "{text}");
    assert!(
        text.contains("  device:\n    node_id 2, gpu_id 0xbeef, cpu_cores_count 0, "),
        "{text}"
    );
    assert!(text.contains(", device_id 0x740f, "), "{text}");

    let out = run(&["verify", dir.path().to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        text,
        "2 files, 1 bo read (8192 bytes), 1 content checksum verified, 1 of 1 message covered \
         by a checksum: clean\n"
    );
}

#[test]
fn verify_names_a_device_entry_of_another_render_node() {
    let dir = render_only_dir(130);
    let out = run(&["verify", dir.path().to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with(
            "amdgpu-renderD-5.img: criu_render_node.device.drm_render_minor: is 130 but the \
             node is renderD129"
        ),
        "{text}"
    );
}

#[test]
fn show_reads_the_contents_and_fails_on_a_damaged_pages_file() {
    let (dir, _) = sample_dir();
    let set = dir.path().to_str().unwrap();
    let out = run(&["show", set]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    // A summary by default; every message only on request.
    assert!(text.contains("\ncontents: "), "{text}");
    assert!(text.contains(": sound\n"), "{text}");
    assert!(!text.contains("bo_entries:"), "{text}");
    assert!(text.contains("--details"), "{text}");
    let out = run(&["show", "--details", set]);
    let details = String::from_utf8(out.stdout).unwrap();
    assert!(details.contains("  bo_entries: 8 entries\n"), "{details}");

    // One flipped byte in a pages file: the messages are sound, the set is not.
    let pages = path(
        dir.path(),
        ImageName::Pages {
            id: 1,
            gpu_id: 0x1000,
        },
    );
    let mut bytes = fs::read(&pages).unwrap();
    bytes[8 + 100] ^= 0x01;
    fs::write(&pages, bytes).unwrap();
    let out = run(&["show", set]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("amdgpu-criu show: amdgpu-pages-1-1000.img: "),
        "{err}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1 problem (see the errors)"), "{text}");
}
