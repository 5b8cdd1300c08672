//! What the demo reports: the measured checkpoint and restore phases, the
//! summary lines, and printing them as text or as one JSON object.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use amdgpu_image::{flags, CriuKfd, ImageKind};
use criu_host_emulator::RestoredTask;
use serde::Serialize;

use super::{GIB, MIB};

/// One side of the demo, as the JSON and the summary report it.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Phase {
    gpus: usize,
    bos: usize,
    /// Logical bytes of the VRAM and GTT BOs.
    bytes: u64,
    /// Checkpoint only: bytes the pages files hold on disk; zero pages are
    /// left as holes, so this is what was really written.
    #[serde(skip_serializing_if = "Option::is_none")]
    written_bytes: Option<u64>,
    /// Checkpoint only: bytes of chunks not written because the parent
    /// images (incremental dump) or another BO of the dump (`KFD_DEDUP`)
    /// hold them.
    #[serde(skip_serializing_if = "is_zero")]
    referenced_bytes: u64,
    seconds: f64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Phase {
    /// `W of B bytes written (P %)`: what a checkpoint wrote of its BOs.
    pub(super) fn written_share(&self) -> String {
        let written = self.written_bytes.unwrap_or(self.bytes);
        format!(
            "{} of {} written ({:.1} %)",
            super::workload::bytes(written),
            super::workload::bytes(self.bytes),
            written as f64 * 100.0 / self.bytes.max(1) as f64
        )
    }
}

/// The machines of a demo, as named on the command line.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Topologies {
    pub(super) checkpoint: String,
    pub(super) restore: String,
}

/// What the demo prints.
#[derive(Debug, Default, Serialize)]
pub(super) struct Report {
    /// The workload's name.
    pub(super) workload: String,
    /// The checkpointing and restoring machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) topologies: Option<Topologies>,
    /// Where the images are; null when they were removed at the end.
    pub(super) image_dir: Option<String>,
    pub(super) checkpoint: Option<Phase>,
    /// `--incremental`: the second checkpoint, against the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) incremental: Option<Phase>,
    pub(super) restore: Option<Phase>,
    pub(super) gpu_map: BTreeMap<u32, u32>,
    pub(super) verified: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<String>,
    /// Why the restore machine cannot take the checkpoint, one line each
    /// (text mode).
    #[serde(skip)]
    pub(super) reasons: Vec<String>,
    /// The same reasons as `map --json` and `check --json` give them.
    #[serde(rename = "reasons", skip_serializing_if = "Vec::is_empty")]
    pub(super) reason_details: Vec<amdgpu_topology::checks::Reason>,
    /// What verification found wrong after a completed restore.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) problems: Vec<String>,
    /// Human-readable lines (text mode only).
    #[serde(skip)]
    pub(super) lines: Vec<String>,
    /// Where the images are (text mode only, printed last).
    #[serde(skip)]
    pub(super) images: String,
}

impl Report {
    /// Prints the report on stdout: one JSON object when `json`, else the
    /// summary lines and where the images are.
    pub(super) fn print(&self, json: bool) -> serde_json::Result<()> {
        if json {
            let mut value = serde_json::to_value(self)?;
            crate::json64::gpu_ids_to_hex(&mut value);
            let text = serde_json::to_string_pretty(&value)?;
            println!("{text}");
        } else {
            for line in &self.lines {
                println!("{line}");
            }
            if !self.images.is_empty() {
                println!("{}", self.images);
            }
        }
        Ok(())
    }
}

/// A GPU map as the text report prints it.
pub(super) fn gpu_map_text(map: &BTreeMap<u32, u32>) -> String {
    use std::fmt::Write as _;
    let mut text = String::from("GPU map (checkpointed gpu_id -> local gpu_id):");
    for (from, to) in map {
        let _ = write!(
            text,
            "\n  {} -> {}",
            crate::out::gpu_id(*from),
            crate::out::gpu_id(*to)
        );
    }
    text
}

