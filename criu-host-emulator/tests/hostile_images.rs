//! Hostile images at restore: a clean dump of a simulated ROCm process is
//! damaged one way at a time (truncated KFD and render-node images, lying
//! length headers, counts of 2^32, overflowing BO sizes, gpu_ids that do not
//! exist, short, long and corrupted pages files) and restored. Each restore
//! must fail `RESTORE_EXT_FILE` with an error (never `-ENOTSUP`, never a
//! panic), log an error line naming the damaged file, and leak nothing.
//! Damage to the KFD message must be refused before the plugin touches the
//! kernel's process state: no `CRIU_OP RESTORE` call is made. (A render-node
//! image is restored after its task's KFD file, whose RESTORE already ran.)
//!
//! A pages file that cannot hold what the KFD image says (missing, cut, too
//! long) is refused before `CRIU_OP RESTORE` too (the store checks its
//! header and size without reading it); contents that fail their checksum
//! are found while they are copied back, after RESTORE and before the task
//! runs, and the restore fails cleanly (CRIU kills the task).

use std::path::Path;

use amdgpu_image::{encode_message, CriuKfd, ImageName};
use criu_host_emulator::EmulatedHost;
use criu_plugin_amdgpu::abi::PANIC_ERRNO;
use criu_plugin_amdgpu::hooks::NOT_MINE;
use criu_plugin_amdgpu::log::{Capture, Level};
use kfd_sim::{Pid, Sim, SimConfig};

mod common;
mod faults_common;

use common::{kfd_image, vmas_of, KFD_ID};
use faults_common::{dump_and_kill, FaultDriver, MiniCriu, Snapshot};

/// Something done to one image file.
type Damage = Box<dyn Fn(&Path)>;

/// A dumped and killed process: its machine, pid, file ids and mappings.
struct Dumped {
    sim: Sim,
    pid: Pid,
    ids: Vec<u32>,
    vmas: Vec<criu_host_emulator::DeviceVma>,
    clean: Vec<(String, Vec<u8>)>,
}

fn dump(images: &Path, shm: &Path) -> Dumped {
    let sim = Sim::synthetic(1, SimConfig::default()).expect("simulated machine");
    let (pid, ids, ()) = dump_and_kill(&sim, images, shm, |_| ());
    let vmas = vmas_of(&kfd_image(images));
    let mut clean = Vec::new();
    for entry in std::fs::read_dir(images).unwrap() {
        let path = entry.unwrap().path();
        clean.push((
            path.file_name().unwrap().to_string_lossy().into_owned(),
            std::fs::read(&path).unwrap(),
        ));
    }
    Dumped {
        sim,
        pid,
        ids,
        vmas,
        clean,
    }
}

fn reset(images: &Path, d: &Dumped) {
    for (name, bytes) in &d.clean {
        std::fs::write(images.join(name), bytes).unwrap();
    }
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// Restores after `damage` was applied; returns what is wrong.
fn check(
    case: &str,
    images: &Path,
    shm: &Path,
    d: &Dumped,
    file: &str,
    before_kernel: bool,
    damage: &dyn Fn(&Path),
) -> Vec<String> {
    reset(images, d);
    damage(&images.join(file));
    let criu = MiniCriu::new(&d.sim, shm);
    let before = Snapshot::take(&d.sim);
    let base = FaultDriver::new(d.sim.driver(d.pid));
    let capture = Capture::start();
    let result = criu.restore(
        |p| base.for_pid(p),
        EmulatedHost::new(images, Some(200)),
        d.pid,
        &d.ids,
        &d.vmas,
    );
    let lines = capture.lines();
    drop(capture);
    let mut bad = Vec::new();
    match result {
        Ok(task) => {
            bad.push(format!("{case}: the restore succeeded"));
            drop(task);
            let _ = d.sim.exit_process(d.pid);
        }
        Err(f) => {
            if f.errno >= 0 || f.errno == NOT_MINE || f.errno == PANIC_ERRNO {
                bad.push(format!("{case}: {} answered {}", f.hook, f.errno));
            }
        }
    }
    if !lines
        .iter()
        .any(|(l, t)| *l == Level::Error && t.contains(file))
    {
        bad.push(format!("{case}: no error line names {file}: {lines:?}"));
    }
    let restored = base.sites().iter().any(|s| s.op == "CRIU_OP:RESTORE");
    if before_kernel && restored {
        bad.push(format!("{case}: CRIU_OP RESTORE was called"));
    }
    let mut after = Snapshot::take(&d.sim);
    after.threads = before.threads;
    if before != after {
        bad.push(format!("{case}: leak: {before:?} -> {after:?}"));
    }
    bad
}

fn rewrite_kfd(edit: impl Fn(&mut CriuKfd) + 'static) -> impl Fn(&Path) {
    move |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        let mut msg: CriuKfd =
            amdgpu_image::decode_message("kfd", &bytes[8..]).expect("clean image decodes");
        edit(&mut msg);
        std::fs::write(path, framed(&encode_message(&msg))).unwrap();
    }
}

