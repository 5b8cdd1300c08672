//! `make install` and `make uninstall` of the root Makefile, into a temporary
//! `DESTDIR` with `PREFIX=/usr`: binaries stripped by default, as built with
//! `STRIP=0`, with separate debug files with `DEBUG_SYMBOLS=1`.
//!
//! The test never builds: it points the Makefile's `BUILD_DIR` at the
//! directory holding this test's own `amdgpu-criu` binary and
//! `PLUGIN_BUILD_DIR` at the one where `cargo test --workspace` has built
//! the plugin's `libcriu_plugin_amdgpu.so` (beside the binary, or in its
//! `deps/`, where `cargo test` leaves it; the plugin crate depends on neither the
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

/// The plugin `cargo test --workspace` built for the binaries in
/// `build_dir`: beside them (a `cargo build`) or in `deps/` (`cargo test`
/// leaves a dependency's `.so` there).
fn plugin_so(build_dir: &Path) -> Option<PathBuf> {
    [build_dir.to_path_buf(), build_dir.join("deps")]
        .into_iter()
        .map(|dir| dir.join("libcriu_plugin_amdgpu.so"))
        .find(|so| so.is_file())
}

fn make_with(target: &str, destdir: &Path, build_dir: &Path, vars: &[&str]) -> Output {
    let plugin_dir = plugin_so(build_dir)
        .and_then(|so| so.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| build_dir.to_path_buf());
    Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_root())
        .arg(target)
        .arg(format!("DESTDIR={}", destdir.display()))
        .arg("PREFIX=/usr")
        .arg(format!("BUILD_DIR={}", build_dir.display()))
        .arg(format!("PLUGIN_BUILD_DIR={}", plugin_dir.display()))
        .args(vars)
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
    if plugin_so(build_dir).is_none() {
        test_env::skip(format!(
            "libcriu_plugin_amdgpu.so is absent from {} and its deps/ (built by `cargo test \
             --workspace`, not by `cargo test -p amdgpu-criu`)",
            build_dir.display()
        ));
        return None;
    }
    if Command::new("make").arg("--version").output().is_err() {
        test_env::skip("make is not installed");
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
    let plugin = plugin_so(build_dir).expect("the plugin beside the binaries");
    let cli = Path::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
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

    // Installed stripped: the build's debug information stays behind, the
    // symbol CRIU looks up stays in.
    for (installed, built) in [
        ("usr/lib/criu/amdgpu_plugin.so", plugin.clone()),
        ("usr/bin/amdgpu-criu", cli.to_path_buf()),
    ] {
        let installed_bytes = fs::read(dest.path().join(installed)).unwrap();
        let built_bytes = fs::read(&built).unwrap();
        assert!(
            sections(&built_bytes).iter().any(|s| s == ".debug_info"),
            "{built:?} has no debug info"
        );
        assert!(
            // .debug_gdb_scripts is loaded (gdb's pretty-printer list) and
            // stays; the DWARF sections go.
            !sections(&installed_bytes)
                .iter()
                .any(|s| s.starts_with(".debug_") && s != ".debug_gdb_scripts"),
            "{installed} is not stripped"
        );
        assert!(
            installed_bytes.len() < built_bytes.len(),
            "{installed}: {} bytes installed from {} built",
            installed_bytes.len(),
            built_bytes.len()
        );
    }
    let so = fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap();
    assert!(
        contains(&so, "CR_PLUGIN_DESC"),
        "the descriptor symbol was stripped"
    );
    // Whatever else the workspace built beside it, the installed plugin
    // carries no simulator, no emulator and no test trigger.
    for needle in [
        "kfd_sim",
        "kfd-sim",
        "criu_host_emulator",
        "SimDriver",
        "EmulatedHost",
        "test-triggered panic",
    ] {
        assert!(
            !contains(&so, needle),
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

/// The section names of a 64-bit little-endian ELF file (empty for
/// anything else): what stripping removes, unlike strings in the code.
fn sections(elf: &[u8]) -> Vec<String> {
    let u16_at = |at: usize| {
        elf.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u32_at = |at: usize| {
        elf.get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    let u64_at = |at: usize| {
        elf.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
    };
    if elf.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Vec::new();
    }
    let (Some(shoff), Some(shentsize), Some(shnum), Some(shstrndx)) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e))
    else {
        return Vec::new();
    };
    let header = |i: usize| shoff + i * shentsize;
    let Some(strtab) = u64_at(header(shstrndx) + 0x18) else {
        return Vec::new();
    };
    (0..shnum)
        .filter_map(|i| {
            let name = strtab + u32_at(header(i))?;
            let len = elf.get(name..)?.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&elf[name..name + len]).into_owned())
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn strip_0_installs_as_built_and_debug_symbols_1_beside() {
    let cli = Path::new(env!("CARGO_BIN_EXE_amdgpu-criu"));
    let build_dir = cli.parent().unwrap();
    let Some(plugin) = plugin_so(build_dir) else {
        test_env::skip(format!(
            "libcriu_plugin_amdgpu.so is absent from {} and its deps/",
            build_dir.display()
        ));
        return;
    };
    if Command::new("make").arg("--version").output().is_err() {
        test_env::skip("make is not installed");
        return;
    }
    let dest = tempfile::tempdir().unwrap();
    assert_ok(
        &make_with("install", dest.path(), build_dir, &["STRIP=0"]),
        "make install STRIP=0",
    );
    assert_eq!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap(),
        fs::read(&plugin).unwrap(),
        "STRIP=0 installs the plugin byte for byte"
    );
    assert_ok(
        &make_with("uninstall", dest.path(), build_dir, &["STRIP=0"]),
        "make uninstall",
    );
    assert!(tree(dest.path()).is_empty(), "uninstall removes everything");

    assert_ok(
        &make_with("install", dest.path(), build_dir, &["DEBUG_SYMBOLS=1"]),
        "make install DEBUG_SYMBOLS=1",
    );
    let so = sections(&fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap());
    assert!(!so.iter().any(|s| s == ".debug_info"), "{so:?}");
    assert!(so.iter().any(|s| s == ".gnu_debuglink"), "{so:?}");
    for debug in [
        "usr/lib/debug/usr/lib/criu/amdgpu_plugin.so.debug",
        "usr/lib/debug/usr/bin/amdgpu-criu.debug",
    ] {
        let bytes = fs::read(dest.path().join(debug)).unwrap_or_default();
        assert!(
            contains(&bytes, ".debug_info"),
            "{debug} holds no debug info"
        );
    }
    let manifest =
        fs::read_to_string(dest.path().join("usr/share/amdgpu-criu/install-manifest")).unwrap();
    assert!(
        manifest.contains("f /usr/lib/debug/usr/bin/amdgpu-criu.debug"),
        "{manifest}"
    );
    assert_ok(
        &make_with("uninstall", dest.path(), build_dir, &["DEBUG_SYMBOLS=1"]),
        "make uninstall",
    );
    assert!(
        tree(dest.path()).is_empty(),
        "uninstall removes the debug files too"
    );
}

#[test]
fn install_without_artifacts_is_refused() {
    if Command::new("make").arg("--version").output().is_err() {
        test_env::skip("make is not installed");
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

    // As built (STRIP=0), so the installed plugin can be compared byte for
    // byte; stripping has its own test.
    let out = make_with("install", dest.path(), &build_dir, &["FORCE=1", "STRIP=0"]);
    assert_ok(&out, "make install FORCE=1");
    assert_eq!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so.orig")).unwrap(),
        FOREIGN_PLUGIN,
        "the replaced plugin is kept"
    );
    assert!(
        fs::read(dest.path().join("usr/lib/criu/amdgpu_plugin.so")).unwrap()
            == fs::read(plugin_so(&build_dir).unwrap()).unwrap(),
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
