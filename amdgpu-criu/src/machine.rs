//! One way to name a machine, for every command that takes one: a sysfs
//! topology tree (`DIR`, the directory holding `nodes/`) or a built-in
//! synthetic machine, `builtin:NAME` (`topology --sysfs`, `check --sysfs`,
//! `map --from/--to`, `demo --topology/--restore-topology`, `doctor
//! --sysfs`). A bare NAME that is no directory but a built-in name is taken
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
        Ok(Machine::Dir(path.to_path_buf()))
    }

    /// The built-in machine's topology, if this is one.
    pub fn builtin_system(&self) -> Option<System> {
        match self {
            Machine::Builtin(name) => builtin(name),
            Machine::Dir(_) => None,
        }
    }

    /// How output names this machine.
    pub fn label(&self) -> String {
        match self {
            Machine::Builtin(name) => format!("{PREFIX}{name}"),
            Machine::Dir(path) => path.display().to_string(),
        }
    }
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
