//! Finding the shared objects that run beside a program on a served
//! machine: the interposer (`libkfd_sim_preload.so`), the CRIU plugin that
//! carries its connection (`libkfd_sim_remote_plugin.so`), and this
//! project's CRIU plugin (`libcriu_plugin_amdgpu.so`, installed as
//! `amdgpu_plugin.so`).
//!
//! Each is looked for, in order: in the environment variable naming it;
//! next to the running executable and in its `deps/` (a cargo build: the
//! executable and the libraries of one `cargo build` share a directory,
//! a test binary sits in `deps/` below it) and the directory above; in
//! `<prefix>/lib/amdgpu-criu/` (`<prefix>/lib/criu/` for the plugin) of an
//! installation whose `bin/` holds the executable.

use std::path::{Path, PathBuf};

use crate::HostError;

/// One companion library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Companion {
    /// What it is, for messages.
    pub what: &'static str,
    /// The environment variable that names it.
    pub var: &'static str,
    /// Its file name in a cargo build.
    pub built: &'static str,
    /// Its file name where it is installed.
    pub installed: &'static str,
    /// The directory below `<prefix>/lib` it is installed in.
    pub lib_dir: &'static str,
    /// How to get it.
    pub hint: &'static str,
}

/// The interposer.
pub const INTERPOSER: Companion = Companion {
    what: "the interposer",
    var: "KFD_SIM_PRELOAD_LIB",
    built: "libkfd_sim_preload.so",
    installed: "libkfd_sim_preload.so",
    lib_dir: "amdgpu-criu",
    hint: "build it with `make sim` or `cargo build --release -p kfd-sim-preload`, \
           or name it with KFD_SIM_PRELOAD_LIB",
};

/// The CRIU plugin that carries a process's connection to its machine.
pub const REMOTE_PLUGIN: Companion = Companion {
    what: "the connection plugin",
    var: "KFD_SIM_REMOTE_PLUGIN",
    built: "libkfd_sim_remote_plugin.so",
    installed: "kfd_sim_remote.so",
    lib_dir: "amdgpu-criu",
    hint: "build it with `make sim` or `cargo build --release -p kfd-sim-remote-plugin`, \
           or name it with KFD_SIM_REMOTE_PLUGIN",
};

/// This project's CRIU plugin.
pub const AMDGPU_PLUGIN: Companion = Companion {
    what: "this project's CRIU plugin",
    var: "AMDGPU_PLUGIN_SO",
    built: "libcriu_plugin_amdgpu.so",
    installed: "amdgpu_plugin.so",
    lib_dir: "criu",
    hint: "build it with `make` or `cargo build --release -p criu-plugin-amdgpu`, \
           or name it with AMDGPU_PLUGIN_SO",
};

impl Companion {
    /// The paths tried, in order, for the running executable.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let exe = std::env::current_exe().ok();
        self.candidates_for(exe.as_deref())
    }

    fn candidates_for(&self, exe: Option<&Path>) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Some(path) = std::env::var_os(self.var) {
            out.push(PathBuf::from(path));
            return out;
        }
        if let Some(dir) = exe.and_then(Path::parent) {
            out.push(dir.join(self.built));
            out.push(dir.join("deps").join(self.built));
            if let Some(up) = dir.parent() {
                out.push(up.join(self.built));
                out.push(up.join("lib").join(self.lib_dir).join(self.installed));
            }
        }
        out
    }

    /// The first candidate that is a file.
    pub fn find(&self) -> Result<PathBuf, HostError> {
        let tried = self.candidates();
        tried
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or(HostError::Companion {
                what: self.what,
                file: self.installed,
                tried,
                hint: self.hint,
            })
    }
}

/// This project's plugin: [`AMDGPU_PLUGIN`], checked to be ours (not
/// upstream's C plugin, which cannot restore what ours writes in every
/// case and does not know the simulator's stand-in files any better).
pub fn amdgpu_plugin() -> Result<PathBuf, HostError> {
    let path = AMDGPU_PLUGIN.find()?;
    match plugin_kind(&path) {
        Ok(PluginKind::Ours) => Ok(path),
        Ok(PluginKind::CPlugin) => Err(HostError::NotOurPlugin {
            path,
            kind: "upstream's C plugin",
        }),
        Ok(PluginKind::Other) => Err(HostError::NotOurPlugin {
            path,
            kind: "no amdgpu plugin at all",
        }),
        Err(e) => Err(HostError::io("cannot read", path, e)),
    }
}

/// Which amdgpu plugin a shared object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginKind {
    /// This project's.
    Ours,
    /// Upstream CRIU's C plugin.
    CPlugin,
    /// Neither.
    Other,
}

/// What the shared object at `path` is, from the strings it holds.
pub fn plugin_kind(path: &Path) -> std::io::Result<PluginKind> {
    let bytes = std::fs::read(path)?;
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    Ok(if has(b"amdgpu-criu-rs") {
        PluginKind::Ours
    } else if has(b"amdgpu_plugin") && has(b"CR_PLUGIN_DESC") {
        PluginKind::CPlugin
    } else {
        PluginKind::Other
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cargo_build_and_an_installation_are_both_searched() {
        let c = Companion {
            var: "KFD_SIM_HOST_TEST_UNSET_VARIABLE",
            ..INTERPOSER
        };
        let tried = c.candidates_for(Some(Path::new("/usr/local/bin/amdgpu-criu")));
        assert_eq!(
            tried,
            [
                "/usr/local/bin/libkfd_sim_preload.so",
                "/usr/local/bin/deps/libkfd_sim_preload.so",
                "/usr/local/libkfd_sim_preload.so",
                "/usr/local/lib/amdgpu-criu/libkfd_sim_preload.so",
            ]
            .map(PathBuf::from)
        );
        let tried = REMOTE_PLUGIN.candidates_for(Some(Path::new("/w/target/debug/deps/t-1")));
        assert!(tried.contains(&PathBuf::from(
            "/w/target/debug/libkfd_sim_remote_plugin.so"
        )));
    }
}
