//! The shipped plugin inside real CRIU releases.
//!
//! `make` builds the `.so` that is installed; these tests install it with
//! `make install DESTDIR=<scratch>` (stripped, as users get it), point CRIU
//! at the installed plugin directory (`criu -L DIR`) and drive CRIU binaries
//! built from the upstream archives in `../shared/vendor/criu/` by its
//! `build.sh`: criu-dev 2cf8f13 (15 hooks), v4.2 (13), v4.1.1 (12), v3.19
//! (10) and the CRIU image streamer. No GPU is needed: the dumped process
//! tree holds ordinary files, and what the plugin must do with them is stay
//! out of the way, say little, and say it in CRIU's log format.
//!
//! Where the binaries live: `$CRIU_BUILDS` (as `.ci/run` exports it), else
//! `~/.cache/criu-builds` (build.sh's default). Which `.so`:
//! `$AMDGPU_PLUGIN_SO`, else `<target>/release/libcriu_plugin_amdgpu.so`
//! beside this test's target directory, refused when older than the
//! plugin's sources (run `make` again).
//!
//! The tests need root, `unshare`, `python3` (the workload) and a working
//! `criu check`. Without them they print why and skip; with `CI` set a skip
//! is a failure. They run one at a time, leave nothing in /tmp (scratch
//! directories are removed when dropped) and kill every process they
//! started, also when an assertion fails.

use real_criu_harness as harness;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use harness::*;

/// Asserts the plugin left no trace in an image directory: no file of its
/// own and no inventory entry.
fn assert_no_plugin_images(images: &Path, release: Release) {
    let names: Vec<String> = fs::read_dir(images)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("amdgpu-")),
        "CRIU {}: plugin files in the images: {names:?}",
        release.name
    );
    let image = fs::read(images.join("inventory.img")).expect("inventory.img");
    if let Some(plugins) = inventory::plugins(&image) {
        assert!(
            !plugins.iter().any(|p| p == "amdgpu_plugin"),
            "CRIU {}: the inventory names the plugin: {plugins:?}",
            release.name
        );
    }
}

/// Dumps and restores the workload tree with `release`; returns the dump
/// and restore runs.
fn dump_and_restore(setup: &Setup, release: Release, extra_dump: &[&str]) -> (Run, Run) {
    let dir = scratch();
    let images = dir.path().join("images");
    let mut tree = Tree::start(setup, dir.path(), None);
    let root = tree.root().to_string();
    let mut args = vec!["dump", "-t", &root, "-D", path(&images)];
    args.extend_from_slice(extra_dump);
    let dump = criu(setup, release, &dir.path().join("dump.log"), &args);
    dump.assert_ok(&format!("dump with CRIU {}", release.name));
    dump.assert_quiet_plugin(release, "dump");
    assert_no_plugin_images(&images, release);
    if extra_dump.contains(&"--leave-running") {
        tree.assert_runs_on("after dump --leave-running");
        for pid in &tree.pids {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    tree.reap();
    let restore = criu(
        setup,
        release,
        &dir.path().join("restore.log"),
        &["restore", "-d", "-D", path(&images)],
    );
    restore.assert_ok(&format!("restore with CRIU {}", release.name));
    restore.assert_quiet_plugin(release, "restore");
    tree.assert_runs_on(&format!("restored by CRIU {}", release.name));
    (dump, restore)
}

#[test]
fn every_release_dumps_and_restores_a_process_tree_beside_the_plugin() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&RELEASES) else {
        return;
    };
    for release in RELEASES {
        let (dump, restore) = dump_and_restore(&setup, release, &[]);
        // One line at init and one at exit, never the option list.
        assert!(
            dump.plugin_lines()
                .iter()
                .any(|l| l.contains("initialized for Dump")),
            "{}",
            dump.log
        );
        // From v4.1 the inventory tells the plugin it is not needed, and
        // then it says nothing that reads as taking part.
        let said = restore.plugin_lines().join("\n");
        if release.hooks >= 12 {
            assert!(said.contains("not needed for this restore"), "{said}");
            for contradiction in ["initialized for Restore", "finished Restore"] {
                assert!(!said.contains(contradiction), "{said}");
            }
        } else {
            assert!(said.contains("initialized for Restore"), "{said}");
        }
    }
}

#[test]
fn criu_dev_dump_with_leave_running() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[HEAD]) else {
        return;
    };
    dump_and_restore(&setup, HEAD, &["--leave-running"]);
}

/// A process that stays alive only while `child` does: killed on drop.
struct Streamer(Child);

