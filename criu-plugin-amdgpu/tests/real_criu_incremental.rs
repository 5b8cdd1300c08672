//! Real CRIU's incremental dumps (`--prev-images-dir`) with the shipped
//! plugin loaded, and `amdgpu-criu flatten` of the result. No GPU is needed
//! (this machine has no `/dev/kfd`): the dumped tree holds no GPU state, so
//! what is tested is the directory layout the plugin and the tool rely on:
//! the `parent` link real CRIU writes is the one the plugin's parent
//! discovery (`DirStore::parent`, which `ChunkPlan::for_store` asks)
//! follows, `flatten` makes a directory CRIU restores from (its own files
//! copied, its `parent` link kept by absolute path), and the restored tree
//! runs on.
//!
//! With memory dirty tracking (`criu check --feature mem_dirty_track`) the
//! chain is CRIU's own: `pre-dump --track-mem` into `1`, then `dump
//! --prev-images-dir ../1 --track-mem` into `2`, whose pagemaps leave the
//! unchanged pages in `1` (so the restore from the flattened directory
//! reads them through its link). A kernel without it
//! (`CONFIG_MEM_SOFT_DIRTY` unset) makes CRIU refuse `--track-mem`,
//! `pre-dump`, and a dump against a parent holding the same tree (no
//! uptime to rule out pid reuse); there the parent is a dump of another
//! tree, which CRIU links without reading its pages, and the test says so.
//!
//! Needs what `real_criu.rs` needs (see there; the same skips, failures
//! under `CI`), plus the `amdgpu-criu` binary `make` built beside the
//! plugin.

use real_criu_harness as harness;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::PoisonError;

use amdgpu_checkpoint::incremental::ChunkPlan;
use amdgpu_image::{DirStore, PARENT_LINK};
use criu_plugin_amdgpu::log::Capture;
use harness::*;

