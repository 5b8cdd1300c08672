//! What AMD's thunk (libhsakmt) reads from the simulated machine equals
//! what our topology parser reads from the same sysfs tree: node count,
//! gfx target, SIMDs and shader layout, memory banks and sizes, caches, io
//! links and weights, gpu_ids (the ones the thunk acquires VMs for), render
//! minors and XGMI hive ids, for every built-in topology and every captured
//! machine in `../shared/fixtures/topology`.
//!
//! Where the thunk deliberately reports something other than the sysfs
//! file (its own apertures after the memory banks, CPU caches from the CPU
//! sysfs, indirect links between GPUs), the check says so and checks that
//! part on its own terms.

mod common;

use std::collections::BTreeSet;

use amdgpu_topology::{Node, System};
use common::{num, records, Record, Scratch};

/// `hsaKmtGetNodeProperties` field → sysfs `properties` key.
const NODE_FIELDS: &[(&str, &str)] = &[
    ("cpu_cores", "cpu_cores_count"),
    ("simds", "simd_count"),
    ("cpu_core_id_base", "cpu_core_id_base"),
    ("simd_id_base", "simd_id_base"),
    ("max_waves_per_simd", "max_waves_per_simd"),
    ("lds_kb", "lds_size_in_kb"),
    ("gds_kb", "gds_size_in_kb"),
    ("wave_front_size", "wave_front_size"),
    ("shader_banks", "array_count"),
    ("arrays", "simd_arrays_per_engine"),
    ("cu_per_array", "cu_per_simd_array"),
    ("simd_per_cu", "simd_per_cu"),
    ("max_slots_scratch_cu", "max_slots_scratch_cu"),
    ("vendor_id", "vendor_id"),
    ("device_id", "device_id"),
    ("location_id", "location_id"),
    ("domain", "domain"),
    ("drm_render_minor", "drm_render_minor"),
    ("hive_id", "hive_id"),
    ("sdma", "num_sdma_engines"),
    ("sdma_xgmi", "num_sdma_xgmi_engines"),
    ("sdma_queues", "num_sdma_queues_per_engine"),
    ("cp_queues", "num_cp_queues"),
    ("gws", "num_gws"),
    ("unique_id", "unique_id"),
    ("max_clock_f", "max_engine_clk_fcompute"),
    ("capability", "capability"),
];

