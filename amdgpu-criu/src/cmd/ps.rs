//! `amdgpu-criu ps`: the ROCm processes of this machine (those holding
//! `/dev/kfd`), their GPUs, VRAM and GTT in use per GPU, queues, and what a
//! checkpoint would write (bytes, and the time at a given storage rate).
//! Nothing is paused or attached: everything comes from files the kernel
//! keeps up to date.
//!
//! - `/sys/class/kfd/kfd/proc/<pid>/` (amdkfd's `kfd_process.c`): one
//!   directory per KFD process; `vram_<gpu_id>` (bytes of VRAM the process
//!   allocated on the GPU, the id in decimal) and `queues/<id>/{type,gpuid}`.
//! - `/proc/<pid>/fd/*` and `/proc/<pid>/fdinfo/*` of its render nodes
//!   (DRM fdinfo): `drm-memory-gtt` / `drm-total-gtt` (and `-vram`) in KiB,
//!   the BOs of the file's VM, which for the compute VM are the KFD BOs.
//! - The KFD topology (`/sys/class/kfd/kfd/topology`), to name each render
//!   node's GPU.
//!
//! A checkpoint writes the contents of the VRAM and GTT BOs: per GPU, the
//! larger of KFD's VRAM count and the render files' VRAM, plus their GTT.
//! Reading another user's fdinfo needs privileges; what could not be read
//! is shown as unknown, never as zero.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;
use serde_json::json;

use crate::out::{gpu_id, human_bytes, plural};

/// Arguments of `ps`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu ps
  amdgpu-criu ps --pid 4242 --rate 500M     # a checkpoint onto a 500 MiB/s disk
  amdgpu-criu ps --json | jq '.processes[].checkpoint_bytes'
  amdgpu-criu ps --simulate builtin:mi210-8gpu-2hive   # two simulated ROCm processes

Exit status: 0 listed (also none), 1 no AMD GPU driver or --pid not a ROCm process, 2 usage errors")]
pub struct Args {
    /// Only this process.
    #[arg(long)]
    pub pid: Option<u32>,
    /// Storage write rate for the time estimate, bytes per second with
    /// binary units (`2G`, `500M`, `1.5GiB/s`).
    #[arg(long, default_value = "2G", value_name = "RATE")]
    pub rate: String,
    /// List the processes of a simulated machine instead (`builtin:NAME`,
    /// a sysfs tree or a topology file, run by kfd-sim with a
    /// TensorFlow-like and a basic workload).
    #[arg(long, value_name = "builtin:NAME|DIR|FILE", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub simulate: Option<String>,
    /// Print one JSON object (`rate_bytes_per_second`, `processes`).
    #[arg(long)]
    pub json: bool,
}

/// Where the files are.
pub struct Roots {
    /// `/sys/class/kfd/kfd`.
    pub kfd: PathBuf,
    /// `/proc`.
    pub proc: PathBuf,
    /// `/sys/class/kfd/kfd/topology`.
    pub topology: PathBuf,
}

/// One GPU of one process.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuUse {
    /// The GPU's id.
    #[serde(serialize_with = "crate::json64::serialize_gpu_id")]
    pub gpu_id: u32,
    /// Its render minor, when the topology names it.
    pub render_minor: Option<u32>,
    /// VRAM in use, bytes.
    pub vram_bytes: u64,
    /// GTT in use, bytes; unknown when no render fdinfo was readable.
    pub gtt_bytes: Option<u64>,
    /// Queues on the GPU.
    pub queues: u32,
}

/// Whether a checkpoint of the process can start now, and why not.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// Whether CRIU can take it now (the machine's own checks are
    /// `doctor`'s).
    pub checkpointable: bool,
    /// Why, in words.
    pub why: String,
}

