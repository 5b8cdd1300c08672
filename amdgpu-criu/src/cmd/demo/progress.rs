//! The progress bar on stderr: the demo's stages and, while the dump runs,
//! the bytes its pages files have reached. Display only: nothing here
//! feeds the report.

use std::path::Path;
use std::time::Duration;

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

/// Runs `dump` while showing how many bytes the pages files in `images`
/// have reached out of `total` (only when the bar is drawn).
pub(super) fn with_pages_progress<T>(
    bar: &ProgressBar,
    images: &Path,
    total: u64,
    dump: impl FnOnce() -> T,
) -> T {
    if bar.is_hidden() {
        return dump();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let written = pages_bytes(images);
                bar.set_message(format!(
                    "checkpointing: {} of {} in pages files",
                    human_bytes(written.min(total)),
                    human_bytes(total)
                ));
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let result = dump();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        result
    })
}

/// Bytes in the pages files of `images` so far, those still being written
/// (`DirStore` writes `.amdgpu-pages-*.part-*` and renames it when done)
/// included. For the progress display only.
fn pages_bytes(images: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(images) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.trim_start_matches('.').starts_with("amdgpu-pages-")
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

pub(super) fn stage(bar: &ProgressBar, message: &'static str) {
    bar.inc(1);
    bar.set_message(message);
}
