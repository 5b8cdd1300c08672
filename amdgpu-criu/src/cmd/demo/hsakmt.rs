//! `demo --workload hsakmt`: the application is AMD's own ROCm thunk
//! (libhsakmt, Debian's `libhsakmt-dev`). A small C program
//! (`hsakmt_probe.c`, compiled here) opens KFD through the thunk on the
//! simulated machine (kfd-sim-preload's `LD_PRELOAD` interposer runs
//! `--topology` inside it), allocates VRAM, CPU-visible VRAM, GTT and a
//! userptr, creates a compute and an SDMA queue and two events; then CRIU
//! (the host emulator with the plugin) checkpoints that process, restores
//! it on the same machine as another host numbers it (`--seed`), and
//! checkpoints the restored process again.
//!
//! Verified means: both checkpoints hold the same BOs (address, size,
//! flags, user gpu_id), queues and events; every BO's contents are
//! bit-identical, and the ones the program wrote hold what it wrote; the
//! restored process runs; the thunk's shared memory and semaphore exist on
//! the restore side as the C plugin recreates them.
//!
//! It needs the thunk's headers, a C compiler and `libkfd_sim_preload.so`
//! (built with the workspace; `KFD_SIM_PRELOAD_LIB` names another): without
//! them it says what to install and exits 2. It never touches a real device
//! or the host's `/dev/shm`.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use amdgpu_image::{CriuKfd, DirStore, ImageName, ImageStore, PagesFile, ReadLimits, ValidatedKfd};

use super::Args;

/// The C program the thunk runs in.
const PROBE_SOURCE: &str = include_str!("hsakmt_probe.c");

/// The CRIU file id the checkpoint gives `/dev/kfd`.
const KFD_ID: u32 = 1;

/// Where, inside the images directory, the restored process's checkpoint
/// goes.
const RESTORED_DIR: &str = "restored";

/// Names another interposer library than the one next to this program.
pub(super) const PRELOAD_LIB_VAR: &str = "KFD_SIM_PRELOAD_LIB";

