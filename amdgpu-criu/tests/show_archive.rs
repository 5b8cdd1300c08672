//! `show` on what crit users have: a CRIU image directory with CRIU's own
//! images beside ours, and a Podman/CRI-O checkpoint archive (tar, plain,
//! zstd- or gzip-compressed, as `podman container checkpoint --export
//! --compress none|zstd|gzip` writes it).

use std::fs;
use std::path::Path;

use amdgpu_image::fuzz_support::{write_sample_set, SampleSpec};
use amdgpu_image::DirStore;

mod cli;
use cli::run;

fn sample_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::open_dir(dir.path()).unwrap();
    write_sample_set(&store, SampleSpec::default()).unwrap();
    // CRIU's own images, as a real checkpoint directory holds them.
    fs::write(dir.path().join("inventory.img"), b"\x54\x57\x45\x58junk").unwrap();
    fs::write(dir.path().join("pages-1.img"), vec![0u8; 8192]).unwrap();
    fs::write(dir.path().join("core-4242.img"), b"core").unwrap();
    dir
}

/// A tar like podman's: `checkpoint/` with the images, plus its own files.
fn podman_tar(images: &Path) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.append_dir_all("checkpoint", images).unwrap();
    let spec = br#"{"ociVersion":"1.0.0"}"#;
    let mut h = tar::Header::new_gnu();
    h.set_size(spec.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "spec.dump", &spec[..]).unwrap();
    b.into_inner().unwrap()
}

fn summary_of(path: &Path) -> (Option<i32>, serde_json::Value, String) {
    let out = run(&["show", "--json", path.to_str().unwrap()]);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code(), v, String::from_utf8(out.stderr).unwrap())
}

#[test]
fn a_criu_image_directory_shows_only_ours() {
    let dir = sample_dir();
    let (code, v, err) = summary_of(dir.path());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["files"].as_array().unwrap().len(), 7);
    let out = run(&["show", dir.path().to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(": 7 amdgpu image files, "), "{text}");
    assert!(
        text.contains("\nprocesses: 1\n  pid 4242 (amdgpu-kfd-1.img): 2 GPUs, 8 BOs"),
        "{text}"
    );
    assert!(text.contains("\nGPUs: 2\n"), "{text}");
    assert!(text.contains("  0x1000 "), "{text}");
    assert!(text.contains("\nBOs by domain:\n"), "{text}");
    assert!(text.contains("\ndma-bufs: 1\n"), "{text}");
    assert!(
        text.contains("\nmessage checksums: 3 of 3 messages verified\n"),
        "{text}"
    );
}

/// `data` gzip-compressed in `members` members, as gzip (one) and pigz
/// (several) write it.
fn gzip(data: &[u8], members: usize) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::new();
    for part in data.chunks(data.len().div_ceil(members)) {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(part).unwrap();
        out.extend(encoder.finish().unwrap());
    }
    out
}

#[test]
fn a_podman_archive_plain_zstd_and_gzip() {
    let dir = sample_dir();
    let (_, direct, _) = summary_of(dir.path());
    let tar = podman_tar(dir.path());
    let work = tempfile::tempdir().unwrap();
    let plain = work.path().join("checkpoint.tar");
    fs::write(&plain, &tar).unwrap();
    let zst = work.path().join("checkpoint.tar.zst");
    fs::write(
        &zst,
        ruzstd::encoding::compress_to_vec(&tar[..], ruzstd::encoding::CompressionLevel::Fastest),
    )
    .unwrap();
    let gz = work.path().join("checkpoint.tar.gz");
    fs::write(&gz, gzip(&tar, 1)).unwrap();
    let pigz = work.path().join("checkpoint-pigz.tar.gz");
    fs::write(&pigz, gzip(&tar, 3)).unwrap();
    for archive in [&plain, &zst, &gz, &pigz] {
        let (code, v, err) = summary_of(archive);
        assert_eq!(code, Some(0), "{}: {err}", archive.display());
        let files = v["files"].as_array().unwrap();
        assert_eq!(files.len(), 7, "{v:#}");
        // The same messages as from the directory; sizes on disk unknown.
        for (a, d) in files.iter().zip(direct["files"].as_array().unwrap()) {
            assert_eq!(a["file"], d["file"]);
            assert_eq!(a["content"], d["content"]);
            assert_eq!(a["pages"], d["pages"]);
            assert_eq!(a["message_checksum"], d["message_checksum"]);
        }
        assert_eq!(v["summary"]["processes"][0]["pid"], 4242);
    }
    let out = run(&["show", zst.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "{} (checkpoint archive): 7 amdgpu image files",
            zst.display()
        )),
        "{text}"
    );
}

