//! The Debian package of `make deb`, as a distribution's user meets it.
//!
//! The package is built from `make`'s release build (the `.so` real CRIU
//! loads in `real_criu.rs`, and the CLI beside it) at two Debian revisions,
//! and checked by lintian. Then dpkg installs, upgrades, removes and purges it
//! in a throwaway root, beside a stand-in for a distribution's `criu`
//! package built with the C plugin, which owns
//! `/usr/lib/criu/amdgpu_plugin.so`.
//! The stand-in's plugin is a real CRIU plugin compiled here with `cc`,
//! whose descriptor carries the stand-in's version, so CRIU's `-v4` log says
//! which plugin it loaded. After every step the test asks real CRIU (the
//! vendored criu-dev build, with no `--libdir`: CRIU's default plugin
//! directory) to dump a process and reads which plugins it loaded, and asks
//! dpkg who owns the plugin's path.
//!
//! The throwaway root is a private mount namespace (`unshare --mount`, held
//! open by a process the test kills) in which `/usr`, `/var` and `/etc` are
//! overlays of the host's, their upper layers on a tmpfs of that namespace
//! alone; dpkg, CRIU and the checks run inside it through `nsenter`. The
//! host's dpkg records of the test's packages, its diversions and the paths
//! the packages install are compared before and after: the test never
//! changes them.
//!
//! The test needs root, `unshare`/`nsenter`, dpkg and dpkg-dev, `cc`,
//! `make`, `python3`, overlayfs, the CRIU builds of `build.sh` and `make`'s
//! release build; the lintian test needs lintian. Without them it says why
//! and skips; with `CI` set a skip is a failure. The packages are built in
//! cargo's scratch directory for integration tests (`CARGO_TARGET_TMPDIR`),
//! nothing is left in /tmp.

use real_criu_harness as harness;

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use harness::{builds_dir, criu_build, is_root, newest, runs, shipped_plugin, Run, HEAD};

const PLUGIN: &str = "/usr/lib/criu/amdgpu_plugin.so";
const DIVERTED: &str = "/usr/lib/criu/amdgpu_plugin.so.distrib";
/// Our plugin's descriptor name, as CRIU logs it when it loads a plugin.
const OUR_PLUGIN: &str = "amdgpu_plugin";

/// Says why the test cannot run: a skip, or a failure under CI
/// (`test_env::skip`).
fn unavailable<T>(why: &str) -> Option<T> {
    test_env::skip(format!("the Debian package test cannot run: {why}"));
    None
}

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The packages every test here uses, built once.
struct Packages {
    /// amdgpu-criu at revisions 1 and 2 of the same build.
    ours: [PathBuf; 2],
    /// The stand-in `criu` at 4.0-1 and 4.0-2, owning [`PLUGIN`].
    criu: [PathBuf; 2],
    /// A package owning `/usr/bin/amdgpu-criu`: installing ours beside it fails
    /// after ours diverted the plugin, so dpkg runs `postrm abort-install`.
    conflict: PathBuf,
    /// The stand-in plugins' bytes (4.0-1, 4.0-2) and ours, as packaged.
    criu_plugin: [Vec<u8>; 2],
    our_plugin: Vec<u8>,
    /// Every path in our package, without the leading '.'.
    our_paths: BTreeSet<String>,
}

fn packages() -> Option<&'static Packages> {
    static PACKAGES: OnceLock<Result<Packages, String>> = OnceLock::new();
    match PACKAGES.get_or_init(build_packages) {
        Ok(p) => Some(p),
        Err(why) => unavailable(why),
    }
}

/// The release build's directory, refused when the CLI or the plugin is
/// older than its sources.
fn release_build() -> Result<PathBuf, String> {
    let plugin = shipped_plugin()?;
    let dir = plugin.parent().unwrap().to_path_buf();
    let cli = dir.join("amdgpu-criu");
    let built = fs::metadata(&cli)
        .and_then(|m| m.modified())
        .map_err(|_| format!("no {}: run `make` first", cli.display()))?;
    let root = harness::workspace_root();
    for krate in ["amdgpu-criu", "criu-host-emulator", "kfd-sim"] {
        if newest(&root.join(krate).join("src")) > built {
            return Err(format!(
                "{} is older than the sources of {krate}: run `make` again",
                cli.display()
            ));
        }
    }
    Ok(dir)
}

