//! `amdgpu-criu doctor`: can this machine checkpoint and restore GPU
//! processes, and if not, why? One line per check, in the order a
//! checkpoint needs them; exit 0 only when every check a checkpoint needs
//! passed.
//!
//! The kernel side goes through [`kfd::Driver`] and a sysfs topology root,
//! so the same code answers for this machine ([`kfd::HostDriver`],
//! `/sys/class/kfd/kfd/topology`) and for a simulated one (`--simulate
//! builtin:NAME`, a `kfd-sim` machine): `/dev/kfd` present and openable, the
//! KFD interface version (the CRIU ops need 1.8+), whether the CRIU ops are
//! permitted (the kernel's own capability check, probed without side
//! effects), the topology and each GPU's checks against itself, the render
//! nodes of the GPUs, and `AMDGPU_GEM_OP_GET_MAPPING_INFO` (which the dump
//! of render-node BOs needs, probed on a 4 KiB scratch BO). The CRIU side
//! is this machine's in both cases: the `criu` on PATH (or `--criu`), its
//! version, `criu check`, how many plugin hooks it has (the size of its
//! `cr_plugin_ctl` symbol, as the plugin itself finds out), and which
//! `amdgpu_plugin.so` it would load from its plugin directory
//! (`CRIU_LIBS_DIR`, else its compiled-in directory): this project's, the C
//! plugin, or both.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use amdgpu_topology::checks::device_mismatches;
use amdgpu_topology::devices::DeviceTopology;
use amdgpu_topology::mapping::map_topologies;
use amdgpu_topology::options::CheckOptions;
use kfd::render::{GemCreate, RenderNode};
use kfd::{Driver, Kfd};
use kfd_sim_host::companion::{plugin_kind, PluginKind};
use serde::Serialize;
use serde_json::json;

use crate::machine::Machine;
use crate::out::{gpu_id, plural};

/// Arguments of `doctor`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  amdgpu-criu doctor
  amdgpu-criu doctor --criu /opt/criu/sbin/criu
  amdgpu-criu doctor --json | jq '.checks[] | select(.status != \"ok\")'
  amdgpu-criu doctor --simulate builtin:mi210-8gpu-2hive   # rehearse on a simulated machine

Exit status: 0 a checkpoint can work here, 1 something it needs is missing, 2 usage errors")]
pub struct Args {
    /// The `criu` binary to examine (default: `criu` on PATH).
    #[arg(long, value_name = "PATH")]
    pub criu: Option<PathBuf>,
    /// Examine a simulated machine (`builtin:NAME`, a sysfs tree or a
    /// topology file, run by kfd-sim) instead of this machine's kernel; the
    /// CRIU checks still look at this machine.
    #[arg(long, value_name = "builtin:NAME|DIR|FILE", value_parser = crate::machine::MachineParser, hide_possible_values = true)]
    pub simulate: Option<String>,
    /// Print one JSON object (`ok`, `machine`, `checks`).
    #[arg(long)]
    pub json: bool,
}

/// The answer of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// What a checkpoint needs is there.
    Ok,
    /// Works, with a caveat.
    Warn,
    /// A checkpoint cannot work until this is fixed.
    Fail,
    /// Not examined (what it needs failed before).
    Skip,
}

impl Status {
    fn tag(self) -> &'static str {
        match self {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// The answer.
    pub status: Status,
    /// What was found, and what to do when it is not ok.
    pub detail: String,
}

fn check(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
    }
}

/// What the checks look at.
pub struct Env<'a> {
    /// The kernel.
    pub driver: &'a dyn Driver,
    /// The KFD topology directory (`/sys/class/kfd/kfd/topology`).
    pub sysfs_root: PathBuf,
    /// How the report names the topology (a simulated machine's name, not
    /// the temporary tree it is served from); None: `sysfs_root`.
    pub topology_name: Option<String>,
    /// Effective capabilities of this process, when known (`CapEff`).
    pub cap_eff: Option<u64>,
    /// The `criu` binary, if one was found or given.
    pub criu: Option<PathBuf>,
    /// Whether `criu` was given with `--criu` (else searched on PATH).
    pub criu_given: bool,
    /// `CRIU_LIBS_DIR`.
    pub libs_dir_env: Option<PathBuf>,
}

