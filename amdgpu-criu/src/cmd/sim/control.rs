//! The control socket of a served machine (`control` in its directory, a
//! unix stream socket only its user reaches): one request line, then the
//! answer.
//!
//! * `status`: one JSON line, the machine's processes and what the
//!   simulator holds of each ([`Status`]).
//! * `hold`: `ok`, then the machine does not end while the connection is
//!   open, even with no process left (a checkpoint taking files out of its
//!   `/dev/shm` after CRIU ended the processes).
//! * `stop`: `ok`, then the machine ends its processes and itself.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::registry::{MachineRecord, CONTROL};

/// What a machine serves.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Status {
    /// Its processes: every process below the serving one, parents first.
    pub processes: Vec<ServedProcess>,
}

/// One process of a machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServedProcess {
    /// Its pid.
    pub pid: u32,
    /// Its parent's.
    pub ppid: u32,
    /// `comm`.
    pub name: String,
    /// `running`, `sleeping`, `stopped`, `zombie`, ...
    pub state: String,
    /// What the simulator holds of it, when it opened `/dev/kfd`.
    pub gpu: Option<GpuState>,
}

/// A process's GPU state on the simulated machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuState {
    /// Its GPUs: the gpu_id it sees (its checkpointed one after a
    /// restore) and the machine's GPU it runs on.
    pub gpus: Vec<GpuPair>,
    /// Its buffer objects.
    pub bos: usize,
    /// Its user queues.
    pub queues: usize,
    /// Its events.
    pub events: usize,
    /// Whether its queues run.
    pub queues_running: bool,
}

/// A GPU of a process.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuPair {
    /// The gpu_id the process sees.
    pub seen: u32,
    /// The gpu_id of the machine's GPU.
    pub local: u32,
}

impl GpuState {
    /// The simulator's record of `pid`, if it has one.
    pub fn of(sim: &kfd_sim::Sim, pid: u32) -> Option<GpuState> {
        let k = sim.kfd_state(kfd_sim::Pid(pid))?;
        Some(GpuState {
            gpus: k
                .gpu_ids
                .iter()
                .map(|&(seen, local)| GpuPair { seen, local })
                .collect(),
            bos: k.bos,
            queues: k.queues,
            events: k.events,
            queues_running: k.queues_running() && !k.queues_paused,
        })
    }
}

/// The word for a `/proc` state letter.
pub fn state_word(state: char) -> &'static str {
    match state {
        'R' => "running",
        'S' | 'D' | 'I' => "sleeping",
        'T' | 't' => "stopped",
        'Z' => "zombie",
        'X' => "dead",
        _ => "unknown",
    }
}

fn connect(record: &MachineRecord) -> std::io::Result<UnixStream> {
    UnixStream::connect(record.dir().join(CONTROL))
}

fn request(stream: &mut UnixStream, what: &str) -> std::io::Result<String> {
    stream.write_all(format!("{what}\n").as_bytes())?;
    let mut line = String::new();
    BufReader::new(&*stream).read_line(&mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the machine closed its control socket",
        ));
    }
    Ok(line)
}

/// The machine's [`Status`].
pub fn status(record: &MachineRecord) -> std::io::Result<Status> {
    let mut stream = connect(record)?;
    let line = request(&mut stream, "status")?;
    serde_json::from_str(&line).map_err(std::io::Error::other)
}

/// Keeps the machine up while the returned connection is open.
pub fn hold(record: &MachineRecord) -> std::io::Result<UnixStream> {
    let mut stream = connect(record)?;
    let line = request(&mut stream, "hold")?;
    if line.trim() != "ok" {
        return Err(std::io::Error::other(format!("hold refused: {line}")));
    }
    Ok(stream)
}

/// Asks the machine to end its processes and itself.
pub fn stop(record: &MachineRecord) -> std::io::Result<()> {
    let mut stream = connect(record)?;
    request(&mut stream, "stop").map(drop)
}

/// The path of a machine directory's control socket.
pub fn socket_path(dir: &Path) -> std::path::PathBuf {
    dir.join(CONTROL)
}
