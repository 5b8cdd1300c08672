//! Making a command a client of a served machine: the interposer preloaded,
//! in its remote mode (`KFD_SIM_REMOTE`), told which machine it serves
//! (`KFD_SIM_MACHINE`, for the sysfs trees it writes).
//!
//! The command also needs the stand-in device nodes of a
//! [`crate::DeviceNamespace`] (or of a mount namespace it enters).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::companion::INTERPOSER;
use crate::{Endpoint, HostError};

/// The interposer library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interposer {
    lib: PathBuf,
}

impl Interposer {
    /// The interposer found as [`crate::companion`] describes.
    pub fn find() -> Result<Interposer, HostError> {
        INTERPOSER.find().map(Interposer::at)
    }

    /// The interposer at `lib`.
    pub fn at(lib: impl Into<PathBuf>) -> Interposer {
        Interposer { lib: lib.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.lib
    }

    /// The environment that makes a process a client of the machine served
    /// at `machine`: `(name, value)` pairs, the interposer first in
    /// `LD_PRELOAD` (before what the caller's environment preloads).
    pub fn environment(&self, machine: &Endpoint) -> Vec<(&'static str, OsString)> {
        let mut preload = OsString::from(self.lib.as_os_str());
        if let Some(more) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload.push(":");
            preload.push(more);
        }
        vec![
            ("LD_PRELOAD", preload),
            ("KFD_SIM_MACHINE", machine.topology.as_os_str().to_owned()),
            ("KFD_SIM_REMOTE", OsString::from(&machine.address)),
        ]
    }

    /// Sets [`Interposer::environment`] on `command` and removes what
    /// would take the process off the served machine (`KFD_SIM_SHM_DIR`:
    /// `/dev/shm` is the machine's).
    pub fn configure(&self, command: &mut Command, machine: &Endpoint) {
        for (name, value) in self.environment(machine) {
            command.env(name, value);
        }
        command.env_remove("KFD_SIM_SHM_DIR");
    }
}