const KFD_PATH: &str = "/dev/kfd";
const CAP_SYS_ADMIN: u32 = 21;
const CAP_CHECKPOINT_RESTORE: u32 = 40;

/// Runs every check.
pub fn diagnose(env: &Env<'_>) -> Vec<Check> {
    let mut out = Vec::new();
    kernel_checks(env, &mut out);
    criu_checks(env, &mut out);
    out
}

fn errno_text(e: &kfd::Error) -> String {
    e.to_string()
}

fn caps_text(cap_eff: u64) -> String {
    let held: Vec<&str> = [
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
        (CAP_CHECKPOINT_RESTORE, "CAP_CHECKPOINT_RESTORE"),
    ]
    .iter()
    .filter(|(bit, _)| cap_eff & (1u64 << bit) != 0)
    .map(|(_, n)| *n)
    .collect();
    if held.is_empty() {
        "holds neither CAP_CHECKPOINT_RESTORE nor CAP_SYS_ADMIN".into()
    } else {
        format!("holds {}", held.join(" and "))
    }
}

fn kernel_checks(env: &Env<'_>, out: &mut Vec<Check>) {
    let kfd_path = Path::new(KFD_PATH);
    let kfd = match env.driver.device_number(kfd_path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            out.push(check(
                "kfd device",
                Status::Fail,
                "no /dev/kfd: no AMD GPU driver (amdgpu with KFD not loaded, or no AMD GPU \
                 on this machine); nothing to checkpoint here",
            ));
            None
        }
        Err(e) => {
            out.push(check("kfd device", Status::Fail, format!("/dev/kfd: {e}")));
            None
        }
        Ok(dev) => match Kfd::open(env.driver) {
            Ok(kfd) => {
                out.push(check(
                    "kfd device",
                    Status::Ok,
                    format!("/dev/kfd (char {}:{}) opened", dev.major, dev.minor),
                ));
                Some(kfd)
            }
            Err(e) => {
                out.push(check(
                    "kfd device",
                    Status::Fail,
                    format!(
                        "/dev/kfd is present but cannot be opened: {} (permissions: the \
                         render/video group, or a container without the device)",
                        errno_text(&e)
                    ),
                ));
                None
            }
        },
    };
    match &kfd {
        None => out.push(check("kfd version", Status::Skip, "needs /dev/kfd open")),
        Some(k) => match k.version() {
            Ok(v) if v.supports_criu() => out.push(check(
                "kfd version",
                Status::Ok,
                format!("KFD interface {v}: has the CRIU ops (1.8+)"),
            )),
            Ok(v) => out.push(check(
                "kfd version",
                Status::Fail,
                format!(
                    "KFD interface {v}: the CRIU ops need 1.8 or later (Linux 5.19+ or a \
                     ROCm DKMS driver); update the kernel driver"
                ),
            )),
            Err(e) => out.push(check(
                "kfd version",
                Status::Fail,
                format!("GET_VERSION failed: {}", errno_text(&e)),
            )),
        },
    }
    let caps = env.cap_eff.map(caps_text);
    match &kfd {
        Some(k) => match k.criu_permitted() {
            Ok(true) => out.push(check(
                "permission",
                Status::Ok,
                format!(
                    "the kernel permits this process's CRIU ops{}",
                    caps.map(|c| format!(" ({c})")).unwrap_or_default()
                ),
            )),
            Ok(false) => out.push(check(
                "permission",
                Status::Fail,
                format!(
                    "the kernel refuses this process's CRIU ops (EACCES){}: run criu as root \
                     or with CAP_CHECKPOINT_RESTORE in the initial user namespace",
                    caps.map(|c| format!("; it {c}")).unwrap_or_default()
                ),
            )),
            Err(e) => out.push(check(
                "permission",
                Status::Fail,
                format!(
                    "the CRIU ioctl is unusable: {} (a kernel without CRIU support)",
                    errno_text(&e)
                ),
            )),
        },
        None => match env.cap_eff {
            Some(c)
                if c & (1u64 << CAP_SYS_ADMIN) != 0
                    || c & (1u64 << CAP_CHECKPOINT_RESTORE) != 0 =>
            {
                out.push(check(
                    "permission",
                    Status::Ok,
                    format!("this process {}", caps_text(c)),
                ))
            }
            Some(c) => out.push(check(
                "permission",
                Status::Fail,
                format!(
                    "this process {}: run criu as root or with CAP_CHECKPOINT_RESTORE",
                    caps_text(c)
                ),
            )),
            None => out.push(check("permission", Status::Skip, "needs /dev/kfd open")),
        },
    }

    // The topology and the GPUs' checks against themselves.
    let root = env.sysfs_root.display().to_string();
    let name = env.topology_name.clone().unwrap_or_else(|| root.clone());
    let topology = match amdgpu_topology::parse(&env.sysfs_root) {
        Ok(parsed) => Some(parsed.system),
        Err(e) => {
            let text = e.to_string().replace(&root, &name);
            let root = &name;
            out.push(check(
                "topology",
                if kfd.is_none() {
                    Status::Skip
                } else {
                    Status::Fail
                },
                if text.contains(root.as_str()) {
                    text
                } else {
                    format!("{root}: {text}")
                },
            ));
            None
        }
    };
    let combined = topology.as_ref().and_then(crate::machine::combined_node);
    if let Some(why) = &combined {
        out.push(check("topology", Status::Fail, format!("{name}: {why}")));
    }
    let devices = topology
        .as_ref()
        .filter(|_| combined.is_none())
        .and_then(|system| match DeviceTopology::from_system(system) {
            Ok(t) => {
                let gpus = t.gpus().count();
                let hives: std::collections::BTreeSet<u64> = t
                    .gpus()
                    .map(|g| g.props.hive_id)
                    .filter(|&h| h != 0)
                    .collect();
                out.push(check(
                    "topology",
                    if gpus == 0 { Status::Fail } else { Status::Ok },
                    format!(
                        "{name}: {}, {}, {}",
                        plural(t.nodes.len() as u64, "node"),
                        plural(gpus as u64, "GPU"),
                        plural(hives.len() as u64, "XGMI hive")
                    ),
                ));
                Some(t)
            }
            Err(e) => {
                out.push(check("topology", Status::Fail, format!("{name}: {e}")));
                None
            }
        });
    match &devices {
        None => out.push(check("gpu self-check", Status::Skip, "needs the topology")),
        Some(t) => {
            let options = CheckOptions::default();
            let mut reasons: Vec<String> = t
                .gpus()
                .flat_map(|g| device_mismatches(g, g, &options))
                .map(|r| r.to_string())
                .collect();
            match map_topologies(t, t, &options) {
                Ok(r) if r.compatible => {}
                Ok(r) => reasons.extend(crate::cmd::map::reason_lines(&r.reasons)),
                Err(e) => reasons.push(e.to_string()),
            }
            if reasons.is_empty() {
                out.push(check(
                    "gpu self-check",
                    Status::Ok,
                    format!(
                        "{} pass the restore checks against themselves",
                        plural(t.gpus().count() as u64, "GPU")
                    ),
                ));
            } else {
                out.push(check(
                    "gpu self-check",
                    Status::Fail,
                    format!(
                        "a checkpoint taken here could not be restored here: {}",
                        reasons.join("; ")
                    ),
                ));
            }
        }
    }

    // Render nodes and GET_MAPPING_INFO.
    let Some(t) = &devices else {
        out.push(check("render nodes", Status::Skip, "needs the topology"));
        out.push(check(
            "gem mapping info",
            Status::Skip,
            "needs a render node",
        ));
        return;
    };
    let mut found = Vec::new();
    let mut missing = Vec::new();
    let mut opened = None;
    let mut families = Vec::new();
    for g in t.gpus() {
        let minor = g.props.drm_render_minor;
        let path = PathBuf::from(format!("/dev/dri/renderD{minor}"));
        let open = env
            .driver
            .device_number(&path)
            .map_err(|e| e.to_string())
            .and_then(|_| RenderNode::open_path(env.driver, &path).map_err(|e| e.to_string()));
        match open {
            Ok(node) => {
                let version = node
                    .version()
                    .map(|v| format!("{} {}.{}.{}", v.name, v.major, v.minor, v.patchlevel))
                    .unwrap_or_else(|e| format!("version unknown: {e}"));
                found.push(format!(
                    "renderD{minor} -> gpu {} ({version})",
                    gpu_id(g.gpu_id)
                ));
                families.push((g.gpu_id, node.device_info().map(|i| i.family)));
                if opened.is_none() {
                    opened = Some((minor, node));
                }
            }
            Err(e) => missing.push(format!("renderD{minor} (gpu {}): {e}", gpu_id(g.gpu_id))),
        }
    }
    if missing.is_empty() {
        out.push(check("render nodes", Status::Ok, found.join(", ")));
    } else {
        out.push(check(
            "render nodes",
            Status::Fail,
            format!(
                "{} of {} cannot be opened: {}",
                missing.len(),
                plural((missing.len() + found.len()) as u64, "render node"),
                missing.join("; ")
            ),
        ));
    }
    out.push(gpu_families(&families));
    match opened {
        None => out.push(check(
            "gem mapping info",
            Status::Skip,
            "needs a render node",
        )),
        Some((minor, node)) => out.push(mapping_info(minor, &node)),
    }
}

