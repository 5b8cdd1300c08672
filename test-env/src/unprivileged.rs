//! A test's body run as an unprivileged user.
//!
//! Root reads a `chmod 000` file as if it were open to all
//! (`CAP_DAC_OVERRIDE`), so a test of what a permission refusal does must
//! not run as root, and CI runs the tests as root. [`run_here`] starts the
//! test binary again, as uid and gid [`NOBODY`] with no supplementary
//! groups, for that one test (`--exact`): the copy runs the whole body,
//! its setup included, without the privilege, and its result is the
//! test's. The binary is copied into a temporary directory open to that
//! user first, so it does not matter whether the target directory is.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The uid and gid the body runs as: Debian's `nobody` and `nogroup`.
pub const NOBODY: u32 = 65534;

/// Set in the environment of the copy [`run_here`] starts.
const MARK: &str = "TEST_ENV_UNPRIVILEGED";

/// `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH`: what lets a process read
/// past file permissions.
const DAC_CAPABILITIES: u64 = (1 << 1) | (1 << 2);

/// Whether this process reads past file permissions: its effective
/// capabilities (`CapEff` in `/proc/self/status`) hold
/// `CAP_DAC_OVERRIDE` or `CAP_DAC_READ_SEARCH`, as root's do.
pub fn bypasses_permissions() -> io::Result<bool> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or_else(|| io::Error::other("/proc/self/status has no CapEff line"))?;
    Ok(caps & DAC_CAPABILITIES != 0)
}

/// Whether the calling test, named `test` as libtest names it, runs its
/// body in this process: `true` when this process cannot read past file
/// permissions (a developer's shell, or the copy this function started);
/// `false` when it can, after the body ran in a copy of the test binary as
/// [`NOBODY`] (its output printed here, its failure a panic here) or could
/// not be started (a [`crate::skip`]). On `false` the caller returns.
#[track_caller]
pub fn run_here(test: &str) -> bool {
    let privileged = match bypasses_permissions() {
        Ok(privileged) => privileged,
        Err(e) => {
            crate::skip(format!("cannot tell this process's capabilities: {e}"));
            return false;
        }
    };
    if !privileged {
        return true;
    }
    assert!(
        std::env::var_os(MARK).is_none(),
        "{test}: started as uid {NOBODY}, this process still reads past file permissions"
    );
    let (dir, exe) = match copy_of_this_binary() {
        Ok(copy) => copy,
        Err(e) => {
            crate::skip(format!(
                "cannot copy the test binary where uid {NOBODY} may run it: {e}"
            ));
            return false;
        }
    };
    let out = Command::new(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(MARK, "1")
        // Root's supplementary groups go too: std drops them when root
        // sets a uid without naming groups.
        .uid(NOBODY)
        .gid(NOBODY)
        .output();
    drop(dir);
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            crate::skip(format!("cannot start the test as uid {NOBODY}: {e}"));
            return false;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{test} as uid {NOBODY}:\n{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{test} failed as uid {NOBODY} ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed;"),
        "{test} did not run as uid {NOBODY} (is it the test's full name?):\n{stdout}"
    );
    false
}

/// A copy of the running test binary in a new temporary directory, both
/// open to every user.
fn copy_of_this_binary() -> io::Result<(tempfile::TempDir, std::path::PathBuf)> {
    let exe = std::env::current_exe()?;
    let dir = tempfile::Builder::new()
        .prefix("test-env-unprivileged")
        .tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let copy = dir.path().join(exe.file_name().unwrap_or("test".as_ref()));
    std::fs::copy(&exe, &copy)?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755))?;
    Ok((dir, copy))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_runs_without_reading_past_permissions() {
        if !run_here("unprivileged::tests::the_body_runs_without_reading_past_permissions") {
            return;
        }
        assert!(!bypasses_permissions().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
        let read = std::fs::read(&file);
        assert_eq!(
            read.map_err(|e| e.kind()),
            Err(io::ErrorKind::PermissionDenied)
        );
    }
}
