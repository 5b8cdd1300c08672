//! One way to name a machine, for every command that takes one: a sysfs
//! topology tree (`DIR`, the directory holding `nodes/`), a topology file
//! (`FILE`, what `topology --export` writes or `topology --json` prints) or
//! a built-in synthetic machine, `builtin:NAME` (`topology --sysfs`, `check
//! --sysfs`, `map --from/--to`, `demo --topology/--restore-topology`,
//! `doctor --simulate`, `ps --simulate`, `sim run|restore --machine`). A bare NAME that is no directory but a built-in name is taken
//! for `builtin:NAME`, with a hint on stderr; a path that does not exist
//! gets a hint listing the built-in names. Completion scripts offer the
//! `builtin:` names ([`MachineParser`]).

use std::path::{Path, PathBuf};

use amdgpu_topology::{builtin, builtin_names, System};
use clap::builder::{PossibleValue, TypedValueParser};

/// The prefix of a built-in machine's name.
pub const PREFIX: &str = "builtin:";

/// A machine as named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Machine {
    /// `builtin:NAME`.
    Builtin(String),
    /// A sysfs topology tree.
    Dir(PathBuf),
    /// A topology file ([`topology_file`](crate::topology_file)).
    File(PathBuf),
}

impl Machine {
    /// Reads a machine argument of `command`. Bare built-in names are
    /// accepted with a hint; unknown `builtin:` names are refused with the
    /// list of known ones.
    pub fn parse(command: &str, spec: &str) -> Result<Machine, String> {
        if let Some(name) = spec.strip_prefix(PREFIX) {
            if builtin(name).is_none() {
                return Err(format!(
                    "no built-in machine {spec:?} (known: {})",
                    known().join(", ")
                ));
            }
            return Ok(Machine::Builtin(name.to_owned()));
        }
        let path = Path::new(spec);
        if !path.exists() {
            if builtin(spec).is_some() {
                crate::out::note(&format!(
                    "amdgpu-criu {command}: hint: {spec:?} is read as builtin:{spec} \
                     (name built-in machines builtin:NAME; a bare name is a directory)"
                ));
                return Ok(Machine::Builtin(spec.to_owned()));
            }
            return Err(format!(
                "{spec}: no such directory (a sysfs topology tree, the directory holding \
                 nodes/); built-in machines are named builtin:NAME: {}",
                known().join(", ")
            ));
        }
        if path.is_dir() {
            Ok(Machine::Dir(path.to_path_buf()))
        } else {
            Ok(Machine::File(path.to_path_buf()))
        }
    }

    /// The topology of a built-in machine or a topology file; None for a
    /// sysfs tree, which the caller parses (and reports what it skipped).
    pub fn system(&self) -> Result<Option<System>, String> {
        match self {
            Machine::Builtin(name) => Ok(builtin(name)),
            Machine::File(path) => crate::topology_file::read(path).map(Some),
            Machine::Dir(_) => Ok(None),
        }
    }

    /// A `kfd-sim` simulator of this machine (a partial sysfs capture
    /// completed as the simulator completes it).
    pub fn simulate(&self) -> Result<kfd_sim::Sim, String> {
        let config = kfd_sim::SimConfig::default();
        let sim = match self {
            Machine::Builtin(name) => kfd_sim::Sim::builtin(name, config),
            Machine::Dir(dir) => kfd_sim::Sim::from_sysfs(dir, config),
            Machine::File(_) => match self.system()? {
                Some(system) => kfd_sim::Sim::new(system, config),
                None => unreachable!("a topology file always has a model"),
            },
        };
        sim.map_err(|e| format!("{}: {e}", self.label()))
    }

    /// How output names this machine.
    pub fn label(&self) -> String {
        match self {
            Machine::Builtin(name) => format!("{PREFIX}{name}"),
            Machine::Dir(path) | Machine::File(path) => path.display().to_string(),
        }
    }
}

/// Why no process on `system` can be checkpointed, if a node holds both
/// CPU cores and GPU SIMDs (the layout 2017-era kernels gave APUs such as
/// Carrizo and Bristol Ridge): a CRIU amdgpu image keeps each node as either
/// a CPU or a GPU device entry, and the plugin's own reader rejects a GPU
/// entry with CPU cores, so no checkpoint taken there could be restored.
pub fn combined_node(system: &System) -> Option<String> {
    let node = system
        .nodes
        .iter()
        .find(|n| n.prop("cpu_cores_count") > 0 && n.prop("simd_count") > 0)?;
    Some(format!(
        "node {} holds both CPU cores ({}) and GPU SIMDs ({}), the layout kernels of 2017 \
         gave APUs; a CRIU amdgpu image records every node as either a CPU or a GPU, so a \
         process on this machine cannot be checkpointed (a kernel that lists the APU's GPU \
         as a node of its own can)",
        node.id,
        node.prop("cpu_cores_count"),
        node.prop("simd_count")
    ))
}

/// Every built-in machine, as `builtin:NAME`.
pub fn known() -> Vec<String> {
    builtin_names()
        .iter()
        .map(|n| format!("{PREFIX}{n}"))
        .collect()
}

/// clap's parser of a machine argument: any string (checked by
/// [`Machine::parse`] when the command runs), with the built-in names as
/// the possible values shell completions offer.
#[derive(Clone, Debug, Default)]
pub struct MachineParser;

impl TypedValueParser for MachineParser {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(known);
        Some(Box::new(
            names.iter().map(|n| PossibleValue::new(n.as_str())),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_and_errors() {
        assert_eq!(
            Machine::parse("t", "builtin:mi210-8gpu-2hive").unwrap(),
            Machine::Builtin("mi210-8gpu-2hive".into())
        );
        assert_eq!(
            Machine::parse("t", "mi210-8gpu-2hive").unwrap(),
            Machine::Builtin("mi210-8gpu-2hive".into())
        );
        let e = Machine::parse("t", "builtin:nope").unwrap_err();
        assert!(e.contains("builtin:mi210-8gpu-2hive"), "{e}");
        let e = Machine::parse("t", "/nonexistent/topo").unwrap_err();
        assert!(
            e.contains("built-in machines are named builtin:NAME"),
            "{e}"
        );
        assert_eq!(
            Machine::parse("t", "/").unwrap(),
            Machine::Dir(PathBuf::from("/"))
        );
    }
}