/// "GPU 0x1 is", "GPUs 0x1, 0x2 are".
fn gpus_are(ids: &[String]) -> String {
    match ids {
        [one] => format!("GPU {one} is"),
        many => format!("GPUs {} are", many.join(", ")),
    }
}

/// The GPUs' families (`AMDGPU_INFO_DEV_INFO`) against what a checkpoint
/// was tried on: gfx9 and later are; CI and VI (gfx7, gfx8) have the SDMA
/// copy encoding and nothing else was tried on them; SI and older cannot
/// be copied from at all.
fn gpu_families(families: &[(u32, kfd::Result<u32>)]) -> Check {
    use kfd_sys::amdgpu_drm::{AMDGPU_FAMILY_AI, AMDGPU_FAMILY_CI};
    if families.is_empty() {
        return check("gpu family", Status::Skip, "needs a render node");
    }
    let ids = |keep: &dyn Fn(u32) -> bool| -> Vec<String> {
        families
            .iter()
            .filter(|(_, f)| f.as_ref().is_ok_and(|f| keep(*f)))
            .map(|(id, _)| gpu_id(*id))
            .collect()
    };
    let unknown: Vec<String> = families
        .iter()
        .filter_map(|(id, f)| {
            f.as_ref()
                .err()
                .map(|e| format!("gpu {}: {e}", gpu_id(*id)))
        })
        .collect();
    let too_old = ids(&|f| f < AMDGPU_FAMILY_CI);
    let untested = ids(&|f| (AMDGPU_FAMILY_CI..AMDGPU_FAMILY_AI).contains(&f));
    if !too_old.is_empty() {
        return check(
            "gpu family",
            Status::Fail,
            format!(
                "{} SI or older: their DMA engine has no copy packet the plugin can \
                 encode, so their memory cannot be checkpointed",
                gpus_are(&too_old)
            ),
        );
    }
    if !unknown.is_empty() {
        return check(
            "gpu family",
            Status::Warn,
            format!("AMDGPU_INFO_DEV_INFO failed: {}", unknown.join("; ")),
        );
    }
    if !untested.is_empty() {
        return check(
            "gpu family",
            Status::Warn,
            format!(
                "{} CI or VI (gfx7, gfx8): the plugin encodes their SDMA copies, but \
                 checkpoints were tried on gfx9 and later only; rehearse with `amdgpu-criu \
                 demo --topology` on a capture of this machine before relying on it",
                gpus_are(&untested)
            ),
        );
    }
    check(
        "gpu family",
        Status::Ok,
        format!(
            "{} of gfx9 or later, as checkpoints were tried on",
            plural(families.len() as u64, "GPU")
        ),
    )
}

