//! `amdgpu-criu topology [--sysfs DIR | --builtin NAME] [--complete] [--json]`:
//! print a KFD topology as the plugin sees it: nodes, gpu_ids, device ids,
//! VRAM, render minors, XGMI hives and links.
//!
//! The topology comes from this machine's sysfs, from a copy of it, or from
//! a built-in synthetic machine. This module only reads and prints; it never
//! opens devices.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use amdgpu_topology::model::link_type;
use amdgpu_topology::parse::{parse_host, Note, DEFAULT_ROOT};
use amdgpu_topology::synthesize::Synthesized;
use amdgpu_topology::{
    builtin, builtin_names, parse, synthesize_missing, Hive, Link, Node, NodeKind, ParseError,
    Skipped, System,
};
use serde::Serialize;

/// Arguments of `topology`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu topology                                  # this machine
  amdgpu-criu topology --sysfs builtin:list           # the built-in machines
  amdgpu-criu topology --sysfs builtin:mi210-8gpu-2hive
  amdgpu-criu topology --sysfs ./copy-of-topology --complete
  amdgpu-criu topology --json > topology.json           # attach to bug reports
  amdgpu-criu topology --export node1.json              # then: map --from node1.json ...

Exit status: 0 printed (or written), 2 the topology cannot be read or FILE written")]
pub struct Args {
    /// Read a copy of a topology tree (the directory holding `nodes/`), a
    /// topology file (`--export`), or a built-in synthetic machine
    /// `builtin:NAME` (`builtin:list` lists them), instead of this
    /// machine's `/sys/class/kfd/kfd/topology`.
    #[arg(long, value_name = "DIR|FILE|builtin:NAME", conflicts_with = "builtin", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub sysfs: Option<String>,
    /// The same as `--sysfs builtin:NAME` (kept for scripts).
    #[arg(long, value_name = "NAME", hide = true)]
    pub builtin: Option<String>,
    /// Fill in missing gpu_ids, VRAM banks and render minors as the
    /// simulator does, and list what was filled in.
    #[arg(long)]
    pub complete: bool,
    /// Print one JSON object (`source`, `gpus`, `hives`, `skipped`, `notes`,
    /// `synthesized`, `system`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the topology into FILE (the JSON of `--json`), a machine every
    /// command reads back: `map --from FILE`, `check --sysfs FILE`, `demo
    /// --topology FILE`.
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
}

/// Where the topology came from and what was learnt reading it.
struct Loaded {
    source: String,
    system: System,
    skipped: Vec<Skipped>,
    notes: Vec<Note>,
}

