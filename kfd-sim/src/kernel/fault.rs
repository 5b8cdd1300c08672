//! Fault injection, the kernel's side: the armed faults ([`FaultTable`]),
//! the check every ioctl entry point and internal point makes ([`check`]),
//! and the specs' syntax ([`FaultSpec`]). The names of the ioctls a fault
//! can target are the handlers' (`crate::amdkfd`, `crate::drm`); they come
//! here as data ([`operations`]) from the public module `crate::fault`
//! above them, which documents the syntax.

use std::fmt;
use std::str::FromStr;

use crate::kernel::State;
use ::kfd::Errno;

/// What kind of operation a fault targets (derived from its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// An ioctl by name (KFD or DRM).
    Ioctl,
    /// One CRIU sub-operation (`CRIU_OP:<OP>`).
    CriuOp,
    /// A device open.
    Open,
    /// A device mmap.
    Mmap,
    /// A dma-buf creation inside the kernel.
    DmabufExport,
    /// A queue eviction or restore inside the CRIU ops.
    QueueScheduling,
    /// A short SDMA copy with an erroring fence.
    ShortDma,
}

/// One armed fault: the `nth` call of `op` fails with `errno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpec {
    /// Normalised operation name (upper case, without `AMDKFD_IOC_` /
    /// `DRM_IOCTL_` prefix).
    pub op: String,
    /// 1-based call number at which the fault fires.
    pub nth: u32,
    /// The error produced.
    pub errno: Errno,
}

/// Why a fault string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultParseError {
    /// Nothing before `:`/`=`.
    #[error("fault spec {0:?}: the operation name is empty")]
    EmptyOp(String),
    /// `N` is not a positive integer.
    #[error("fault spec {spec:?}: call number {value:?} is not a positive integer")]
    BadCount {
        /// The whole spec.
        spec: String,
        /// The offending text.
        value: String,
    },
    /// `ERRNO` is neither a known name nor a positive number.
    #[error("fault spec {spec:?}: unknown errno {value:?} (use a name like EIO or a number)")]
    BadErrno {
        /// The whole spec.
        spec: String,
        /// The offending text.
        value: String,
    },
    /// An operation the simulator never checks, so the fault could never
    /// fire.
    #[error("fault spec {spec:?}: unknown operation {op:?}; valid operations: {}", known.join(", "))]
    UnknownOp {
        /// The whole spec.
        spec: String,
        /// The normalised operation name.
        op: String,
        /// Every operation a fault can target.
        known: Vec<String>,
    },
    /// A `CRIU_OP:` sub-operation that does not exist.
    #[error("fault spec {spec:?}: unknown criu operation {value:?} (PROCESS_INFO, CHECKPOINT, UNPAUSE, RESTORE, RESUME)")]
    BadCriuOp {
        /// The whole spec.
        spec: String,
        /// The offending text.
        value: String,
    },
}

/// CRIU sub-operation names, by op number.
pub(crate) const CRIU_OP_NAMES: [&str; 5] =
    ["PROCESS_INFO", "CHECKPOINT", "UNPAUSE", "RESTORE", "RESUME"];

/// The internal fault points that are not ioctls (see `crate::fault`).
const INTERNAL_POINTS: [&str; 6] = [
    "OPEN",
    "MMAP",
    "DMABUF_EXPORT",
    "EVICT",
    "RESTORE_QUEUES",
    "SDMA_SHORT",
];

/// Every operation a fault can target, in normalised form: `ioctls` (the
/// names of the KFD and render-node ioctls the simulator handles), the CRIU
/// sub-operations and the internal points. Sorted, without duplicates.
pub(crate) fn operations<'a>(ioctls: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut ops: Vec<String> = ioctls
        .into_iter()
        .chain(INTERNAL_POINTS)
        .map(str::to_owned)
        .chain(CRIU_OP_NAMES.iter().map(|op| format!("CRIU_OP:{op}")))
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

/// Upper-cases and strips the ioctl prefixes.
pub(crate) fn normalize(name: &str) -> String {
    let up = name.trim().to_ascii_uppercase();
    let up = up
        .strip_prefix("AMDKFD_IOC_")
        .map(str::to_owned)
        .unwrap_or(up);
    up.strip_prefix("DRM_IOCTL_")
        .map(str::to_owned)
        .unwrap_or(up)
}