/// Probes `AMDGPU_GEM_OP_GET_MAPPING_INFO` on a 4 KiB scratch BO.
fn mapping_info<D: Driver>(minor: u32, node: &RenderNode<D>) -> Check {
    let name = "gem mapping info";
    let bo = match node.gem_create(&GemCreate {
        size: 4096,
        alignment: 4096,
        domains: u64::from(amdgpu_image::flags::GEM_DOMAIN_GTT),
        flags: 0,
    }) {
        Ok(bo) => bo,
        Err(e) => {
            return check(
                name,
                Status::Fail,
                format!("renderD{minor}: cannot create a 4 KiB scratch BO to probe it: {e}"),
            )
        }
    };
    let answer = node.gem_mapping_info(bo);
    // Best effort: the BO dies with the file anyway.
    let _ = node.gem_close(bo);
    match answer {
        Ok(_) => check(
            name,
            Status::Ok,
            format!("renderD{minor}: AMDGPU_GEM_OP_GET_MAPPING_INFO works (render-node BOs can be checkpointed)"),
        ),
        Err(e) if e.errno() == libc::EINVAL => check(
            name,
            Status::Fail,
            format!(
                "renderD{minor}: the kernel lacks AMDGPU_GEM_OP_GET_MAPPING_INFO (EINVAL): \
                 processes with render-node BOs cannot be checkpointed; update the amdgpu driver"
            ),
        ),
        Err(e) => check(name, Status::Fail, format!("renderD{minor}: {e}")),
    }
}

