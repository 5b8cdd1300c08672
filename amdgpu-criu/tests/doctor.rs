//! `amdgpu-criu doctor` on this machine and on a simulated 8-GPU machine,
//! with the vendored CRIU builds when they are there.

use std::path::{Path, PathBuf};

mod cli;
use cli::{run, run_with};

/// A vendored CRIU build (`../shared/vendor/criu/build.sh`), or `None`
/// with the reason given to `test_env::skip` (a failure under CI).
fn vendored_criu(name: &str) -> Option<PathBuf> {
    built(
        Path::new(name).join("criu"),
        &format!("../shared/vendor/criu/build.sh {name}"),
    )
}

/// The C plugin built beside the vendored CRIUs (`.ci/build-c-plugin.sh`),
/// or `None` with the reason given to `test_env::skip`.
fn c_plugin() -> Option<PathBuf> {
    built(
        Path::new("c-plugin").join("amdgpu_plugin.so"),
        ".ci/build-c-plugin.sh",
    )
}

/// `path` among the CRIU builds ([`test_env::criu_builds`]) when it was
/// built (by `script`, which `.ci/run` runs), else `None` after saying so
/// through `test_env::skip`.
fn built(path: PathBuf, script: &str) -> Option<PathBuf> {
    let path = test_env::criu_builds().join(path);
    if path.is_file() {
        return Some(path);
    }
    test_env::skip(format!(
        "{} is absent (build it with {script}; .ci/run does)",
        path.display()
    ));
    None
}

/// This project's plugin, when `cargo test --workspace` built it (in the
/// binary's `deps/`, or beside it after a `cargo build`).
fn our_plugin() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_BIN_EXE_amdgpu-criu")).parent()?;
    let found = [dir.to_path_buf(), dir.join("deps")]
        .into_iter()
        .map(|d| d.join("libcriu_plugin_amdgpu.so"))
        .find(|so| so.is_file());
    if found.is_none() {
        test_env::skip(format!(
            "libcriu_plugin_amdgpu.so is absent from {} and its deps/ (built by `cargo test \
             --workspace`)",
            dir.display()
        ));
    }
    found
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON")
}

fn status<'a>(v: &'a serde_json::Value, name: &str) -> (&'a str, &'a str) {
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}"));
    (c["status"].as_str().unwrap(), c["detail"].as_str().unwrap())
}

#[test]
fn this_machine() {
    let out = run(&["doctor"]);
    let text = String::from_utf8(out.stdout).unwrap();
    if Path::new("/dev/kfd").exists() {
        test_env::skip("this machine has /dev/kfd; the no-driver answer needs a machine without");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.starts_with("amdgpu-criu doctor: this machine\n"),
        "{text}"
    );
    assert!(
        text.contains("FAIL kfd device        no /dev/kfd: no AMD GPU driver"),
        "{text}"
    );
    assert!(
        text.contains("skip kfd version       needs /dev/kfd open"),
        "{text}"
    );
    assert!(text.ends_with("failed\n"), "{text}");
}

#[test]
fn a_simulated_8_gpu_machine() {
    let out = run(&[
        "doctor",
        "--simulate",
        "builtin:mi210-8gpu-2hive",
        "--json",
        "--criu",
        "/nonexistent/criu",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["ok"], false);
    assert_eq!(
        v["machine"],
        "builtin:mi210-8gpu-2hive (simulated by kfd-sim)"
    );
    for name in [
        "kfd device",
        "kfd version",
        "permission",
        "topology",
        "gpu self-check",
        "render nodes",
        "gem mapping info",
    ] {
        assert_eq!(status(&v, name).0, "ok", "{name}: {}", status(&v, name).1);
    }
    assert_eq!(
        status(&v, "criu"),
        (
            "fail",
            "--criu /nonexistent/criu: no such file (give the path of a criu binary, e.g. \
             /usr/sbin/criu)"
        )
    );
    assert_eq!(status(&v, "plugin").0, "skip");
}

#[test]
fn a_simulated_machine_with_a_real_criu_and_our_plugin() {
    let Some(criu) = vendored_criu("head") else {
        return;
    };
    let Some(ours) = our_plugin() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&ours, dir.path().join("amdgpu_plugin.so")).unwrap();
    let libs = dir.path().to_str().unwrap();
    let args = [
        "doctor",
        "--simulate",
        "builtin:mi210-8gpu-2hive",
        "--criu",
        criu.to_str().unwrap(),
    ];
    let out = run_with(&args, &[("CRIU_LIBS_DIR", libs)]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("ok   criu hooks        15 plugin hooks"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "ok   plugin            {libs} (CRIU_LIBS_DIR): loads this project's plugin"
        )),
        "{text}"
    );
    // `criu check` needs root; as root on a sound kernel everything passes.
    if text.contains("ok   criu check") {
        assert_eq!(out.status.code(), Some(0), "{text}");
        assert!(text.ends_with("a checkpoint can work here\n"), "{text}");
    } else {
        println!("note: criu check failed here: {text}");
        assert_eq!(out.status.code(), Some(1), "{text}");
    }

    // Both plugins in the directory: CRIU would load both.
    let Some(c) = c_plugin() else {
        return;
    };
    std::fs::copy(&c, dir.path().join("amdgpu_plugin_c.so")).unwrap();
    let out = run_with(
        &[&args[..], &["--json"]].concat(),
        &[("CRIU_LIBS_DIR", libs)],
    );
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    let (s, detail) = status(&v, "plugin");
    assert_eq!(s, "fail", "{detail}");
    assert!(
        detail.contains("holds both this project's plugin")
            && detail.contains("amdgpu_plugin_c.so"),
        "{detail}"
    );
}

#[test]
fn an_older_criu_and_the_c_plugin() {
    let Some(criu) = vendored_criu("v4.1.1") else {
        return;
    };
    let Some(c) = c_plugin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&c, dir.path().join("amdgpu_plugin.so")).unwrap();
    let out = run_with(
        &[
            "doctor",
            "--simulate",
            "builtin:mi210-8gpu-2hive",
            "--criu",
            criu.to_str().unwrap(),
            "--json",
        ],
        &[("CRIU_LIBS_DIR", dir.path().to_str().unwrap())],
    );
    let v = json(&out);
    assert_eq!(
        status(&v, "criu").1,
        format!("{}: version 4.1.1", criu.display())
    );
    let (s, detail) = status(&v, "criu hooks");
    assert_eq!((s, detail), ("ok", "12 plugin hooks: an older CRIU: the plugin works without the 3 newer hooks (see criu-amdgpu-plugin(1))"));
    let (s, detail) = status(&v, "plugin");
    assert_eq!(s, "warn", "{detail}");
    assert!(detail.contains("upstream's C plugin"), "{detail}");
}

#[test]
fn usage_errors() {
    let out = run(&["doctor", "--simulate", "builtin:nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no built-in machine \"builtin:nope\""));
}
