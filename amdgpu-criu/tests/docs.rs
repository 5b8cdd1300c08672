//! The man pages in `docs/man/` against the code they describe: they format
//! without warnings, every subcommand and flag of the built tool is
//! documented in `amdgpu-criu.1` (and nothing that does not exist), and
//! every environment variable the plugin reads is in
//! `criu-amdgpu-plugin.1`. So the pages cannot silently drift. The Persian
//! translation `fa/criu-amdgpu-plugin.1` keeps the English page's sections,
//! options, names and examples, and formats cleanly as UTF-8.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use amdgpu_checkpoint::options::{check_flags, CheckOptions, MAX_BUFFER_SIZE};

fn workspace_root() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    while !fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")) {
        dir = dir.parent().expect("a workspace root above the crate");
    }
    dir.to_path_buf()
}

fn man_page(name: &str) -> (PathBuf, String) {
    let path = workspace_root().join("docs/man").join(name);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// The page as plain words: roff's `\-` is a `-`, `\e` a backslash.
fn unescaped(roff: &str) -> String {
    roff.replace("\\-", "-").replace("\\e", "\\")
}

fn cli(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "amdgpu-criu {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// Subcommand names listed under `Commands:` of `--help`, without `help`.
fn subcommands() -> Vec<String> {
    let help = cli(&["--help"]);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Long options (`--name`) a subcommand's `--help` lists, without `--help`.
fn long_flags(subcommand: &str) -> Vec<String> {
    let global = global_flags();
    flags_of(&cli(&[subcommand, "--help"]))
        .into_iter()
        .filter(|f| !global.contains(f))
        .collect()
}

/// The long flags in the Options of a `--help` text (`--verbose...` of a
/// counted flag as `--verbose`).
fn flags_of(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .flat_map(|l| l.split([' ', ',', '=']))
        .map(|w| w.trim_end_matches("..."))
        .filter(|w| w.starts_with("--") && w.len() > 2 && *w != "--help" && *w != "--version")
        .map(str::to_owned)
        .collect()
}

/// The options every subcommand takes (`-v`, `--quiet`, `--log`).
fn global_flags() -> Vec<String> {
    flags_of(&cli(&["--help"]))
}

/// Structural checks every page must pass even without groff: a title, the
/// sections a man page needs, only known requests, balanced example blocks.
fn check_structure(path: &Path, text: &str) {
    const KNOWN: &[&str] = &[
        "TH", "SH", "SS", "PP", "TP", "IP", "B", "I", "BR", "BI", "IR", "RB", "RI", "IB", "EX",
        "EE", "br", "\\\"",
    ];
    let name = path.display();
    assert!(
        text.lines().any(|l| l.starts_with(".TH ")),
        "{name}: no .TH"
    );
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "EXAMPLES", "SEE ALSO"] {
        assert!(
            text.lines()
                .any(|l| l == format!(".SH {section}") || l == format!(".SH \"{section}\"")),
            "{name}: no {section} section"
        );
    }
    let mut in_example = false;
    for (n, line) in text.lines().enumerate() {
        let Some(request) = line.strip_prefix('.') else {
            continue;
        };
        let request = request.split_whitespace().next().unwrap_or_default();
        assert!(
            KNOWN.contains(&request),
            "{name}:{}: unknown request .{request}",
            n + 1
        );
        match request {
            "EX" => {
                assert!(!in_example, "{name}:{}: nested .EX", n + 1);
                in_example = true;
            }
            "EE" => {
                assert!(in_example, "{name}:{}: .EE without .EX", n + 1);
                in_example = false;
            }
            _ => {}
        }
    }
    assert!(!in_example, "{name}: .EX not closed");
}

/// `groff -k -man -Tutf8 -ww` (what `man -l` runs, `-k` passing UTF-8 input
/// through preconv): every warning is a formatting defect. Returns the
/// rendered text, or `None` when groff is absent outside CI.
fn check_with_groff(path: &Path) -> Option<String> {
    let Ok(out) = Command::new("groff")
        .args(["-k", "-man", "-Tutf8", "-ww"])
        .arg(path)
        .env("LC_ALL", "C.UTF-8")
        .output()
    else {
        test_env::skip(format!(
            "groff check of {}: groff is not installed (package groff-base)",
            path.display()
        ));
        return None;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "groff on {}: {stderr}",
        path.display()
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn man_pages_are_well_formed() {
    for page in ["amdgpu-criu.1", "criu-amdgpu-plugin.1"] {
        let (path, text) = man_page(page);
        check_structure(&path, &text);
        check_with_groff(&path);
    }
}

/// The arguments of a roff font request line set in `font` (`'B'` or
/// `'I'`): all of `.B`, the alternating ones of `.BR`, `.RB`, `.BI`, `.IB`, ...
fn font_arguments(line: &str, font: char) -> Vec<String> {
    let Some(rest) = line.strip_prefix('.') else {
        return Vec::new();
    };
    let (request, args) = rest.split_once(' ').unwrap_or((rest, ""));
    let mut words = Vec::new();
    let mut chars = args.trim().chars().peekable();
    while chars.peek().is_some() {
        let mut word = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                word.push(c);
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        words.push(word);
    }
    if request.len() == 1 && request.starts_with(font) {
        return vec![words.join(" ")];
    }
    let fonts: Vec<char> = request.chars().collect();
    if fonts.len() != 2 || !fonts.iter().all(|f| "BIR".contains(*f)) {
        return Vec::new();
    }
    words
        .into_iter()
        .enumerate()
        .filter(|(i, _)| fonts[i % 2] == font)
        .map(|(_, w)| w)
        .collect()
}

/// What a translation must keep from its original: the count of each
/// structural request, every bold and italic name (options, variables,
/// commands, files; words in the page's own language and section names
/// aside), and the examples verbatim.
#[derive(Debug, PartialEq)]
struct PageSkeleton {
    requests: Vec<(String, usize)>,
    bold: Vec<String>,
    italic: Vec<String>,
    examples: Vec<String>,
}

fn skeleton(text: &str) -> PageSkeleton {
    let sections: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(".SH ").or_else(|| l.strip_prefix(".SS ")))
        .map(|l| l.trim_matches('"').to_owned())
        .collect();
    let names = |font: char| {
        let mut names: Vec<String> = text
            .lines()
            .flat_map(|l| font_arguments(l, font))
            .filter(|w| w.is_ascii() && !w.is_empty() && !sections.contains(w))
            .collect();
        names.sort();
        names
    };
    let requests = ["SH", "SS", "TP", "IP", "PP", "EX"]
        .iter()
        .map(|r| {
            let count = text
                .lines()
                .filter(|l| *l == format!(".{r}") || l.starts_with(&format!(".{r} ")))
                .count();
            ((*r).to_owned(), count)
        })
        .collect();
    let examples = text
        .split(".EX\n")
        .skip(1)
        .filter_map(|block| block.split(".EE\n").next())
        .map(str::to_owned)
        .collect();
    PageSkeleton {
        requests,
        bold: names('B'),
        italic: names('I'),
        examples,
    }
}

#[test]
fn persian_plugin_page_keeps_step_with_the_english_one() {
    let (_, english) = man_page("criu-amdgpu-plugin.1");
    let (path, persian) = man_page("fa/criu-amdgpu-plugin.1");
    let original = skeleton(&english);
    assert!(
        original.bold.iter().any(|b| b == "KFD_MAX_BUFFER_SIZE")
            && original.bold.iter().any(|b| b == "\\-\\-libdir")
            && original.examples.len() >= 4,
        "the skeleton parser finds the options and examples: {original:?}"
    );
    assert_eq!(
        skeleton(&persian),
        original,
        "{} must have the sections, options, names and examples of the English page",
        path.display()
    );
    assert!(
        persian.contains(".SH \"نام\"") && persian.contains("criu-amdgpu-plugin \\- "),
        "the NAME section is translated and keeps `name \\- summary` for whatis"
    );
    if let Some(rendered) = check_with_groff(&path) {
        assert!(
            rendered.contains("افزونه") && rendered.contains("KFD_MAX_BUFFER_SIZE"),
            "groff renders the Persian text as UTF-8"
        );
    }
}

#[test]
fn every_subcommand_and_flag_is_documented() {
    let (_, text) = man_page("amdgpu-criu.1");
    let text = unescaped(&text);
    let commands = subcommands();
    assert!(
        commands.len() >= 5,
        "too few subcommands parsed: {commands:?}"
    );
    let documented: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix(".SS \""))
        .filter_map(|l| l.split_whitespace().next())
        .map(|w| w.trim_end_matches('"').to_owned())
        .collect();
    let existing: BTreeSet<String> = commands.iter().cloned().collect();
    assert_eq!(
        documented, existing,
        "the .SS subsections of amdgpu-criu.1 must match the subcommands of --help"
    );
    let options: String = text
        .split(".SH OPTIONS")
        .nth(1)
        .unwrap_or_default()
        .split(".SH ")
        .next()
        .unwrap_or_default()
        .to_owned();
    let global = global_flags();
    assert!(global.len() >= 3, "global options: {global:?}");
    for flag in &global {
        assert!(
            options.contains(flag.as_str()),
            "amdgpu-criu.1: OPTIONS does not mention the global {flag}"
        );
    }
    for command in &commands {
        let section: String = text
            .split(".SS \"")
            .find(|s| {
                s.starts_with(&format!("{command} ")) || s.starts_with(&format!("{command}\""))
            })
            .unwrap_or_default()
            .split(".SH ")
            .next()
            .unwrap_or_default()
            .to_owned();
        assert!(
            section.contains("Exit status"),
            "amdgpu-criu.1: {command} has no exit status"
        );
        for flag in long_flags(command) {
            assert!(
                section.contains(&flag),
                "amdgpu-criu.1: {command} section does not mention {flag}"
            );
        }
        assert!(
            text.contains(&format!("amdgpu-criu {command}")),
            "amdgpu-criu.1: {command} is missing from the synopsis or examples"
        );
    }
}

/// `std::env::var("NAME")` literals in the plugin's sources.
fn plugin_variables(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            plugin_variables(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = fs::read_to_string(&path).unwrap();
            for piece in text.split("env::var(\"").skip(1) {
                if let Some(name) = piece.split('"').next() {
                    found.insert(name.to_owned());
                }
            }
        }
    }
}

#[test]
fn every_plugin_variable_is_documented() {
    let (_, text) = man_page("criu-amdgpu-plugin.1");
    let text = unescaped(&text);
    let mut variables: BTreeSet<String> = check_flags(&CheckOptions::all())
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    variables.insert(MAX_BUFFER_SIZE.to_owned());
    for spec in amdgpu_checkpoint::options::OPTIONS {
        variables.insert(spec.variable.to_owned());
        // Every plugin option has its entry under PLUGIN OPTIONS.
        let option = format!(".B amdgpu.{}", spec.name.replace('-', "\\-"));
        assert!(
            man_page("criu-amdgpu-plugin.1")
                .1
                .lines()
                .any(|l| l == option),
            "criu-amdgpu-plugin.1 has no entry {option:?}"
        );
    }
    for crate_dir in ["amdgpu-checkpoint", "criu-plugin-amdgpu"] {
        let src = workspace_root().join(crate_dir).join("src");
        if src.is_dir() {
            plugin_variables(&src, &mut variables);
        } else {
            test_env::skip(format!("{crate_dir} sources: {} is absent", src.display()));
        }
    }
    assert!(
        variables.len() >= 8,
        "too few variables found: {variables:?}"
    );
    for variable in &variables {
        assert!(
            text.lines()
                .any(|l| l == format!(".B {variable}") || l.starts_with(&format!(".B {variable} "))),
            "criu-amdgpu-plugin.1 has no entry for {variable}"
        );
    }
}

#[test]
fn completions_cover_every_subcommand() {
    let commands = subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = cli(&["completions", shell]);
        for command in &commands {
            assert!(
                script.contains(command.as_str()),
                "{shell} completions do not offer {command}"
            );
        }
        for flag in long_flags("topology") {
            assert!(
                script.contains(flag.trim_start_matches('-')),
                "{shell} completions do not offer topology {flag}"
            );
        }
    }
    // The scripts load into their shells and complete there: every shell is
    // installed by .ci/run, so a missing one is a skip only off CI.
    for shell in ["bash", "zsh", "fish"] {
        if let Some(offered) = complete_in(shell, &cli(&["completions", shell])) {
            assert!(
                offered.contains("--json"),
                "{shell} does not complete `amdgpu-criu topology --js` to --json: {offered}"
            );
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_amdgpu-criu"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// The zsh script that loads a completion script (its path is `$1`) into
/// an interactive zsh on a pseudo-terminal, as a user's `compinit` does,
/// types `amdgpu-criu topology --js` and a tab, and prints what the line
/// became.
const ZSH_DRIVER: &str = r#"
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PS1='> '; autoload -U compinit && compinit -u -D && source ${(q)1} && print LOAD''ED || print BRO''KEN"
zpty -r -m z out '*(LOADED|BROKEN)*' || exit 4
[[ $out == *BROKEN* ]] && { print -r -- "the script does not load: $out"; exit 1 }
zpty -w -n z $'amdgpu-criu topology --js\t'
zpty -r -m z out '*--json*' || exit 5
zpty -d z
print -r -- --json
"#;

/// Loads the completion `script` into `shell` (bash, zsh or fish, with a
/// scratch home and no user configuration) and completes
/// `amdgpu-criu topology --js` there: what the shell offers, or `None`
/// (a skip) when the shell is not installed.
fn complete_in(shell: &str, script: &str) -> Option<String> {
    if Command::new(shell).arg("--version").output().is_err() {
        test_env::skip(format!(
            "{shell} completions: {shell} is not installed (apt-get install {shell})"
        ));
        return None;
    }
    let home = tempfile::tempdir().unwrap();
    let path = home.path().join(format!("amdgpu-criu.{shell}"));
    fs::write(&path, script).unwrap();
    let mut command = Command::new(shell);
    match shell {
        "bash" => command.args(["--norc", "--noprofile", "-c"]).arg(format!(
            "source {} || exit 1; COMP_LINE='amdgpu-criu topology --js'; \
             COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=(amdgpu-criu topology --js); COMP_CWORD=2; \
             \"$(complete -p amdgpu-criu | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')\" \
             amdgpu-criu --js topology; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display()
        )),
        "zsh" => {
            let driver = home.path().join("driver.zsh");
            fs::write(&driver, ZSH_DRIVER).unwrap();
            command.arg("-f").arg(&driver).arg(&path)
        }
        "fish" => command.args(["--no-config", "-c"]).arg(format!(
            "source {} || exit 1; complete -C 'amdgpu-criu topology --js'",
            path.display()
        )),
        _ => unreachable!("no completion check for {shell}"),
    };
    let mut child = command
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("XDG_DATA_HOME", home.path())
        .env("XDG_CACHE_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Only a script that never completes keeps the shell waiting.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stderr).trim().is_empty(),
        "{shell} does not load its completion script ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}
