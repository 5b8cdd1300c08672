//! What can go wrong while serving a machine to host programs and driving
//! CRIU over them, one variant per cause a caller may act on.

use std::io;
use std::path::PathBuf;

/// An error of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A `builtin:NAME` names no built-in machine.
    #[error("no built-in machine {name:?} (known: {known})")]
    UnknownMachine {
        /// The name given.
        name: String,
        /// The built-in names, comma-separated.
        known: String,
    },
    /// The simulator refused the machine.
    #[error("cannot simulate {machine}: {source}")]
    Machine {
        /// How the machine was named.
        machine: String,
        /// The simulator's reason.
        source: kfd_sim::SimError,
    },
    /// A file or directory operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done ("cannot create", "cannot write", ...).
        what: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// The machine could not be served.
    #[error("cannot serve the simulated machine: {0}")]
    Serve(io::Error),
    /// The character device the stand-in nodes copy is missing or cannot
    /// be opened.
    #[error(
        "{} cannot stand in for the GPU device nodes: {reason} \
         (it must be a character device this user can open{})",
        path.display(),
        if *for_criu { "; CRIU needs a misc device it has no handler for, /dev/fuse: modprobe fuse" } else { "" }
    )]
    StandIn {
        /// The device tried.
        path: PathBuf,
        /// Why it does not do.
        reason: String,
        /// Whether CRIU will see the nodes (then only `/dev/fuse` does).
        for_criu: bool,
    },
    /// A library this crate runs programs with is not where it looks.
    #[error("{what} ({file}) not found; looked in {}: {hint}", list(tried))]
    Companion {
        /// What the file is ("the interposer", ...).
        what: &'static str,
        /// Its file name.
        file: &'static str,
        /// Every path tried, in order.
        tried: Vec<PathBuf>,
        /// How to get it.
        hint: &'static str,
    },
    /// A file named as this project's CRIU plugin is another one.
    #[error(
        "{} is not this project's amdgpu plugin ({kind}): build it with `make` or \
         `cargo build -p criu-plugin-amdgpu` and name it with AMDGPU_PLUGIN_SO",
        path.display()
    )]
    NotOurPlugin {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// No usable CRIU.
    #[error(
        "no usable CRIU: {}; install CRIU 3.17 or later, build one with `make criu` \
         (from a CRIU source tree, CRIU_SRC=DIR, or fetched with git, CRIU_REF=v4.2) \
         into $CRIU_BUILDS (default ~/.cache/criu-builds), or name one with --criu PATH",
        tried_list(tried)
    )]
    NoCriu {
        /// Each candidate and why it did not do.
        tried: Vec<(PathBuf, String)>,
    },
    /// A CRIU given by the caller does not work here.
    #[error("{} cannot be used: {reason}", path.display())]
    CriuUnusable {
        /// The binary.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The private mount namespace could not be made.
    #[error("cannot start {program} in a private mount namespace with the stand-in device nodes: {source}{}", privilege_hint(*unprivileged))]
    Namespace {
        /// The program.
        program: String,
        /// Whether it was tried as a user without root (with a user
        /// namespace).
        unprivileged: bool,
        /// The failing step's error.
        source: io::Error,
    },
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn tried_list(tried: &[(PathBuf, String)]) -> String {
    if tried.is_empty() {
        return "no criu on PATH and no CRIU build".to_owned();
    }
    tried
        .iter()
        .map(|(p, why)| format!("{}: {why}", p.display()))
        .collect::<Vec<_>>()
        .join("; ")
}

fn privilege_hint(unprivileged: bool) -> &'static str {
    if unprivileged {
        " (without root this needs unprivileged user namespaces: \
         sysctl kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0, \
         or run as root)"
    } else {
        ""
    }
}

impl HostError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        HostError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