fn build_packages() -> Result<Packages, String> {
    if !is_root() {
        return Err("dpkg and CRIU need root".into());
    }
    for (tool, arg, package) in [
        ("dpkg-deb", "--version", "dpkg"),
        ("dpkg-shlibdeps", "--version", "dpkg-dev"),
        ("cc", "--version", "gcc"),
        ("make", "--version", "make"),
        ("python3", "--version", "python3"),
        ("unshare", "--version", "util-linux"),
        ("nsenter", "--version", "util-linux"),
    ] {
        if !runs(tool, arg) {
            return Err(format!(
                "{tool} is not installed (Debian package {package})"
            ));
        }
    }
    let build = release_build()?;
    let root = harness::workspace_root();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deb_package");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    // Both revisions at once: each build is mostly xz, on one core.
    let make_deb = |revision: u32| {
        let out = run_ok(
            Command::new("make")
                .arg("-s")
                .arg("-C")
                .arg(&root)
                .arg("deb")
                .arg(format!("BUILD_DIR={}", build.display()))
                .arg(format!("DEB_DIR={}", dir.display()))
                .arg(format!("DEB_REVISION={revision}"))
                .env("DEBFULLNAME", "Package Test")
                .env("DEBEMAIL", "package-test@example.org"),
            "make deb",
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    let ours = std::thread::scope(|s| {
        let second = s.spawn(|| make_deb(2));
        [make_deb(1), second.join().expect("make deb of revision 2")]
    });
    println!(
        "make deb: {} and {} in {:.1} s",
        ours[0].display(),
        ours[1].display(),
        started.elapsed().as_secs_f64()
    );
    for (deb, revision) in ours.iter().zip(["-1_", "-2_"]) {
        assert!(
            deb.is_file() && deb.to_string_lossy().contains(revision),
            "make deb printed {}",
            deb.display()
        );
    }
    let extracted = dir.join("ours");
    run_ok(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&ours[0])
            .arg(&extracted),
        "dpkg-deb -x",
    );
    let our_plugin = fs::read(extracted.join(&PLUGIN[1..])).unwrap();
    let listing = run_ok(
        Command::new("dpkg-deb").arg("--fsys-tarfile").arg(&ours[0]),
        "dpkg-deb --fsys-tarfile",
    );
    let our_paths = tar_paths(&listing.stdout);

    let criu = ["4.0-1", "4.0-2"].map(|version| stand_in_criu(&dir, version));
    let criu_plugin = ["4.0-1", "4.0-2"]
        .map(|version| fs::read(dir.join(format!("criu-{version}")).join(&PLUGIN[1..])).unwrap());
    let conflict = fake_package(
        &dir,
        "amdgpu-criu-conflict",
        "1",
        &[("usr/bin/amdgpu-criu", b"#!/bin/sh\n".as_slice())],
    );
    Ok(Packages {
        ours,
        criu,
        conflict,
        criu_plugin,
        our_plugin,
        our_paths,
    })
}

/// The member names of a tar stream (`dpkg-deb --fsys-tarfile`), without
/// the leading "." and trailing "/".
fn tar_paths(tar: &[u8]) -> BTreeSet<String> {
    let mut child = Command::new("tar")
        .arg("-t")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("tar runs");
    let mut stdin = child.stdin.take().unwrap();
    let tar = tar.to_vec();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &tar));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "tar -t failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches('.').trim_end_matches('/').to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// A package of `files` (relative path, contents), built with dpkg-deb.
fn fake_package(dir: &Path, name: &str, version: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let tree = dir.join(format!("{name}-{version}"));
    for (path, contents) in files {
        let path = tree.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, contents).unwrap();
    }
    fs::create_dir_all(tree.join("DEBIAN")).unwrap();
    fs::write(
        tree.join("DEBIAN/control"),
        format!(
            "Package: {name}\nVersion: {version}\nArchitecture: all\n\
             Maintainer: Package Test <package-test@example.org>\n\
             Description: stand-in for the Debian package test\n"
        ),
    )
    .unwrap();
    let deb = dir.join(format!("{name}_{version}_all.deb"));
    run_ok(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zgzip", "--build"])
            .arg(&tree)
            .arg(&deb),
        "dpkg-deb --build",
    );
    deb
}