/// Bytes the pages files of `dir` occupy (allocated blocks, so the holes
/// of elided zero pages do not count).
pub(super) fn pages_on_disk(dir: &Path) -> u64 {
    super::images::pages_files(dir, &[ImageKind::Pages, ImageKind::DrmPages], false)
        .iter()
        .map(|m| (m.blocks() * 512).min(m.len()))
        .sum()
}

pub(super) fn checkpoint_phase(images: &[(u32, CriuKfd)], dir: &Path, time: Duration) -> Phase {
    let gpus: BTreeSet<u32> = images
        .iter()
        .flat_map(|(_, m)| m.device_entries.iter().filter(|d| d.gpu_id != 0))
        .map(|d| d.gpu_id)
        .collect();
    let bos = images.iter().map(|(_, m)| m.bo_entries.len()).sum();
    let bytes = images
        .iter()
        .flat_map(|(_, m)| &m.bo_entries)
        .filter(|b| b.alloc_flags & (flags::KFD_VRAM | flags::KFD_GTT) != 0)
        .map(|b| b.size)
        .sum();
    let referenced = images
        .iter()
        .flat_map(|(_, m)| m.bo_entries.iter().map(move |b| (m.chunk_size, b)))
        .filter_map(|(chunk_size, b)| {
            let chunk_size = chunk_size?;
            let sources = b.chunk_sources.as_ref()?;
            Some(
                sources
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| **s != 0)
                    .map(|(i, _)| amdgpu_image::chunks::chunk_len(b.size, chunk_size, i as u64))
                    .sum::<u64>(),
            )
        })
        .sum();
    Phase {
        gpus: gpus.len(),
        bos,
        bytes,
        written_bytes: Some(pages_on_disk(dir)),
        referenced_bytes: referenced,
        seconds: time.as_secs_f64(),
    }
}

pub(super) fn restore_phase(tasks: &[RestoredTask], time: Duration) -> Phase {
    let mut phase = Phase {
        seconds: time.as_secs_f64(),
        ..Phase::default()
    };
    let mut gpus = BTreeSet::new();
    for kfd in tasks
        .iter()
        .filter_map(|t| t.plugin.restorer())
        .flat_map(|r| r.restored())
    {
        phase.bos += kfd.bos;
        phase.bytes += kfd.content_bytes;
        gpus.extend(kfd.gpu_map.values().copied());
    }
    phase.gpus = gpus.len();
    phase
}

pub(super) fn human_bytes(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

pub(super) fn phase_line(name: &str, phase: &Phase) -> String {
    let rate = |bytes: u64| {
        if phase.seconds > 0.0 {
            format!("{:.2} GiB/s", bytes as f64 / GIB as f64 / phase.seconds)
        } else {
            "-".to_owned()
        }
    };
    match phase.written_bytes {
        Some(written) => {
            let percent = |n: u64| {
                if phase.bytes > 0 {
                    100.0 * n as f64 / phase.bytes as f64
                } else {
                    0.0
                }
            };
            let referenced = phase.referenced_bytes;
            let share = percent(phase.bytes.saturating_sub(written + referenced));
            let referenced = if referenced > 0 {
                format!(
                    ", {:.1}% referenced (held by the parent images or written once for \
                     another BO)",
                    percent(referenced)
                )
            } else {
                String::new()
            };
            format!(
                "{name} {}, {}, {} of BOs, {} written ({share:.1}% elided as zero \
                 pages{referenced}) in {:.3} s ({} of BOs, {} written)",
                crate::out::plural(phase.gpus as u64, "GPU"),
                crate::out::plural(phase.bos as u64, "BO"),
                human_bytes(phase.bytes),
                human_bytes(written),
                phase.seconds,
                rate(phase.bytes),
                rate(written)
            )
        }
        None => format!(
            "{name} {}, {}, {} of BOs in {:.3} s ({})",
            crate::out::plural(phase.gpus as u64, "GPU"),
            crate::out::plural(phase.bos as u64, "BO"),
            human_bytes(phase.bytes),
            phase.seconds,
            rate(phase.bytes)
        ),
    }
}