/// One ROCm process.
#[derive(Clone, Debug, Serialize)]
pub struct RocmProcess {
    /// Its pid.
    pub pid: u32,
    /// `comm`.
    pub name: String,
    /// Its owner (`/proc/PID/status` Uid, named from `/etc/passwd`), when
    /// readable.
    pub user: Option<String>,
    /// `/proc/PID/cmdline`, arguments joined by spaces, when readable.
    pub cmdline: Option<String>,
    /// Its cgroup (the v2 path, else the first v1 hierarchy's).
    pub cgroup: Option<String>,
    /// The container (64-hex id of Docker, Podman, containerd, CRI-O) or
    /// Kubernetes pod (`pod<uid>`) its cgroup names.
    pub container: Option<String>,
    /// What it is doing: `running`, `stopped`, `traced by PID (NAME)`,
    /// `being checkpointed by criu (pid N)`, `exiting`.
    pub state: String,
    /// Whether its GPU queues are paused: true while a CRIU dump holds it
    /// (the dump pauses them and resumes them at its end); null when the
    /// kernel does not say (it shows no pause flag: after a dump killed
    /// without its guardian, `amdgpu-criu unpause --pid` resumes them).
    pub queues_paused: Option<bool>,
    /// Whether a checkpoint can start now.
    pub verdict: Verdict,
    /// Per GPU, by gpu_id.
    pub gpus: Vec<GpuUse>,
    /// All its queues.
    pub queues: u32,
    /// What a checkpoint would write of GPU memory (VRAM + GTT contents).
    pub checkpoint_bytes: u64,
    /// Whether every GPU's GTT could be read (else `checkpoint_bytes` is a
    /// lower bound).
    pub complete: bool,
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `drm-memory-<region>` or `drm-total-<region>` of an fdinfo text, bytes.
fn fdinfo_bytes(text: &str, region: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        let key = key.trim();
        if key != format!("drm-memory-{region}") && key != format!("drm-total-{region}") {
            return None;
        }
        let mut words = value.split_whitespace();
        let n: u64 = words.next()?.parse().ok()?;
        let unit = match words.next() {
            None => 1,
            Some("KiB") => 1 << 10,
            Some("MiB") => 1 << 20,
            Some("GiB") => 1 << 30,
            Some(_) => return None,
        };
        n.checked_mul(unit)
    })
}

/// The render minor → gpu_id table of the topology (empty when unreadable).
fn render_gpus(topology: &Path) -> BTreeMap<u32, u32> {
    let Ok(parsed) = amdgpu_topology::parse(topology) else {
        return BTreeMap::new();
    };
    let Ok(t) = amdgpu_topology::devices::DeviceTopology::from_system(&parsed.system) else {
        return BTreeMap::new();
    };
    t.gpus()
        .map(|g| (g.props.drm_render_minor, g.gpu_id))
        .collect()
}

/// The ROCm processes under `roots` (all, or `pid`), in pid order.
pub fn scan(roots: &Roots, only: Option<u32>) -> Result<Vec<RocmProcess>, String> {
    let proc_dir = roots.kfd.join("proc");
    let entries = std::fs::read_dir(&proc_dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "{} does not exist: no AMD GPU driver (amdgpu with KFD) on this machine, so no \
                 ROCm processes",
                proc_dir.display()
            )
        } else {
            format!("{}: {e}", proc_dir.display())
        }
    })?;
    let mut pids: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|p| only.is_none_or(|o| o == *p))
        .collect();
    pids.sort_unstable();
    let minors = render_gpus(&roots.topology);
    Ok(pids
        .into_iter()
        .map(|pid| process(roots, &proc_dir.join(pid.to_string()), pid, &minors))
        .collect())
}

