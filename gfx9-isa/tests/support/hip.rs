//! Building the HIP programs of `test-programs/` with the system's hipcc
//! for gfx90a and gfx900; a missing hipcc is a skip (a failure under CI).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiles `test-programs/<source>` into `dir`; `None` (after
/// `test_env::skip`) when hipcc cannot run.
#[allow(dead_code)]
pub fn compile(dir: &Path, source: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("test-programs")
        .join(source);
    let exe = dir.join(source.trim_end_matches(".hip"));
    let out = match Command::new("hipcc")
        .args([
            "--offload-arch=gfx90a",
            "--offload-arch=gfx900",
            "-O2",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        // clang's offload driver leaves an empty directory per target in
        // TMPDIR (`kernels-` and six random characters): keep them in the
        // test's own directory, removed with it.
        .env("TMPDIR", dir)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            test_env::skip(format!(
                "hipcc cannot run ({e}): apt-get install hipcc libamdhip64-dev rocm-device-libs"
            ));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "hipcc {source} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}
