//! Transfer figures: checkpoint and restore of BO contents through the real
//! plugin (the CRIU emulator over `kfd-sim`) side by side with plain
//! sequential I/O of the same bytes in the same directory, the C plugin's
//! serial strategy, staging memory and zero-page elision, with raw writes
//! of a pages file's exact layout (data runs written, zero runs left as
//! holes) as the storage's ceiling for it. The BO layouts ([`Fill`]) are
//! defined once, in [`Fill::page_holds_data`].
//!
//! Every write phase ends with `fsync` of what it wrote (raw file, pages
//! files, serial image) and every read phase starts with the files' page
//! cache dropped (`posix_fadvise(DONTNEED)` after that `fsync`), so raw and
//! plugin runs see the storage the same way. Used by the report binary;
//! never prints and never touches anything outside the directory it is
//! given.

mod c_strategy;
mod disk;
mod error;
mod fill;
mod machine;
mod plugin;
mod raw;
mod restore_read;
mod sdma;

use std::time::Duration;

pub use c_strategy::{c_strategy_dump, SerialRun};
pub use disk::{disk_usage, drop_cache, pages_files};
pub use error::{BenchError, Result};
pub use fill::{BoPlan, Fill, FILL_PAGE};
pub use machine::{BenchBo, Machine};
pub use plugin::{options_with_max_buffer, plugin_run, PluginRun, RunOptions};
pub use raw::{
    raw_io, raw_layout_write, raw_write_behind, read_plain, write_plain, RawFigures, RawLayout,
    RawLayoutRun,
};
pub use restore_read::{restore_read, RestoreReadFigures};
pub use sdma::{sdma_cold_write, sdma_rates, SdmaFigures, SdmaRig};

/// CRIU's file id of the workload's `/dev/kfd` fd; render nodes follow.
const KFD_ID: u32 = 1;
/// Size of each plain read and write of the raw runs.
const RAW_IO: usize = 8 << 20;

/// Bytes per second as GiB/s.
pub fn gibs(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / (1u64 << 30) as f64
}
