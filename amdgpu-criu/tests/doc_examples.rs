//! Every `amdgpu-criu` example the documentation shows, run: the README,
//! `docs/first-checkpoint.md`, the crate's README, the man pages (English
//! and Persian) and every subcommand's `--help`. Each runs in bash, as a
//! reader would paste it, in a sandbox that holds what the examples name
//! (`/var/lib/ckpt` and friends are image sets the demo wrote, `./node1` a
//! sysfs tree, `checkpoint.tar.zst` a Podman archive of a set, ...).
//!
//! An example passes when the tool understood it (no usage error, no
//! bare-name hint, no panic) and answered with a status its documentation
//! gives: 0 or 1, or 2 only where this machine lacks what the example
//! needs (a GPU driver, CRIU). Lines of other tools (criu, podman, make,
//! cargo test) are not run; `cargo run -p amdgpu-criu --` is this tool.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

mod cli;
mod preload;

/// One example: where it is written and the command line.
struct Example {
    source: String,
    line: String,
}

fn workspace_root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    while !fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")) {
        dir = dir.parent().expect("a workspace root above the crate");
    }
    dir.to_path_buf()
}

/// The lines of the fenced `sh` blocks of a Markdown file, continuation
/// lines joined.
fn markdown(path: &Path, out: &mut Vec<Example>) {
    let text = fs::read_to_string(path).unwrap();
    let mut in_sh = false;
    let mut pending = String::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        if let Some(start) = line.strip_suffix('\\') {
            pending.push_str(start);
            continue;
        }
        pending.push_str(line);
        out.push(Example {
            source: format!("{}:{}", path.display(), n + 1),
            line: std::mem::take(&mut pending),
        });
    }
}

/// The lines of the `.EX`/`.EE` blocks of a man page, roff escapes undone.
fn man_page(path: &Path, out: &mut Vec<Example>) {
    let text = fs::read_to_string(path).unwrap();
    let mut inside = false;
    for (n, line) in text.lines().enumerate() {
        match line {
            ".EX" => inside = true,
            ".EE" => inside = false,
            _ if inside => out.push(Example {
                source: format!("{}:{}", path.display(), n + 1),
                line: line.replace("\\-", "-").replace("\\e", "\\"),
            }),
            _ => {}
        }
    }
}

/// The `Examples:` of every subcommand's `--help`.
fn help_examples(out: &mut Vec<Example>) {
    let help = cli::stdout(&cli::run(&["--help"]));
    let subcommands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect();
    assert!(subcommands.len() > 10, "{help}");
    for sub in subcommands {
        let text = cli::stdout(&cli::run(&[&sub, "--help"]));
        for line in text
            .lines()
            .skip_while(|l| *l != "Examples:")
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
        {
            out.push(Example {
                source: format!("amdgpu-criu {sub} --help"),
                line: line.trim().to_owned(),
            });
        }
    }
}

/// The command line as this test runs it, or None when it is another
/// tool's (or needs a person: an editor).
fn runnable(line: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') || line.contains("$EDITOR") {
        return None;
    }
    let line = line.replace("sudo ", "");
    let line = line
        .replace("cargo run --release -p amdgpu-criu -- ", "amdgpu-criu ")
        .replace("cargo run -p amdgpu-criu -- ", "amdgpu-criu ");
    // `amdgpu-criu verify DIR && criu restore ...`: this tool's part.
    let line = match line.split_once(" && ") {
        Some((first, rest))
            if !rest.trim_start().starts_with("amdgpu-criu")
                && !rest.trim_start().starts_with("echo") =>
        {
            first.to_owned()
        }
        _ => line,
    };
    // The first word after environment assignments names the tool.
    let first = line
        .split_whitespace()
        .find(|w| !w.contains('=') || w.starts_with('-'))?;
    let tool = first.trim_start_matches("<(");
    (tool == "amdgpu-criu" || (tool == "source" && line.contains("amdgpu-criu"))).then_some(line)
}

