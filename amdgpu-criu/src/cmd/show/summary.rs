//! The summary that opens `show`'s output for an image set.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use amdgpu_image::seal::SealCheck;
use amdgpu_image::{flags, KfdDeviceEntry};
use serde_json::{json, Value};

use super::{Entry, Loaded};
use crate::out::{gpu_id, human_bytes, plural};
use amdgpu_image::priv_data::{self, Objects};

/// One checkpointed process (KFD image).
struct Process {
    file: String,
    pid: u32,
    gpus: Vec<u32>,
    bos: u64,
    objects: Option<Objects>,
    num_of_objects: u32,
}

/// One GPU of the set.
struct Gpu {
    gpu_id: u32,
    node_id: u32,
    render_minor: u32,
    device_id: u32,
    vram_size: u64,
    hive_id: u64,
}

/// Counts and sizes of a set, from the files that could be read.
pub(super) struct Summary {
    processes: Vec<Process>,
    gpus: BTreeMap<u32, Gpu>,
    /// Domain name -> (count, bytes).
    domains: BTreeMap<&'static str, (u64, u64)>,
    render_nodes: Vec<(u32, u64)>,
    dmabufs: u64,
    pages: (u64, u64, Option<u64>),
    file_bytes: u64,
    disk_bytes: Option<u64>,
    covered: (u64, u64),
}

fn kfd_domain(alloc_flags: u32) -> &'static str {
    match alloc_flags & flags::KFD_MEM_TYPE_MASK {
        flags::KFD_VRAM => "VRAM",
        flags::KFD_GTT => "GTT",
        flags::KFD_USERPTR => "USERPTR",
        flags::KFD_DOORBELL => "DOORBELL",
        flags::KFD_MMIO_REMAP => "MMIO_REMAP",
        _ => "unknown",
    }
}

fn render_domain(domains: u32) -> &'static str {
    if domains & flags::GEM_DOMAIN_VRAM != 0 {
        "render VRAM"
    } else if domains & flags::GEM_DOMAIN_GTT != 0 {
        "render GTT"
    } else if domains & flags::GEM_DOMAIN_CPU != 0 {
        "render CPU"
    } else {
        "render other"
    }
}

impl Summary {
    pub(super) fn of(entries: &[Entry]) -> Summary {
        let mut s = Summary {
            processes: Vec::new(),
            gpus: BTreeMap::new(),
            domains: BTreeMap::new(),
            render_nodes: Vec::new(),
            dmabufs: 0,
            pages: (0, 0, Some(0)),
            file_bytes: 0,
            disk_bytes: Some(0),
            covered: (0, 0),
        };
        let add_gpu = |gpus: &mut BTreeMap<u32, Gpu>, d: &KfdDeviceEntry| {
            gpus.entry(d.gpu_id).or_insert(Gpu {
                gpu_id: d.gpu_id,
                node_id: d.node_id,
                render_minor: d.drm_render_minor,
                device_id: d.device_id,
                vram_size: d.vram_size,
                hive_id: d.hive_id,
            });
        };
        for e in entries {
            s.file_bytes += e.len;
            s.disk_bytes = match (s.disk_bytes, e.disk) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            match e.seal {
                Some(SealCheck::Match(_)) => s.covered.0 += 1,
                Some(_) => s.covered.1 += 1,
                None => {}
            }
            match &e.loaded {
                Ok(Loaded::Kfd(m)) => {
                    for d in m.device_entries.iter().filter(|d| d.is_gpu()) {
                        add_gpu(&mut s.gpus, d);
                    }
                    for bo in &m.bo_entries {
                        let slot = s.domains.entry(kfd_domain(bo.alloc_flags)).or_default();
                        slot.0 += 1;
                        slot.1 += bo.size;
                    }
                    s.processes.push(Process {
                        file: e.name.to_string(),
                        pid: m.pid,
                        gpus: m
                            .device_entries
                            .iter()
                            .filter(|d| d.is_gpu())
                            .map(|d| d.gpu_id)
                            .collect(),
                        bos: m.bo_entries.len() as u64,
                        objects: priv_data::objects(
                            &m.priv_data,
                            u64::from(m.num_of_gpus),
                            m.num_of_bos,
                            m.num_of_objects,
                        ),
                        num_of_objects: m.num_of_objects,
                    });
                }
                Ok(Loaded::Render(m)) => {
                    if let Some(d) = &m.device {
                        add_gpu(&mut s.gpus, d);
                    }
                    for bo in &m.bo_entries {
                        let slot = s
                            .domains
                            .entry(render_domain(bo.preferred_domains))
                            .or_default();
                        slot.0 += 1;
                        slot.1 += bo.size;
                    }
                    s.render_nodes
                        .push((m.drm_render_minor, m.bo_entries.len() as u64));
                }
                Ok(Loaded::Dmabuf(_)) => s.dmabufs += 1,
                Ok(Loaded::Pages { payload, .. }) => {
                    s.pages.0 += 1;
                    s.pages.1 += payload;
                    s.pages.2 = match (s.pages.2, e.disk) {
                        (Some(a), Some(b)) => Some(a + b),
                        _ => None,
                    };
                }
                Err(_) => {}
            }
        }
        s.render_nodes.sort_unstable();
        s
    }