/// Runs the hsakmt workload: 0 verified, 1 not verified, 2 usage errors.
pub(super) fn run(args: &Args) -> ExitCode {
    match execute(args) {
        Ok(summary) => {
            print(args, &summary, None);
            ExitCode::SUCCESS
        }
        Err(Failure::Usage(message)) => {
            eprintln!("amdgpu-criu demo: {message}");
            ExitCode::from(2)
        }
        Err(Failure::NotVerified(summary, message)) => {
            print(args, &summary, Some(&message));
            eprintln!("amdgpu-criu demo: {message}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    Usage(String),
    NotVerified(Box<Summary>, String),
}

/// What the run found, for the report.
#[derive(Default)]
struct Summary {
    machines: Machines,
    bos: usize,
    bos_with_contents: usize,
    content_bytes: u64,
    objects: u32,
    gpu_map: BTreeMap<u32, u32>,
    steps: Vec<String>,
}

/// What the workloads run by AMD's user space report alike: the machines,
/// where the images are and the GPU map.
#[derive(Default)]
pub(super) struct Machines {
    /// The checkpointing machine, as given.
    pub(super) checkpoint: String,
    /// The restoring machine: the same model as another host numbers it.
    pub(super) restore: String,
    /// The image set, when it is kept (`--dir`, `--keep`).
    pub(super) images: Option<PathBuf>,
}

impl Machines {
    pub(super) fn of(args: &Args) -> Machines {
        Machines {
            checkpoint: args.topology.clone(),
            restore: format!("{} renumbered (seed {})", args.topology, args.seed),
            images: None,
        }
    }

    /// The JSON keys every workload's report has.
    pub(super) fn json(
        &self,
        workload: &str,
        gpu_map: &BTreeMap<u32, u32>,
        error: Option<&str>,
    ) -> serde_json::Map<String, serde_json::Value> {
        let value = serde_json::json!({
            "workload": workload,
            "topologies": { "checkpoint": self.checkpoint, "restore": self.restore },
            "image_dir": self.images.as_ref().map(|p| p.display().to_string()),
            "gpu_map": gpu_map,
            "verified": error.is_none(),
            "error": error,
        });
        match value {
            serde_json::Value::Object(map) => map,
            _ => serde_json::Map::new(),
        }
    }

    /// The first lines of the text report.
    pub(super) fn print_head(&self, workload: &str) {
        println!(
            "checkpoint on {}, restore on {}",
            self.checkpoint, self.restore
        );
        println!("workload: {workload}");
    }

    /// The GPU map and where the images are, as the other workloads print them.
    pub(super) fn print_tail(&self, gpu_map: &BTreeMap<u32, u32>, also: &str) {
        println!("{}", super::report::gpu_map_text(gpu_map));
        match &self.images {
            Some(dir) => println!("images: {}{also}", dir.display()),
            None => {
                println!("images: removed when the demo ended (--keep or --dir DIR keeps them)")
            }
        }
    }
}

/// The `gpu_id=A renumbered_gpu_id=B` pairs of the programs' lines.
pub(super) fn gpu_pair(fields: &BTreeMap<String, String>) -> Option<(u32, u32)> {
    let id = |k: &str| fields.get(k).and_then(|v| crate::out::parse_gpu_id(v));
    Some((id("gpu_id")?, id("renumbered_gpu_id")?))
}

fn print(args: &Args, s: &Summary, error: Option<&str>) {
    let restored = s
        .machines
        .images
        .as_ref()
        .map(|d| d.join(RESTORED_DIR).display().to_string());
    if args.json {
        let mut value = s.machines.json("hsakmt", &s.gpu_map, error);
        value.insert(
            "checkpoint".into(),
            serde_json::json!({
                "bos": s.bos,
                "bos_with_contents": s.bos_with_contents,
                "content_bytes": s.content_bytes,
                "queues_and_events": s.objects,
            }),
        );
        value.insert("restored_image_dir".into(), serde_json::json!(restored));
        value.insert("steps".into(), serde_json::json!(s.steps));
        let mut value = serde_json::Value::Object(value);
        crate::json64::gpu_ids_to_hex(&mut value);
        println!("{value}");
        return;
    }
    s.machines
        .print_head("hsakmt (AMD's libhsakmt on kfd-sim), 1 process");
    println!(
        "checkpoint: {} BOs ({} with contents, {}), {} queues and events",
        s.bos,
        s.bos_with_contents,
        crate::out::human_bytes(s.content_bytes),
        s.objects
    );
    for step in &s.steps {
        println!("  {step}");
    }
    let also = restored
        .map(|r| format!(" (the restored process's checkpoint: {r})"))
        .unwrap_or_default();
    s.machines.print_tail(&s.gpu_map, &also);
    println!(
        "verified: {}",
        if error.is_none() {
            "same BOs, contents, queues and events after the restore"
        } else {
            "no"
        }
    );
}

/// `libkfd_sim_preload.so`: `KFD_SIM_PRELOAD_LIB`, or next to this program
/// (cargo puts it in the same target directory).
pub(super) fn preload_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PRELOAD_LIB_VAR) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libkfd_sim_preload.so"),
        dir.join("deps/libkfd_sim_preload.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// [`preload_lib`], or why `--workload {workload}` cannot run without it.
pub(super) fn preload_lib_for(workload: &str) -> Result<PathBuf, String> {
    preload_lib().filter(|p| p.is_file()).ok_or_else(|| {
        format!(
            "--workload {workload} needs libkfd_sim_preload.so next to this program or named by {PRELOAD_LIB_VAR}: cargo build -p kfd-sim-preload"
        )
    })
}

/// Writes a workload's C program `name.c` into `dir` and compiles it
/// against `library` (`-lhsakmt`, `-lhsa-runtime64`); the executable's path.
pub(super) fn compile_probe(
    dir: &Path,
    name: &str,
    source_text: &str,
    library: &str,
    workload: &str,
) -> Result<PathBuf, String> {
    let source = dir.join(format!("{name}.c"));
    let probe = dir.join(name);
    std::fs::write(&source, source_text)
        .map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    let built = Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&probe)
        .arg(&source)
        .arg(library)
        .output()
        .map_err(|e| format!("--workload {workload} needs a C compiler (cc): {e}"))?;
    if !built.status.success() {
        return Err(format!(
            "compiling the {workload} program failed:\n{}",
            String::from_utf8_lossy(&built.stderr)
        ));
    }
    Ok(probe)
}

fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(message.into())
}

fn execute(args: &Args) -> Result<Summary, Failure> {
    if args.size.is_some() {
        return Err(usage(
            "--size does not apply to --workload hsakmt: the thunk's program allocates a fixed set of BOs",
        ));
    }
    if args.restore_topology.is_some() {
        return Err(usage(
            "--restore-topology does not apply to --workload hsakmt: it restores on the checkpointing machine as another host numbers it (--seed)",
        ));
    }
    if !args.inject.is_empty() {
        return Err(usage(
            "--inject does not apply to --workload hsakmt: the simulator runs inside the thunk's process",
        ));
    }
    if !Path::new("/usr/include/hsakmt.h").is_file() {
        return Err(usage(
            "--workload hsakmt needs AMD's thunk and its headers: apt-get install libhsakmt1 libhsakmt-dev",
        ));
    }
    let lib = preload_lib_for("hsakmt").map_err(usage)?;
    let scratch = super::cleanup::temporary_dir("amdgpu-criu-demo-hsakmt").map_err(usage)?;
    // The checkpoint is the image set at --dir (as every workload keeps
    // it); the checkpoint of the restored process goes beside it, in
    // `restored/`, a set of its own.
    let images_root = match &args.dir {
        Some(dir) => super::images::given_dir(dir).map_err(usage)?,
        None => scratch.path().join("images"),
    };
    let first = images_root.clone();
    let second = images_root.join(RESTORED_DIR);
    let thunk_shm = scratch.path().join("shm");
    let restore_shm = scratch.path().join("restore-shm");
    for d in [&first, &second, &thunk_shm, &restore_shm] {
        std::fs::create_dir_all(d)
            .map_err(|e| usage(format!("cannot create {}: {e}", d.display())))?;
    }
    if std::fs::read_dir(&second)
        .map(|mut r| r.next().is_some())
        .unwrap_or(false)
    {
        return Err(usage(format!(
            "{} is not empty: give --dir a new or empty directory",
            second.display()
        )));
    }
    let probe = compile_probe(
        scratch.path(),
        "hsakmt_probe",
        PROBE_SOURCE,
        "-lhsakmt",
        "hsakmt",
    )
    .map_err(usage)?;
    let run = Command::new(&probe)
        .arg("checkpoint")
        .args([&first, &second, &restore_shm])
        .env("LD_PRELOAD", &lib)
        .env("KFD_SIM_MACHINE", &args.topology)
        .env("KFD_SIM_SHM_DIR", &thunk_shm)
        .env("KFD_SIM_PRELOAD_RENUMBER_SEED", args.seed.to_string())
        .output()
        .map_err(|e| usage(format!("running {}: {e}", probe.display())))?;
    let out = String::from_utf8_lossy(&run.stdout).into_owned();
    let mut summary = Summary {
        machines: Machines::of(args),
        ..Summary::default()
    };
    summary.machines.images = match (&args.dir, args.keep) {
        (Some(_), _) => Some(images_root.clone()),
        (None, true) => Some(scratch.keep().join("images")),
        (None, false) => None,
    };
    for line in out.lines().filter(|l| l.starts_with("checkpoint ")) {
        let fields = record(line);
        if let Some((from, to)) = gpu_pair(&fields) {
            summary.gpu_map.insert(from, to);
        }
        if let Some(step) = fields.get("step") {
            summary.steps.push(format!("{step}: done"));
        }
    }
    if !run.status.success() || !out.contains("\ndone\n") {
        let why = out
            .lines()
            .find_map(|l| l.strip_prefix("checkpoint error="))
            .map(|e| e.replace('_', " "))
            .unwrap_or_else(|| {
                format!(
                    "the thunk's program failed ({}): {}",
                    run.status,
                    String::from_utf8_lossy(&run.stderr).trim()
                )
            });
        return Err(Failure::NotVerified(Box::new(summary), why));
    }
    match verify(&out, &first, &second, &restore_shm, &mut summary) {
        Ok(()) => Ok(summary),
        Err(why) => Err(Failure::NotVerified(Box::new(summary), why)),
    }
}

/// The `key=value` fields of one output line.
pub(super) fn record(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn kfd_image(dir: &Path) -> Result<CriuKfd, String> {
    let name = ImageName::Kfd { id: KFD_ID };
    DirStore::open_dir(dir)
        .map_err(|e| e.to_string())?
        .read_message(&name, ReadLimits::default())
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .ok_or_else(|| format!("{}: no {name}", dir.display()))
}

/// Every BO's contents in a checkpoint, by address.
fn contents(dir: &Path, image: &CriuKfd) -> Result<Vec<(u64, Vec<u8>)>, String> {
    let validated = ValidatedKfd::new(KFD_ID, image.clone()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (name, layout) in validated.pages_files() {
        let path = dir.join(name.to_string());
        let file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let pages =
            PagesFile::open(file, &name.to_string(), layout.clone()).map_err(|e| e.to_string())?;
        for (i, bo) in layout.bos().iter().enumerate() {
            let bytes = pages.bo_bytes(i).map_err(|e| e.to_string())?;
            out.push((image.bo_entries[bo.entry].addr, bytes.to_vec()));
        }
    }
    out.sort();
    Ok(out)
}

fn verify(
    out: &str,
    first: &Path,
    second: &Path,
    restore_shm: &Path,
    summary: &mut Summary,
) -> Result<(), String> {
    let (a, b) = (kfd_image(first)?, kfd_image(second)?);
    summary.bos = a.bo_entries.len();
    summary.objects = a.num_of_objects;
    let key = |img: &CriuKfd| {
        let mut bos: Vec<_> = img
            .bo_entries
            .iter()
            .map(|bo| (bo.addr, bo.size, bo.alloc_flags, bo.gpu_id))
            .collect();
        bos.sort();
        bos
    };
    if key(&a) != key(&b) {
        return Err("the restored process holds other BOs than the thunk's".into());
    }
    if a.num_of_objects != b.num_of_objects {
        return Err(format!(
            "{} queues and events checkpointed, {} after the restore",
            a.num_of_objects, b.num_of_objects
        ));
    }
    let (ca, cb) = (contents(first, &a)?, contents(second, &b)?);
    summary.bos_with_contents = ca.len();
    summary.content_bytes = ca.iter().map(|(_, c)| c.len() as u64).sum();
    if ca != cb {
        return Err("BO contents differ after the restore".into());
    }
    for line in out.lines().filter(|l| l.starts_with("object ")) {
        let r = record(line);
        if r.get("kind").map(String::as_str) == Some("userptr") {
            continue; // process memory: CRIU's pages, not the plugin's
        }
        let addr: u64 = r.get("addr").and_then(|v| v.parse().ok()).unwrap_or(0);
        let fill: u8 = r.get("fill").and_then(|v| v.parse().ok()).unwrap_or(0);
        let written = ca
            .iter()
            .find(|(a, _)| *a == addr)
            .is_some_and(|(_, bytes)| bytes.iter().all(|&v| v == fill));
        if !written {
            return Err(format!(
                "the BO at {addr:#x} does not hold what the program wrote"
            ));
        }
    }
    if a.shared_mem_size != 0 {
        let path = restore_shm.join("hsakmt_shared_mem");
        let file = std::fs::File::open(&path)
            .map_err(|e| format!("the thunk's shared memory was not recreated: {e}"))?;
        let mut magic = [0u8; 4];
        file.read_exact_at(&mut magic, 0)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if u32::from_ne_bytes(magic) != a.shared_mem_magic {
            return Err("the recreated shared memory lacks the thunk's magic".into());
        }
        if !restore_shm.join("sem.hsakmt_semaphore").is_file() {
            return Err("the thunk's semaphore was not recreated".into());
        }
        summary
            .steps
            .push("hsakmt shared memory and semaphore: recreated".into());
    }
    Ok(())
}