/// The stand-in for a distribution's `criu` package: it owns [`PLUGIN`], a
/// CRIU plugin with no hooks whose descriptor is named after `version`.
fn stand_in_criu(dir: &Path, version: &str) -> PathBuf {
    let source = dir.join(format!("c-plugin-{version}.c"));
    // cr_plugin_desc_t of criu/include/criu-plugin.h; version 0.2.0.
    fs::write(
        &source,
        format!(
            "struct cr_plugin_desc {{ const char *name; int (*init)(int); \
             void (*exit)(int, int); unsigned int version; unsigned int max_hooks; \
             void *hooks[1]; }};\n\
             struct cr_plugin_desc CR_PLUGIN_DESC = {{ \"{}\", 0, 0, 0x200, 0, {{ 0 }} }};\n",
            stand_in_name(version)
        ),
    )
    .unwrap();
    let so = dir.join(format!("c-plugin-{version}.so"));
    run_ok(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&source),
        "cc (the stand-in plugin)",
    );
    let bytes = fs::read(&so).unwrap();
    fake_package(dir, "criu", version, &[(&PLUGIN[1..], &bytes)])
}

fn stand_in_name(version: &str) -> String {
    format!("c_plugin_stand_in_{}", version.replace(['.', '-'], "_"))
}

/// A private mount namespace whose `/usr`, `/var` and `/etc` are overlays
/// of the host's; killed (and with it the overlays' tmpfs) on drop.
struct ThrowawayRoot {
    holder: Child,
    _layers: tempfile::TempDir,
}

impl ThrowawayRoot {
    fn new() -> Result<ThrowawayRoot, String> {
        let layers = tempfile::tempdir().map_err(|e| e.to_string())?;
        let script = r#"set -e
mount -t tmpfs -o mode=0700 deb-package-test "$1"
for d in usr var etc; do
    mkdir "$1/$d.upper" "$1/$d.work"
    mount -t overlay overlay -o "lowerdir=/$d,upperdir=$1/$d.upper,workdir=$1/$d.work" "/$d"
done
echo ready
exec sleep 3600"#;
        let mut holder = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(layers.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("unshare: {e}"))?;
        let mut line = String::new();
        let _ = BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line);
        if line.trim() != "ready" {
            let _ = holder.kill();
            let out = holder.wait_with_output().unwrap();
            return Err(format!(
                "cannot make a throwaway root (a mount namespace with overlays of /usr, /var \
                 and /etc): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(ThrowawayRoot {
            holder,
            _layers: layers,
        })
    }