impl Drop for Streamer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_socket(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "the image streamer made no {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn criu_dev_streams_through_the_image_streamer() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[HEAD]) else {
        return;
    };
    if !setup.streamer().is_file() {
        unavailable(&format!(
            "no criu-image-streamer at {} (run build.sh)",
            setup.streamer().display()
        ));
        return;
    }
    let dir = scratch();
    let images = dir.path().join("images");
    let stream_file = dir.path().join("img.stream");
    let mut tree = Tree::start(&setup, dir.path(), None);
    let root = tree.root().to_string();

    // The streamer's shards must be pipes: threads move them to and from
    // a file.
    let mut capture = Streamer(
        Command::new(setup.streamer())
            .args(["--images-dir", path(&images), "capture"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the streamer"),
    );
    let mut shard = capture.0.stdout.take().unwrap();
    let mut file = fs::File::create(&stream_file).unwrap();
    let saver = std::thread::spawn(move || std::io::copy(&mut shard, &mut file));
    wait_for_socket(&images.join("streamer-capture.sock"));
    let dump = criu(
        &setup,
        HEAD,
        &dir.path().join("dump.log"),
        &["dump", "--stream", "-t", &root, "-D", path(&images)],
    );
    dump.assert_ok("dump --stream");
    let status = capture.0.wait().expect("streamer exit");
    let mut err = String::new();
    if let Some(mut e) = capture.0.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "capture failed: {err}");
    let saved = saver.join().unwrap().expect("saving the stream");
    assert!(saved > 0, "the streamer captured nothing");
    drop(capture);
    dump.assert_quiet_plugin(HEAD, "dump --stream");
    tree.reap();
    for entry in fs::read_dir(&images).unwrap() {
        let name = entry.unwrap().file_name();
        assert!(
            !name.to_string_lossy().ends_with(".img"),
            "--stream wrote {name:?} into the images directory"
        );
    }

    let mut serve = Streamer(
        Command::new(setup.streamer())
            .args(["--images-dir", path(&images), "serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the streamer"),
    );
    let mut shard = serve.0.stdin.take().unwrap();
    let mut file = fs::File::open(&stream_file).unwrap();
    let feeder = std::thread::spawn(move || std::io::copy(&mut file, &mut shard));
    wait_for_socket(&images.join("streamer-serve.sock"));
    let restore = criu(
        &setup,
        HEAD,
        &dir.path().join("restore.log"),
        &["restore", "--stream", "-d", "-D", path(&images)],
    );
    drop(serve);
    let _ = feeder.join();
    restore.assert_ok("restore --stream");
    restore.assert_quiet_plugin(HEAD, "restore --stream");
    tree.assert_runs_on("restored from the stream");
}

#[test]
fn criu_dev_inventory_listing_the_plugin_makes_it_claim_the_restore() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[HEAD]) else {
        return;
    };
    if Path::new("/dev/kfd").exists() {
        test_env::skip("this machine has /dev/kfd, so the plugin can take the restore");
        return;
    }
    let dir = scratch();
    let images = dir.path().join("images");
    let mut tree = Tree::start(&setup, dir.path(), None);
    let root = tree.root().to_string();
    let dump = criu(
        &setup,
        HEAD,
        &dir.path().join("dump.log"),
        &["dump", "-t", &root, "-D", path(&images)],
    );
    dump.assert_ok("dump");
    tree.reap();
    let inventory = images.join("inventory.img");
    let image = fs::read(&inventory).unwrap();
    assert_eq!(inventory::plugins(&image), Some(vec![]));
    let listed = inventory::with_plugins(&image, &["amdgpu_plugin"]);
    assert_eq!(
        inventory::plugins(&listed),
        Some(vec!["amdgpu_plugin".to_owned()])
    );
    fs::write(&inventory, listed).unwrap();

    let restore = criu(
        &setup,
        HEAD,
        &dir.path().join("restore.log"),
        &["restore", "-d", "-D", path(&images)],
    );
    assert!(
        !restore.ok(),
        "a restore of images that need the plugin must fail without /dev/kfd"
    );
    let said = restore
        .plugin_lines()
        .into_iter()
        .find(|l| l.contains("Error ("))
        .unwrap_or_else(|| panic!("no plugin error line:\n{}", restore.log));
    for why in [
        "inventory lists amdgpu_plugin",
        "no /dev/kfd",
        "restore them on",
    ] {
        assert!(said.contains(why), "the error does not say {why:?}: {said}");
    }
    assert!(
        restore
            .log
            .contains("Failed in init(2) of \"amdgpu_plugin\""),
        "CRIU did not stop at the plugin's init:\n{}",
        restore.log
    );
    // Nothing was restored.
    for pid in &tree.pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists()
                || fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| !c.contains("workload.py")),
            "process {pid} runs although the restore failed"
        );
    }
}

/// A misc character device that CRIU has no handler for and that opens
/// without further setup, as (path, major, minor).
fn foreign_char_device() -> Option<(PathBuf, u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    ["/dev/fuse", "/dev/loop-control"].iter().find_map(|p| {
        let meta = fs::metadata(p).ok()?;
        if !meta.file_type().is_char_device() || fs::File::open(p).is_err() {
            return None;
        }
        let rdev = meta.rdev();
        let major = ((rdev >> 8) & 0xfff) as u32 | ((rdev >> 32) & !0xfff) as u32;
        let minor = (rdev & 0xff) as u32 | ((rdev >> 12) & !0xff) as u32;
        Some((PathBuf::from(p), major, minor))
    })
}