/// `line` with the absolute paths the examples use for images and
/// topologies moved into `sandbox` (`/var/lib/ckpt` is `SANDBOX/var/lib/ckpt`).
fn in_sandbox(line: &str, sandbox: &Path) -> String {
    let mut out = String::new();
    let mut rest = line;
    'scan: while !rest.is_empty() {
        for prefix in ["/var/lib/", "/tmp/", "/srv/"] {
            if rest.starts_with(prefix)
                && out
                    .chars()
                    .last()
                    .is_none_or(|c| matches!(c, ' ' | '=' | '>' | '"' | '\''))
            {
                out.push_str(&sandbox.display().to_string());
                out.push_str(prefix);
                rest = &rest[prefix.len()..];
                continue 'scan;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `demo` into `dir`, which it must verify.
fn demo_into(dir: &Path, args: &[&str], env: &[(&str, &str)]) {
    let mut all = vec!["demo", "-q", "--dir", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = cli::run_with(&all, env);
    assert_eq!(out.status.code(), Some(0), "{all:?}: {}", cli::stderr(&out));
}

fn copy_files(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A Podman-like archive of the set in `images`: its files in
/// `checkpoint/`.
fn archive_of(images: &Path) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_dir_all("checkpoint", images).unwrap();
    builder.into_inner().unwrap()
}

/// What the examples name, made in `sandbox` (`work/` is where they run).
fn prepare(sandbox: &Path) {
    let work = sandbox.join("work");
    for dir in [
        "work",
        "tmp/test-set",
        "home/.local/share/bash-completion/completions",
        "home/.zfunc",
        "home/.config/fish/completions",
        "var/lib/kubelet/checkpoints",
        "srv/topologies",
    ] {
        fs::create_dir_all(sandbox.join(dir)).unwrap();
    }
    // Image sets: a basic checkpoint on two GPUs, a chain, a deduplicated set.
    let ckpt = sandbox.join("var/lib/ckpt");
    demo_into(
        &ckpt,
        &["--workload", "basic", "--topology", "builtin:pcie-2gpu"],
        &[],
    );
    copy_files(&ckpt, &ckpt.join("train"));
    // The Docker walk-through's exported checkpoint.
    copy_files(&ckpt, &ckpt.join("ck3"));
    let chain = sandbox.join("chain");
    demo_into(
        &chain,
        &[
            "--workload",
            "basic",
            "--topology",
            "builtin:pcie-2gpu",
            "--incremental",
            "1",
        ],
        &[],
    );
    copy_files(&chain, &ckpt.join("1"));
    for second in ["2", "3"] {
        copy_files(&chain.join("incremental"), &ckpt.join(second));
        std::os::unix::fs::symlink("../1", ckpt.join(second).join("parent")).unwrap();
    }
    demo_into(
        &ckpt.join("dedup"),
        &[
            "--workload",
            "data-parallel",
            "--topology",
            "builtin:pcie-2gpu",
            "--size",
            "2M",
        ],
        &[("KFD_DEDUP", "1")],
    );
    // Archives of the basic set, as Podman and the kubelet write them.
    let tar = archive_of(&ckpt.join("train"));
    fs::write(ckpt.join("train.tar"), &tar).unwrap();
    fs::write(
        sandbox
            .join("var/lib/kubelet/checkpoints/checkpoint-POD_NAMESPACE-CONTAINER-TIMESTAMP.tar"),
        &tar,
    )
    .unwrap();
    fs::write(
        work.join("checkpoint.tar.zst"),
        ruzstd::encoding::compress_to_vec(&tar[..], ruzstd::encoding::CompressionLevel::Fastest),
    )
    .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).unwrap();
    fs::write(work.join("checkpoint.tar.gz"), gz.finish().unwrap()).unwrap();
    // Machines: sysfs trees and topology files of the checkpoint's model.
    let system = amdgpu_topology::builtin("pcie-2gpu").unwrap();
    for tree in [
        "work/topology-of-node1",
        "work/topology-of-node2",
        "work/node1",
        "work/node2",
        "work/copy-of-topology",
        "work/topo-a",
        "work/source-topology",
        "work/target-topology",
        "tmp/topo-a",
        "srv/topologies/node1",
    ] {
        amdgpu_topology::write::write(&system, &sandbox.join(tree)).unwrap();
    }
    for file in ["tmp/topo-a.json", "work/target.json"] {
        let out = cli::run(&[
            "topology",
            "--sysfs",
            "builtin:pcie-2gpu",
            "--export",
            sandbox.join(file).to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", cli::stderr(&out));
    }
}

/// Why `stderr` with exit status 2 is this machine's lack, not the
/// example's fault: no GPU driver or topology, no CRIU. `sim` examples name
/// the user's own program (`./my_app`), its pid and the checkpoint it made:
/// here those are missing, and the tool must say which one (tests/sim.rs
/// runs the same commands end to end on a real program under real CRIU).
fn machine_lacks(line: &str, stderr: &str) -> bool {
    let sim_placeholder = line.starts_with("amdgpu-criu sim ")
        && [
            "./my_app: no such executable file",
            "no process 4242",
            "holds no checkpoint of `amdgpu-criu sim checkpoint`",
        ]
        .iter()
        .any(|w| stderr.contains(w));
    sim_placeholder
        || [
            "/sys/class/kfd/kfd",
            "/dev/kfd",
            "no AMD GPU driver",
            "no criu",
            "needs libkfd_sim_preload.so",
        ]
        .iter()
        .any(|w| stderr.contains(w))
}

#[test]
fn every_example_the_docs_show_runs() {
    let root = workspace_root();
    let mut examples = Vec::new();
    for md in [
        "README.md",
        "docs/first-checkpoint.md",
        "amdgpu-criu/README.md",
    ] {
        markdown(&root.join(md), &mut examples);
    }
    for page in [
        "docs/man/amdgpu-criu.1",
        "docs/man/criu-amdgpu-plugin.1",
        "docs/man/fa/criu-amdgpu-plugin.1",
    ] {
        man_page(&root.join(page), &mut examples);
    }
    help_examples(&mut examples);

    let sandbox = tempfile::tempdir().unwrap();
    prepare(sandbox.path());
    let bin = Path::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let preload = preload::preload_lib();
    let mut ran = BTreeSet::new();
    let mut failures = Vec::new();
    for example in &examples {
        let Some(line) = runnable(&example.line) else {
            continue;
        };
        if !ran.insert(line.clone()) {
            continue;
        }
        if line.contains("rocr-copy") && preload.is_none() {
            preload::skip("libkfd_sim_preload.so is not built: the rocr-copy examples cannot run");
            continue;
        }
        let mut command = Command::new("bash");
        command
            .args(["-c", &in_sandbox(&line, sandbox.path())])
            .current_dir(sandbox.path().join("work"))
            .env("PATH", &path)
            .env("HOME", sandbox.path().join("home"))
            .env("TMPDIR", sandbox.path().join("tmp"))
            .env("PAGER", "cat");
        for name in cli::VARIABLES {
            command.env_remove(name);
        }
        if let Some(lib) = &preload {
            command.env("KFD_SIM_PRELOAD_LIB", lib);
        }
        let out = command.output().expect("run bash");
        let (stdout, stderr) = (cli::stdout(&out), cli::stderr(&out));
        let code = out.status.code();
        let understood = !stderr.contains("Usage: amdgpu-criu")
            && !stderr.contains("try '--help'")
            && !stderr.contains("is read as builtin:")
            && !stderr.contains("panicked")
            && !stderr.contains("command not found");
        let status_ok = match code {
            Some(0 | 1) => true,
            Some(2) => machine_lacks(&line, &stderr),
            _ => false,
        };
        if !understood || !status_ok {
            failures.push(format!(
                "{}: {line}\n  exit {code:?}\n  stdout: {}\n  stderr: {}",
                example.source,
                stdout
                    .lines()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("\n          "),
                stderr
                    .lines()
                    .take(8)
                    .collect::<Vec<_>>()
                    .join("\n          "),
            ));
        }
    }
    assert!(
        ran.len() > 60,
        "only {} examples found: the collection is broken",
        ran.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} examples failed:\n\n{}",
        failures.len(),
        ran.len(),
        failures.join("\n\n")
    );
}
