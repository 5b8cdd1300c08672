//! A simulated machine served to host processes: the [`Sim`], its
//! [`Server`] accepting every host process that connects (each the
//! simulated process of its own pid), and the two directories the
//! processes on it see: the machine's topology tree (what
//! `KFD_SIM_MACHINE` names in their environment) and the directory their
//! private `/dev/shm` is (the thunk's shared memory and semaphore, CRIU's
//! link-remap files).
//!
//! It never starts a process: [`crate::DeviceNamespace`] and
//! [`crate::Interposer`] make a command one of its clients.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kfd_sim::remote::{HostService, Observer, Server, Verdict};
use kfd_sim::{Sim, SimConfig};

use crate::HostError;

/// The prefix of a built-in machine's name.
pub const BUILTIN_PREFIX: &str = "builtin:";

/// Where a machine's topology comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineSource {
    /// `builtin:NAME` ([`amdgpu_topology::builtin_names`]).
    Builtin(String),
    /// A topology tree (the directory holding `nodes/`, as
    /// `/sys/class/kfd/kfd/topology`); what a partial capture lacks is
    /// filled in as the simulator does.
    Sysfs(PathBuf),
}

/// A machine: its topology, and optionally the same machine as another
/// host numbers it ([`amdgpu_topology::renumbered`]: other gpu_ids, node
/// order, render minors, PCI buses and hive ids; everything the plugin's
/// checks compare unchanged), the usual "another machine" a checkpoint is
/// restored on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSpec {
    /// The topology.
    pub source: MachineSource,
    /// Renumbered with this seed.
    pub renumber: Option<u64>,
}