/// The `amdgpu-criu` of the build that made the shipped plugin, or why it
/// cannot be used.
fn amdgpu_criu() -> Result<PathBuf, String> {
    let so = shipped_plugin()?;
    let cli = so
        .parent()
        .ok_or("the plugin has no directory")?
        .join("amdgpu-criu");
    let built = fs::metadata(&cli)
        .and_then(|m| m.modified())
        .map_err(|_| format!("{} is missing: run `make` first", cli.display()))?;
    let root = workspace_root();
    for krate in ["amdgpu-criu", "amdgpu-image"] {
        if newest(&root.join(krate).join("src")) > built {
            return Err(format!(
                "{} is older than the sources of {krate}: run `make` again",
                cli.display()
            ));
        }
    }
    Ok(cli)
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether this kernel lets CRIU track memory changes between dumps.
fn dirty_tracking(setup: &Setup) -> bool {
    Command::new(setup.criu(HEAD))
        .args(["check", "--feature", "mem_dirty_track"])
        .output()
        .expect("run criu check")
        .status
        .success()
}

/// The same directory (device and inode), however reached.
fn same_dir(a: &fs::Metadata, b: &Path) -> bool {
    let b = fs::metadata(b).expect("stat");
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[test]
fn criu_dev_incremental_dump_flattened_restores_and_runs_on() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[HEAD]) else {
        return;
    };
    let cli = match amdgpu_criu() {
        Ok(cli) => cli,
        Err(why) => {
            unavailable(&why);
            return;
        }
    };
    let dir = scratch();
    let images = dir.path().join("images");
    let (first, second) = (images.join("1"), images.join("2"));
    fs::create_dir(&first).unwrap();
    fs::create_dir(&second).unwrap();
    let log = |name: &str| dir.path().join(name);

    let tracking = dirty_tracking(&setup);
    let mut tree = if tracking {
        let tree = Tree::start(&setup, dir.path(), None);
        let root = tree.root().to_string();
        let pre = criu(
            &setup,
            HEAD,
            &log("pre-dump.log"),
            &["pre-dump", "-t", &root, "-D", path(&first), "--track-mem"],
        );
        pre.assert_ok("pre-dump --track-mem");
        pre.assert_quiet_plugin(HEAD, "pre-dump");
        tree.assert_runs_on("after pre-dump");
        tree
    } else {
        println!(
            "this kernel has no memory dirty tracking (`criu check --feature \
             mem_dirty_track` fails): CRIU refuses --track-mem and pre-dump, so the parent \
             is a dump of another tree"
        );
        let other = scratch();
        let mut old = Tree::start(&setup, other.path(), None);
        let root = old.root().to_string();
        let dump = criu(
            &setup,
            HEAD,
            &log("parent-dump.log"),
            &["dump", "-t", &root, "-D", path(&first)],
        );
        dump.assert_ok("dump of the parent's tree");
        old.reap();
        Tree::start(&setup, dir.path(), None)
    };
    let root = tree.root().to_string();
    let mut args = vec![
        "dump",
        "-t",
        &root,
        "-D",
        path(&second),
        "--prev-images-dir",
        "../1",
    ];
    if tracking {
        args.push("--track-mem");
    }
    let dump = criu(&setup, HEAD, &log("dump.log"), &args);
    dump.assert_ok("dump --prev-images-dir ../1");
    dump.assert_quiet_plugin(HEAD, "incremental dump");
    tree.reap();

    // The link CRIU wrote is the one the plugin's parent discovery follows.
    assert_eq!(
        fs::read_link(second.join(PARENT_LINK)).expect("CRIU links the parent"),
        Path::new("../1")
    );
    let store = DirStore::open_dir(&second).expect("the images directory opens");
    let parent = store
        .parent()
        .expect("the parent link resolves")
        .expect("a parent is found");
    assert_eq!(parent.shown(), "parent -> ../1");
    let found = parent.dir().metadata().expect("stat the parent");
    assert!(same_dir(&found, &first), "the parent found is images/1");
    // What a dump of GPU state into this directory would decide: the
    // parent is found, and holds no chunk digests (no GPU state), so every
    // chunk would be written.
    criu_plugin_amdgpu::log::install();
    let capture = Capture::start();
    let plan = ChunkPlan::for_store(&store, false).expect("the chunk plan");
    let lines = capture.lines();
    drop(capture);
    assert!(plan.parent_dump_id().is_none());
    assert!(
        lines
            .iter()
            .any(|(_, l)| l.contains("parent images parent -> ../1 carry no chunk digests")),
        "{lines:#?}"
    );

    // Flattened: CRIU's files copied, the parent linked by absolute path.
    let flat = dir.path().join("flat");
    fs::create_dir(&flat).unwrap();
    let out = Command::new(&cli)
        .args(["flatten", path(&second), path(&flat)])
        .output()
        .expect("run amdgpu-criu flatten");
    let text = said(&out);
    assert!(out.status.success(), "flatten: {text}");
    assert!(text.contains("nothing to flatten"), "{text}");
    let absolute = fs::canonicalize(&first).unwrap();
    assert!(
        text.contains(&format!("parent -> {}", absolute.display())),
        "{text}"
    );
    assert_eq!(fs::read_link(flat.join(PARENT_LINK)).unwrap(), absolute);
    let mut copied = 0;
    for entry in fs::read_dir(&second).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            let name = entry.file_name();
            assert_eq!(
                fs::read(flat.join(&name)).unwrap(),
                fs::read(entry.path()).unwrap(),
                "{name:?} copied unchanged"
            );
            copied += 1;
        }
    }
    assert!(
        text.contains(&format!("{copied} of CRIU's files copied unchanged")),
        "{text}"
    );

    // CRIU restores from the flattened directory and the tree runs on.
    let restore = criu(
        &setup,
        HEAD,
        &log("restore.log"),
        &["restore", "-d", "-D", path(&flat)],
    );
    restore.assert_ok("restore from the flattened directory");
    restore.assert_quiet_plugin(HEAD, "restore");
    tree.assert_runs_on("restored from the flattened directory");
}
