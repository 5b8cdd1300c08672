//! A simulated machine served to host processes, and what it answers about them.

use super::*;

/// A simulated machine served to host processes.
pub struct Served {
    /// The simulated machine.
    pub sim: Sim,
    /// What serves it.
    pub server: Server,
    /// What `KFD_SIM_MACHINE` names for it: its topology, written where
    /// the namespaces see it (the simulator's own tree is in the host's
    /// `/dev/shm`, which they replace).
    pub topology: tempfile::TempDir,
    /// The service host processes reach it through, ended with it.
    pub _service: kfd_sim::remote::HostService,
}

impl Served {
    /// `sim` served to host processes.
    pub fn new(sim: Sim) -> Served {
        let server = Server::new(&sim).expect("serve the machine");
        Served::with_server(sim, server)
    }

    /// `sim` served by `server` to host processes.
    pub fn with_server(sim: Sim, server: Server) -> Served {
        Served::observed(sim, server, Arc::new(|_| Verdict::Run))
    }

    /// `sim` served by `server` to host processes, `observer` seeing every
    /// call.
    pub fn observed(sim: Sim, server: Server, observer: kfd_sim::remote::Observer) -> Served {
        let service = server
            .serve_host_processes(observer)
            .expect("serve host processes");
        let topology = tempfile::Builder::new()
            .prefix("real-criu-topology")
            .tempdir()
            .expect("a topology directory");
        amdgpu_topology::write(sim.topology(), topology.path()).expect("write the topology");
        Served {
            topology,
            sim,
            server,
            _service: service,
        }
    }

    /// A machine served on a socket file, which clients in other network
    /// namespaces reach.
    pub fn builtin_on_a_path(name: &str) -> (Served, tempfile::TempDir) {
        let sim = Sim::builtin(name, SimConfig::default()).expect("the simulated machine");
        let dir = tempfile::Builder::new()
            .prefix("real-criu-socket")
            .tempdir()
            .expect("a socket directory");
        let server = Server::new_in(&sim, dir.path()).expect("serve the machine");
        (Served::with_server(sim, server), dir)
    }

    /// The built-in machine `name`, served.
    pub fn builtin(name: &str) -> Served {
        Served::new(Sim::builtin(name, SimConfig::default()).expect("the simulated machine"))
    }

    /// `name` with other gpu_ids, node order and render minors (shuffled,
    /// then moved up by 16: no minor the original machine used).
    pub fn renumbered(name: &str, seed: u64) -> Served {
        let system = amdgpu_topology::builtin(name).expect("a built-in machine");
        let mut system = amdgpu_topology::renumbered(&system, seed);
        for node in &mut system.nodes {
            let minor = node.prop("drm_render_minor");
            if minor != 0 {
                node.properties.set("drm_render_minor", minor + 16);
            }
        }
        Served::new(Sim::new(system, SimConfig::default()).expect("the renumbered machine"))
    }

    /// The render minors of its GPUs, comma-separated, as the script takes them.
    pub fn renders(&self) -> String {
        self.sim
            .gpus()
            .iter()
            .map(|g| g.render_minor.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Waits until the simulator holds nothing of any process.
    pub fn assert_empty(&self, what: &str) {
        let empty = wait_for(Duration::from_secs(20), || {
            let a = self.sim.accounting();
            a.kfd_processes == 0 && a.live_bos == 0 && a.open_fds() == 0 && a.cpu_mappings == 0
        });
        assert!(
            empty,
            "{what}: the simulator still holds {:?}",
            self.sim.accounting()
        );
    }
}