fn process(roots: &Roots, dir: &Path, pid: u32, minors: &BTreeMap<u32, u32>) -> RocmProcess {
    let mut gpus: BTreeMap<u32, GpuUse> = BTreeMap::new();
    let entry = |gpus: &mut BTreeMap<u32, GpuUse>, id: u32| {
        let minor = minors.iter().find(|(_, g)| **g == id).map(|(m, _)| *m);
        gpus.entry(id)
            .or_insert_with(|| GpuUse {
                gpu_id: id,
                render_minor: minor,
                ..GpuUse::default()
            })
            .gpu_id
    };
    if let Ok(files) = std::fs::read_dir(dir) {
        for f in files.filter_map(Result::ok) {
            let name = f.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_prefix("vram_").and_then(|i| i.parse().ok()) {
                let id = entry(&mut gpus, id);
                let bytes = read_trimmed(&f.path())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if let Some(g) = gpus.get_mut(&id) {
                    g.vram_bytes = bytes;
                }
            }
        }
    }
    let mut queues = 0;
    if let Ok(qs) = std::fs::read_dir(dir.join("queues")) {
        for q in qs.filter_map(Result::ok) {
            queues += 1;
            if let Some(id) = read_trimmed(&q.path().join("gpuid")).and_then(|v| v.parse().ok()) {
                let id = entry(&mut gpus, id);
                if let Some(g) = gpus.get_mut(&id) {
                    g.queues += 1;
                }
            }
        }
    }
    // DRM fdinfo of the render fds.
    let pid_dir = roots.proc.join(pid.to_string());
    let mut fd_vram: BTreeMap<u32, u64> = BTreeMap::new();
    let mut fd_gtt: BTreeMap<u32, u64> = BTreeMap::new();
    if let Ok(fds) = std::fs::read_dir(pid_dir.join("fd")) {
        for fd in fds.filter_map(Result::ok) {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let Some(minor) = target
                .to_str()
                .and_then(|t| t.strip_prefix("/dev/dri/renderD"))
                .and_then(|m| m.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(&id) = minors.get(&minor) else {
                continue;
            };
            let Ok(info) = std::fs::read_to_string(pid_dir.join("fdinfo").join(fd.file_name()))
            else {
                continue;
            };
            if let Some(v) = fdinfo_bytes(&info, "vram") {
                *fd_vram.entry(id).or_default() += v;
            }
            if let Some(g) = fdinfo_bytes(&info, "gtt") {
                *fd_gtt.entry(id).or_default() += g;
            }
        }
    }
    for (id, v) in &fd_vram {
        let id = entry(&mut gpus, *id);
        if let Some(g) = gpus.get_mut(&id) {
            g.vram_bytes = g.vram_bytes.max(*v);
        }
    }
    for (id, v) in &fd_gtt {
        let id = entry(&mut gpus, *id);
        if let Some(g) = gpus.get_mut(&id) {
            g.gtt_bytes = Some(*v);
        }
    }
    let complete = gpus.values().all(|g| g.gtt_bytes.is_some());
    let checkpoint_bytes = gpus
        .values()
        .map(|g| g.vram_bytes + g.gtt_bytes.unwrap_or(0))
        .sum();
    // In render-node order, as the topology numbers the GPUs.
    let mut gpus: Vec<GpuUse> = gpus.into_values().collect();
    gpus.sort_by_key(|g| (g.render_minor.is_none(), g.render_minor, g.gpu_id));
    let name = read_trimmed(&pid_dir.join("comm")).unwrap_or_else(|| "?".into());
    let task = Task::read(&roots.proc, pid);
    let cgroup = std::fs::read_to_string(pid_dir.join("cgroup"))
        .ok()
        .and_then(|text| cgroup_path(&text));
    let container = cgroup.as_deref().and_then(container_of);
    let (state, queues_paused, verdict) = task.judge(&roots.proc, complete);
    RocmProcess {
        pid,
        name,
        user: task.user(),
        cmdline: std::fs::read(pid_dir.join("cmdline")).ok().and_then(|raw| {
            let args: Vec<String> = raw
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            (!args.is_empty()).then(|| args.join(" "))
        }),
        cgroup,
        container,
        state,
        queues_paused,
        verdict,
        gpus,
        queues,
        checkpoint_bytes,
        complete,
    }
}

/// What `/proc/PID/status` says of a process.
#[derive(Default)]
struct Task {
    /// The `State:` letter (`R`, `S`, `T`, `t`, `Z`, ...).
    state: Option<char>,
    /// `Uid:` (real).
    uid: Option<u32>,
    /// `TracerPid:`, when not 0.
    tracer: Option<u32>,
}

impl Task {
    fn read(proc: &Path, pid: u32) -> Task {
        let Ok(status) = std::fs::read_to_string(proc.join(pid.to_string()).join("status")) else {
            return Task::default();
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
        };
        Task {
            state: field("State:").and_then(|s| s.chars().next()),
            uid: field("Uid:").and_then(|s| s.split_whitespace().next()?.parse().ok()),
            tracer: field("TracerPid:")
                .and_then(|s| s.parse().ok())
                .filter(|&t| t != 0),
        }
    }

    /// The owner's name from `/etc/passwd`, else the uid.
    fn user(&self) -> Option<String> {
        let uid = self.uid?;
        let named = std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|passwd| {
                passwd.lines().find_map(|l| {
                    let mut f = l.split(':');
                    let name = f.next()?;
                    (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
                })
            });
        Some(named.unwrap_or_else(|| uid.to_string()))
    }

    /// Its state in words, whether its queues are known to be paused, and
    /// whether a checkpoint can start now.
    fn judge(&self, proc: &Path, complete: bool) -> (String, Option<bool>, Verdict) {
        let lower_bound = if complete {
            ""
        } else {
            " (its GTT could not be read: the size is a lower bound; run as root)"
        };
        if let Some(tracer) = self.tracer {
            let name = read_trimmed(&proc.join(tracer.to_string()).join("comm"))
                .unwrap_or_else(|| "?".into());
            if name == "criu" {
                return (
                    format!("being checkpointed by criu (pid {tracer})"),
                    Some(true),
                    Verdict {
                        checkpointable: false,
                        why: format!(
                            "criu (pid {tracer}) is checkpointing it now; its GPU queues are \
                             paused until the dump ends"
                        ),
                    },
                );
            }
            return (
                format!("traced by {tracer} ({name})"),
                None,
                Verdict {
                    checkpointable: false,
                    why: format!(
                        "{name} (pid {tracer}) traces it, and CRIU cannot seize a traced \
                         process: detach {name} first"
                    ),
                },
            );
        }
        match self.state {
            Some('Z' | 'X') => (
                "exiting".into(),
                None,
                Verdict {
                    checkpointable: false,
                    why: "it is exiting".into(),
                },
            ),
            Some(state) => (
                if matches!(state, 'T' | 't') {
                    "stopped".into()
                } else {
                    "running".into()
                },
                None,
                Verdict {
                    checkpointable: true,
                    why: format!("nothing holds it{lower_bound}"),
                },
            ),
            None => (
                "unknown".into(),
                None,
                Verdict {
                    checkpointable: true,
                    why: format!(
                        "its status is not readable here (another user's process: run as \
                         root to know more){lower_bound}"
                    ),
                },
            ),
        }
    }
}

/// The cgroup path of a `/proc/PID/cgroup` text: the v2 one (`0::PATH`),
/// else the first hierarchy's.
fn cgroup_path(text: &str) -> Option<String> {
    let paths: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let (id, _, path) = (f.next()?, f.next()?, f.next()?);
            Some((id, path))
        })
        .collect();
    paths
        .iter()
        .find(|(id, _)| *id == "0")
        .or_else(|| paths.first())
        .map(|(_, p)| (*p).to_owned())
}