fn criu_checks(env: &Env<'_>, out: &mut Vec<Check>) {
    let missing = env.criu.as_ref().filter(|p| !p.is_file()).map(|p| {
        let why = if p.exists() {
            "not a file"
        } else {
            "no such file"
        };
        format!(
            "--criu {}: {why} (give the path of a criu binary, e.g. /usr/sbin/criu)",
            p.display()
        )
    });
    let criu = env.criu.as_ref().filter(|p| p.is_file());
    let Some(criu) = criu else {
        out.push(check(
            "criu",
            Status::Fail,
            if let Some(why) = missing {
                why
            } else if env.criu_given {
                "the --criu binary does not exist".to_owned()
            } else {
                "no criu on PATH: install CRIU 3.17 or later (or pass --criu PATH)".to_owned()
            },
        ));
        for name in ["criu hooks", "criu check", "plugin"] {
            out.push(check(name, Status::Skip, "needs criu"));
        }
        return;
    };
    let version = run(criu, ["--version"], Duration::from_secs(10));
    let version_line = version.as_ref().ok().and_then(|(_, text)| {
        text.lines()
            .find_map(|l| l.strip_prefix("Version:").map(|v| v.trim().to_owned()))
    });
    match (&version, &version_line) {
        (Ok(_), Some(v)) => out.push(check(
            "criu",
            Status::Ok,
            format!("{}: version {v}", criu.display()),
        )),
        (Ok((_, text)), None) => out.push(check(
            "criu",
            Status::Fail,
            format!(
                "{}: `criu --version` printed no version: {}",
                criu.display(),
                text.trim()
            ),
        )),
        (Err(e), _) => out.push(check(
            "criu",
            Status::Fail,
            format!("{}: cannot run it: {e}", criu.display()),
        )),
    }
    match elf_symbol_size(criu, "cr_plugin_ctl") {
        Ok(Some(size)) if size >= 16 => {
            let hooks = (size - 16) / 16;
            let (status, what) = match hooks {
                0..=9 => (
                    Status::Fail,
                    "the plugin needs CRIU 3.17 or later (10 hooks)".to_owned(),
                ),
                10..=14 => (
                    Status::Ok,
                    format!(
                        "an older CRIU: the plugin works without the {} newer {} (see \
                         criu-amdgpu-plugin(1))",
                        15 - hooks,
                        if hooks == 14 { "hook" } else { "hooks" }
                    ),
                ),
                _ => (Status::Ok, "every hook the plugin can use".to_owned()),
            };
            out.push(check(
                "criu hooks",
                status,
                format!("{}: {what}", plural(hooks, "plugin hook")),
            ));
        }
        Ok(_) => out.push(check(
            "criu hooks",
            Status::Warn,
            "no cr_plugin_ctl symbol in the binary (stripped, or not CRIU): the plugin finds \
             the count at load time",
        )),
        Err(e) => out.push(check(
            "criu hooks",
            Status::Warn,
            format!("cannot read the binary: {e}"),
        )),
    }
    match run(criu, ["check"], Duration::from_secs(60)) {
        Ok((true, text)) => out.push(check(
            "criu check",
            Status::Ok,
            last_line(&text).unwrap_or("passed").to_owned(),
        )),
        Ok((false, text)) => out.push(check(
            "criu check",
            Status::Fail,
            format!(
                "`criu check` failed: {}",
                last_line(&text).unwrap_or("no output")
            ),
        )),
        Err(e) => out.push(check("criu check", Status::Fail, e.to_string())),
    }
    out.push(plugin_check(env, criu));
}

fn last_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).rfind(|l| !l.is_empty())
}

