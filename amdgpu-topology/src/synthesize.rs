//! Completing partial topologies so every GPU node has what a live host has:
//! a `gpu_id`, a VRAM bank and a render minor.
//!
//! Several fixtures are partial captures (no `gpu_id`, no `mem_banks`); the
//! simulator needs them whole. [`synthesize_missing`] fills in, and reports,
//! exactly these items, and touches nothing else:
//!
//! 1. **CPU `gpu_id`**: a CPU node without a `gpu_id` file gets 0.
//! 2. **VRAM bank**: a GPU/APU node without a frame-buffer bank gets one
//!    (`heap_type 1`, FB public, as on large-BAR Instinct hosts), appended
//!    after its existing banks, sized by [`vram_per_node`]; `mem_banks_count`
//!    becomes the number of banks.
//! 3. **`gpu_id`**: a GPU/APU node without one gets the kernel's recipe
//!    ([`GpuIdInputs::for_node`] over its properties and VRAM), made unique
//!    among the ids already present, in node order.
//! 4. **`drm_render_minor`**: a GPU/APU node whose minor is missing or 0 gets
//!    128 + its index among GPU nodes, or the next free minor above that.
//!    A new key goes after `domain` (or `location_id`), where the kernel
//!    prints it.
//!
//! Values the capture has are never changed. This module never touches the
//! file system.

use std::fmt;

use serde::Serialize;

use crate::gpu_id::{make_unique, GpuIdInputs};
use crate::model::{heap_type, GpuId, Indexed, Properties, RenderMinor, System};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// One item [`synthesize_missing`] filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Synthesized {
    /// A CPU node's `gpu_id` set to 0.
    CpuGpuId {
        /// The node id.
        node: u32,
    },
    /// A VRAM bank added.
    VramBank {
        /// The node id.
        node: u32,
        /// The bank's index.
        index: u32,
        /// Its size in bytes.
        size: u64,
    },
    /// A GPU's `gpu_id` synthesized.
    GpuId {
        /// The node id.
        node: u32,
        /// The id.
        gpu_id: GpuId,
    },
    /// A GPU's `drm_render_minor` synthesized.
    RenderMinor {
        /// The node id.
        node: u32,
        /// The minor.
        minor: RenderMinor,
    },
}

impl fmt::Display for Synthesized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Synthesized::CpuGpuId { node } => write!(f, "node {node}: gpu_id 0 (CPU)"),
            Synthesized::VramBank { node, index, size } => {
                write!(
                    f,
                    "node {node}: mem_banks/{index} with {size} bytes of VRAM"
                )
            }
            Synthesized::GpuId { node, gpu_id } => write!(f, "node {node}: gpu_id {gpu_id}"),
            Synthesized::RenderMinor { node, minor } => {
                write!(f, "node {node}: drm_render_minor {minor}")
            }
        }
    }
}

/// What a GPU model has, for sizing synthesized VRAM banks.
struct BoardMemory {
    device_id: u64,
    /// VRAM of the whole board (of one GCD for multi-die boards).
    vram: u64,
    /// XCCs of the whole board (or GCD).
    xccs: u64,
    /// Memory bus width in bits.
    width: u64,
    /// Memory clock in MHz.
    mem_clk_max: u64,
}

/// Known boards: public specifications of each product.
const BOARDS: &[BoardMemory] = &[
    // Instinct MI300X: 192 GiB HBM3, 8 XCDs.
    BoardMemory {
        device_id: 0x74A1,
        vram: 192 * GIB,
        xccs: 8,
        width: 8192,
        mem_clk_max: 1300,
    },
    // Instinct MI308X: 192 GiB HBM3, 4 XCDs.
    BoardMemory {
        device_id: 0x74A2,
        vram: 192 * GIB,
        xccs: 4,
        width: 8192,
        mem_clk_max: 1300,
    },
    // Instinct MI300A: 128 GiB unified HBM3, 6 XCDs.
    BoardMemory {
        device_id: 0x74A0,
        vram: 128 * GIB,
        xccs: 6,
        width: 8192,
        mem_clk_max: 1300,
    },
    // Instinct MI210: 64 GiB HBM2e.
    BoardMemory {
        device_id: 0x740F,
        vram: 64 * GIB,
        xccs: 1,
        width: 4096,
        mem_clk_max: 1600,
    },
    // Instinct MI250X / MI250: 128 GiB per package, 64 GiB per GCD node.
    BoardMemory {
        device_id: 0x7408,
        vram: 64 * GIB,
        xccs: 1,
        width: 4096,
        mem_clk_max: 1600,
    },
    BoardMemory {
        device_id: 0x740C,
        vram: 64 * GIB,
        xccs: 1,
        width: 4096,
        mem_clk_max: 1600,
    },
    // Instinct MI100: 32 GiB HBM2.
    BoardMemory {
        device_id: 0x738C,
        vram: 32 * GIB,
        xccs: 1,
        width: 4096,
        mem_clk_max: 1200,
    },
    // Radeon Instinct MI25 class (Vega 10): 16 GiB HBM2.
    BoardMemory {
        device_id: 0x6860,
        vram: 16 * GIB,
        xccs: 1,
        width: 2048,
        mem_clk_max: 945,
    },
    // Polaris 10 (RX 470/480/570/580): 8 GiB GDDR5.
    BoardMemory {
        device_id: 0x67DF,
        vram: 8 * GIB,
        xccs: 1,
        width: 256,
        mem_clk_max: 2000,
    },
    // Bristol Ridge APU: the usual 512 MiB UMA carve-out.
    BoardMemory {
        device_id: 0x9874,
        vram: 512 * MIB,
        xccs: 1,
        width: 64,
        mem_clk_max: 1200,
    },
];