    pub(super) fn print(&self, out: &mut String, at: &str, files: usize) {
        let disk = self
            .disk_bytes
            .map(|d| format!(", {} on disk", human_bytes(d)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{at}: {} amdgpu image {}, {}{disk}",
            files,
            if files == 1 { "file" } else { "files" },
            human_bytes(self.file_bytes)
        );
        if files == 0 {
            return;
        }
        let _ = writeln!(out, "processes: {}", self.processes.len());
        for p in &self.processes {
            let objects = match &p.objects {
                Some(o) => {
                    let (c, d, other) = o
                        .queues
                        .values()
                        .fold((0, 0, 0), |acc, q| (acc.0 + q.0, acc.1 + q.1, acc.2 + q.2));
                    let mut q = format!(
                        "{} ({c} compute, {d} SDMA{})",
                        plural(o.queue_count(), "queue"),
                        if other > 0 {
                            format!(", {other} other")
                        } else {
                            String::new()
                        }
                    );
                    q.push_str(&format!(", {}", plural(o.events, "event")));
                    if o.svm_ranges > 0 {
                        q.push_str(&format!(", {}", plural(o.svm_ranges, "SVM range")));
                    }
                    q
                }
                None => format!(
                    "{} (queues and events: priv_data in an unknown layout)",
                    plural(p.num_of_objects, "object")
                ),
            };
            let _ = writeln!(
                out,
                "  pid {} ({}): {}, {}, {objects}",
                p.pid,
                p.file,
                plural(p.gpus.len() as u64, "GPU"),
                plural(p.bos, "BO"),
            );
        }
        let _ = writeln!(out, "GPUs: {}", self.gpus.len());
        if !self.gpus.is_empty() {
            let _ = writeln!(
                out,
                "  {:<8} {:>4}  {:<10}  {:<6}  {:>9}  hive",
                "gpu_id", "node", "render", "device", "VRAM"
            );
        }
        let mut by_node: Vec<&Gpu> = self.gpus.values().collect();
        by_node.sort_by_key(|g| (g.node_id, g.gpu_id));
        for g in by_node {
            let hive = if g.hive_id == 0 {
                "-".to_owned()
            } else {
                format!("{:#x}", g.hive_id)
            };
            let _ = writeln!(
                out,
                "  {:<8} {:>4}  {:<10}  {:<6}  {:>9}  {hive}",
                gpu_id(g.gpu_id),
                g.node_id,
                format!("renderD{}", g.render_minor),
                format!("{:#x}", g.device_id),
                human_bytes(g.vram_size),
            );
        }
        let _ = writeln!(out, "BOs by domain:");
        if self.domains.is_empty() {
            let _ = writeln!(out, "  none");
        }
        for (domain, (count, bytes)) in &self.domains {
            let _ = writeln!(
                out,
                "  {domain:<12} {:>10}  {:>10}",
                plural(*count, "BO"),
                human_bytes(*bytes)
            );
        }
        let render_bos: u64 = self.render_nodes.iter().map(|r| r.1).sum();
        let minors: Vec<String> = self
            .render_nodes
            .iter()
            .map(|r| format!("renderD{}", r.0))
            .collect();
        let _ = writeln!(
            out,
            "render nodes: {}{}, {}",
            self.render_nodes.len(),
            if minors.is_empty() {
                String::new()
            } else {
                format!(" ({})", minors.join(", "))
            },
            plural(render_bos, "BO")
        );
        let _ = writeln!(out, "dma-bufs: {}", self.dmabufs);
        let disk = self
            .pages
            .2
            .map(|d| format!(", {} on disk", human_bytes(d)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "pages files: {}, {} of contents{disk}",
            self.pages.0,
            human_bytes(self.pages.1)
        );
        let _ = writeln!(
            out,
            "message checksums: {} of {} verified{}",
            self.covered.0,
            plural(self.covered.0 + self.covered.1, "message"),
            if self.covered.1 > 0 {
                " (the others are not covered or do not match; see below)"
            } else {
                ""
            }
        );
    }

    pub(super) fn to_json(&self) -> Value {
        // Ids and 64-bit values as the messages show them (strings, ids in hex).
        let gpus: Vec<Value> = self
            .gpus
            .values()
            .map(|g| {
                let mut gpu = json!({
                    "gpu_id": g.gpu_id,
                    "node_id": g.node_id,
                    "drm_render_minor": g.render_minor,
                    "device_id": g.device_id,
                    "vram_size": g.vram_size,
                    "hive_id": g.hive_id,
                });
                crate::json64::message_to_strings(&mut gpu);
                gpu
            })
            .collect();
        json!({
            "processes": self.processes.iter().map(|p| json!({
                "file": p.file,
                "pid": p.pid,
                "gpu_ids": p.gpus.iter().map(|g| gpu_id(*g)).collect::<Vec<_>>(),
                "bos": p.bos,
                "num_of_objects": p.num_of_objects,
                "queues": p.objects.as_ref().map(Objects::queue_count),
                "events": p.objects.as_ref().map(|o| o.events),
                "svm_ranges": p.objects.as_ref().map(|o| o.svm_ranges),
            })).collect::<Vec<_>>(),
            "gpus": gpus,
            "bos_by_domain": self.domains.iter().map(|(d, (count, bytes))| {
                (d.to_string(), json!({ "count": count, "bytes": bytes }))
            }).collect::<serde_json::Map<_, _>>(),
            "render_nodes": self.render_nodes.iter().map(|(minor, bos)| json!({
                "drm_render_minor": minor, "bos": bos,
            })).collect::<Vec<_>>(),
            "dmabufs": self.dmabufs,
            "pages_files": {
                "count": self.pages.0,
                "content_bytes": self.pages.1,
                "disk_bytes": self.pages.2,
            },
            "file_bytes": self.file_bytes,
            "disk_bytes": self.disk_bytes,
            "messages_covered": self.covered.0,
            "messages_not_covered_or_bad": self.covered.1,
        })
    }
}