/// Differences between the thunk's node `t` (with its banks, caches and
/// links) and our parser's node `p`.
fn compare_node(
    t: &Record,
    banks: &[Record],
    caches: &[Record],
    links: &[Record],
    p: &Node,
    out: &mut Vec<String>,
) {
    let id = p.id;
    for (tk, pk) in NODE_FIELDS {
        // The thunk stores these in 8- and 16-bit fields.
        let (tv, pv) = match *pk {
            "num_sdma_queues_per_engine" | "num_cp_queues" | "num_gws" => {
                (num(t, tk), p.prop(pk) & 0xff)
            }
            "vendor_id" | "device_id" => (num(t, tk), p.prop(pk) & 0xffff),
            "max_engine_clk_fcompute"
            | "simd_id_base"
            | "cpu_core_id_base"
            | "location_id"
            | "capability"
            | "domain" => (num(t, tk), p.prop(pk) & 0xffff_ffff),
            _ => (num(t, tk), p.prop(pk)),
        };
        if tv != pv {
            out.push(format!("node {id}: thunk {tk}={tv}, parser {pk}={pv}"));
        }
    }
    let gfx = p.prop("gfx_target_version");
    if p.is_gpu() {
        let want = (gfx / 10000, gfx / 100 % 100, gfx % 100);
        let got = (
            num(t, "gfx_major"),
            num(t, "gfx_minor"),
            num(t, "gfx_stepping"),
        );
        if got != want {
            out.push(format!(
                "node {id}: thunk gfx {got:?}, parser gfx_target_version {gfx}"
            ));
        }
    }

    // Memory: the sysfs banks first, in order; a GPU node then has the
    // thunk's own apertures (LDS, scratch, SVM, MMIO: heap types 4..7).
    let sys_banks = p.mem_banks.as_deref().unwrap_or_default();
    if banks.len() < sys_banks.len() {
        out.push(format!(
            "node {id}: thunk has {} memory banks, sysfs {}",
            banks.len(),
            sys_banks.len()
        ));
    }
    for (tb, pb) in banks.iter().zip(sys_banks) {
        let heap = pb.properties.get_or_zero("heap_type");
        for (tk, pk, pv) in [
            ("heap", "heap_type", heap),
            (
                "size",
                "size_in_bytes",
                pb.properties.get_or_zero("size_in_bytes"),
            ),
            ("width", "width", pb.properties.get_or_zero("width")),
            (
                "clock_max",
                "mem_clk_max",
                pb.properties.get_or_zero("mem_clk_max"),
            ),
        ] {
            if num(tb, tk) != pv {
                out.push(format!(
                    "node {id} bank {}: thunk {tk}={}, parser {pk}={pv}",
                    pb.index,
                    num(tb, tk)
                ));
            }
        }
    }
    // An APU slot the thunk counts but leaves zeroed: its GPUVM aperture
    // is listed only when the node's `local_mem_size` is non-zero
    // (hsaKmtGetNodeMemoryProperties memsets every counted slot first).
    for extra in banks.iter().skip(sys_banks.len()) {
        let heap = num(extra, "heap");
        let unfilled = heap == 0 && num(extra, "size") == 0 && num(extra, "base") == 0;
        if !p.is_gpu() || !((4..=7).contains(&heap) || unfilled) {
            out.push(format!(
                "node {id}: unexpected thunk memory bank beyond sysfs's: {extra:?}"
            ));
        }
    }

    // Caches: a GPU (or APU) node's come from the KFD tree; a CPU node's
    // from the CPU sysfs the interposer serves for the simulated NUMA node
    // (kfd_sim_preload::tree: 3 private levels per core, an L3 per 8).
    if p.prop("simd_count") > 0 {
        let sys_caches = p.caches.as_deref().unwrap_or_default();
        if caches.len() != sys_caches.len() {
            out.push(format!(
                "node {id}: thunk has {} caches, sysfs {}",
                caches.len(),
                sys_caches.len()
            ));
        }
        for (tc, pc) in caches.iter().zip(sys_caches) {
            for (tk, pk) in [
                ("processor_id_low", "processor_id_low"),
                ("level", "level"),
                ("size", "size"),
                ("line_size", "cache_line_size"),
                ("lines_per_tag", "cache_lines_per_tag"),
                ("associativity", "association"),
                ("latency", "latency"),
                ("type", "type"),
            ] {
                let pv = pc.properties.get_or_zero(pk) & 0xffff_ffff;
                if num(tc, tk) != pv {
                    out.push(format!(
                        "node {id} cache {}: thunk {tk}={}, parser {pk}={pv}",
                        pc.index,
                        num(tc, tk)
                    ));
                }
            }
        }
    } else {
        let cores = p.prop("cpu_cores_count") as usize;
        let want = cores * 3 + cores.div_ceil(8);
        if caches.len() != want {
            out.push(format!(
                "node {id}: thunk read {} CPU caches from the simulated NUMA node, {want} served",
                caches.len()
            ));
        }
    }

    // IO links: the sysfs links first, in order; then the thunk's indirect
    // links to nodes no direct link reaches.
    let sys_links = p.io_links.as_deref().unwrap_or_default();
    if links.len() < sys_links.len() {
        out.push(format!(
            "node {id}: thunk has {} io links, sysfs {}",
            links.len(),
            sys_links.len()
        ));
    }
    let mut direct = BTreeSet::new();
    for (tl, pl) in links.iter().zip(sys_links) {
        let g = |k: &str| pl.properties.get_or_zero(k) & 0xffff_ffff;
        direct.insert(g("node_to"));
        for (tk, pk) in [
            ("type", "type"),
            ("from", "node_from"),
            ("to", "node_to"),
            ("weight", "weight"),
            ("min_latency", "min_latency"),
            ("max_latency", "max_latency"),
            ("min_bandwidth", "min_bandwidth"),
            ("max_bandwidth", "max_bandwidth"),
            ("rec_transfer_size", "recommended_transfer_size"),
        ] {
            if num(tl, tk) != g(pk) {
                out.push(format!(
                    "node {id} link {}: thunk {tk}={}, parser {pk}={}",
                    pl.index,
                    num(tl, tk),
                    g(pk)
                ));
            }
        }
    }
    for extra in links.iter().skip(sys_links.len()) {
        let to = num(extra, "to");
        if num(extra, "from") != u64::from(id) || direct.contains(&to) {
            out.push(format!(
                "node {id}: thunk link beyond sysfs's is not an indirect link: {extra:?}"
            ));
        }
    }
}

