//! Loads the built `amdgpu_plugin.so` into small C programs that behave like
//! CRIU's plugin loader (tests/c_host/host.c), one per CRIU generation, and
//! checks the descriptor, the load-time `max_hooks` choice, the `-ENOTSUP`
//! answers for foreign files and the log lines that reach CRIU's logger.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The cdylib as `cargo build -p criu-plugin-amdgpu` makes it, in a target
/// directory of its own under target/, so the test does not depend on
/// whether the running `cargo test` uplifted the `.so` of this package.
fn plugin_so() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test executable path");
            // target/<profile>/deps/c_host-<hash>
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test binary lives in target/<profile>/deps");
            let target_dir = profile_dir
                .parent()
                .expect("target dir")
                .join("c-host-plugin");
            let profile = profile_dir.file_name().expect("profile directory name");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--quiet", "-p", "criu-plugin-amdgpu", "--lib"])
                .arg("--target-dir")
                .arg(&target_dir);
            if profile == "release" {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "cargo build of the plugin failed");
            let so = target_dir.join(profile).join("libcriu_plugin_amdgpu.so");
            assert!(so.exists(), "{} was not built", so.display());
            so
        })
        .clone()
}

/// kfd-sim-preload's interposer, when the workspace's build put it next
/// to this test binary.
fn preload_lib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    [
        deps.join("libkfd_sim_preload.so"),
        deps.parent()?.join("libkfd_sim_preload.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

fn c_compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    Command::new(&cc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| cc)
}

struct Host {
    exe: PathBuf,
}

fn build_host(dir: &Path, name: &str, defines: &[&str]) -> Option<Host> {
    let Some(cc) = c_compiler() else {
        test_env::skip("no C compiler (set CC or install cc)");
        return None;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c_host/host.c");
    let exe = dir.join(name);
    let out = Command::new(cc)
        .args(["-std=gnu11", "-Wall", "-Werror", "-O1", "-rdynamic", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(defines)
        .arg("-ldl")
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling the C host failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(Host { exe })
}

struct Run {
    stdout: String,
    stderr: String,
}

impl Run {
    fn log_lines(&self) -> Vec<&str> {
        self.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("LOG "))
            .collect()
    }
}

fn run_host(host: &Host, expected_max_hooks: u32, env: &[(&str, &str)]) -> Run {
    let images = tempfile::tempdir().expect("images dir");
    let mut cmd = Command::new(&host.exe);
    cmd.arg(plugin_so())
        .arg(expected_max_hooks.to_string())
        .arg(images.path())
        .env_remove("AMDGPU_PLUGIN_MAX_HOOKS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the C host");
    let run = Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        out.status.success() && run.stdout.contains("PASS"),
        "C host failed (expected max_hooks {expected_max_hooks}):\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    run
}

#[test]
fn max_hooks_follows_criu_hook_table() {
    let dir = tempfile::tempdir().unwrap();
    for (criu_max, expected) in [
        (10, 10),
        (12, 12),
        (13, 13),
        (14, 14),
        (15, 15),
        (16, 16),
        (17, 16),
    ] {
        let Some(host) = build_host(
            dir.path(),
            &format!("host{criu_max}"),
            &[
                &format!("-DHOOK_MAX={criu_max}"),
                "-DINVENTORY",
                "-DINVENTORY_OLD",
            ],
        ) else {
            return;
        };
        let run = run_host(&host, expected, &[]);
        let lines = run.log_lines();
        assert!(
            lines.iter().all(|l| l[2..].starts_with("amdgpu_plugin: ")),
            "info lines start with the prefix, and nothing else was logged: {lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("max_hooks {expected}: CRIU has {criu_max}"))),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("initialized for Dump")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("initialized for Restore")),
            "{lines:?}"
        );
    }
}

#[test]
fn marker_symbols_when_the_hook_table_is_not_exported() {
    let dir = tempfile::tempdir().unwrap();
    let Some(v41) = build_host(dir.path(), "v41", &["-DINVENTORY", "-DINVENTORY_OLD"]) else {
        return;
    };
    run_host(&v41, 12, &[]);
    let Some(v317) = build_host(dir.path(), "v317", &[]) else {
        return;
    };
    run_host(&v317, 10, &[]);
}

#[test]
fn environment_override_and_its_validation() {
    let dir = tempfile::tempdir().unwrap();
    let Some(host) = build_host(dir.path(), "host12", &["-DHOOK_MAX=12"]) else {
        return;
    };
    run_host(&host, 11, &[("AMDGPU_PLUGIN_MAX_HOOKS", "11")]);
    // Above what this CRIU accepts: capped (the host refuses a descriptor
    // above its maximum as CRIU does, so PASS means it loaded).
    let run = run_host(&host, 12, &[("AMDGPU_PLUGIN_MAX_HOOKS", "15")]);
    assert!(
        run.log_lines().iter().any(|l| l.starts_with("2 Warn  (")
            && l.contains("AMDGPU_PLUGIN_MAX_HOOKS=15 is more than this CRIU accepts; using 12")),
        "{}",
        run.stdout
    );
    let run = run_host(&host, 12, &[("AMDGPU_PLUGIN_MAX_HOOKS", "99")]);
    assert!(
        run.log_lines().iter().any(|l| l.starts_with("1 Error (")
            && l.contains("): amdgpu_plugin: ignoring AMDGPU_PLUGIN_MAX_HOOKS=\"99\"")),
        "no error line, tagged as CRIU's pr_err tags them, about the invalid override:\n{}",
        run.stdout
    );
    // Without a hook table to read, the override is what the user says.
    let Some(v41) = build_host(dir.path(), "v41", &["-DINVENTORY", "-DINVENTORY_OLD"]) else {
        return;
    };
    run_host(&v41, 14, &[("AMDGPU_PLUGIN_MAX_HOOKS", "14")]);
}

#[test]
fn a_16_hook_criu_loads_the_plugin_and_calls_only_its_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let Some(host) = build_host(
        dir.path(),
        "host16",
        &["-DHOOK_MAX=16", "-DINVENTORY", "-DINVENTORY_OLD"],
    ) else {
        return;
    };
    let run = run_host(&host, 16, &[]);
    assert!(
        run.log_lines()
            .iter()
            .any(|l| l.contains("max_hooks 16: CRIU has 16")),
        "{}",
        run.stdout
    );
}

#[test]
fn plugin_options_from_criu_plugin_get_options() {
    let dir = tempfile::tempdir().unwrap();
    let Some(host) = build_host(
        dir.path(),
        "options",
        &[
            "-DHOOK_MAX=16",
            "-DINVENTORY",
            "-DINVENTORY_OLD",
            "-DGET_OPTIONS",
        ],
    ) else {
        return;
    };
    // Another plugin's entry is left alone; ours are taken. The host checks
    // its array was not touched.
    let run = run_host(
        &host,
        16,
        &[(
            "HOST_PLUGIN_OPTIONS",
            "cuda.device-map=0=1\namdgpu.numa-check=no\namdgpu.device-map=0x1111=0000:c1:00.0",
        )],
    );
    assert!(
        run.log_lines().iter().any(|l| l.contains(
            "plugin options from CRIU's command line: amdgpu.numa-check=no \
             amdgpu.device-map=0x1111=0000:c1:00.0 (1 of other plugins left to them)"
        )),
        "{}",
        run.stdout
    );

    for (entry, expected) in [
        (
            "amdgpu.numa-chek=no",
            "unknown plugin option \"amdgpu.numa-chek\"; the amdgpu plugin's options are",
        ),
        (
            "amdgpu.numa-check=maybe",
            "plugin option amdgpu.numa-check=\"maybe\": not a boolean; expecting YES/NO or 1/0",
        ),
        ("amdgpu.device-map=0x1111", "a pin needs SRC=DST"),
    ] {
        let run = run_host(
            &host,
            16,
            &[
                ("HOST_PLUGIN_OPTIONS", entry),
                ("HOST_EXPECT_INIT_FAIL", "1"),
            ],
        );
        assert!(
            run.log_lines()
                .iter()
                .any(|l| l.starts_with("1 Error (") && l.contains(expected)),
            "{entry}: {}",
            run.stdout
        );
    }
    // A bad KFD_DEVICE_MAP fails too, with or without the service.
    let run = run_host(
        &host,
        16,
        &[("KFD_DEVICE_MAP", "0x1111"), ("HOST_EXPECT_INIT_FAIL", "1")],
    );
    assert!(
        run.log_lines()
            .iter()
            .any(|l| l.starts_with("1 Error (") && l.contains("KFD_DEVICE_MAP")),
        "{}",
        run.stdout
    );
}

#[test]
fn the_command_line_overrides_the_environment_in_the_log() {
    // Without /dev/kfd the option lines are not printed; with it (a GPU
    // machine) the precedence shows in them. A machine without one runs
    // the host on a simulated machine behind kfd-sim-preload's interposer
    // (its /dev/kfd), built with the workspace.
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    std::fs::create_dir(&shm).unwrap();
    let mut machine = Vec::new();
    if !Path::new("/dev/kfd").exists() {
        let Some(preload) = preload_lib() else {
            test_env::skip(
                "no /dev/kfd, and libkfd_sim_preload.so is not built (test the workspace)",
            );
            return;
        };
        machine = vec![
            ("LD_PRELOAD", preload.display().to_string()),
            ("KFD_SIM_MACHINE", "single-gpu".to_owned()),
            ("KFD_SIM_SHM_DIR", shm.display().to_string()),
        ];
    }
    let Some(host) = build_host(
        dir.path(),
        "precedence",
        &[
            "-DHOOK_MAX=16",
            "-DINVENTORY",
            "-DINVENTORY_OLD",
            "-DGET_OPTIONS",
        ],
    ) else {
        return;
    };
    let mut env = vec![
        ("HOST_PLUGIN_OPTIONS", "amdgpu.numa-check=yes"),
        ("KFD_NUMA_CHECK", "NO"),
        ("KFD_VRAM_SIZE_CHECK", "NO"),
    ];
    env.extend(machine.iter().map(|(k, v)| (*k, v.as_str())));
    let run = run_host(&host, 16, &env);
    for expected in [
        "param: amdgpu.numa-check (KFD_NUMA_CHECK) = YES (command line)",
        "param: amdgpu.vram-size-check (KFD_VRAM_SIZE_CHECK) = NO (environment)",
    ] {
        assert!(run.stdout.contains(expected), "{expected}: {}", run.stdout);
    }
}

#[test]
fn inventory_gate_at_restore() {
    let dir = tempfile::tempdir().unwrap();
    let have_kfd = Path::new("/dev/kfd").exists();
    let Some(listed) = build_host(dir.path(), "listed", &["-DHOOK_MAX=13", "-DINVENTORY"]) else {
        return;
    };
    let run = run_host(&listed, 13, &[]);
    assert!(!run.stdout.contains("not needed"), "{}", run.stdout);
    if !have_kfd {
        // The C host checked that init(RESTORE) failed; the reason is an
        // error line that says what to do.
        assert!(
            run.log_lines().iter().any(|l| l.starts_with("1 Error (")
                && l.contains("inventory lists amdgpu_plugin")
                && l.contains("no /dev/kfd")),
            "{}",
            run.stdout
        );
    }
    let Some(unlisted) = build_host(
        dir.path(),
        "unlisted",
        &["-DHOOK_MAX=13", "-DINVENTORY", "-DINVENTORY_WITHOUT_US"],
    ) else {
        return;
    };
    let run = run_host(&unlisted, 13, &[]);
    assert!(
        run.stdout.contains("not needed for this restore"),
        "{}",
        run.stdout
    );
    // No line that contradicts it: the plugin neither says it initialized
    // for the restore nor that it finished one.
    for contradiction in ["initialized for Restore", "finished Restore"] {
        assert!(!run.stdout.contains(contradiction), "{}", run.stdout);
    }
    let Some(old) = build_host(
        dir.path(),
        "old",
        &["-DHOOK_MAX=13", "-DINVENTORY", "-DINVENTORY_OLD"],
    ) else {
        return;
    };
    let run = run_host(&old, 13, &[]);
    assert!(
        run.stdout.contains("initialized for Restore"),
        "images without a plugin list keep every plugin: {}",
        run.stdout
    );
}

#[test]
fn a_machine_without_gpus_hears_two_lines_per_run() {
    if Path::new("/dev/kfd").exists() {
        test_env::skip("this machine has /dev/kfd");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(host) = build_host(
        dir.path(),
        "quiet",
        &["-DHOOK_MAX=16", "-DINVENTORY", "-DINVENTORY_OLD"],
    ) else {
        return;
    };
    let run = run_host(&host, 16, &[]);
    // Three stages (dump, pre-dump, restore), every hook called with files
    // that are not ours: one line at init and one at exit per stage, at
    // every level, and no option lines.
    let lines = run.log_lines();
    assert_eq!(lines.len(), 6, "{lines:#?}");
    assert!(!run.stdout.contains("_CHECK"), "{}", run.stdout);
}

/// `tests/c_host/sibling.c`: the other device plugin of the dispatch
/// scenario.
fn build_sibling(dir: &Path) -> Option<PathBuf> {
    let Some(cc) = c_compiler() else {
        test_env::skip("no C compiler (set CC or install cc)");
        return None;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c_host/sibling.c");
    let so = dir.join("sibling.so");
    let out = Command::new(cc)
        .args([
            "-std=gnu11",
            "-Wall",
            "-Werror",
            "-O1",
            "-shared",
            "-fPIC",
            "-o",
        ])
        .arg(&so)
        .arg(&src)
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling the sibling plugin failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(so)
}

/// One handler call of the dispatch scenario: (plugin, hook, arg, answer).
type HookCall = (String, u32, i32, i32);

fn hook_calls(stdout: &str) -> Vec<HookCall> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("CALL "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 5, "{l}");
            (
                w[0].to_owned(),
                w[1].parse().unwrap(),
                w[2].parse().unwrap(),
                w[4].parse().unwrap(),
            )
        })
        .collect()
}

/// CRIU's hook changes of 2026, through the C host's model of CRIU's hook
/// chains with another device plugin loaded before or after ours, on this
/// machine and (when the interposer is built) on a simulated GPU machine:
/// criu#3105's pid -1 call after the per-task loops of
/// `CHECKPOINT_DEVICES` (which the plugin does not register) and
/// `RESUME_DEVICES_LATE` is answered `-ENOTSUP`, so the plugin after ours
/// hears it; 66fe7a1dd's broadcast `DUMP_DEVICES_LATE`, `RESTORE_INIT`
/// and `POST_FORKING` run ours once each, answered 0 or `-ENOTSUP` when
/// nothing is ours, and CRIU goes on.
#[test]
fn criu_2026_sentinel_and_broadcast_hooks_beside_another_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let Some(sibling) = build_sibling(dir.path()) else {
        return;
    };
    let Some(host) = build_host(
        dir.path(),
        "dispatch",
        &[
            "-DHOOK_MAX=16",
            "-DINVENTORY",
            "-DINVENTORY_OLD",
            "-DDISPATCH",
        ],
    ) else {
        return;
    };
    let shm = dir.path().join("shm");
    std::fs::create_dir(&shm).unwrap();
    let mut machines = vec![("this machine", Vec::new())];
    if !Path::new("/dev/kfd").exists() {
        let Some(preload) = preload_lib() else {
            test_env::skip("libkfd_sim_preload.so is not built (test the workspace)");
            return;
        };
        machines.push((
            "a simulated GPU machine",
            vec![
                ("LD_PRELOAD", preload.display().to_string()),
                ("KFD_SIM_MACHINE", "single-gpu".to_owned()),
                ("KFD_SIM_SHM_DIR", shm.display().to_string()),
            ],
        ));
    }
    const RESUME_DEVICES_LATE: u32 = 9;
    const CHECKPOINT_DEVICES: u32 = 11;
    const BROADCAST: [u32; 3] = [12, 13, 14];
    let enotsup = -libc::ENOTSUP;
    for (machine, env) in &machines {
        for sibling_first in [false, true] {
            let what = format!(
                "{machine}, the other plugin loaded {}",
                if sibling_first { "first" } else { "last" }
            );
            let mut vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let sibling_path = sibling.display().to_string();
            vars.push(("HOST_SIBLING", &sibling_path));
            vars.push(("HOST_SIBLING_FIRST", if sibling_first { "1" } else { "0" }));
            let run = run_host(&host, 16, &vars);
            let calls = hook_calls(&run.stdout);
            let ours = |hook: u32, arg: Option<i32>| -> Vec<i32> {
                calls
                    .iter()
                    .filter(|(p, h, a, _)| {
                        p == "amdgpu_plugin" && *h == hook && arg.is_none_or(|x| x == *a)
                    })
                    .map(|c| c.3)
                    .collect()
            };
            let sibling_heard = |hook: u32, arg: i32| {
                run.stdout
                    .lines()
                    .filter(|l| *l == format!("SIBLING {hook} {arg}"))
                    .count()
            };
            // The plugin registers no CHECKPOINT_DEVICES: the other plugin
            // hears every call, the sentinel too.
            assert!(ours(CHECKPOINT_DEVICES, None).is_empty(), "{what}");
            assert_eq!(sibling_heard(CHECKPOINT_DEVICES, -1), 1, "{what}");
            // The sentinel of RESUME_DEVICES_LATE: not ours.
            let sentinel = ours(RESUME_DEVICES_LATE, Some(-1));
            assert!(
                sentinel.iter().all(|&r| r == enotsup),
                "{what}: {sentinel:?}"
            );
            if !sibling_first {
                assert_eq!(sentinel, [enotsup], "{what}: ours is asked first");
                assert_eq!(
                    sibling_heard(RESUME_DEVICES_LATE, -1),
                    1,
                    "{what}: the plugin after ours hears the pid -1 call:\n{}",
                    run.stdout
                );
            }
            // Broadcasts: ours runs once each, answering 0 or -ENOTSUP
            // (nothing here is its own), and the other plugin runs too.
            for hook in BROADCAST {
                let answers = ours(hook, None);
                assert_eq!(answers.len(), 1, "{what}: hook {hook}: {answers:?}");
                assert!(
                    answers.iter().all(|&r| r == 0 || r == enotsup),
                    "{what}: hook {hook}: {answers:?}"
                );
                assert!(
                    run.stdout
                        .lines()
                        .any(|l| l.starts_with(&format!("SIBLING {hook} "))),
                    "{what}: hook {hook} reached the other plugin"
                );
            }
        }
    }
}
