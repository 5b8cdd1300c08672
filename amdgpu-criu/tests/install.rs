//! `make install` and `make uninstall` of the root Makefile, into a temporary
//! `DESTDIR` with `PREFIX=/usr`.
//!
//! The test never builds: it points the Makefile's `BUILD_DIR` and
//! `PLUGIN_BUILD_DIR` at the directory holding this test's own `amdgpu-criu`
//! binary, where `cargo test --workspace` has also built the plugin's
//! `libcriu_plugin_amdgpu.so` (the plugin crate depends on neither the
//! simulator nor the CRIU host emulator, so that `.so` is the one `make`
//! ships, in debug). Running a release build here would double the CI build
//! time. When the `.so` is absent (for example `cargo test -p
//! amdgpu-criu` alone) or `make` is not installed, the test says so and
//! skips.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace_root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    while !fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")) {
        dir = dir.parent().expect("a workspace root above the crate");
    }
    dir.to_path_buf()
}

fn make(target: &str, destdir: &Path, build_dir: &Path) -> Output {
    make_with(target, destdir, build_dir, &[])
}

fn make_with(target: &str, destdir: &Path, build_dir: &Path, extra: &[&str]) -> Output {
    Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_root())
        .arg(target)
        .arg(format!("DESTDIR={}", destdir.display()))
        .arg("PREFIX=/usr")
        .arg(format!("BUILD_DIR={}", build_dir.display()))
        .arg(format!("PLUGIN_BUILD_DIR={}", build_dir.display()))
        .args(extra)
        .output()
        .expect("make runs")
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every path under `root`, relative, directories included.
fn tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            out.insert(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

const INSTALLED_FILES: [&str; 9] = [
    "usr/lib/criu/amdgpu_plugin.so",
    "usr/bin/amdgpu-criu",
    "usr/share/man/man1/criu-amdgpu-plugin.1",
    "usr/share/man/man1/amdgpu-criu.1",
    "usr/share/man/fa/man1/criu-amdgpu-plugin.1",
    "usr/share/bash-completion/completions/amdgpu-criu",
    "usr/share/zsh/site-functions/_amdgpu-criu",
    "usr/share/fish/vendor_completions.d/amdgpu-criu.fish",
    "usr/share/amdgpu-criu/install-manifest",
];

/// The directory holding the test's binaries and the plugin `.so`, or `None`
/// (with the reason printed) when the test cannot run here.
fn build_dir_with_plugin() -> Option<PathBuf> {
    let cli = Path::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
    let build_dir = cli.parent().unwrap();
    let plugin = build_dir.join("libcriu_plugin_amdgpu.so");
    if !plugin.is_file() {
        println!(
            "skipped: {} is absent (built by `cargo test --workspace`, not by `cargo test -p amdgpu-criu`)",
            plugin.display()
        );
        return None;
    }
    if Command::new("make").arg("--version").output().is_err() {
        println!("skipped: make is not installed");
        return None;
    }
    Some(build_dir.to_path_buf())
}

#[test]
fn install_then_uninstall_leaves_what_was_there() {
    let Some(build_dir) = build_dir_with_plugin() else {
        return;
    };
    let build_dir = build_dir.as_path();
    let plugin = build_dir.join("libcriu_plugin_amdgpu.so");
    let dest = tempfile::tempdir().unwrap();
    // A directory and a file that were there before: they must survive.
    fs::create_dir_all(dest.path().join("usr/share/man/man1")).unwrap();
    fs::write(
        dest.path().join("usr/share/man/man1/other.1"),
        ".TH OTHER 1\n",
    )
    .unwrap();
    let before = tree(dest.path());

    assert_ok(&make("install", dest.path(), build_dir), "make install");
    let installed: BTreeSet<String> = tree(dest.path())
        .into_iter()
        .filter(|p| dest.path().join(p).is_file() && !before.contains(p))
        .collect();
    let expected: BTreeSet<String> = INSTALLED_FILES.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(installed, expected);

    assert_eq!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap(),
        fs::read(&plugin).unwrap(),
        "the plugin is installed byte for byte"
    );
    // Whatever else the workspace built beside it, the installed plugin
    // carries no simulator, no emulator and no test trigger.
    let so = fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap();
    for needle in [
        "kfd_sim",
        "kfd-sim",
        "criu_host_emulator",
        "SimDriver",
        "EmulatedHost",
        "test-triggered panic",
    ] {
        assert!(
            !so.windows(needle.len()).any(|w| w == needle.as_bytes()),
            "the installed plugin contains {needle:?}"
        );
    }
    for (installed, source) in [
        ("usr/share/man/man1/amdgpu-criu.1", "docs/man/amdgpu-criu.1"),
        (
            "usr/share/man/fa/man1/criu-amdgpu-plugin.1",
            "docs/man/fa/criu-amdgpu-plugin.1",
        ),
    ] {
        assert_eq!(
            fs::read_to_string(dest.path().join(installed)).unwrap(),
            fs::read_to_string(workspace_root().join(source)).unwrap(),
            "{installed} is {source}"
        );
    }
    for (file, marker) in [
        (
            "usr/share/bash-completion/completions/amdgpu-criu",
            "complete -F",
        ),
        (
            "usr/share/zsh/site-functions/_amdgpu-criu",
            "#compdef amdgpu-criu",
        ),
        (
            "usr/share/fish/vendor_completions.d/amdgpu-criu.fish",
            "complete -c amdgpu-criu",
        ),
    ] {
        let script = fs::read_to_string(dest.path().join(file)).unwrap();
        assert!(script.contains(marker), "{file} lacks {marker:?}");
        assert!(
            script.contains("topology"),
            "{file} does not complete subcommands"
        );
    }
    let manifest =
        fs::read_to_string(dest.path().join("usr/share/amdgpu-criu/install-manifest")).unwrap();
    let listed: BTreeSet<String> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("f /"))
        .map(str::to_owned)
        .collect();
    assert_eq!(listed, expected, "the manifest lists every installed file");
    assert!(
        !manifest.contains("d /usr/share/man\n") && !manifest.contains("d /usr/share/man/man1\n"),
        "directories that existed are not claimed:\n{manifest}"
    );

    let again = make("install", dest.path(), build_dir);
    assert!(
        !again.status.success(),
        "installing over an installation must be refused"
    );

    assert_ok(&make("uninstall", dest.path(), build_dir), "make uninstall");
    assert_eq!(tree(dest.path()), before, "uninstall restores the tree");

    let again = make("uninstall", dest.path(), build_dir);
    assert!(
        !again.status.success(),
        "uninstalling with nothing installed is an error"
    );
}

