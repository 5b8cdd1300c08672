//! The simulated machines: a topology named on the command line (a
//! built-in name or a sysfs tree) and the `kfd-sim` simulator built from it.

use std::path::Path;

use amdgpu_topology::{parse, synthesize_missing, System};
use kfd_sim::{Sim, SimConfig};

use super::Stop;

/// A simulated machine.
pub(super) struct Machine {
    pub(super) label: String,
    pub(super) system: System,
}

/// A built-in topology by name, or a sysfs tree completed as the simulator
/// completes partial captures.
pub(super) fn resolve(spec: &str) -> Result<Machine, Stop> {
    let machine = crate::machine::Machine::parse("demo", spec).map_err(Stop::Usage)?;
    if let Some(system) = machine.builtin_system() {
        return Ok(Machine {
            label: machine.label(),
            system,
        });
    }
    let dir = Path::new(spec);
    if !dir.is_dir() {
        return Err(Stop::Usage(format!(
            "{spec}: not a directory (a sysfs topology tree), nor a built-in machine ({})",
            crate::machine::known().join(", ")
        )));
    }
    let parsed = parse(dir).map_err(|e| Stop::Usage(format!("{spec}: {e}")))?;
    let mut system = parsed.system;
    refuse_combined_nodes(spec, &system)?;
    let filled = synthesize_missing(&mut system);
    if !filled.is_empty() {
        crate::out::note(&format!(
            "amdgpu-criu demo: note: {spec}: {} missing properties (gpu_ids, VRAM banks, \
             render minors) filled in as the simulator does",
            filled.len()
        ));
    }
    for note in kfd_sim::complete_kernel_properties(&mut system) {
        crate::out::note(&format!(
            "amdgpu-criu demo: note: {spec}: {note} (what a current kernel reports for this \
             chip; the capture's kernel did not print it)"
        ));
    }
    Ok(Machine {
        label: spec.to_owned(),
        system,
    })
}

/// Refuses a topology whose node holds both CPU cores and GPU SIMDs (the
/// layout 2017-era kernels gave APUs such as Carrizo): a CRIU amdgpu image
/// keeps each node as either a CPU or a GPU device entry, and the plugin's
/// own reader rejects a GPU entry with CPU cores, so no checkpoint taken on
/// such a machine could be restored.
fn refuse_combined_nodes(spec: &str, system: &System) -> Result<(), Stop> {
    match system
        .nodes
        .iter()
        .find(|n| n.prop("cpu_cores_count") > 0 && n.prop("simd_count") > 0)
    {
        Some(node) => Err(Stop::Usage(format!(
            "{spec}: node {} holds both CPU cores ({}) and GPU SIMDs ({}), the layout \
             kernels of 2017 gave APUs; a CRIU amdgpu image records every node as either \
             a CPU or a GPU, so a process on this machine cannot be checkpointed (a kernel \
             that lists the APU's GPU as a node of its own can)",
            node.id,
            node.prop("cpu_cores_count"),
            node.prop("simd_count")
        ))),
        None => Ok(()),
    }
}

pub(super) fn simulate(machine: &Machine) -> Result<Sim, Stop> {
    Sim::new(machine.system.clone(), SimConfig::default()).map_err(|e| {
        Stop::Usage(format!(
            "{}: cannot simulate this machine: {e}",
            machine.label
        ))
    })
}
