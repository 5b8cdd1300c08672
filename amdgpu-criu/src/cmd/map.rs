//! `amdgpu-criu map --from DIR --to DIR [--json]`: could a process
//! checkpointed on topology FROM be restored on topology TO? Prints the GPU
//! (and CPU) mapping the plugin would use, or every reason it would refuse.
//!
//! Each side is a copy of a sysfs topology tree or `builtin:NAME` (a built-in
//! synthetic machine). Honours the `KFD_*_CHECK` variables as the plugin does
//! (invalid values are reported and the default kept), and pins GPUs with
//! `--device-map` (or `KFD_DEVICE_MAP`) as the plugin's `amdgpu.device-map`. The decision itself is
//! `amdgpu_topology::mapping`; this module only reads, prints and picks the
//! exit code, and never touches devices.

use std::path::Path;
use std::process::ExitCode;

use amdgpu_checkpoint::options::{check_flags, checks_only, InvalidOption, Options};
use amdgpu_topology::checks::Reason;
use amdgpu_topology::device_map::DeviceMap;
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::mapping::{map_topologies_pinned, MapResult};
use amdgpu_topology::options::CheckOptions;
use amdgpu_topology::{parse, synthesize_missing, GpuId};

/// Arguments of `map`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu map --from builtin:mi210-8gpu-2hive --to builtin:mi250x-8
  amdgpu-criu map --from ./topology-of-node1 --to /sys/class/kfd/kfd/topology
  KFD_FW_VER_CHECK=0 amdgpu-criu map --from ./node1 --to ./node2 --json
  amdgpu-criu map --from ./node1 --to ./node2 --device-map 0000:05:00.0=0000:25:00.0
  amdgpu-criu topology --export node1.json && amdgpu-criu map --from node1.json --to ./node2

Exit status: 0 compatible, 1 not compatible, 2 unreadable topology or device map")]
pub struct Args {
    /// The checkpointed machine's topology: a copy of
    /// `/sys/class/kfd/kfd/topology` (the directory holding `nodes/`), a
    /// topology file (what `topology --export FILE` writes), or `builtin:NAME` for a
    /// built-in machine.
    #[arg(long, value_name = "DIR|FILE|builtin:NAME", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub from: String,
    /// The restoring machine's topology, same forms.
    #[arg(long, value_name = "DIR|FILE|builtin:NAME", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub to: String,
    /// Fill in what partial captures lack (gpu_ids, VRAM banks, render
    /// minors) as the simulator does, and note it on stderr.
    #[arg(long)]
    pub complete: bool,
    /// Print JSON (`{"compatible", "gpu_map", "cpu_map", "reasons"}`).
    #[arg(long)]
    pub json: bool,
    /// Pin checkpointed GPUs to local ones, as the plugin's
    /// `amdgpu.device-map`: `SRC=DST[,SRC=DST...]`, each side a gpu_id
    /// (decimal or 0x hex), a PCI address or a unique_id. Overrides
    /// `KFD_DEVICE_MAP`.
    #[arg(long, value_name = "SRC=DST[,...]")]
    pub device_map: Option<String>,
}

/// The `KFD_*_CHECK` switches of the environment, read as the plugin reads
/// them: an invalid value keeps its check on and is returned. The plugin's
/// other variables are not read (they shape a dump or restore, not the
/// checks; the device map has `device_map`).
pub(crate) fn checks_from_env() -> Result<(CheckOptions, Vec<InvalidOption>), String> {
    let (options, invalid) = Options::default()
        .read(checks_only(|name| std::env::var(name).ok()), &[])
        .map_err(|e| e.to_string())?;
    Ok((*options.checks(), invalid))
}