#[test]
fn install_without_artifacts_is_refused() {
    if Command::new("make").arg("--version").output().is_err() {
        println!("skipped: make is not installed");
        return;
    }
    let dest = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = make("install", dest.path(), empty.path());
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run 'make' first"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree(dest.path()).is_empty(), "nothing is installed");
}

/// A plugin of another origin (the distribution's C `amdgpu_plugin.so`) in
/// the plugin directory before any install.
const FOREIGN_PLUGIN: &[u8] = b"\x7fELF the distribution's C amdgpu_plugin.so";

fn with_foreign_plugin() -> tempfile::TempDir {
    let dest = tempfile::tempdir().unwrap();
    fs::create_dir_all(dest.path().join("usr/lib/criu")).unwrap();
    fs::write(
        dest.path().join("usr/lib/criu/amdgpu_plugin.so"),
        FOREIGN_PLUGIN,
    )
    .unwrap();
    dest
}

#[test]
fn install_refuses_to_overwrite_a_plugin_it_did_not_write() {
    let Some(build_dir) = build_dir_with_plugin() else {
        return;
    };
    let dest = with_foreign_plugin();
    let before = tree(dest.path());

    let out = make("install", dest.path(), &build_dir);
    assert!(
        !out.status.success(),
        "install over a foreign plugin must be refused"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("amdgpu_plugin.so exists") && stderr.contains("FORCE=1"),
        "the refusal names the file and the way out: {stderr}"
    );
    assert_eq!(
        tree(dest.path()),
        before,
        "a refused install writes nothing"
    );
    assert_eq!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap(),
        FOREIGN_PLUGIN
    );
}

#[test]
fn forced_install_keeps_the_old_plugin_and_uninstall_puts_it_back() {
    let Some(build_dir) = build_dir_with_plugin() else {
        return;
    };
    let dest = with_foreign_plugin();
    let before = tree(dest.path());

    let out = make_with("install", dest.path(), &build_dir, &["FORCE=1"]);
    assert_ok(&out, "make install FORCE=1");
    assert_eq!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so.orig")).unwrap(),
        FOREIGN_PLUGIN,
        "the replaced plugin is kept"
    );
    assert_eq!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap(),
        fs::read(build_dir.join("libcriu_plugin_amdgpu.so")).unwrap(),
        "ours is installed"
    );
    let manifest =
        fs::read_to_string(dest.path().join("usr/share/amdgpu-criu/install-manifest")).unwrap();
    assert!(
        manifest.contains("o /usr/lib/criu/amdgpu_plugin.so\n"),
        "the manifest records the kept file:\n{manifest}"
    );

    assert_ok(
        &make("uninstall", dest.path(), &build_dir),
        "make uninstall",
    );
    assert_eq!(tree(dest.path()), before, "uninstall restores the tree");
    assert_eq!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap(),
        FOREIGN_PLUGIN,
        "the old plugin is back, byte for byte"
    );
}
