//! `amdgpu-criu flatten` and CRIU's own files, through the built binary: a
//! flattened directory is a whole images directory (CRIU's files copied
//! unchanged beside the standalone amdgpu files), its `parent` link points
//! at the source's parent by absolute path for CRIU's own incremental
//! images, the output says which files are standalone, and a dump that
//! never finished is refused.

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args(args)
        .output()
        .expect("amdgpu-criu runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// CRIU's files of an incremental dump, as `criu dump --prev-images-dir
/// ../1 --track-mem` leaves them beside the plugin's (contents made up:
/// flatten copies them without reading them).
const CRIU_FILES: [(&str, &[u8]); 4] = [
    ("inventory.img", b"inventory of the dump"),
    ("pagemap-1.img", b"pagemap entries, some in_parent"),
    ("pages-1.img", &[0xa5; 8192]),
    ("stats-dump", b"stats"),
];

#[test]
fn flatten_copies_criu_files_and_links_their_parent() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let out = run(&[
        "demo",
        "--topology",
        "pcie-2gpu",
        "--size",
        "32M",
        "--incremental",
        "1",
        "--dir",
        path(&dir),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let chained = dir.join("incremental");
    let parent = std::fs::canonicalize(chained.join("parent")).expect("the demo links a parent");
    for (name, bytes) in CRIU_FILES {
        std::fs::write(chained.join(name), bytes).unwrap();
    }
    std::fs::create_dir(chained.join("a-directory")).unwrap();
    // The demo's emulated CRIU leaves files of its own there too.
    let criu_files: Vec<String> = std::fs::read_dir(&chained)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("amdgpu-"))
        .collect();
    assert!(criu_files.len() >= CRIU_FILES.len());

    let flat = root.path().join("flat");
    std::fs::create_dir(&flat).unwrap();
    let out = run(&["flatten", path(&chained), path(&flat)]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("standalone, verified"), "{said}");
    assert!(
        said.contains(&format!(
            "{} of CRIU's files copied unchanged (CRIU's own images are not flattened)",
            criu_files.len()
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "{}/parent -> {}: CRIU's own incremental images",
            flat.display(),
            parent.display()
        )),
        "{said}"
    );
    assert!(
        said.contains("not copied (not regular files): a-directory"),
        "{said}"
    );
    for name in &criu_files {
        assert_eq!(
            std::fs::read(flat.join(name)).unwrap(),
            std::fs::read(chained.join(name)).unwrap(),
            "{name}"
        );
    }
    let link = std::fs::read_link(flat.join("parent")).unwrap();
    assert!(link.is_absolute(), "{}", link.display());
    assert_eq!(link, parent);

    // The amdgpu files stand alone: verify finds no reference, even with
    // the parent link gone.
    std::fs::remove_file(flat.join("parent")).unwrap();
    let verify = run(&["verify", path(&flat)]);
    assert!(verify.status.success(), "{}", text(&verify));

    // A source without a parent link gives none.
    let again = root.path().join("again");
    std::fs::create_dir(&again).unwrap();
    let out = run(&["flatten", path(&flat), path(&again)]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("parent ->"), "{}", text(&out));
    assert!(std::fs::symlink_metadata(again.join("parent")).is_err());

    // A dump that never finished (a writer's file left behind) is refused.
    let name = std::fs::read_dir(&chained)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("amdgpu-kfd-"))
        .expect("a KFD image");
    std::fs::write(chained.join(format!(".{name}.part-1-0")), b"").unwrap();
    let unfinished = root.path().join("unfinished");
    std::fs::create_dir(&unfinished).unwrap();
    let out = run(&["flatten", path(&chained), path(&unfinished)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("the dump did not finish"),
        "{}",
        text(&out)
    );
}

/// A checkpoint of processes without GPU state has no amdgpu file: flatten
/// copies CRIU's files and links the parent; a directory with no image
/// file at all is refused.
#[test]
fn flatten_without_amdgpu_files_copies_criu_files() {
    let root = tempfile::tempdir().unwrap();
    let first = root.path().join("1");
    let second = root.path().join("2");
    std::fs::create_dir(&first).unwrap();
    std::fs::create_dir(&second).unwrap();
    std::os::unix::fs::symlink("../1", second.join("parent")).unwrap();
    for (name, bytes) in CRIU_FILES {
        std::fs::write(second.join(name), bytes).unwrap();
    }
    let flat = root.path().join("flat");
    std::fs::create_dir(&flat).unwrap();
    let out = run(&["flatten", path(&second), path(&flat)]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("no amdgpu image files in"), "{said}");
    assert!(said.contains("nothing to flatten"), "{said}");
    assert!(
        said.contains("4 of CRIU's files copied unchanged"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_link(flat.join("parent")).unwrap(),
        std::fs::canonicalize(&first).unwrap()
    );
    for (name, bytes) in CRIU_FILES {
        assert_eq!(std::fs::read(flat.join(name)).unwrap(), bytes, "{name}");
    }

    let empty = root.path().join("empty");
    let dst = root.path().join("dst");
    std::fs::create_dir(&empty).unwrap();
    std::fs::create_dir(&dst).unwrap();
    let out = run(&["flatten", path(&empty), path(&dst)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no image files"), "{}", text(&out));
}