/// Runs `program args` with a deadline: (exit success, stdout + stderr).
fn run<const N: usize>(
    program: &Path,
    args: [&str; N],
    deadline: Duration,
) -> io::Result<(bool, String)> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let started = Instant::now();
    loop {
        if let Some(_status) = child.try_wait()? {
            let output = child.wait_with_output()?;
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            return Ok((output.status.success(), text));
        }
        if started.elapsed() > deadline {
            // Ours to end: it was started above.
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "`{} {}` did not finish in {} s",
                    program.display(),
                    args.join(" "),
                    deadline.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The plugin directory compiled into `criu` (`CR_PLUGIN_DEFAULT`): the
/// first absolute path string in the binary ending in `lib/criu` or
/// `lib/criu/`.
fn compiled_plugin_dir(criu: &Path) -> Option<PathBuf> {
    let bytes = std::fs::read(criu).ok()?;
    bytes
        .split(|&b| b == 0)
        .filter_map(|s| std::str::from_utf8(s).ok())
        .find(|s| {
            s.starts_with('/')
                && !s.contains(char::is_whitespace)
                && (s.ends_with("lib/criu") || s.ends_with("lib/criu/"))
        })
        .map(PathBuf::from)
}

fn plugin_check(env: &Env<'_>, criu: &Path) -> Check {
    let name = "plugin";
    let (dir, from) = match &env.libs_dir_env {
        Some(dir) => (dir.clone(), "CRIU_LIBS_DIR"),
        None => match compiled_plugin_dir(criu) {
            Some(dir) => (dir, "criu's compiled-in plugin directory"),
            None => (
                PathBuf::from("/usr/lib/criu"),
                "CRIU's default plugin directory",
            ),
        },
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) => {
            return check(
                name,
                Status::Fail,
                format!(
                    "{} ({from}): {e}: CRIU loads no amdgpu plugin, so it cannot dump a GPU \
                     process; `sudo make install PREFIX=/usr` installs ours there",
                    dir.display()
                ),
            )
        }
    };
    let mut ours = Vec::new();
    let mut c_plugin = Vec::new();
    let mut sos: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension() == Some(OsStr::new("so")))
        .collect();
    sos.sort();
    for so in &sos {
        match plugin_kind(so) {
            Ok(PluginKind::Ours) => ours.push(so.display().to_string()),
            Ok(PluginKind::CPlugin) => c_plugin.push(so.display().to_string()),
            _ => {}
        }
    }
    let shown = format!("{} ({from})", dir.display());
    match (ours.is_empty(), c_plugin.is_empty()) {
        (false, true) => check(
            name,
            Status::Ok,
            format!("{shown}: loads this project's plugin {}", ours.join(", ")),
        ),
        (true, false) => check(
            name,
            Status::Warn,
            format!(
                "{shown}: loads upstream's C plugin {}, not this project's; it works, with \
                 the C plugin's limits",
                c_plugin.join(", ")
            ),
        ),
        (false, false) => check(
            name,
            Status::Fail,
            format!(
                "{shown}: holds both this project's plugin ({}) and the C plugin ({}): CRIU \
                 loads every .so there and both would claim /dev/kfd; remove one",
                ours.join(", "),
                c_plugin.join(", ")
            ),
        ),
        (true, true) => check(
            name,
            Status::Fail,
            format!(
                "{shown}: no amdgpu_plugin.so: CRIU cannot dump a GPU process; `sudo make \
                 install PREFIX=/usr` installs ours (or pass --libdir to criu)"
            ),
        ),
    }
}