/// The container id (the last 64-hex run: `docker-<id>.scope`,
/// `libpod-<id>`, `cri-containerd-<id>`, `crio-<id>`) or the Kubernetes
/// pod (`pod<uid>`) a cgroup path names.
fn container_of(path: &str) -> Option<String> {
    let hex64 = path
        .split(|c: char| !c.is_ascii_hexdigit())
        .rfind(|run| run.len() == 64)
        .map(str::to_owned);
    hex64.or_else(|| {
        path.split('/').rev().find_map(|part| {
            let part = part.strip_suffix(".slice").unwrap_or(part);
            let pod = part.rsplit('-').next()?;
            pod.starts_with("pod").then(|| pod.replace('_', "-"))
        })
    })
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    #[test]
    fn cgroups_name_their_container_or_pod() {
        let docker = format!("0::/system.slice/docker-{}.scope\n", "ab".repeat(32));
        let path = cgroup_path(&docker).unwrap();
        assert_eq!(container_of(&path), Some("ab".repeat(32)));
        let pod = "0::/kubepods.slice/kubepods-besteffort.slice/\
                   kubepods-besteffort-pod1c2d_33e4.slice/cri-containerd-x.scope\n";
        assert_eq!(
            container_of(&cgroup_path(pod).unwrap()),
            Some("pod1c2d-33e4".to_owned())
        );
        let v1 = "12:pids:/user.slice\n11:memory:/user.slice\n";
        assert_eq!(cgroup_path(v1).as_deref(), Some("/user.slice"));
        assert_eq!(container_of("/user.slice"), None);
    }

    fn fake_proc(pid: u32, status: &str) -> tempfile::TempDir {
        let proc = tempfile::tempdir().unwrap();
        let dir = proc.path().join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), status).unwrap();
        proc
    }

    #[test]
    fn a_process_criu_traces_is_being_checkpointed_with_its_queues_paused() {
        let proc = fake_proc(
            10,
            "State:\tt (tracing stop)\nUid:\t0\t0\t0\t0\nTracerPid:\t77\n",
        );
        std::fs::create_dir_all(proc.path().join("77")).unwrap();
        std::fs::write(proc.path().join("77/comm"), "criu\n").unwrap();
        let (state, paused, verdict) = Task::read(proc.path(), 10).judge(proc.path(), true);
        assert_eq!(state, "being checkpointed by criu (pid 77)");
        assert_eq!(paused, Some(true));
        assert!(!verdict.checkpointable);

        std::fs::write(proc.path().join("77/comm"), "gdb\n").unwrap();
        let (state, paused, verdict) = Task::read(proc.path(), 10).judge(proc.path(), true);
        assert_eq!(state, "traced by 77 (gdb)");
        assert_eq!(paused, None);
        assert!(verdict.why.contains("detach gdb first"), "{}", verdict.why);
    }

    #[test]
    fn a_running_process_is_checkpointable_and_its_owner_named() {
        let proc = fake_proc(
            10,
            "State:\tS (sleeping)\nUid:\t0\t0\t0\t0\nTracerPid:\t0\n",
        );
        let task = Task::read(proc.path(), 10);
        assert_eq!(task.user().as_deref(), Some("root"));
        let (state, paused, verdict) = task.judge(proc.path(), false);
        assert_eq!(state, "running");
        assert_eq!(paused, None);
        assert!(verdict.checkpointable);
        assert!(verdict.why.contains("lower bound"), "{}", verdict.why);
    }
}

