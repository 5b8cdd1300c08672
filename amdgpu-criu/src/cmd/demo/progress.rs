//! The progress bar on stderr: the demo's stages and, while the dump, the
//! restore and the verification run, the bytes done and the rate; without
//! a terminal, a line every few seconds instead. Display only: nothing here
//! feeds the report.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::report::human_bytes;

/// The bar with one step per stage when `show` (a terminal, no `--json`),
/// else a hidden one.
pub(super) fn bar(show: bool) -> ProgressBar {
    if show {
        let bar = ProgressBar::with_draw_target(Some(7), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:24}] {pos}/{len} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    } else {
        ProgressBar::hidden()
    }
}

/// Whether progress goes to stderr as a line every few seconds (no
/// terminal, no `--json`); set once by `run`.
static LINES: AtomicBool = AtomicBool::new(false);

/// Makes [`with_progress`] print a line every [`LINE_EVERY`] when the bar
/// is hidden.
pub(super) fn lines_without_terminal(on: bool) {
    LINES.store(on, Ordering::Relaxed);
}

/// How often a progress line is printed without a terminal.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// Runs `work` while showing `what` has done `done()` bytes of `total`,
/// with the rate: on the bar when it is drawn, else as a line on stderr
/// every few seconds when [`lines_without_terminal`] is on.
pub(super) fn with_progress<T>(
    bar: &ProgressBar,
    what: &str,
    total: u64,
    done: impl Fn() -> u64 + Sync,
    work: impl FnOnce() -> T,
) -> T {
    let lines = LINES.load(Ordering::Relaxed);
    if bar.is_hidden() && !lines {
        return work();
    }
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    let text = |bytes: u64| {
        let seconds = started.elapsed().as_secs_f64();
        let rate = if seconds > 0.0 {
            format!("{}/s", human_bytes((bytes as f64 / seconds) as u64))
        } else {
            "-".to_owned()
        };
        format!(
            "{what}: {} of {} ({rate})",
            human_bytes(bytes.min(total)),
            human_bytes(total)
        )
    };
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut last_line = Instant::now();
            while !finished.load(Ordering::Relaxed) {
                let message = text(done());
                if !bar.is_hidden() {
                    bar.set_message(message);
                } else if last_line.elapsed() >= LINE_EVERY {
                    eprintln!("amdgpu-criu demo: {message}");
                    last_line = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let result = work();
        finished.store(true, Ordering::Relaxed);
        result
    })
}

/// Bytes this process has read with `read(2)` and its kind so far
/// (`rchar` of `/proc/self/io`): how far a restore or a verification that
/// reads the pages files has come. For the progress display only.
pub(super) fn bytes_read() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("rchar: "))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Bytes in the KFD pages files of `images` so far (the bar's total is the
/// KFD BOs), those still being written
/// (`DirStore` writes `.amdgpu-pages-*.part-*` and renames it when done)
/// included. For the progress display only.
pub(super) fn pages_bytes(images: &Path) -> u64 {
    super::images::pages_files(images, &[amdgpu_image::ImageKind::Pages], true)
        .iter()
        .map(|m| m.len())
        .sum()
}

pub(super) fn stage(bar: &ProgressBar, message: &'static str) {
    bar.inc(1);
    bar.set_message(message);
}