impl MachineSpec {
    /// Reads `builtin:NAME` or a directory (not renumbered).
    pub fn parse(spec: &str) -> Result<MachineSpec, HostError> {
        let source = match spec.strip_prefix(BUILTIN_PREFIX) {
            Some(name) if amdgpu_topology::builtin(name).is_some() => {
                MachineSource::Builtin(name.to_owned())
            }
            Some(name) => {
                return Err(HostError::UnknownMachine {
                    name: name.to_owned(),
                    known: amdgpu_topology::builtin_names()
                        .iter()
                        .map(|n| format!("{BUILTIN_PREFIX}{n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            }
            None => MachineSource::Sysfs(PathBuf::from(spec)),
        };
        Ok(MachineSpec {
            source,
            renumber: None,
        })
    }

    /// The same, renumbered with `seed`.
    pub fn renumbered(self, seed: Option<u64>) -> MachineSpec {
        MachineSpec {
            renumber: seed,
            ..self
        }
    }

    /// The topology as named (`builtin:NAME` or the directory).
    pub fn name(&self) -> String {
        match &self.source {
            MachineSource::Builtin(name) => format!("{BUILTIN_PREFIX}{name}"),
            MachineSource::Sysfs(dir) => dir.display().to_string(),
        }
    }

    /// How output names the machine: [`MachineSpec::name`], with the seed
    /// when renumbered.
    pub fn label(&self) -> String {
        match self.renumber {
            Some(seed) => format!("{} renumbered (seed {seed})", self.name()),
            None => self.name(),
        }
    }

    /// The machine's topology.
    pub fn system(&self) -> Result<amdgpu_topology::System, HostError> {
        let system = match &self.source {
            MachineSource::Builtin(name) => {
                amdgpu_topology::builtin(name).ok_or_else(|| HostError::UnknownMachine {
                    name: name.clone(),
                    known: amdgpu_topology::builtin_names().join(", "),
                })?
            }
            MachineSource::Sysfs(dir) => {
                let parsed = amdgpu_topology::parse(dir).map_err(|e| HostError::Machine {
                    machine: self.name(),
                    source: kfd_sim::SimError::Topology {
                        path: dir.clone(),
                        reason: e.to_string(),
                    },
                })?;
                let mut system = parsed.system;
                amdgpu_topology::synthesize_missing(&mut system);
                system
            }
        };
        Ok(match self.renumber {
            Some(seed) => amdgpu_topology::renumbered(&system, seed),
            None => system,
        })
    }

    /// The simulated machine.
    pub fn build(&self, config: SimConfig) -> Result<Sim, HostError> {
        Sim::new(self.system()?, config).map_err(|source| HostError::Machine {
            machine: self.label(),
            source,
        })
    }
}

/// What a client, or a process preparing one, needs to know of a served
/// machine: from [`ServedMachine::endpoint`], or recorded by the process
/// serving it for others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The address clients connect to (`KFD_SIM_REMOTE`).
    pub address: String,
    /// The machine's topology tree (`KFD_SIM_MACHINE`).
    pub topology: PathBuf,
    /// The directory the clients' `/dev/shm` is.
    pub shm: PathBuf,
    /// The render minors of its GPUs, in topology order.
    pub render_minors: Vec<u32>,
}

/// Where the served machine listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listen {
    /// An abstract unix socket: nothing to clean up, reachable from this
    /// process's network namespace only.
    Abstract,
    /// A socket file in the machine's directory, for clients in other
    /// network namespaces (a container's).
    InDirectory,
}

/// A simulated machine served to host processes (see the module docs).
///
/// Dropping it stops accepting clients; processes still connected lose
/// their machine at their next device call.
pub struct ServedMachine {
    // Dropped in this order: no new client, then the listening socket.
    service: HostService,
    server: Server,
    sim: Sim,
    label: String,
    topology: PathBuf,
    shm: PathBuf,
}

impl std::fmt::Debug for ServedMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedMachine")
            .field("label", &self.label)
            .field("address", &self.server.address())
            .field("topology", &self.topology)
            .finish_non_exhaustive()
    }
}

impl ServedMachine {
    /// Serves `sim` (named `label` in messages) to every host process that
    /// connects, `observer` seeing each call. `dir` (which must exist)
    /// receives `topology/` and `shm/`; it is the caller's to remove once
    /// the machine is dropped and no process uses it.
    pub fn serve(
        sim: Sim,
        label: impl Into<String>,
        dir: &Path,
        listen: Listen,
        observer: Option<Observer>,
    ) -> Result<ServedMachine, HostError> {
        let topology = dir.join("topology");
        amdgpu_topology::write(sim.topology(), &topology)
            .map_err(|e| HostError::io("cannot write the topology to", &topology, e))?;
        let shm = dir.join("shm");
        std::fs::create_dir(&shm).map_err(|e| HostError::io("cannot create", &shm, e))?;
        // The interposer in every process writes its sysfs trees under
        // its /dev/shm, which is this directory: open to the user the
        // processes run as whoever serves them.
        set_mode(&shm, 0o1777)?;
        let server = match listen {
            Listen::Abstract => Server::new(&sim),
            Listen::InDirectory => Server::new_in(&sim, dir),
        }
        .map_err(HostError::Serve)?;
        let observer = observer.unwrap_or_else(|| Arc::new(|_| Verdict::Run));
        let service = server
            .serve_host_processes(observer)
            .map_err(HostError::Serve)?;
        Ok(ServedMachine {
            service,
            server,
            sim,
            label: label.into(),
            topology,
            shm,
        })
    }

    /// What a client needs to reach the machine.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            address: self.server.address().to_owned(),
            topology: self.topology.clone(),
            shm: self.shm.clone(),
            render_minors: self.render_minors(),
        }
    }

    /// The simulator.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// How messages name the machine.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The address clients connect to (`KFD_SIM_REMOTE`).
    pub fn address(&self) -> &str {
        self.server.address()
    }

    /// The machine's topology tree (`KFD_SIM_MACHINE`).
    pub fn topology_dir(&self) -> &Path {
        &self.topology
    }

    /// The directory the processes' `/dev/shm` is.
    pub fn shm_dir(&self) -> &Path {
        &self.shm
    }

    /// The render minors of the machine's GPUs, in topology order.
    pub fn render_minors(&self) -> Vec<u32> {
        self.sim.gpus().iter().map(|g| g.render_minor).collect()
    }

    /// Whether the simulator holds nothing of any process (no KFD
    /// process, BO, open device file or CPU mapping).
    pub fn holds_nothing(&self) -> bool {
        let a = self.sim.accounting();
        a.kfd_processes == 0 && a.live_bos == 0 && a.open_fds() == 0 && a.cpu_mappings == 0
    }

    /// Stops accepting clients and gives back the simulator (for a caller
    /// that inspects it after its processes ended).
    pub fn into_sim(self) -> Sim {
        let ServedMachine {
            service,
            server,
            sim,
            ..
        } = self;
        drop(service);
        drop(server);
        sim
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), HostError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| HostError::io("cannot set the permissions of", path, e))
}
