//! The memory a wave reads and writes: a trait by 64-bit GPU virtual
//! address, with atomics done through it so an implementation can make them
//! atomic against the host and other waves.

/// What kind of access faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A load (or an instruction fetch).
    Read,
    /// A store.
    Write,
    /// A read-modify-write.
    Atomic,
}

impl Access {
    /// `read`, `write` or `atomic`.
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Atomic => "atomic",
        }
    }
}

/// A failed access: the first address the memory could not serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemFault {
    /// The faulting address.
    pub addr: u64,
    /// What the access was.
    pub access: Access,
}

/// The read-modify-write of an atomic (Vega ISA 9.1.9 / 12.14 "FLAT
/// atomics", the same set for MUBUF and GLOBAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// `new = src`.
    Swap,
    /// `new = old == cmp ? src : old`.
    CmpSwap,
    /// `new = old + src`.
    Add,
    /// `new = old - src`.
    Sub,
    /// Signed minimum.
    Smin,
    /// Unsigned minimum.
    Umin,
    /// Signed maximum.
    Smax,
    /// Unsigned maximum.
    Umax,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise xor.
    Xor,
    /// `new = old >= src ? 0 : old + 1` (unsigned).
    Inc,
    /// `new = old == 0 || old > src ? src : old - 1` (unsigned).
    Dec,
    /// Floating-point add (f32 on 4 bytes, f64 on 8).
    FAdd,
    /// Floating-point minimum.
    FMin,
    /// Floating-point maximum.
    FMax,
}

impl AtomicOp {
    /// The new 32-bit value from the old one, the data and the compare
    /// value.
    pub fn apply32(self, old: u32, src: u32, cmp: u32) -> u32 {
        let f = |op: fn(f32, f32) -> f32| op(f32::from_bits(old), f32::from_bits(src)).to_bits();
        match self {
            AtomicOp::Swap => src,
            AtomicOp::CmpSwap => {
                if old == cmp {
                    src
                } else {
                    old
                }
            }
            AtomicOp::Add => old.wrapping_add(src),
            AtomicOp::Sub => old.wrapping_sub(src),
            AtomicOp::Smin => (old as i32).min(src as i32) as u32,
            AtomicOp::Umin => old.min(src),
            AtomicOp::Smax => (old as i32).max(src as i32) as u32,
            AtomicOp::Umax => old.max(src),
            AtomicOp::And => old & src,
            AtomicOp::Or => old | src,
            AtomicOp::Xor => old ^ src,
            AtomicOp::Inc => {
                if old >= src {
                    0
                } else {
                    old + 1
                }
            }
            AtomicOp::Dec => {
                if old == 0 || old > src {
                    src
                } else {
                    old - 1
                }
            }
            AtomicOp::FAdd => f(|a, b| a + b),
            AtomicOp::FMin => f(f32::min),
            AtomicOp::FMax => f(f32::max),
        }
    }

    /// The new 64-bit value from the old one, the data and the compare
    /// value.
    pub fn apply64(self, old: u64, src: u64, cmp: u64) -> u64 {
        let f = |op: fn(f64, f64) -> f64| op(f64::from_bits(old), f64::from_bits(src)).to_bits();
        match self {
            AtomicOp::Swap => src,
            AtomicOp::CmpSwap => {
                if old == cmp {
                    src
                } else {
                    old
                }
            }
            AtomicOp::Add => old.wrapping_add(src),
            AtomicOp::Sub => old.wrapping_sub(src),
            AtomicOp::Smin => (old as i64).min(src as i64) as u64,
            AtomicOp::Umin => old.min(src),
            AtomicOp::Smax => (old as i64).max(src as i64) as u64,
            AtomicOp::Umax => old.max(src),
            AtomicOp::And => old & src,
            AtomicOp::Or => old | src,
            AtomicOp::Xor => old ^ src,
            AtomicOp::Inc => {
                if old >= src {
                    0
                } else {
                    old + 1
                }
            }
            AtomicOp::Dec => {
                if old == 0 || old > src {
                    src
                } else {
                    old - 1
                }
            }
            AtomicOp::FAdd => f(|a, b| a + b),
            AtomicOp::FMin => f(f64::min),
            AtomicOp::FMax => f(f64::max),
        }
    }
}

/// Global memory as a wave sees it, by GPU virtual address.
///
/// Reads and writes are little-endian byte copies; an implementation
/// returns a [`MemFault`] naming the first address it cannot serve. The
/// atomics return the old value and must be atomic against every other
/// user of the memory the implementation knows of (other waves, the host).
pub trait Memory {
    /// Reads `buf.len()` bytes at `addr`.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault>;
    /// Writes `data` at `addr`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemFault>;
    /// A 32-bit atomic at `addr` (4-byte aligned); returns the old value.
    fn atomic32(&mut self, addr: u64, op: AtomicOp, src: u32, cmp: u32) -> Result<u32, MemFault>;
    /// A 64-bit atomic at `addr` (8-byte aligned); returns the old value.
    fn atomic64(&mut self, addr: u64, op: AtomicOp, src: u64, cmp: u64) -> Result<u64, MemFault>;
}