/// A rate such as `2G`, `500M`, `1.5GiB/s`, `100MB/s` (binary units), in
/// bytes per second.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (number, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let scale = match unit {
        "" => 1.0,
        "K" | "k" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "--rate {text}: unknown unit {unit:?} (use K, M, G or T)"
            ))
        }
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("--rate {text}: not a number of bytes per second (e.g. 2G, 500M)"))?;
    let rate = n * scale;
    if rate.is_finite() && rate > 0.0 {
        Ok(rate)
    } else {
        Err(format!("--rate {text}: must be more than 0"))
    }
}

fn seconds_text(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.0} ms", seconds * 1000.0)
    } else if seconds < 120.0 {
        format!("{seconds:.1} s")
    } else {
        format!("{:.1} min", seconds / 60.0)
    }
}

fn print(processes: &[RocmProcess], rate: f64, rate_text: &str) {
    if processes.is_empty() {
        println!("no ROCm processes (none holds /dev/kfd)");
        return;
    }
    for p in processes {
        let seconds = p.checkpoint_bytes as f64 / rate;
        println!(
            "pid {} ({}): {}, {}, checkpoint {}{} ~{} at {}/s",
            p.pid,
            p.name,
            plural(p.gpus.len() as u64, "GPU"),
            plural(p.queues, "queue"),
            if p.complete { "" } else { "at least " },
            human_bytes(p.checkpoint_bytes),
            seconds_text(seconds),
            rate_text
        );
        println!(
            "  {}: {}",
            if p.verdict.checkpointable {
                "checkpointable"
            } else {
                "not checkpointable now"
            },
            p.verdict.why
        );
        println!(
            "  state {}, GPU queues {}",
            p.state,
            match p.queues_paused {
                Some(true) => "paused",
                Some(false) => "running",
                None => "not shown by the kernel",
            }
        );
        let unknown = || "?".to_owned();
        println!(
            "  user {}, cgroup {}{}",
            p.user.clone().unwrap_or_else(unknown),
            p.cgroup.clone().unwrap_or_else(unknown),
            p.container
                .as_ref()
                .map(|c| format!(" (container {})", &c[..c.len().min(12)]))
                .unwrap_or_default()
        );
        if let Some(cmdline) = &p.cmdline {
            println!("  {cmdline}");
        }
        println!(
            "  {:<8} {:<10} {:>10} {:>10} {:>6}",
            "gpu_id", "render", "VRAM", "GTT", "queues"
        );
        for g in &p.gpus {
            println!(
                "  {:<8} {:<10} {:>10} {:>10} {:>6}",
                gpu_id(g.gpu_id),
                g.render_minor
                    .map_or_else(|| "?".to_owned(), |m| format!("renderD{m}")),
                human_bytes(g.vram_bytes),
                g.gtt_bytes.map_or_else(|| "?".to_owned(), human_bytes),
                g.queues
            );
        }
    }
}

