//! One grammar across commands: machines named `builtin:NAME` or DIR
//! everywhere (a bare name taken with a hint), `-v`, `--quiet` and `--log`,
//! quiet ends on closed pipes, and built-in names in the completions.

mod cli;
use cli::{run, stderr};

#[test]
fn every_command_takes_builtin_names_and_hints_at_bare_ones() {
    for args in [
        vec!["topology", "--sysfs", "builtin:single-gpu"],
        vec![
            "map",
            "--from",
            "builtin:single-gpu",
            "--to",
            "builtin:single-gpu",
        ],
        vec![
            "doctor",
            "--simulate",
            "builtin:single-gpu",
            "--criu",
            "/nonexistent",
        ],
        vec!["ps", "--simulate", "builtin:single-gpu"],
    ] {
        let out = run(&args);
        assert_ne!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("hint:"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // A bare name: taken, with a hint; `--quiet` drops the hint.
    let out = run(&["map", "--from", "single-gpu", "--to", "builtin:single-gpu"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("hint: \"single-gpu\" is read as builtin:single-gpu"),
        "{}",
        stderr(&out)
    );
    let out = run(&[
        "--quiet",
        "map",
        "--from",
        "single-gpu",
        "--to",
        "builtin:single-gpu",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stderr(&out), "");
    // Neither a directory nor a built-in name: the names are listed.
    let out = run(&[
        "map",
        "--from",
        "no-such-machine",
        "--to",
        "builtin:single-gpu",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("built-in machines are named builtin:NAME: builtin:"),
        "{}",
        stderr(&out)
    );
    let out = run(&["topology", "--sysfs", "builtin:nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no built-in machine \"builtin:nope\""));
    // The built-in names in the completions.
    let script = String::from_utf8(run(&["completions", "bash"]).stdout).unwrap();
    assert!(script.contains("builtin:mi210-8gpu-2hive"));
}

#[test]
fn log_and_verbose() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("amdgpu-criu.log");
    let out = run(&[
        "--log",
        log.to_str().unwrap(),
        "map",
        "--from",
        "single-gpu",
        "--to",
        "builtin:nope",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("hint: \"single-gpu\""), "{text}");
    // Each line after the seconds since the start, as CRIU's -o log.
    for line in text.lines() {
        let stamp = line.get(..12).unwrap_or_default();
        assert!(
            stamp.len() == 12
                && stamp.starts_with('(')
                && stamp.ends_with(") ")
                && stamp[1..3].chars().all(|c| c.is_ascii_digit())
                && &stamp[3..4] == "."
                && stamp[4..10].chars().all(|c| c.is_ascii_digit()),
            "{line:?}"
        );
    }
    assert!(
        text.contains("no built-in machine \"builtin:nope\""),
        "{text}"
    );
    // The demo's plugin lines: all in the log, and on stderr with -v.
    let images = dir.path().join("images");
    let out = run(&[
        "demo",
        "-v",
        "--workload",
        "basic",
        "--dir",
        images.to_str().unwrap(),
        "--log",
        log.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("amdgpu_plugin: "), "{}", stderr(&out));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .filter(|l| l.contains("amdgpu_plugin: "))
            .count()
            > 10,
        "{text}"
    );
    let out = run(&["--log", "/nonexistent/dir/log", "ps"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn demo_into_a_closed_pipe() {
    cli::into_closed_pipe(&["demo", "--workload", "basic"]);
}