/// VRAM used for a GPU model not in the table.
pub const DEFAULT_VRAM: u64 = 16 * GIB;

/// The VRAM one KFD node of `device_id` plausibly has when it runs
/// `num_xcc` XCCs: the board's VRAM split evenly among its partitions
/// (board XCCs / `num_xcc`), or [`DEFAULT_VRAM`] for an unknown board.
pub fn vram_per_node(device_id: u64, num_xcc: u64) -> u64 {
    match BOARDS.iter().find(|b| b.device_id == device_id) {
        Some(board) => {
            let partitions = (board.xccs / num_xcc.max(1)).max(1);
            board.vram / partitions
        }
        None => DEFAULT_VRAM,
    }
}

/// Fills in the missing `gpu_id`s, VRAM banks and render minors (see the
/// module documentation for exactly what) and returns what was filled in, in
/// node order per step. A complete topology is left unchanged.
pub fn synthesize_missing(system: &mut System) -> Vec<Synthesized> {
    let mut done = Vec::new();

    for node in &mut system.nodes {
        if !node.is_gpu() && node.gpu_id.is_none() {
            node.gpu_id = Some(0);
            done.push(Synthesized::CpuGpuId { node: node.id });
        }
    }

    for node in system.nodes.iter_mut().filter(|n| n.is_gpu()) {
        if node.vram().is_some() {
            continue;
        }
        let device_id = node.prop("device_id");
        let num_xcc = node.properties.get("num_xcc").unwrap_or(1);
        let size = vram_per_node(device_id, num_xcc);
        let board = BOARDS.iter().find(|b| b.device_id == device_id);
        let mut props = Properties::new();
        props.set("heap_type", heap_type::FB_PUBLIC);
        props.set("size_in_bytes", size);
        props.set("flags", 0);
        props.set("width", board.map_or(4096, |b| b.width));
        props.set("mem_clk_max", board.map_or(1000, |b| b.mem_clk_max));
        let banks = node.mem_banks.get_or_insert_with(Vec::new);
        let index = banks.iter().map(|b| b.index + 1).max().unwrap_or(0);
        banks.push(Indexed::new(index, props));
        let count = banks.len() as u64;
        if node.properties.contains("mem_banks_count") {
            node.properties.set("mem_banks_count", count);
        }
        done.push(Synthesized::VramBank {
            node: node.id,
            index,
            size,
        });
    }

    let mut taken: Vec<GpuId> = system
        .nodes
        .iter()
        .filter_map(|n| n.gpu_id)
        .filter(|&id| id != 0)
        .collect();
    for node in system.nodes.iter_mut().filter(|n| n.is_gpu()) {
        if node.gpu_id.is_some() {
            continue;
        }
        let vram: u64 = node
            .mem_banks
            .iter()
            .flatten()
            .map(|b| &b.properties)
            .filter(|p| {
                let heap = p.get_or_zero("heap_type");
                heap == heap_type::FB_PUBLIC || heap == heap_type::FB_PRIVATE
            })
            .map(|p| p.get_or_zero("size_in_bytes"))
            .fold(0, u64::saturating_add);
        let hash = GpuIdInputs::for_node(node, vram).hash();
        // 65535 GPUs in one host cannot happen; keep the hash if it did.
        let gpu_id = make_unique(hash, |id| taken.contains(&id)).unwrap_or(hash);
        taken.push(gpu_id);
        node.gpu_id = Some(gpu_id);
        done.push(Synthesized::GpuId {
            node: node.id,
            gpu_id,
        });
    }

    let mut minors: Vec<RenderMinor> = system.gpus().filter_map(|n| n.render_minor()).collect();
    minors.retain(|&m| m != 0);
    for (index, node) in system.nodes.iter_mut().filter(|n| n.is_gpu()).enumerate() {
        if node.properties.get("drm_render_minor").unwrap_or(0) != 0 {
            continue;
        }
        let mut minor = 128 + index as RenderMinor;
        while minors.contains(&minor) {
            minor += 1;
        }
        minors.push(minor);
        let anchor = if node.properties.contains("domain") {
            "domain"
        } else {
            "location_id"
        };
        node.properties
            .insert_after(anchor, "drm_render_minor", u64::from(minor));
        done.push(Synthesized::RenderMinor {
            node: node.id,
            minor,
        });
    }
    done
}