/// Runs `ps`.
pub fn run(args: Args) -> ExitCode {
    let rate = match parse_rate(&args.rate) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("amdgpu-criu ps: {e}");
            return ExitCode::from(2);
        }
    };
    let rate_text = human_bytes(rate as u64);
    let found = match &args.simulate {
        None => scan(
            &Roots {
                kfd: PathBuf::from("/sys/class/kfd/kfd"),
                proc: PathBuf::from("/proc"),
                topology: PathBuf::from(amdgpu_topology::parse::DEFAULT_ROOT),
            },
            args.pid,
        ),
        Some(spec) => simulated(spec, args.pid),
    };
    let processes = match found {
        Ok(p) => p,
        Err(e) => {
            eprintln!("amdgpu-criu ps: {e}");
            return ExitCode::from(1);
        }
    };
    if args.json {
        let list: Vec<serde_json::Value> = processes
            .iter()
            .map(|p| {
                let mut v = serde_json::to_value(p).unwrap_or_default();
                if let Some(map) = v.as_object_mut() {
                    map.insert(
                        "estimated_seconds".into(),
                        json!(p.checkpoint_bytes as f64 / rate),
                    );
                }
                v
            })
            .collect();
        println!(
            "{:#}",
            json!({ "rate_bytes_per_second": rate, "processes": list })
        );
    } else {
        print(&processes, rate, &rate_text);
    }
    match args.pid {
        Some(pid)
            if processes.is_empty()
                && args.simulate.is_none()
                && !Path::new(&format!("/proc/{pid}")).exists() =>
        {
            eprintln!("amdgpu-criu ps: no process {pid}");
            ExitCode::from(1)
        }
        Some(pid) if processes.is_empty() => {
            eprintln!("amdgpu-criu ps: pid {pid} holds no /dev/kfd (not a ROCm process)");
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}

/// Two workloads on a simulated machine, listed from the files kfd-sim
/// writes as the kernel lays them out.
fn simulated(spec: &str, only: Option<u32>) -> Result<Vec<RocmProcess>, String> {
    use kfd_sim::workload::{Profile, Workload};
    let machine = crate::machine::Machine::parse("ps", spec)?;
    let label = machine.label();
    let sim = machine.simulate()?;
    let mut apps = Vec::new();
    for profile in [
        Profile::TensorFlowLike { bo_bytes: 4 << 20 },
        Profile::Basic,
    ] {
        let mut app =
            Workload::launch(&sim, &profile).map_err(|e| format!("{label}: workload: {e}"))?;
        app.step().map_err(|e| format!("{label}: workload: {e}"))?;
        apps.push(app);
    }
    let files = sim
        .write_proc_files()
        .map_err(|e| format!("{label}: writing the simulated /proc and sysfs: {e}"))?;
    scan(
        &Roots {
            kfd: files.kfd_root(),
            proc: files.proc_root(),
            topology: sim.sysfs_root(),
        },
        only,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("2G").unwrap(), 2.0 * (1u64 << 30) as f64);
        assert_eq!(parse_rate("500M/s").unwrap(), 500.0 * (1u64 << 20) as f64);
        assert_eq!(parse_rate("1.5GiB/s").unwrap(), 1.5 * (1u64 << 30) as f64);
        assert_eq!(parse_rate("4096").unwrap(), 4096.0);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("3X").is_err());
    }

    #[test]
    fn fdinfo_forms() {
        let old = "drm-driver:\tamdgpu\ndrm-memory-vram:\t1024 KiB\ndrm-memory-gtt: \t8 KiB\n";
        assert_eq!(fdinfo_bytes(old, "vram"), Some(1 << 20));
        assert_eq!(fdinfo_bytes(old, "gtt"), Some(8 << 10));
        let new = "drm-total-gtt:\t2 MiB\ndrm-resident-gtt:\t2 MiB\n";
        assert_eq!(fdinfo_bytes(new, "gtt"), Some(2 << 20));
        assert_eq!(fdinfo_bytes(new, "vram"), None);
    }

    #[test]
    fn the_simulated_processes_are_listed_as_their_state_says() {
        let sim = kfd_sim::Sim::builtin("mi210-8gpu-2hive", kfd_sim::SimConfig::default()).unwrap();
        let mut app = kfd_sim::workload::Workload::launch(
            &sim,
            &kfd_sim::workload::Profile::TensorFlowLike { bo_bytes: 1 << 20 },
        )
        .unwrap();
        app.step().unwrap();
        let state = sim.kfd_state(app.pid()).unwrap();
        let files = sim.write_proc_files().unwrap();
        let roots = Roots {
            kfd: files.kfd_root(),
            proc: files.proc_root(),
            topology: sim.sysfs_root(),
        };
        let list = scan(&roots, None).unwrap();
        assert_eq!(list.len(), 1);
        let p = &list[0];
        assert_eq!(p.pid, app.pid().0);
        assert_eq!(p.queues as usize, state.queues);
        assert_eq!(p.gpus.len(), 8);
        assert!(p.complete);
        // Per GPU: 6 VRAM BOs of 1 MiB and 2 GTT BOs (the profile), the
        // queues 2 compute + 4 SDMA.
        for g in &p.gpus {
            assert!(g.vram_bytes >= 6 << 20, "{g:?}");
            assert!(g.gtt_bytes.unwrap() > 0, "{g:?}");
            assert_eq!(g.queues, 6, "{g:?}");
            assert!(g.render_minor.is_some());
        }
        let sum: u64 = p
            .gpus
            .iter()
            .map(|g| g.vram_bytes + g.gtt_bytes.unwrap())
            .sum();
        assert_eq!(p.checkpoint_bytes, sum);
        // One pid, and one that is not there.
        assert_eq!(scan(&roots, Some(app.pid().0)).unwrap().len(), 1);
        assert!(scan(&roots, Some(app.pid().0 + 1000)).unwrap().is_empty());
        drop(files);
        // No driver: a clear answer.
        let none = Roots {
            kfd: PathBuf::from("/nonexistent/kfd"),
            proc: PathBuf::from("/proc"),
            topology: PathBuf::from("/nonexistent/topology"),
        };
        let e = scan(&none, None).unwrap_err();
        assert!(e.contains("no AMD GPU driver"), "{e}");
    }
}