#[test]
fn damaged_archives_are_named() {
    let dir = sample_dir();
    let tar = podman_tar(dir.path());
    let work = tempfile::tempdir().unwrap();
    // Cut inside the archive: the reader says what it could not read.
    let cut = work.path().join("cut.tar");
    fs::write(&cut, &tar[..tar.len() / 2]).unwrap();
    let out = run(&["show", cut.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!("amdgpu-criu show: {}", cut.display())),
        "{err}"
    );
    // A zstd frame that is not one.
    let bad = work.path().join("bad.tar.zst");
    fs::write(&bad, [0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff]).unwrap();
    let out = run(&["show", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    // A gzip stream cut short: named, never a panic.
    let gz = work.path().join("c.tar.gz");
    fs::write(&gz, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0]).unwrap();
    let out = run(&["show", gz.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!("amdgpu-criu show: {}", gz.display()))
            && !err.contains("panicked"),
        "{err}"
    );
    // An archive without amdgpu images.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_cksum();
    b.append_data(&mut h, "checkpoint/inventory.img", &b"x"[..])
        .unwrap();
    let none = work.path().join("none.tar");
    fs::write(&none, b.into_inner().unwrap()).unwrap();
    let out = run(&["show", none.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no amdgpu image files"));
}

/// The fuzz target's corpus (fuzz/corpus/checkpoint_archive/), replayed
/// through the check the target runs: seeds and every crash input added
/// there stay regression tests.
#[test]
fn checkpoint_archive_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/checkpoint_archive");
    let mut n = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = fs::read(&path).unwrap();
        let result = std::panic::catch_unwind(|| amdgpu_image::fuzz_support::check_archive(&data));
        assert!(result.is_ok(), "{} fails its check", path.display());
        n += 1;
    }
    assert!(n >= 5, "corpus shrank to {n}");
    // The seeds are what they claim.
    let zst = fs::read(dir.join("podman.tar.zst")).unwrap();
    let found = amdgpu_image::archive::read_archive(&zst[..], Default::default()).unwrap();
    let names: Vec<String> = found.iter().map(|f| f.name.to_string()).collect();
    assert_eq!(
        names,
        [
            "amdgpu-pages-1-1000.img",
            "amdgpu-dmabuf_3.img",
            "amdgpu-dmabuf_4.img"
        ]
    );
    assert_eq!(
        found[0].bytes.len(),
        8,
        "a pages file is read up to its header"
    );
    assert_eq!(found[0].len, 8 + 4096);
}

/// `verify` and `check` read an archive as they read the directory it was
/// made of: the same answers; a pages file damaged inside the archive is
/// found by `verify`, and no temporary directory is left behind.
#[test]
fn verify_and_check_read_an_archive_like_its_directory() {
    let dir = sample_dir();
    let tar = podman_tar(dir.path());
    let work = tempfile::tempdir().unwrap();
    let zst = work.path().join("checkpoint.tar.zst");
    fs::write(
        &zst,
        ruzstd::encoding::compress_to_vec(&tar[..], ruzstd::encoding::CompressionLevel::Fastest),
    )
    .unwrap();
    let temp = tempfile::tempdir().unwrap();
    let answer = |args: &[&str]| {
        let out = cli::run_with(args, &[("TMPDIR", temp.path().to_str().unwrap())]);
        let text = String::from_utf8(out.stdout).unwrap();
        (out.status.code(), text)
    };
    let (d, a) = (dir.path().to_str().unwrap(), zst.to_str().unwrap());
    let (code, text) = answer(&["verify", d]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(answer(&["verify", a]), (code, text));
    for machine in ["builtin:pcie-2gpu", "builtin:single-gpu"] {
        let direct = answer(&["check", d, "--sysfs", machine, "--json"]);
        assert!(direct.0 == Some(0) || direct.0 == Some(1), "{direct:?}");
        assert_eq!(answer(&["check", a, "--sysfs", machine, "--json"]), direct);
    }
    // A flipped byte in a pages file, inside the (plain) archive.
    let pages = dir.path().join("amdgpu-pages-1-1000.img");
    let mut bytes = fs::read(&pages).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    fs::write(&pages, bytes).unwrap();
    let damaged = work.path().join("damaged.tar");
    fs::write(&damaged, podman_tar(dir.path())).unwrap();
    let (code, text) = answer(&["verify", damaged.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("amdgpu-pages-1-1000.img"), "{text}");
    assert_eq!(
        fs::read_dir(temp.path()).unwrap().count(),
        0,
        "the unpacked archives are removed"
    );
}