/// The device map of `--device-map`, else of `KFD_DEVICE_MAP`, else none.
pub(crate) fn device_map(flag: Option<&str>) -> Result<DeviceMap, String> {
    let from_env = std::env::var(amdgpu_checkpoint::options::DEVICE_MAP).ok();
    let (text, source) = match (flag, from_env.as_deref()) {
        (Some(text), _) => (text, "--device-map"),
        (None, Some(text)) => (text, amdgpu_checkpoint::options::DEVICE_MAP),
        (None, None) => return Ok(DeviceMap::default()),
    };
    text.parse().map_err(|e| format!("{source}: {e}"))
}

/// [`map_topologies_pinned`] with `map` resolved against both sides.
pub(crate) fn map_with(
    from: &DeviceTopology,
    to: &DeviceTopology,
    options: &CheckOptions,
    map: &DeviceMap,
) -> Result<MapResult, String> {
    let pins = map.resolve(from, to).map_err(|e| e.to_string())?;
    map_topologies_pinned(from, to, options, &pins).map_err(|e| e.to_string())
}

/// Runs `map`: 0 when compatible, 1 when not, 2 when a topology cannot be
/// read or no answer could be reached.
pub fn run(args: Args) -> ExitCode {
    let (options, invalid) = match checks_from_env() {
        Ok(read) => read,
        Err(message) => {
            eprintln!("amdgpu-criu map: {message}");
            return ExitCode::from(2);
        }
    };
    for warning in &invalid {
        eprintln!("amdgpu-criu map: warning: {warning}");
    }
    let loaded = load("map", &args.from, args.complete)
        .and_then(|from| Ok((from, load("map", &args.to, args.complete)?)));
    let pins = match device_map(args.device_map.as_deref()) {
        Ok(map) => map,
        Err(message) => {
            eprintln!("amdgpu-criu map: {message}");
            return ExitCode::from(2);
        }
    };
    let (from, to) = match loaded {
        Ok(pair) => pair,
        Err(message) => {
            eprintln!("amdgpu-criu map: {message}");
            return ExitCode::from(2);
        }
    };
    let result = match map_with(&from, &to, &options, &pins) {
        Ok(result) => result,
        Err(e) => {
            eprintln!("amdgpu-criu map: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        let text = serde_json::to_value(&result).and_then(|mut value| {
            crate::json64::gpu_ids_to_hex(&mut value);
            serde_json::to_string_pretty(&value)
        });
        match text {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("amdgpu-criu map: cannot format the result as JSON: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print_text(&result, &from, &to, &options);
    }
    if result.compatible {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Reads one topology (`DIR` or `builtin:NAME`) into the device view,
/// printing what the parser had to skip and what `--complete` filled in,
/// each line prefixed with the subcommand's name.
pub(crate) fn load(command: &str, spec: &str, complete: bool) -> Result<DeviceTopology, String> {
    let machine = crate::machine::Machine::parse(command, spec)?;
    let mut system = if let Some(system) = machine.system()? {
        system
    } else {
        let parsed = parse(Path::new(spec)).map_err(|e| format!("{spec}: {e}"))?;
        for skipped in &parsed.skipped {
            crate::out::note(&format!("amdgpu-criu {command}: {spec}: note: {skipped}"));
        }
        parsed.system
    };
    if complete {
        for item in synthesize_missing(&mut system) {
            crate::out::note(&format!("amdgpu-criu {command}: {spec}: filled in: {item}"));
        }
    }
    DeviceTopology::from_system(&system).map_err(|e| {
        let hint = if complete {
            ""
        } else {
            " (a partial capture? --complete fills in gpu_ids and VRAM banks)"
        };
        format!("{spec}: {e}{hint}")
    })
}

fn node_of(topology: &DeviceTopology, gpu_id: u32) -> String {
    topology
        .gpus()
        .find(|n| n.gpu_id == gpu_id)
        .map_or_else(|| "?".to_owned(), |n| n.node_id.to_string())
}

/// Prints a mapping result as text: the checks switched off, then the GPU
/// and CPU maps or every reason there is none.
pub(crate) fn print_text(
    result: &MapResult,
    from: &DeviceTopology,
    to: &DeviceTopology,
    options: &CheckOptions,
) {
    let off: Vec<&str> = check_flags(options)
        .iter()
        .filter(|(_, on)| !on)
        .map(|(name, _)| *name)
        .collect();
    if !off.is_empty() {
        println!("checks switched off: {}", off.join(", "));
    }
    if !result.compatible {
        println!("not compatible:");
        for line in reason_lines(&result.reasons) {
            println!("  {line}");
        }
        return;
    }
    println!("compatible");
    println!("GPU map (checkpointed gpu_id -> local gpu_id):");
    for (src, dst) in &result.gpu_map {
        println!(
            "  {} -> {}  (node {} -> node {})",
            crate::out::gpu_id(*src),
            crate::out::gpu_id(*dst),
            node_of(from, *src),
            node_of(to, *dst)
        );
    }
    if !result.cpu_map.is_empty() {
        println!("CPU nodes (checkpointed -> local):");
        for (src, dst) in &result.cpu_map {
            println!("  {src} -> {dst}");
        }
    }
}

/// The `KFD_*_CHECK` variable that switches off the check behind a reason,
/// if it can be switched off (as the plugin reads it).
fn switch_of(check: &str) -> Option<&'static str> {
    use amdgpu_checkpoint::options as o;
    Some(match check {
        "fw_version" => o::FW_VERSION_CHECK,
        "sdma_fw_version" => o::SDMA_FW_VERSION_CHECK,
        "caches_count" => o::CACHES_COUNT_CHECK,
        "num_gws" => o::NUM_GWS_CHECK,
        "vram_size" => o::VRAM_SIZE_CHECK,
        "capability" => o::CAPABILITY_CHECK,
        amdgpu_topology::checks::rule::NUMA => o::NUMA_CHECK,
        _ => return None,
    })
}

/// One line per reason, except that pair reasons (a checkpointed GPU against
/// a local GPU) differing only in the checkpointed GPU share one line
/// listing those GPUs: equal GPUs failing against the same local GPU.
pub(crate) fn reason_lines(reasons: &[Reason]) -> Vec<String> {
    let mut lines: Vec<(Option<Reason>, Vec<GpuId>)> = Vec::new();
    for reason in reasons {
        if reason.local_gpu.is_none() || reason.gpu.is_none() {
            lines.push((Some(reason.clone()), Vec::new()));
            continue;
        }
        let key = Reason {
            gpu: None,
            ..reason.clone()
        };
        let gpu = reason.gpu.unwrap_or_default();
        match lines
            .iter_mut()
            .find(|(r, gpus)| !gpus.is_empty() && r.as_ref() == Some(&key))
        {
            Some((_, gpus)) => gpus.push(gpu),
            None => lines.push((Some(key), vec![gpu])),
        }
    }
    lines
        .into_iter()
        .filter_map(|(reason, gpus)| {
            let reason = reason?;
            let switch = match (switch_of(reason.check), reason.check) {
                (Some(name), _) => format!(" ({name}=0 switches this check off)"),
                // The count is of the GPUs the process sees: a container's
                // device cgroup decides it.
                (None, amdgpu_topology::checks::rule::GPU_COUNT) => format!(
                    " (restore where the process sees {n} GPU{s}: a machine with {n}, or a \
                     container that exposes {n} of the machine's GPUs to it)",
                    n = reason.checkpointed,
                    s = if reason.checkpointed == 1 { "" } else { "s" }
                ),
                (None, _) => String::new(),
            };
            let line = match gpus.as_slice() {
                [] => reason.to_string(),
                [gpu] => Reason {
                    gpu: Some(*gpu),
                    ..reason
                }
                .to_string(),
                many => {
                    let ids: Vec<String> = many.iter().map(|g| crate::out::gpu_id(*g)).collect();
                    format!("checkpointed GPUs {}: {reason}", ids.join(", "))
                }
            };
            Some(line + &switch)
        })
        .collect()
}