#[test]
fn criu_dev_leaves_other_character_devices_to_criu() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[HEAD]) else {
        return;
    };
    let Some((device, _, _)) = foreign_char_device() else {
        unavailable("neither /dev/fuse nor /dev/loop-control opens here");
        return;
    };
    let dir = scratch();
    let images = dir.path().join("images");
    let tree = Tree::start(&setup, dir.path(), Some(&device));
    let root = tree.root().to_string();
    let dump = criu(
        &setup,
        HEAD,
        &dir.path().join("dump.log"),
        &["dump", "-t", &root, "-D", path(&images)],
    );
    assert!(
        !dump.ok(),
        "CRIU has no handler for {}: the dump must fail",
        device.display()
    );
    // CRIU's own error, after the plugin said "not mine".
    assert!(
        dump.criu_errors()
            .iter()
            .any(|l| l.contains("of that type") || l.contains("chr")),
        "no CRIU error about the device:\n{}",
        dump.log
    );
    assert!(
        !dump
            .plugin_lines()
            .iter()
            .any(|l| l.contains("Error (") || l.contains("Warn  (")),
        "the plugin claimed {}:\n{}",
        device.display(),
        dump.plugin_lines().join("\n")
    );
    tree.assert_runs_on("after the failed dump");
}

/// Runs `script` (sh) in a private mount namespace with a /dev of its own,
/// where `/dev/kfd` is the node `major:minor`.
const FAKE_KFD_SCRIPT: &str = r#"
set -eu
scratch=$1 criu=$2 plugins=$3 workload=$4 major=$5 minor=$6
mkdir "$scratch/hostdev"
mount --rbind /dev "$scratch/hostdev"
mount -t tmpfs -o mode=755 fakedev /dev
for n in null zero full random urandom tty ptmx; do
    touch "/dev/$n"
    mount --bind "$scratch/hostdev/$n" "/dev/$n"
done
mkdir /dev/pts /dev/shm /dev/net
mount --bind "$scratch/hostdev/pts" /dev/pts
if [ -e "$scratch/hostdev/net/tun" ]; then
    touch /dev/net/tun
    mount --bind "$scratch/hostdev/net/tun" /dev/net/tun
fi
mount -t tmpfs shm /dev/shm
umount -l "$scratch/hostdev"
rmdir "$scratch/hostdev"
mknod /dev/kfd c "$major" "$minor"
python3 "$workload" "$scratch" /dev/kfd </dev/null >/dev/null 2>&1 &
while [ ! -s "$scratch/pids" ] || [ "$(wc -l < "$scratch/heartbeat" 2>/dev/null || echo 0)" -lt 2 ]; do
    sleep 0.05
done
root=$(cut -d' ' -f1 "$scratch/pids")
status=0
"$criu" dump -t "$root" -D "$scratch/images" -v4 -o "$scratch/dump.log" -L "$plugins" || status=$?
echo "$status" > "$scratch/dump.status"
"#;

#[test]
fn criu_dev_fails_the_dump_of_a_dev_kfd_that_is_no_kfd() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(setup) = setup(&[HEAD]) else {
        return;
    };
    let Some((device, major, minor)) = foreign_char_device() else {
        unavailable("neither /dev/fuse nor /dev/loop-control opens here");
        return;
    };
    let dir = scratch();
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(FAKE_KFD_SCRIPT)
        .arg("fake-kfd")
        .arg(dir.path())
        .arg(setup.criu(HEAD))
        .arg(setup.plugin_dir())
        .arg(&setup.workload)
        .arg(major.to_string())
        .arg(minor.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    // The tree runs on in the namespace after the script: adopt it so it
    // is killed whatever happens below.
    let tree = dir
        .path()
        .join("pids")
        .exists()
        .then(|| Tree::adopt(dir.path()));
    assert!(
        out.status.success(),
        "the namespace script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = tree.expect("the workload started");
    let status = fs::read_to_string(dir.path().join("dump.status")).unwrap();
    let log = fs::read_to_string(dir.path().join("dump.log")).unwrap_or_default();
    assert_ne!(
        status.trim(),
        "0",
        "the dump of a /dev/kfd that is {} must fail:\n{log}",
        device.display()
    );
    let error = log
        .lines()
        .find(|l| l.contains("Error (") && l.contains("amdgpu_plugin: "))
        .unwrap_or_else(|| panic!("no plugin error in the dump log:\n{log}"));
    assert!(
        error.contains("DUMP_EXT_FILE") && error.contains(&format!("pid {}", tree.root())),
        "the error names the hook and the task: {error}"
    );
    assert!(
        error.contains("the device at /dev/kfd is not an amdkfd device"),
        "the error says what is wrong with the file: {error}"
    );
    tree.assert_runs_on("after the failed dump");
}