/// The size of dynamic (or static) symbol `name` in the ELF64
/// little-endian file at `path`; `None` when there is no such symbol.
fn elf_symbol_size(path: &Path, name: &str) -> io::Result<Option<u64>> {
    let bytes = std::fs::read(path)?;
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "not a 64-bit little-endian ELF file",
        )
    };
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err(bad());
    }
    let u16_at = |at: usize| -> Option<u64> {
        Some(u64::from(u16::from_le_bytes(
            bytes.get(at..at + 2)?.try_into().ok()?,
        )))
    };
    let u32_at = |at: usize| -> Option<u64> {
        Some(u64::from(u32::from_le_bytes(
            bytes.get(at..at + 4)?.try_into().ok()?,
        )))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let shoff = u64_at(0x28).ok_or_else(bad)? as usize;
    let shentsize = u16_at(0x3a).ok_or_else(bad)? as usize;
    let shnum = u16_at(0x3c).ok_or_else(bad)? as usize;
    let section = |i: usize| -> Option<(u64, usize, usize, usize, usize)> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            u32_at(at + 4)?,             // sh_type
            u64_at(at + 0x18)? as usize, // sh_offset
            u64_at(at + 0x20)? as usize, // sh_size
            u32_at(at + 0x28)? as usize, // sh_link
            u64_at(at + 0x38)? as usize, // sh_entsize
        ))
    };
    for i in 0..shnum {
        let Some((kind, offset, size, link, entsize)) = section(i) else {
            return Err(bad());
        };
        // SHT_SYMTAB 2, SHT_DYNSYM 11.
        if (kind != 2 && kind != 11) || entsize < 24 {
            continue;
        }
        let Some((_, str_off, str_size, _, _)) = section(link) else {
            return Err(bad());
        };
        let strings = bytes
            .get(str_off..str_off.saturating_add(str_size))
            .ok_or_else(bad)?;
        for sym in 0..size / entsize {
            let at = offset + sym * entsize;
            let Some(name_off) = u32_at(at) else { break };
            let Some(tail) = strings.get(name_off as usize..) else {
                continue;
            };
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            if &tail[..end] == name.as_bytes() {
                return Ok(u64_at(at + 16));
            }
        }
    }
    Ok(None)
}

/// `criu` on PATH.
fn criu_on_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("criu"))
        .find(|p| p.is_file())
}

/// This process's effective capabilities (`CapEff` of /proc/self/status).
fn host_cap_eff() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Runs `doctor`.
pub fn run_cmd(args: Args) -> ExitCode {
    let (criu, criu_given) = match &args.criu {
        Some(p) => (Some(p.clone()), true),
        None => (criu_on_path(), false),
    };
    let libs_dir_env = std::env::var_os("CRIU_LIBS_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let (checks, machine) = match &args.simulate {
        None => {
            let env = Env {
                driver: &kfd::HostDriver,
                sysfs_root: PathBuf::from(amdgpu_topology::parse::DEFAULT_ROOT),
                topology_name: None,
                cap_eff: host_cap_eff(),
                criu,
                criu_given,
                libs_dir_env,
            };
            (diagnose(&env), "this machine".to_owned())
        }
        Some(spec) => {
            let sim = match simulated(spec) {
                Ok(sim) => sim,
                Err(e) => {
                    eprintln!("amdgpu-criu doctor: {e}");
                    return ExitCode::from(2);
                }
            };
            let pid = match sim.0.spawn_process() {
                Ok(pid) => pid,
                Err(e) => {
                    eprintln!("amdgpu-criu doctor: {e}");
                    return ExitCode::from(2);
                }
            };
            let driver = sim.0.driver(pid);
            let env = Env {
                driver: &driver,
                sysfs_root: sim.0.sysfs_root(),
                topology_name: Some(sim.1.clone()),
                cap_eff: None,
                criu,
                criu_given,
                libs_dir_env,
            };
            (diagnose(&env), format!("{} (simulated by kfd-sim)", sim.1))
        }
    };
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    // For a report: the kernel this runs on (a simulated machine's KFD is
    // kfd-sim's, its CRIU this machine's).
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| format!("Linux {}", r.trim()))
        .unwrap_or_else(|_| "unknown".to_owned());
    if args.json {
        println!(
            "{:#}",
            json!({ "ok": ok, "machine": machine, "kernel": kernel, "checks": checks })
        );
    } else {
        println!("amdgpu-criu doctor: {machine}");
        println!("     {:<17} {kernel}", "kernel");
        for c in &checks {
            println!("{} {:<17} {}", c.status.tag(), c.name, c.detail);
        }
        let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
        if ok {
            println!("a checkpoint can work here");
        } else {
            println!(
                "a checkpoint cannot work here: {} failed",
                plural(failed as u64, "check")
            );
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn simulated(spec: &str) -> Result<(kfd_sim::Sim, String), String> {
    let machine = Machine::parse("doctor", spec)?;
    let label = machine.label();
    Ok((machine.simulate()?, label))
}

#[cfg(test)]
mod tests;
