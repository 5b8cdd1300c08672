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
    if let crate::machine::Machine::Builtin(_) = machine {
        if let Some(system) = machine.system().map_err(Stop::Usage)? {
            return Ok(Machine {
                label: machine.label(),
                system,
            });
        }
    }
    let mut system = match machine.system().map_err(Stop::Usage)? {
        Some(system) => system,
        None => {
            parse(Path::new(spec))
                .map_err(|e| Stop::Usage(format!("{spec}: {e}")))?
                .system
        }
    };
    if let Some(why) = crate::machine::combined_node(&system) {
        return Err(Stop::Usage(format!("{spec}: {why}")));
    }
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

pub(super) fn simulate(machine: &Machine) -> Result<Sim, Stop> {
    Sim::new(machine.system.clone(), SimConfig::default()).map_err(|e| {
        Stop::Usage(format!(
            "{}: cannot simulate this machine: {e}",
            machine.label
        ))
    })
}