/// Runs `topology`: 0 on success, 2 when the topology cannot be read.
pub fn run(mut args: Args) -> ExitCode {
    if args.sysfs.as_deref() == Some("builtin:list") {
        args.sysfs = None;
        args.builtin = Some("list".into());
    }
    let mut file = None;
    if let Some(spec) = args.sysfs.clone() {
        match crate::machine::Machine::parse("topology", &spec) {
            Ok(crate::machine::Machine::Builtin(name)) => {
                args.sysfs = None;
                args.builtin = Some(name);
            }
            Ok(crate::machine::Machine::Dir(_)) => {}
            Ok(machine @ crate::machine::Machine::File(_)) => file = Some(machine),
            Err(e) => {
                eprintln!("amdgpu-criu topology: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if args.builtin.as_deref() == Some("list") {
        return emit(&builtin_list(args.json));
    }
    let loaded = match &file {
        Some(machine) => machine.system().map(|system| Loaded {
            source: machine.label(),
            system: system.unwrap_or_default(),
            skipped: Vec::new(),
            notes: Vec::new(),
        }),
        None => load(&args),
    };
    let mut loaded = match loaded {
        Ok(loaded) => loaded,
        Err(message) => {
            eprintln!("amdgpu-criu topology: {message}");
            return ExitCode::from(2);
        }
    };
    let synthesized = if args.complete {
        synthesize_missing(&mut loaded.system)
    } else {
        Vec::new()
    };
    if let Some(path) = &args.export {
        return export(path, &loaded, &synthesized);
    }
    let text = if args.json {
        match serde_json::to_string_pretty(&Report::new(&loaded, &synthesized)) {
            Ok(mut text) => {
                text.push('\n');
                text
            }
            Err(e) => {
                eprintln!("amdgpu-criu topology: cannot format the topology as JSON: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        render_text(&loaded, &synthesized)
    };
    emit(&text)
}

/// The built-in machines, each with its GPU model and count: one per line,
/// or a JSON array.
fn builtin_list(json: bool) -> String {
    let machines: Vec<serde_json::Value> = builtin_names()
        .iter()
        .filter_map(|name| {
            let system = builtin(name)?;
            let first = system.gpus().next()?;
            let hives = system.hives().len();
            Some(serde_json::json!({
                "name": format!("{}{name}", crate::machine::PREFIX),
                "gpus": system.gpus().count(),
                "model": first.name.clone().unwrap_or_default(),
                "gfx_target": gfx_target(first.prop("gfx_target_version")),
                "device_id": format!("{:#06x}", first.prop("device_id")),
                "vram_bytes": first.vram().map(|(bytes, _)| bytes),
                "xgmi_hives": hives,
            }))
        })
        .collect();
    if json {
        return format!("{:#}\n", serde_json::Value::Array(machines));
    }
    let mut out = String::new();
    for m in &machines {
        let _ = writeln!(
            out,
            "{:<26} {:>3} x {} {} ({}, {}){}",
            m["name"].as_str().unwrap_or_default(),
            m["gpus"],
            m["model"].as_str().unwrap_or_default(),
            m["gfx_target"].as_str().unwrap_or("-"),
            m["device_id"].as_str().unwrap_or_default(),
            m["vram_bytes"].as_u64().map_or("-".to_owned(), human_bytes),
            match m["xgmi_hives"].as_u64() {
                Some(0) | None => String::new(),
                Some(n) => format!(", {}", crate::out::plural(n, "XGMI hive")),
            }
        );
    }
    out
}

/// `--export FILE`: the JSON of `--json`, written whole or not at all.
fn export(path: &Path, loaded: &Loaded, synthesized: &[Synthesized]) -> ExitCode {
    let text = match serde_json::to_string_pretty(&Report::new(loaded, synthesized)) {
        Ok(text) => text + "\n",
        Err(e) => {
            eprintln!("amdgpu-criu topology: cannot format the topology as JSON: {e}");
            return ExitCode::from(2);
        }
    };
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => dir.to_path_buf(),
        None => PathBuf::from("."),
    };
    let written = tempfile::NamedTempFile::new_in(&dir)
        .and_then(|mut f| f.write_all(text.as_bytes()).map(|()| f))
        .and_then(|f| f.persist(path).map_err(|e| e.error));
    match written {
        Ok(_) => {
            println!(
                "wrote {}: {} ({}, {}); `amdgpu-criu map --from {0} ...` and `check --sysfs {0}` \
                 read it",
                path.display(),
                loaded.source,
                crate::out::plural(loaded.system.nodes.len() as u64, "node"),
                crate::out::plural(loaded.system.gpus().count() as u64, "GPU"),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "amdgpu-criu topology: --export {}: {e} (give a path in a writable directory)",
                path.display()
            );
            ExitCode::from(2)
        }
    }
}

/// Writes `text` to stdout. A reader that went away (`| head`) is not an
/// error; any other write failure is.
fn emit(text: &str) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("amdgpu-criu topology: cannot write to stdout: {e}");
            ExitCode::from(2)
        }
    }
}

fn load(args: &Args) -> Result<Loaded, String> {
    if let Some(name) = &args.builtin {
        let names = builtin_names().join(", ");
        let system = builtin(name)
            .ok_or_else(|| format!("no built-in topology {name:?} (known: {names})"))?;
        return Ok(Loaded {
            source: format!("builtin:{name}"),
            system,
            skipped: Vec::new(),
            notes: Vec::new(),
        });
    }
    let root = args
        .sysfs
        .as_ref()
        .map_or_else(|| PathBuf::from(DEFAULT_ROOT), PathBuf::from);
    let parsed = match &args.sysfs {
        Some(dir) => parse(Path::new(dir)),
        None => parse_host(),
    };
    match parsed {
        Ok(parsed) => Ok(Loaded {
            source: root.display().to_string(),
            system: parsed.system,
            skipped: parsed.skipped,
            notes: parsed.notes,
        }),
        Err(ParseError::NoTopology { .. }) if args.sysfs.is_none() => Err(format!(
            "{DEFAULT_ROOT} does not exist: this machine has no amdkfd topology \
             (amdgpu not loaded, or no AMD GPU); use --sysfs DIR to read a copy of \
             one, or --sysfs builtin:NAME for a synthetic machine ({})",
            crate::machine::known().join(", ")
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// One GPU node, summarized.
#[derive(Serialize)]
struct GpuSummary {
    node: u32,
    kind: NodeKind,
    gpu_id: Option<u32>,
    name: Option<String>,
    device_id: u64,
    gfx_target: Option<String>,
    pci: String,
    vram_bytes: Option<u64>,
    vram_public: Option<bool>,
    render_minor: Option<u32>,
    hive_id: u64,
}

impl GpuSummary {
    fn new(node: &Node) -> Self {
        let vram = node.vram();
        GpuSummary {
            node: node.id,
            kind: node.kind(),
            gpu_id: node.gpu_id,
            name: node.name.clone(),
            device_id: node.prop("device_id"),
            gfx_target: gfx_target(node.prop("gfx_target_version")),
            pci: pci_address(node),
            vram_bytes: vram.map(|(size, _)| size),
            vram_public: vram.map(|(_, public)| public),
            render_minor: node.render_minor(),
            hive_id: node.hive_id(),
        }
    }
}

#[derive(Serialize)]
struct Report<'a> {
    source: &'a str,
    nodes: usize,
    cpus: usize,
    gpus: Vec<GpuSummary>,
    hives: Vec<Hive>,
    skipped: &'a [Skipped],
    notes: Vec<String>,
    synthesized: Vec<String>,
    system: &'a System,
}

impl<'a> Report<'a> {
    fn new(loaded: &'a Loaded, synthesized: &[Synthesized]) -> Self {
        let s = &loaded.system;
        Report {
            source: &loaded.source,
            nodes: s.nodes.len(),
            cpus: s.cpus().count(),
            gpus: s.gpus().map(GpuSummary::new).collect(),
            hives: s.hives(),
            skipped: &loaded.skipped,
            notes: loaded.notes.iter().map(ToString::to_string).collect(),
            synthesized: synthesized.iter().map(ToString::to_string).collect(),
            system: s,
        }
    }
}

/// `gfx942` from 90402: major, minor and stepping, the last two in hex.
fn gfx_target(version: u64) -> Option<String> {
    if version == 0 {
        return None;
    }
    let (major, minor, step) = (version / 10000, (version / 100) % 100, version % 100);
    Some(format!("gfx{major}{minor:x}{step:x}"))
}

/// `domain:bus:device.function` from `domain` and `location_id`.
fn pci_address(node: &Node) -> String {
    let location = node.prop("location_id");
    let devfn = location & 0xff;
    format!(
        "{:04x}:{:02x}:{:02x}.{}",
        node.prop("domain"),
        (location >> 8) & 0xff,
        devfn >> 3,
        devfn & 7
    )
}

fn human_bytes(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else {
        format!("{:.1} MiB", b / MIB)
    }
}

fn link_type_name(kind: u64) -> String {
    match kind {
        link_type::HYPERTRANSPORT => "HyperTransport".into(),
        link_type::PCIE => "PCIe".into(),
        link_type::QPI => "QPI".into(),
        link_type::XGMI => "XGMI".into(),
        other => format!("type {other}"),
    }
}

/// `2-5,7,9` from sorted node ids.
fn ranges(ids: &[u32]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", ids[i], ids[j])
        } else {
            ids[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// `PCIe->0; XGMI->3-5` for a node's links, grouped by type.
fn link_summary(links: &[Link]) -> String {
    let mut kinds: Vec<u64> = links.iter().map(Link::link_type).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
        .into_iter()
        .map(|kind| {
            let mut targets: Vec<u32> = links
                .iter()
                .filter(|l| l.link_type() == kind)
                .map(Link::node_to)
                .collect();
            targets.sort_unstable();
            format!("{}->{}", link_type_name(kind), ranges(&targets))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn render_text(loaded: &Loaded, synthesized: &[Synthesized]) -> String {
    let s = &loaded.system;
    let mut out = String::new();
    let generation = s.generation_id.map_or_else(
        || "no generation_id".to_owned(),
        |g| format!("generation {g}"),
    );
    // Writing to a String cannot fail; the results are ignored below.
    let _ = writeln!(out, "topology: {} ({generation})", loaded.source);
    let hives = s.hives();
    let _ = writeln!(
        out,
        "{}: {}, {}; {}",
        crate::out::plural(s.nodes.len() as u64, "node"),
        crate::out::plural(s.cpus().count() as u64, "CPU"),
        crate::out::plural(s.gpus().count() as u64, "GPU"),
        crate::out::plural(hives.len() as u64, "XGMI hive")
    );
    let _ = writeln!(
        out,
        "\n{:>4}  {:<4}  {:>6}  {:<14} {:>6}  {:<8} {:<13} {:>10}  {:>5}  hive_id",
        "node", "kind", "gpu_id", "name", "device", "target", "pci", "vram", "minor"
    );
    for node in &s.nodes {
        // gpu_ids in hex, as image file names and every command show them.
        // A CPU node's gpu_id 0 is no id.
        let gpu_id = node
            .gpu_id
            .filter(|&id| id != 0)
            .map_or("-".to_owned(), crate::out::gpu_id);
        let name = node.name.clone().unwrap_or_else(|| "-".to_owned());
        if node.kind() == NodeKind::Cpu {
            let _ = writeln!(
                out,
                "{:>4}  {:<4}  {:>6}  {:<14} {} cores",
                node.id,
                "CPU",
                gpu_id,
                name,
                node.prop("cpu_cores_count")
            );
            continue;
        }
        let g = GpuSummary::new(node);
        let kind = if g.kind == NodeKind::Apu {
            "APU"
        } else {
            "GPU"
        };
        let vram = g.vram_bytes.map_or("-".to_owned(), human_bytes);
        let minor = g.render_minor.map_or("-".to_owned(), |m| m.to_string());
        let _ = writeln!(
            out,
            "{:>4}  {:<4}  {:>6}  {:<14} {:>#6x}  {:<8} {:<13} {:>10}  {:>5}  {}",
            g.node,
            kind,
            gpu_id,
            name,
            g.device_id,
            g.gfx_target.unwrap_or_else(|| "-".to_owned()),
            g.pci,
            vram,
            minor,
            if g.hive_id == 0 {
                "-".to_owned()
            } else {
                format!("{:#x}", g.hive_id)
            }
        );
    }
    if !hives.is_empty() {
        let _ = writeln!(out, "\nhives:");
        for hive in &hives {
            let agrees = if hive.hive_id_agrees {
                ""
            } else {
                " (hive_id properties disagree with the links)"
            };
            let _ = writeln!(
                out,
                "  hive_id {:#x}: nodes {} ({}){agrees}",
                hive.hive_id,
                ranges(&hive.nodes),
                crate::out::plural(hive.nodes.len() as u64, "GPU")
            );
        }
    }
    let _ = writeln!(out, "\nlinks:");
    for node in &s.nodes {
        let io = link_summary(node.io_links());
        let p2p = link_summary(node.p2p_links());
        if io.is_empty() && p2p.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "  node {:>3}: io {}",
            node.id,
            if io.is_empty() { "-" } else { &io }
        );
        if !p2p.is_empty() {
            let _ = write!(out, " | p2p {p2p}");
        }
        out.push('\n');
    }
    for skipped in &loaded.skipped {
        let _ = writeln!(out, "skipped: {skipped}");
    }
    // Per-node notes of partial captures are grouped into one line each.
    let mut no_gpu_id = Vec::new();
    let mut no_banks = Vec::new();
    for note in &loaded.notes {
        match note {
            Note::MissingGpuId { node } => no_gpu_id.push(*node),
            Note::MissingMemBanks { node } => no_banks.push(*node),
            other => {
                let _ = writeln!(out, "note: {other}");
            }
        }
    }
    if !no_gpu_id.is_empty() {
        let _ = writeln!(out, "note: no gpu_id file in nodes {}", ranges(&no_gpu_id));
    }
    if !no_banks.is_empty() {
        let _ = writeln!(
            out,
            "note: no mem_banks (VRAM size unknown) in GPU nodes {}",
            ranges(&no_banks)
        );
    }
    // Fill-ins, one line per kind.
    let mut cpu_ids = Vec::new();
    let mut gpu_ids = Vec::new();
    let mut banks = Vec::new();
    let mut minors = Vec::new();
    for item in synthesized {
        match *item {
            Synthesized::CpuGpuId { node } => cpu_ids.push(node),
            Synthesized::GpuId { node, .. } => gpu_ids.push(node),
            Synthesized::VramBank { node, .. } => banks.push(node),
            Synthesized::RenderMinor { node, .. } => minors.push(node),
            _ => {
                let _ = writeln!(out, "synthesized: {item}");
            }
        }
    }
    for (what, nodes) in [
        ("gpu_id 0 for CPU nodes", cpu_ids),
        ("VRAM bank for nodes", banks),
        ("gpu_id for nodes", gpu_ids),
        ("drm_render_minor for nodes", minors),
    ] {
        if !nodes.is_empty() {
            let _ = writeln!(out, "synthesized: {what} {}", ranges(&nodes));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx_names() {
        assert_eq!(gfx_target(90402).as_deref(), Some("gfx942"));
        assert_eq!(gfx_target(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_target(90008).as_deref(), Some("gfx908"));
        assert_eq!(gfx_target(110000).as_deref(), Some("gfx1100"));
        assert_eq!(gfx_target(0), None);
    }

    #[test]
    fn node_ranges() {
        assert_eq!(ranges(&[]), "");
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[2, 3, 4, 5, 7, 9, 10]), "2-5,7,9-10");
    }
}
