#![doc = include_str!("../README.md")]

pub mod harness;
pub mod unprivileged;

use std::cell::RefCell;
use std::ffi::OsStr;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// Whether the tests run under CI, from the `CI` environment variable (see
/// [`ci_value`] for the values).
pub fn under_ci() -> bool {
    ci_value(std::env::var_os("CI").as_deref())
}

/// Whether a value of `CI` means CI: unset, empty (or blank), `0`, `false`,
/// `no` and `off` (any case) do not; `1`, `true`, `yes`, `on` do, and so
/// does any other value, since services set `CI` to their own names and a
/// value not understood must not let a skip pass.
pub fn ci_value(value: Option<&OsStr>) -> bool {
    let Some(value) = value else {
        return false;
    };
    let value = value.to_string_lossy();
    let value = value.trim();
    !(value.is_empty()
        || ["0", "false", "no", "off"]
            .iter()
            .any(|v| value.eq_ignore_ascii_case(v)))
}

/// Where the vendored CRIU builds are (`../shared/vendor/criu/build.sh`
/// and `.ci/build-c-plugin.sh` put them there, `.ci/run` exports it):
/// `CRIU_BUILDS`, else `$XDG_CACHE_HOME/criu-builds`, else
/// `~/.cache/criu-builds`, as the scripts choose it.
pub fn criu_builds() -> PathBuf {
    if let Some(dir) = std::env::var_os("CRIU_BUILDS").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_default();
    cache.join("criu-builds")
}

thread_local! {
    /// The reason the test running on this thread gave to [`skip`], for
    /// [`harness`] to report it.
    static SKIPPED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Says why the calling test cannot run. Under CI ([`under_ci`]) this is a
/// failure: `.ci/run` installs everything the tests need, so a skip there
/// hides a defect. Elsewhere it prints `skipped: <reason>`; the caller then
/// returns.
#[track_caller]
pub fn skip(reason: impl Display) {
    if under_ci() {
        panic!("CI is set and this test cannot run: {reason}");
    }
    println!("skipped: {reason}");
    SKIPPED.with(|s| *s.borrow_mut() = Some(reason.to_string()));
}

/// Takes the reason [`skip`] recorded on this thread, if any.
fn take_skip() -> Option<String> {
    SKIPPED.with(|s| s.borrow_mut().take())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_values() {
        for v in [
            "1",
            "true",
            "TRUE",
            "True",
            "yes",
            "YES",
            "on",
            " 1 ",
            "woodpecker",
        ] {
            assert!(ci_value(Some(OsStr::new(v))), "CI={v:?} is CI");
        }
        for v in ["", " ", "0", "false", "FALSE", "False", "no", "NO", "off"] {
            assert!(!ci_value(Some(OsStr::new(v))), "CI={v:?} is not CI");
        }
        assert!(!ci_value(None), "no CI is not CI");
    }

    #[test]
    fn a_skip_outside_ci_is_recorded_once() {
        if under_ci() {
            let caught = std::panic::catch_unwind(|| skip("a reason"));
            assert!(caught.is_err(), "a skip under CI fails");
            assert_eq!(take_skip(), None);
            return;
        }
        skip("a reason");
        assert_eq!(take_skip().as_deref(), Some("a reason"));
        assert_eq!(take_skip(), None);
    }
}
