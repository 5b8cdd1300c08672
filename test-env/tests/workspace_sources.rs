//! Conventions every Rust source of the workspace keeps, checked by reading
//! them all: `CI` is read in one place (`test_env::under_ci`), a test that
//! cannot run says so through `test_env::skip` (never by printing
//! "skipped" and returning, which passes under CI), and no string literal
//! carries the indentation of a lost line continuation (a `\` at the end of
//! a line dropped, so the next line's leading spaces end up in a log line
//! or an error message).

use std::path::{Path, PathBuf};

/// The workspace root: the directory above this crate.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-env sits in the workspace")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, build output and hidden directories left
/// out.
fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        let kind = entry.file_type().expect("a directory entry's type");
        if kind.is_dir() {
            rust_sources(&path, out);
        } else if kind.is_file() && name.ends_with(".rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<(String, String)> {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_sources(&root, &mut files);
    files.sort();
    assert!(
        files.len() > 100,
        "only {} Rust files under {}",
        files.len(),
        root.display()
    );
    files
        .into_iter()
        .map(|f| {
            let text =
                std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let rel = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
            (rel, text)
        })
        .collect()
}

/// A string literal of a source: its first line, its contents as written
/// (escapes not interpreted) and the code just before it, whitespace
/// removed.
#[derive(Debug, PartialEq, Eq)]
struct Literal {
    line: usize,
    text: String,
    before: String,
}

/// The non-raw string literals (`"..."`, `b"..."`, `c"..."`) of Rust
/// source `src`, outside comments. Raw strings (`r"..."`, `r#"..."#`) are
/// left out: their line breaks are meant.
fn string_literals(src: &str) -> Vec<Literal> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        line += usize::from(b[i] == b'\n');
                        i += 1;
                    }
                }
            }
            // A raw string: r"..", r#".."#, br"..", cr#".."#.
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#')) && {
                let word = b[..i].iter().rev().take_while(|&&c| ident(c)).count();
                word == 0 || (word == 1 && matches!(b[i - 1], b'b' | b'c'))
            } =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                i += 2 + hashes;
                while i < b.len() && !b[i..].starts_with(&close) {
                    line += usize::from(b[i] == b'\n');
                    i += 1;
                }
                i += close.len();
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if let Some(len) = std::str::from_utf8(&b[i + 1..])
                    .ok()
                    .and_then(|rest| rest.chars().next())
                    .map(char::len_utf8)
                    .filter(|&len| b.get(i + 1 + len) == Some(&b'\''))
                {
                    i += len + 2;
                } else {
                    i += 1;
                }
            }
            b'"' => {
                let start = line;
                let before: String = String::from_utf8_lossy(&b[i.saturating_sub(80)..i])
                    .split_whitespace()
                    .collect();
                let mut text = String::new();
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        text.push('\\');
                        text.push(b[i + 1] as char);
                        line += usize::from(b[i + 1] == b'\n');
                        i += 2;
                        continue;
                    }
                    line += usize::from(b[i] == b'\n');
                    text.push(b[i] as char);
                    i += 1;
                }
                i += 1;
                out.push(Literal {
                    line: start,
                    text,
                    before,
                });
            }
            _ => i += 1,
        }
    }
    out
}

/// What is wrong with a literal's text: a line break without a `\` that
/// carries the next line's indentation into the string, or, inside one
/// line of its output, a run of spaces as wide as an indentation where the
/// rest of the line has single spaces only (aligned columns have several
/// runs, or align a `#` comment).
fn broken_continuation(text: &str) -> Option<&'static str> {
    /// Wider than any column alignment the workspace's output uses.
    const INDENT_RUN: usize = 12;
    let lines: Vec<&str> = text.split('\n').collect();
    let unescaped_break = lines.windows(2).any(|pair| {
        !pair[0].ends_with('\\') && pair[1].starts_with("    ") && !pair[1].trim().is_empty()
    });
    if unescaped_break {
        return Some("a line break without `\\` carries the next line's indentation");
    }
    // What Rust makes of `\` at the end of a line: the break and the next
    // line's leading whitespace are dropped.
    let joined: String = text
        .split("\\\n")
        .enumerate()
        .map(|(k, part)| if k == 0 { part } else { part.trim_start() })
        .collect();
    for line in joined.split("\\n") {
        let line = line.trim_start();
        let runs: Vec<(usize, usize)> = line
            .match_indices("  ")
            .map(|(at, _)| at)
            .filter(|&at| at == 0 || line.as_bytes()[at - 1] != b' ')
            .map(|at| (at, line[at..].bytes().take_while(|&c| c == b' ').count()))
            .collect();
        if let [(at, len)] = runs[..] {
            if len >= INDENT_RUN && !line[at + len..].starts_with('#') {
                return Some("a run of spaces as wide as an indentation inside a line");
            }
        }
    }
    None
}

#[test]
fn literals_are_found_outside_comments_and_raw_strings() {
    let src = "// \"in a comment\"\nlet a = 'x'; let b = '\"'; fn f<'a>(s: &'a str) {}\n\
               let c = \"one \\\" two\";\nlet d = r#\"raw \" text\"#;\n/* \"block\" */ let e = b\"bytes\";";
    let found: Vec<String> = string_literals(src).into_iter().map(|l| l.text).collect();
    assert_eq!(found, ["one \\\" two", "bytes"]);
    let lines: Vec<usize> = string_literals("\n\n\"a\nb\" \"c\"")
        .into_iter()
        .map(|l| l.line)
        .collect();
    assert_eq!(lines, [3, 4]);
}

#[test]
fn a_lost_continuation_is_told_from_alignment() {
    let lost = format!("no room to wait for its buffer's{}creator", " ".repeat(30));
    assert!(broken_continuation(&lost).is_some());
    assert!(broken_continuation("first line\n        second").is_some());
    for fine in [
        "ok   criu hooks        15 plugin hooks",
        "a line \\\n             continued",
        "table:\n| a | b |\n",
        "            leading spaces are meant",
    ] {
        assert_eq!(broken_continuation(fine), None, "{fine:?}");
    }
}

#[test]
fn no_string_literal_holds_a_lost_line_continuation() {
    let mut found = Vec::new();
    for (file, text) in sources() {
        for lit in string_literals(&text) {
            if let Some(why) = broken_continuation(&lit.text) {
                found.push(format!("{file}:{}: {why}: {:?}", lit.line, lit.text));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn ci_is_read_by_test_env_alone_and_skips_go_through_it() {
    let me = Path::new("test-env").join("src").join("lib.rs");
    let this_file = Path::new("test-env")
        .join("tests")
        .join("workspace_sources.rs");
    let mut found = Vec::new();
    for (file, text) in sources() {
        if Path::new(&file) == me || Path::new(&file) == this_file {
            continue;
        }
        for lit in string_literals(&text) {
            if lit.text == "CI" {
                found.push(format!(
                    "{file}:{}: reads CI itself: use test_env::under_ci or test_env::skip",
                    lit.line
                ));
            }
            let printed = ["println!(", "print!("]
                .iter()
                .any(|p| lit.before.ends_with(p));
            if printed && lit.text.to_ascii_lowercase().starts_with("skip") {
                found.push(format!(
                    "{file}:{}: prints {:?}: say why through test_env::skip, which fails under CI",
                    lit.line, lit.text
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}
