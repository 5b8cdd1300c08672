//! The BOs the application filled and the comparison of their bytes after a restore.

use super::*;

/// A BO the application filled, as it listed it in `ready`.
#[derive(Debug, Clone)]
pub struct FilledBo {
    /// `vram` or `gtt`.
    pub kind: String,
    /// The GPU node the application allocated it on.
    pub node: u32,
    /// Its GPU virtual address.
    pub va: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The seed of its [`pattern`].
    pub seed: u64,
}

/// The application's pattern: little-endian xorshift64 words.
pub fn pattern(seed: u64, size: u64) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(size as usize);
    for _ in 0..size / 8 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// What a restored BO holds where it differs from what the application
/// wrote ([`bo_mismatches`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The restored process has no BO at the address.
    Missing,
    /// The simulator could not read the BO.
    Unreadable(String),
    /// `words` of its 8-byte words differ, the first at byte `first`;
    /// `zero` of those are zero.
    Differs {
        /// The byte offset of the first word that differs.
        first: u64,
        /// How many 8-byte words differ.
        words: u64,
        /// How many of those are zero.
        zero: u64,
    },
}

/// A BO of a restored process that does not hold what the application
/// wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoMismatch {
    /// `vram` or `gtt`.
    pub kind: String,
    /// The GPU node it is on.
    pub node: u32,
    /// Its GPU virtual address.
    pub va: u64,
    /// Its size in bytes.
    pub size: u64,
    /// What the restored BO holds.
    pub found: Found,
}

impl std::fmt::Display for BoMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, node, va, size) = (&self.kind, self.node, self.va, self.size);
        write!(f, "the {kind} BO of node {node} at {va:#x} ({size} bytes)")?;
        match &self.found {
            Found::Missing => write!(f, " is missing"),
            Found::Unreadable(e) => write!(f, " cannot be read: {e}"),
            Found::Differs { first, words, zero } => write!(
                f,
                " differs from what the application wrote in {words} of its {} words \
                 (the first at byte {first}; {zero} of them zero)",
                size / 8
            ),
        }
    }
}

/// The BOs of `p` (as the simulator reads them, every byte) that do not
/// hold what the application wrote; the libdrm mapping of a shared buffer
/// is no KFD address and is left to [`check_sharing`]. `Err` when the
/// simulator has no such process.
pub fn bo_mismatches(served: &Served, p: &Proc) -> Result<Vec<BoMismatch>, String> {
    // Compared a slice at a time: a BO may be GiBs.
    const SLICE: u64 = 16 << 20;
    let workload = Workload::attach(&served.sim, Pid(p.pid));
    let described = workload
        .describe()
        .map_err(|e| format!("pid {}: {e}", p.pid))?;
    let mut wrong = Vec::new();
    for bo in p.bos.iter().filter(|b| b.kind != "shared-cpu") {
        let mismatch = |found| BoMismatch {
            kind: bo.kind.clone(),
            node: bo.node,
            va: bo.va,
            size: bo.size,
            found,
        };
        let Some(d) = described
            .bos
            .iter()
            .find(|d| d.va == bo.va || (d.user_addr == bo.va && d.user_addr != 0))
        else {
            wrong.push(mismatch(Found::Missing));
            continue;
        };
        let mut x = bo.seed;
        let (mut first, mut words, mut zero) = (None, 0u64, 0u64);
        let mut at = 0;
        let mut unreadable = None;
        while at < bo.size / 8 * 8 {
            let len = SLICE.min(bo.size / 8 * 8 - at);
            let bytes = match workload.read_bo(d.handle, at, len as usize) {
                Ok(b) => b,
                Err(e) => {
                    unreadable = Some(e.to_string());
                    break;
                }
            };
            for (i, w) in bytes.chunks_exact(8).enumerate() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let w = u64::from_le_bytes(w.try_into().unwrap());
                if w != x {
                    first.get_or_insert(at + 8 * i as u64);
                    words += 1;
                    zero += u64::from(w == 0);
                }
            }
            at += len;
        }
        if let Some(e) = unreadable {
            wrong.push(mismatch(Found::Unreadable(e)));
        } else if let Some(first) = first {
            wrong.push(mismatch(Found::Differs { first, words, zero }));
        }
    }
    Ok(wrong)
}

/// The value of `key=value` among a line's space-separated fields.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// A hexadecimal number, with or without `0x`; panics on anything else.
pub fn hex(v: &str) -> u64 {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).expect("a hex number")
}