fn parse_errno(spec: &str, s: &str) -> Result<Errno, FaultParseError> {
    let up = s.trim().to_ascii_uppercase();
    if let Some(errno) = Errno::from_name(&up) {
        return Ok(errno);
    }
    match up.parse::<i32>() {
        Ok(v) if v > 0 => Ok(Errno(v)),
        _ => Err(FaultParseError::BadErrno {
            spec: spec.to_owned(),
            value: s.to_owned(),
        }),
    }
}

impl FaultSpec {
    /// A fault on the `nth` call of `op` with `errno`.
    pub fn new(op: &str, nth: u32, errno: Errno) -> FaultSpec {
        FaultSpec {
            op: normalize(op),
            nth: nth.max(1),
            errno,
        }
    }

    /// Parses `spec` like [`FromStr`] and also refuses an operation not in
    /// `known` (see [`operations`]). The error lists the valid operations.
    pub(crate) fn parse_among(
        spec: &str,
        known: Vec<String>,
    ) -> Result<FaultSpec, FaultParseError> {
        let fault: FaultSpec = spec.parse()?;
        if known.contains(&fault.op) {
            Ok(fault)
        } else {
            Err(FaultParseError::UnknownOp {
                spec: spec.to_owned(),
                op: fault.op,
                known,
            })
        }
    }

    /// What the fault targets.
    pub fn kind(&self) -> FaultKind {
        match self.op.as_str() {
            "OPEN" => FaultKind::Open,
            "MMAP" => FaultKind::Mmap,
            "DMABUF_EXPORT" => FaultKind::DmabufExport,
            "EVICT" | "RESTORE_QUEUES" => FaultKind::QueueScheduling,
            "SDMA_SHORT" => FaultKind::ShortDma,
            op if op.starts_with("CRIU_OP:") => FaultKind::CriuOp,
            _ => FaultKind::Ioctl,
        }
    }
}

impl FromStr for FaultSpec {
    type Err = FaultParseError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (lhs, errno) = match spec.split_once('=') {
            Some((l, e)) => (l, Some(parse_errno(spec, e)?)),
            None => (spec, None),
        };
        let mut parts: Vec<&str> = lhs.split(':').collect();
        let mut nth = 1;
        if parts.len() > 1 {
            let last = parts[parts.len() - 1].trim();
            if last.chars().all(|c| c.is_ascii_digit()) {
                nth = match last.parse::<u32>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(FaultParseError::BadCount {
                            spec: spec.to_owned(),
                            value: last.to_owned(),
                        })
                    }
                };
                parts.pop();
            }
        }
        let op = normalize(&parts.join(":"));
        if op.is_empty() || op.starts_with(':') {
            return Err(FaultParseError::EmptyOp(spec.to_owned()));
        }
        if let Some(sub) = op.strip_prefix("CRIU_OP:") {
            if !CRIU_OP_NAMES.contains(&sub) {
                return Err(FaultParseError::BadCriuOp {
                    spec: spec.to_owned(),
                    value: sub.to_owned(),
                });
            }
        }
        let default = if op == "MMAP" {
            libc::ENOMEM
        } else {
            libc::EIO
        };
        Ok(FaultSpec {
            op,
            nth,
            errno: errno.unwrap_or(Errno(default)),
        })
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The `OP:N=ERRNO` form the parser reads back: the bare name, not
        // the errno's `Display` (which leads with the C library's text).
        match self.errno.name() {
            Some(name) => write!(f, "{}:{}={name}", self.op, self.nth),
            None => write!(f, "{}:{}={}", self.op, self.nth, self.errno.0),
        }
    }
}

#[derive(Debug, Clone)]
struct Armed {
    spec: FaultSpec,
    seen: u32,
}

/// The armed faults of one simulator.
#[derive(Debug, Default)]
pub(crate) struct FaultTable {
    armed: Vec<Armed>,
}

impl FaultTable {
    pub(crate) fn arm(&mut self, spec: FaultSpec) {
        self.armed.push(Armed { spec, seen: 0 });
    }

    pub(crate) fn clear(&mut self) {
        self.armed.clear();
    }

    pub(crate) fn pending(&self) -> Vec<FaultSpec> {
        self.armed.iter().map(|a| a.spec.clone()).collect()
    }

