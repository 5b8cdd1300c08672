//! Which `criu` to run: the one the caller names, else the first that
//! works here of `criu` on `PATH` and the CRIU builds in `$CRIU_BUILDS`
//! (default `~/.cache/criu-builds`, where `make criu` and the project's CI
//! put them: `<name>/criu`).
//!
//! "Works here" is `criu check` passing: a CRIU too old for the running
//! kernel (Debian 12's 3.17 on a 6.13 kernel, whose vDSO it cannot parse)
//! fails it, and is passed over with its reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::HostError;

/// The builds tried, newest first, before any other directory of the
/// builds directory.
pub const BUILD_NAMES: [&str; 4] = ["head", "v4.2", "v4.1.1", "v3.19"];

/// A CRIU binary that passed `criu check`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criu {
    /// The binary.
    pub path: PathBuf,
    /// What `criu --version` says (`Version: 4.2`), when it says it.
    pub version: Option<String>,
}

/// `$CRIU_BUILDS`, else `$XDG_CACHE_HOME/criu-builds`, else
/// `~/.cache/criu-builds`.
pub fn builds_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CRIU_BUILDS") {
        return Some(PathBuf::from(dir));
    }
    if let Some(cache) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(cache).join("criu-builds"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/criu-builds"))
}

/// The `criu` binaries worth trying, in order (see the module docs).
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let criu = dir.join("criu");
            if criu.is_file() && !out.contains(&criu) {
                out.push(criu);
            }
        }
    }
    if let Some(builds) = builds_dir() {
        for name in BUILD_NAMES {
            let criu = builds.join(name).join("criu");
            if criu.is_file() {
                out.push(criu);
            }
        }
        let mut others: Vec<PathBuf> = std::fs::read_dir(&builds)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("criu"))
            .filter(|c| c.is_file() && !out.contains(c))
            .collect();
        others.sort();
        out.extend(others);
    }
    out
}

impl Criu {
    /// `given` when it works; else the first candidate that does; else
    /// every candidate with its reason ([`HostError::NoCriu`]).
    pub fn find(given: Option<&Path>) -> Result<Criu, HostError> {
        if let Some(path) = given {
            return Criu::at(path).map_err(|reason| HostError::CriuUnusable {
                path: path.to_path_buf(),
                reason,
            });
        }
        let mut tried = Vec::new();
        for path in candidates() {
            match Criu::at(&path) {
                Ok(criu) => return Ok(criu),
                Err(reason) => tried.push((path, reason)),
            }
        }
        Err(HostError::NoCriu { tried })
    }

    /// The CRIU at `path` if `criu check` passes, else why not.
    pub fn at(path: &Path) -> Result<Criu, String> {
        if !path.is_file() {
            return Err("no such file".into());
        }
        let check = Command::new(path)
            .arg("check")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run it: {e}"))?;
        if !check.status.success() {
            let said = String::from_utf8_lossy(&check.stderr);
            let said = said
                .lines()
                .chain(String::from_utf8_lossy(&check.stdout).lines())
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output")
                .trim()
                .to_owned();
            return Err(format!("`criu check` fails here: {said}"));
        }
        let version = Command::new(path)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .find_map(|l| l.strip_prefix("Version:").map(|v| v.trim().to_owned()))
            });
        Ok(Criu {
            path: path.to_path_buf(),
            version,
        })
    }
}