    /// `program args` inside the root.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg("--target")
            .arg(self.holder.id().to_string())
            .args(["--mount", "--"])
            .arg(program)
            .env_remove("CRIU_LIBS_DIR")
            .env("LC_ALL", "C")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null());
        cmd
    }

    fn output(&self, program: &str, args: &[&str]) -> Output {
        self.command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("nsenter {program}: {e}"))
    }

    fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.output(program, args);
        assert!(
            out.status.success(),
            "in the throwaway root, {program} {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            text(&out)
        );
        text(&out)
    }

    fn dpkg(&self, args: &[&str]) -> String {
        self.ok("dpkg", args)
    }

    fn install(&self, deb: &Path) -> String {
        self.dpkg(&["-i", deb.to_str().unwrap()])
    }

    /// The file at `path` inside the root, `None` when there is none.
    fn read(&self, path: &str) -> Option<Vec<u8>> {
        let out = self.output("cat", &[path]);
        out.status.success().then_some(out.stdout)
    }

    fn exists(&self, path: &str) -> bool {
        self.output("test", &["-e", path]).status.success()
    }

    /// Those of `paths` that exist inside the root.
    fn existing(&self, paths: &BTreeSet<String>) -> BTreeSet<String> {
        let mut cmd = self.command("sh");
        cmd.args(["-c", r#"for p; do [ ! -e "$p" ] || echo "$p"; done"#, "sh"])
            .args(paths);
        let out = cmd.output().expect("sh runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The diversions dpkg records for [`PLUGIN`], one line each.
    fn diversions(&self) -> String {
        self.ok("dpkg-divert", &["--list", PLUGIN])
            .trim()
            .to_string()
    }

    /// Dumps a process with `criu` (no `--libdir`) and returns CRIU's run:
    /// its log names every plugin it loaded from /usr/lib/criu.
    fn criu_dump(&self, criu: &Path) -> Run {
        let scratch = tempfile::tempdir().unwrap();
        // Its only fds are its standard ones, opened inside the root: CRIU
        // resolves each file through the mounts of the dumped task's
        // namespace, where a file inherited from outside (a jobserver's
        // /dev/null, say) has no mount.
        let mut sleeper = self
            .command("bash")
            .args([
                "-c",
                r#"for fd in /proc/$$/fd/*; do n=${fd##*/}; [ "$n" -le 2 ] || eval "exec $n>&-"; done
                exec setsid sleep 600 </dev/null >/dev/null 2>&1"#,
            ])
            .spawn()
            .expect("start a process to dump");
        let log = scratch.path().join("dump.log");
        let output = self
            .command(criu.to_str().unwrap())
            .args(["dump", "-v4", "-t", &sleeper.id().to_string(), "-D"])
            .arg(scratch.path())
            .arg("-o")
            .arg(&log)
            .output()
            .expect("run criu");
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        let run = Run {
            output,
            log: String::from_utf8_lossy(&fs::read(&log).unwrap_or_default()).into_owned(),
        };
        run.assert_ok("criu dump in the throwaway root");
        run
    }
}

impl Drop for ThrowawayRoot {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The plugins a CRIU run's log says it loaded (`Plugin "NAME" (version
/// ...`), in load order.
fn loaded_plugins(run: &Run) -> Vec<String> {
    run.log
        .lines()
        .filter_map(|l| l.split_once("Plugin \"")?.1.split_once("\" (version"))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The packages the test installs in the throwaway root.
const TEST_PACKAGES: [&str; 3] = ["amdgpu-criu", "criu", "amdgpu-criu-conflict"];

/// What the test must leave unchanged on the host: dpkg's records of the
/// packages it installs (their status stanzas, their info files), the
/// diversions, and the paths it installs into. Only these: other packages
/// may be installed on the host meanwhile.
fn host_state() -> Vec<String> {
    let status = fs::read_to_string("/var/lib/dpkg/status").unwrap_or_default();
    let mut state: Vec<String> = status
        .split("\n\n")
        .filter(|stanza| {
            stanza
                .lines()
                .any(|l| TEST_PACKAGES.iter().any(|p| l == format!("Package: {p}")))
        })
        .map(str::to_string)
        .collect();
    state.push(fs::read_to_string("/var/lib/dpkg/diversions").unwrap_or_default());
    for dir in ["/usr/lib/criu", "/var/lib/dpkg/info"] {
        let mut names: Vec<String> = fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                dir != "/var/lib/dpkg/info"
                    || TEST_PACKAGES
                        .iter()
                        .any(|p| n.starts_with(&format!("{p}.")))
            })
            .collect();
        names.sort();
        state.push(format!("{dir}: {}", names.join(" ")));
    }
    for path in ["/usr/bin/amdgpu-criu", "/usr/share/doc/amdgpu-criu"] {
        state.push(format!("{path}: {}", Path::new(path).exists()));
    }
    state
}

#[test]
fn lintian_reports_no_errors_or_warnings() {
    let Some(packages) = packages() else {
        return;
    };
    if !runs("lintian", "--version") {
        unavailable::<()>("lintian is not installed (Debian package lintian)");
        return;
    }
    let started = Instant::now();
    // lintian 2.116 leaves a database of the ELF files it read
    // (mldbm-elf-*) in TMPDIR: give it one that goes.
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new("lintian")
        .env("TMPDIR", scratch.path())
        .args([
            "--fail-on",
            "error,warning",
            "--display-info",
            "--tag-display-limit",
            "0",
        ])
        .arg(&packages.ours[0])
        .output()
        .expect("run lintian");
    let said = text(&out);
    println!(
        "lintian ({:.1} s):\n{said}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "lintian failed ({}):\n{said}",
        out.status
    );
    assert!(
        !said
            .lines()
            .any(|l| l.starts_with("E: ") || l.starts_with("W: ")),
        "lintian errors or warnings:\n{said}"
    );
}

#[test]
fn dpkg_installs_upgrades_and_purges_beside_the_c_plugin() {
    let Some(packages) = packages() else {
        return;
    };
    let criu = match criu_build(&builds_dir(), HEAD) {
        Ok(criu) => criu,
        Err(why) => {
            unavailable::<()>(&why);
            return;
        }
    };
    let started = Instant::now();
    let host_before = host_state();
    let root = match ThrowawayRoot::new() {
        Ok(root) => root,
        Err(why) => {
            unavailable::<()>(&why);
            return;
        }
    };
    let [ours1, ours2] = &packages.ours;
    let [criu1, criu2] = &packages.criu;
    let ours = "diversion of /usr/lib/criu/amdgpu_plugin.so to \
                /usr/lib/criu/amdgpu_plugin.so.distrib by amdgpu-criu";
    let loads = |expected: &[&str], when: &str| {
        let run = root.criu_dump(&criu);
        let loaded = loaded_plugins(&run);
        assert_eq!(
            loaded, expected,
            "{when}: CRIU loaded {loaded:?}:\n{}",
            run.log
        );
        if expected.contains(&OUR_PLUGIN) {
            assert!(
                run.plugin_lines()
                    .iter()
                    .any(|l| l.contains("initialized for Dump")),
                "{when}: our plugin did not initialize:\n{}",
                run.log
            );
        }
    };
    let name1 = stand_in_name("4.0-1");
    let name2 = stand_in_name("4.0-2");

    // The distribution's criu with its C plugin: CRIU loads that one.
    root.install(criu1);
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.criu_plugin[0]));
    loads(&[&name1], "the stand-in criu alone");
    // What of our package's paths is there before it (shared directories).
    let baseline = root.existing(&packages.our_paths);

    // Ours diverts it: the C plugin is kept under a name CRIU does not load.
    // man-db indexes the man pages (English and Persian) without a word.
    let said = root.install(ours1);
    assert!(
        !said.to_lowercase().contains("warning") && !said.contains("mandb:"),
        "dpkg -i {}:\n{said}",
        ours1.display()
    );
    // From here on man-db's trigger (seconds per dpkg run, none of it
    // about this package) is switched off as Debian's man-db/auto-update
    // does it.
    root.ok("rm", &["-f", "/var/lib/man-db/auto-update"]);
    assert_eq!(root.diversions(), ours);
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.our_plugin));
    assert_eq!(root.read(DIVERTED).as_ref(), Some(&packages.criu_plugin[0]));
    let owner = root.dpkg(&["-S", PLUGIN]);
    for line in [
        "diversion by amdgpu-criu from: /usr/lib/criu/amdgpu_plugin.so",
        "diversion by amdgpu-criu to: /usr/lib/criu/amdgpu_plugin.so.distrib",
    ] {
        assert!(owner.contains(line), "dpkg -S {PLUGIN}:\n{owner}");
    }
    assert!(
        owner.lines().any(|l| l.ends_with(&format!(": {PLUGIN}"))
            && l.contains("amdgpu-criu")
            && l.contains("criu")),
        "dpkg -S {PLUGIN} names both packages:\n{owner}"
    );
    assert_eq!(root.dpkg(&["--verify", "amdgpu-criu"]), "");
    loads(&[OUR_PLUGIN], "ours installed over the stand-in");
    let version = root.ok("/usr/bin/amdgpu-criu", &["--version"]);
    assert!(
        version.starts_with("amdgpu-criu "),
        "amdgpu-criu --version: {version}"
    );
    let doctor = root.output(
        "/usr/bin/amdgpu-criu",
        &["doctor", "--criu", criu.to_str().unwrap()],
    );
    let doctor = text(&doctor);
    assert!(
        doctor.lines().any(|l| l.contains("plugin")
            && l.contains("loads this project's plugin /usr/lib/criu/amdgpu_plugin.so")),
        "amdgpu-criu doctor:\n{doctor}"
    );

    // The distribution updates its criu: the new C plugin goes to the
    // diverted name, ours stays.
    root.install(criu2);
    assert_eq!(root.diversions(), ours);
    assert_eq!(root.read(DIVERTED).as_ref(), Some(&packages.criu_plugin[1]));
    assert_eq!(root.dpkg(&["--verify", "amdgpu-criu"]), "");
    loads(&[OUR_PLUGIN], "after the stand-in's upgrade");

    // Our upgrade keeps the diversion.
    root.install(ours2);
    let status = root.dpkg(&["-s", "amdgpu-criu"]);
    assert!(status.contains("Version: 0."), "{status}");
    assert!(status.contains("-2\n"), "upgraded to revision 2:\n{status}");
    assert_eq!(root.diversions(), ours);
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.our_plugin));
    assert_eq!(root.read(DIVERTED).as_ref(), Some(&packages.criu_plugin[1]));
    loads(&[OUR_PLUGIN], "after our upgrade");

    // Purge: nothing of ours is left and the C plugin is back in place.
    root.dpkg(&["--purge", "amdgpu-criu"]);
    assert_nothing_of_ours(&root, packages, &baseline, "after the purge");
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.criu_plugin[1]));
    let owner = root.dpkg(&["-S", PLUGIN]);
    assert_eq!(owner.trim(), format!("criu: {PLUGIN}"));
    loads(&[&name2], "after the purge");

    // The other order: ours first, the distribution's criu after it.
    root.dpkg(&["--purge", "criu"]);
    root.install(ours2);
    assert_eq!(root.diversions(), ours);
    assert!(!root.exists(DIVERTED));
    root.install(criu1);
    assert_eq!(root.read(DIVERTED).as_ref(), Some(&packages.criu_plugin[0]));
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.our_plugin));
    loads(&[OUR_PLUGIN], "the stand-in installed after ours");

    // An upgrade that fails (a file of the new version belongs to another
    // package) puts the old version back with its diversion.
    root.dpkg(&["--purge", "amdgpu-criu"]);
    root.install(ours1);
    root.dpkg(&[
        "-i",
        "--force-overwrite",
        packages.conflict.to_str().unwrap(),
    ]);
    let failed = root.output("dpkg", &["-i", ours2.to_str().unwrap()]);
    assert!(
        !failed.status.success(),
        "the upgrade was to fail:\n{}",
        text(&failed)
    );
    let status = root.dpkg(&["-s", "amdgpu-criu"]);
    assert!(
        status.contains("Status: install ok installed") && status.contains("-1\n"),
        "after the failed upgrade:\n{status}"
    );
    assert_eq!(root.diversions(), ours);
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.our_plugin));
    assert_eq!(root.read(DIVERTED).as_ref(), Some(&packages.criu_plugin[0]));
    loads(&[OUR_PLUGIN], "after the failed upgrade");

    // An install that fails after preinst diverted the C plugin
    // (postrm abort-install) gives it back.
    root.dpkg(&["--purge", "amdgpu-criu"]);
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.criu_plugin[0]));
    let failed = root.output("dpkg", &["-i", ours1.to_str().unwrap()]);
    assert!(
        !failed.status.success(),
        "the install was to fail:\n{}",
        text(&failed)
    );
    assert!(
        text(&failed).contains("amdgpu-criu-conflict"),
        "{}",
        text(&failed)
    );
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.criu_plugin[0]));
    root.dpkg(&["--purge", "amdgpu-criu-conflict", "amdgpu-criu"]);
    assert_nothing_of_ours(&root, packages, &baseline, "after the failed install");

    // A `make install PREFIX=/usr` in place: the package refuses, and
    // diverts nothing.
    root.ok("mkdir", &["-p", "/usr/share/amdgpu-criu"]);
    root.ok("touch", &["/usr/share/amdgpu-criu/install-manifest"]);
    let refused = root.output("dpkg", &["-i", ours1.to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("run 'make uninstall PREFIX=/usr'"),
        "{}",
        text(&refused)
    );
    assert_eq!(root.diversions(), "");
    assert_eq!(root.read(PLUGIN).as_ref(), Some(&packages.criu_plugin[0]));
    loads(&[&name1], "after the refused install");

    drop(root);
    assert_eq!(
        host_before,
        host_state(),
        "the host's dpkg records, diversions or installed paths changed"
    );
    println!(
        "dpkg scenarios in a throwaway root: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Asserts dpkg knows nothing of amdgpu-criu and of our package's paths
/// only those in `baseline` (there before it) are left.
fn assert_nothing_of_ours(
    root: &ThrowawayRoot,
    packages: &Packages,
    baseline: &BTreeSet<String>,
    when: &str,
) {
    let status = root.output(
        "dpkg-query",
        &["-W", "-f", "${db:Status-Status}", "amdgpu-criu"],
    );
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.is_empty() || status == "not-installed",
        "{when}: dpkg still has amdgpu-criu as {status:?}"
    );
    assert!(
        !root.diversions().contains("amdgpu-criu"),
        "{when}: {}",
        root.diversions()
    );
    assert!(!root.exists(DIVERTED), "{when}: {DIVERTED} is left");
    let info = root.ok(
        "sh",
        &[
            "-c",
            "ls /var/lib/dpkg/info | grep '^amdgpu-criu\\.' || true",
        ],
    );
    assert_eq!(info.trim(), "", "{when}: dpkg's info files are left");
    let left = root.existing(&packages.our_paths);
    let ours_left: Vec<&String> = left.difference(baseline).collect();
    assert!(ours_left.is_empty(), "{when}: left behind: {ours_left:?}");
}