    /// Counts one call of `name`; returns the errno of a fault that fires now.
    fn hit(&mut self, name: &str) -> Option<Errno> {
        let mut fired = None;
        self.armed.retain_mut(|a| {
            if a.spec.op != name {
                return true;
            }
            a.seen += 1;
            if a.seen == a.spec.nth && fired.is_none() {
                fired = Some(a.spec.errno);
                false
            } else {
                true
            }
        });
        fired
    }
}

/// Called at each operation entry with the operation's normalised name:
/// fails with the armed errno when a fault fires on this call.
pub(crate) fn check(st: &mut State, name: &str) -> Result<(), Errno> {
    match st.faults.hit(name) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// For the SDMA engine: whether this copy is to be cut short, and the error
/// its fence reports. Call once per copy packet.
pub(crate) fn short_dma(st: &mut State) -> Option<Errno> {
    st.faults.hit("SDMA_SHORT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_and_short_forms() {
        let f: FaultSpec = "CRIU_OP:CHECKPOINT=EIO".parse().unwrap();
        assert_eq!(
            FaultSpec::parse_known("CRIU_OP:CHECKPOINT=EIO"),
            Ok(f.clone())
        );
        assert_eq!(
            (f.op.as_str(), f.nth, f.errno),
            ("CRIU_OP:CHECKPOINT", 1, Errno(libc::EIO))
        );
        assert_eq!(f.kind(), FaultKind::CriuOp);
        let f: FaultSpec = "DRM_IOCTL_AMDGPU_CS:3=ENOMEM".parse().unwrap();
        assert_eq!(
            (f.op.as_str(), f.nth, f.errno),
            ("AMDGPU_CS", 3, Errno(libc::ENOMEM))
        );
        let f: FaultSpec = "mmap".parse().unwrap();
        assert_eq!(
            (f.op.as_str(), f.nth, f.errno),
            ("MMAP", 1, Errno(libc::ENOMEM))
        );
        let f: FaultSpec = "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU:2=12".parse().unwrap();
        assert_eq!(
            (f.op.as_str(), f.nth, f.errno),
            ("ALLOC_MEMORY_OF_GPU", 2, Errno(12))
        );
        let f: FaultSpec = "CRIU_OP:RESTORE:2".parse().unwrap();
        assert_eq!((f.op.as_str(), f.nth), ("CRIU_OP:RESTORE", 2));
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(matches!(
            "".parse::<FaultSpec>(),
            Err(FaultParseError::EmptyOp(_))
        ));
        assert!(matches!(
            "=EIO".parse::<FaultSpec>(),
            Err(FaultParseError::EmptyOp(_))
        ));
        assert!(matches!(
            "X:0".parse::<FaultSpec>(),
            Err(FaultParseError::BadCount { .. })
        ));
        assert!(matches!(
            "X=EWHAT".parse::<FaultSpec>(),
            Err(FaultParseError::BadErrno { .. })
        ));
        assert!(matches!(
            "X=-3".parse::<FaultSpec>(),
            Err(FaultParseError::BadErrno { .. })
        ));
        assert!(matches!(
            "CRIU_OP:DANCE".parse::<FaultSpec>(),
            Err(FaultParseError::BadCriuOp { .. })
        ));
    }

    #[test]
    fn fires_once_on_the_nth_call() {
        let mut t = FaultTable::default();
        t.arm("X:2=EBUSY".parse().unwrap());
        assert_eq!(t.hit("Y"), None);
        assert_eq!(t.hit("X"), None);
        assert_eq!(t.hit("X"), Some(Errno(libc::EBUSY)));
        assert_eq!(t.hit("X"), None);
        assert!(t.pending().is_empty());
    }

    #[test]
    fn display_round_trips() {
        let f: FaultSpec = "AMDGPU_CS:3=ENOMEM".parse().unwrap();
        assert_eq!(f.to_string(), "AMDGPU_CS:3=ENOMEM");
        assert_eq!(f.to_string().parse::<FaultSpec>().unwrap(), f);
        let f = FaultSpec::new("MMAP", 1, Errno(4000));
        assert_eq!(f.to_string(), "MMAP:1=4000");
        assert_eq!(f.to_string().parse::<FaultSpec>().unwrap(), f);
    }
}