/// Every difference between the thunk's view (`out`, the probe's output)
/// and the parser's `system`.
fn compare(out: &str, system: &System) -> Vec<String> {
    let mut diffs = Vec::new();
    let sys = &records(out, "system")[0];
    if num(sys, "nodes") != system.nodes.len() as u64 {
        diffs.push(format!(
            "thunk sees {} nodes, parser {}",
            num(sys, "nodes"),
            system.nodes.len()
        ));
        return diffs;
    }
    let nodes = records(out, "node");
    let of = |kind: &str, id: u32| -> Vec<Record> {
        records(out, kind)
            .into_iter()
            .filter(|r| num(r, "node") == u64::from(id))
            .collect()
    };
    for (t, p) in nodes.iter().zip(&system.nodes) {
        compare_node(
            t,
            &of("mem", p.id),
            &of("cache", p.id),
            &of("link", p.id),
            p,
            &mut diffs,
        );
    }
    // gpu_ids: the thunk acquires a VM for each GPU it read.
    let report = common::report(out, "topology");
    let acquired: BTreeSet<u64> = records(report, "acquired")[0]["gpu_ids"]
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("a gpu_id"))
        .collect();
    let parsed: BTreeSet<u64> = system
        .gpus()
        .filter_map(|n| n.gpu_id.map(u64::from))
        .collect();
    if acquired != parsed {
        diffs.push(format!(
            "thunk acquired VMs for gpu_ids {acquired:?}, parser reads {parsed:?}"
        ));
    }
    diffs.extend(
        common::refused_ioctls(report)
            .into_iter()
            .map(|r| format!("simulator refused {r}")),
    );
    diffs
}

#[test]
fn the_thunk_reads_every_machine_as_our_parser_does() {
    let scratch = Scratch::new();
    let Some(probe) = common::hsakmt_probe(&scratch) else {
        return;
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for (machine, sim) in common::machines() {
        let sim = match sim {
            Ok(sim) => sim,
            Err(reason) => {
                assert!(
                    !amdgpu_topology::builtin_names().contains(&machine.as_str()),
                    "built-in machine {machine}: {reason}"
                );
                println!("{machine}: no simulated machine ({reason})");
                continue;
            }
        };
        let parsed = amdgpu_topology::parse(&sim.sysfs_root())
            .unwrap_or_else(|e| panic!("{machine}: our parser on the simulator's tree: {e}"));
        // amdkfd numbers its nodes 0..n; the thunk reads nodes/0 .. n-1. A
        // capture of a single node other than 0 is part of a machine.
        let ids: Vec<u32> = parsed.system.nodes.iter().map(|n| n.id).collect();
        if ids.iter().enumerate().any(|(i, &id)| id as usize != i) {
            println!(
                "{machine}: node ids {ids:?} are not 0..n, no kernel shows such a tree: not run"
            );
            continue;
        }
        let run = common::run_preloaded(&scratch, machine.as_ref(), &probe, &["topology"]);
        let stdout = String::from_utf8_lossy(&run.stdout);
        if !run.status.success() {
            failures.push(format!(
                "{machine}: the probe failed ({}):\n{stdout}\n{}",
                run.status,
                String::from_utf8_lossy(&run.stderr)
            ));
            continue;
        }
        let diffs = compare(&stdout, &parsed.system);
        println!(
            "{machine}: {} nodes, {} GPUs, {} differences",
            parsed.system.nodes.len(),
            parsed.system.gpus().count(),
            diffs.len()
        );
        for d in &diffs {
            failures.push(format!("{machine}: {d}"));
        }
        checked += 1;
    }
    assert!(checked > 0, "no machine was checked");
    assert!(
        failures.is_empty(),
        "{} differences between the thunk and our parser:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // hsaKmtCloseKFD unlinks the shared memory and semaphore it created
    // (destroy_counter_props): through the interposer, in the private
    // directory.
    let left: Vec<_> = std::fs::read_dir(scratch.shm())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.is_empty(),
        "left in the private shm directory: {left:?}"
    );
}