/// Set by the parent for the child run under `RLIMIT_AS`.
const CHILD_ENV: &str = "AMDGPU_PLUGIN_HOSTILE_CHILD";

#[test]
fn damaged_images_are_refused_with_clear_errors() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child run: the limit must be in force, or the run proves
        // nothing.
        let mut probe: Vec<u8> = Vec::new();
        assert!(
            probe.try_reserve(1 << 30).is_err(),
            "RLIMIT_AS is not in force in the child"
        );
    }
    let images = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir().unwrap();
    let d = dump(images.path(), shm.path());
    let kfd = ImageName::Kfd { id: KFD_ID }.to_string();
    let render = ImageName::RenderNode { id: KFD_ID + 1 }.to_string();
    let kfd_len = d.clean.iter().find(|(n, _)| *n == kfd).unwrap().1.len();
    let pages = d
        .clean
        .iter()
        .map(|(n, _)| n.clone())
        .find(|n| n.starts_with("amdgpu-pages-"))
        .expect("a pages file");
    let mut bad = Vec::new();
    let mut cases = 0;
    let mut run = |case: String, file: &str, before_kernel: bool, damage: &dyn Fn(&Path)| {
        cases += 1;
        bad.extend(check(
            &case,
            images.path(),
            shm.path(),
            &d,
            file,
            before_kernel,
            damage,
        ));
    };

    // Truncations: every byte of the header and the first fields, then
    // points spread over the rest.
    let mut cuts: Vec<usize> = (0..48).collect();
    cuts.extend((48..kfd_len).step_by(kfd_len / 24 + 1));
    cuts.push(kfd_len - 1);
    for cut in cuts {
        run(
            format!("{kfd} cut to {cut}"),
            &kfd,
            true,
            &move |p: &Path| {
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(cut as u64).unwrap();
            },
        );
    }
    for cut in [0u64, 7, 8, 9] {
        run(
            format!("{render} cut to {cut}"),
            &render,
            false,
            &move |p: &Path| {
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(cut).unwrap();
            },
        );
    }
    for claim in [1u64 << 32, 1 << 62, u64::MAX] {
        run(
            format!("{kfd} claims {claim} bytes"),
            &kfd,
            true,
            &move |p: &Path| {
                let mut bytes = std::fs::read(p).unwrap();
                bytes[..8].copy_from_slice(&claim.to_le_bytes());
                std::fs::write(p, bytes).unwrap();
            },
        );
    }
    let edits: Vec<(&str, Damage)> = vec![
        (
            "num_of_bos 2^32",
            Box::new(rewrite_kfd(|m| m.num_of_bos = 1 << 32)),
        ),
        (
            "num_of_gpus 2^32-1",
            Box::new(rewrite_kfd(|m| m.num_of_gpus = u32::MAX)),
        ),
        (
            "bo size u64::MAX",
            Box::new(rewrite_kfd(|m| m.bo_entries[0].size = u64::MAX)),
        ),
        (
            "bo end overflows",
            Box::new(rewrite_kfd(|m| m.bo_entries[0].addr = u64::MAX - 4095)),
        ),
        (
            "bo on a gpu_id that does not exist",
            Box::new(rewrite_kfd(|m| m.bo_entries[0].gpu_id = 0xdead)),
        ),
        (
            "device entries gone",
            Box::new(rewrite_kfd(|m| m.device_entries.clear())),
        ),
        (
            "a bo entry missing",
            Box::new(rewrite_kfd(|m| {
                m.bo_entries.pop();
            })),
        ),
    ];
    for (case, edit) in &edits {
        run(format!("{kfd}: {case}"), &kfd, true, edit.as_ref());
    }
    // Bytes changed in place, values every validation accepts: the
    // message checksum (tag 120) finds them before the kernel is asked.
    let clean_kfd = d.clean.iter().find(|(n, _)| *n == kfd).unwrap().1.clone();
    let msg: CriuKfd = amdgpu_image::decode_message("kfd", &clean_kfd[8..]).unwrap();
    let priv_at = clean_kfd
        .windows(msg.priv_data.len())
        .position(|w| w == msg.priv_data.as_slice())
        .expect("priv_data in the image");
    let middle = priv_at + msg.priv_data.len() / 2;
    run(
        format!("{kfd}: 4 bytes of priv_data flipped"),
        &kfd,
        true,
        &move |p: &Path| {
            let mut bytes = std::fs::read(p).unwrap();
            for b in &mut bytes[middle..middle + 4] {
                *b ^= 0xff;
            }
            std::fs::write(p, bytes).unwrap();
        },
    );
    let mut edited = msg.clone();
    edited
        .device_entries
        .iter_mut()
        .find(|e| e.gpu_id != 0)
        .unwrap()
        .wave_front_size ^= 7;
    let sealed_with_old_checksum = {
        let mut with = edited.clone();
        let original: CriuKfd =
            amdgpu_image::decode_message_unchecked("kfd", &clean_kfd[8..]).unwrap();
        with.message_checksum = original.message_checksum;
        assert!(with.message_checksum.is_some(), "the dump seals its images");
        framed(&encode_message(&with))
    };
    run(
        format!("{kfd}: wave_front_size changed"),
        &kfd,
        true,
        &move |p: &Path| std::fs::write(p, &sealed_with_old_checksum).unwrap(),
    );

    // Pages files: refused with an error naming the file; a file of the
    // wrong shape before CRIU_OP RESTORE, a flipped bit in the contents
    // while they are copied back (see the module docs).
    let pages_len = d.clean.iter().find(|(n, _)| *n == pages).unwrap().1.len() as u64;
    let pages_damage: Vec<(String, bool, Damage)> = vec![
        (
            "cut by a page".into(),
            true,
            Box::new(move |p: &Path| {
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(pages_len - 4096).unwrap();
            }),
        ),
        (
            "cut to its header".into(),
            true,
            Box::new(|p: &Path| {
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(8).unwrap();
            }),
        ),
        (
            "one byte too long".into(),
            true,
            Box::new(move |p: &Path| {
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(pages_len + 1).unwrap();
            }),
        ),
        (
            "a flipped bit".into(),
            false,
            Box::new(|p: &Path| {
                let mut bytes = std::fs::read(p).unwrap();
                let at = 8 + 100;
                bytes[at] ^= 0x10;
                std::fs::write(p, bytes).unwrap();
            }),
        ),
        (
            "deleted".into(),
            true,
            Box::new(|p: &Path| std::fs::remove_file(p).unwrap()),
        ),
    ];
    for (case, before_kernel, damage) in &pages_damage {
        run(
            format!("{pages} {case}"),
            &pages,
            *before_kernel,
            damage.as_ref(),
        );
    }
    println!("{cases} damaged restores");
    assert!(
        bad.is_empty(),
        "{} problems:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The whole corpus again, through the plugin's restore path, in a child
/// process whose address space is capped at 256 MiB: the simulated machine,
/// the process and its images fit; a length header taken at its word or a
/// count of 2^32 entries turned into an allocation aborts the child.
#[test]
fn damaged_images_under_small_address_space_limit() {
    let exe = std::env::current_exe().expect("test binary path");
    let limit_kib = 256 * 1024;
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {limit_kib} && exec \"$0\" \"$@\""))
        .arg(&exe)
        .args([
            "--exact",
            "damaged_images_are_refused_with_clear_errors",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .output();
    match status {
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "the corpus failed under RLIMIT_AS {limit_kib} KiB: {}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                stdout.contains("damaged restores") && stdout.contains("1 passed"),
                "the child ran the corpus: {stdout}"
            );
        }
        Err(e) => test_env::skip(format!("cannot run sh to set RLIMIT_AS: {e}")),
    }
}
