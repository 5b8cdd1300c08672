//! Integer and bit VALU operations, one lane function each (Vega ISA
//! 12.7-12.10, the VOP1/VOP2/VOP3 opcode descriptions; MI200 ISA 12.7-12.10).

use super::operands::{lanes, Ty};
use super::scalar::bfe_signed;
use super::valu::shape::{Kind, LaneFn, Vop};
use super::wave::Wave;
use super::{Exec, Fail};
use crate::opcodes::Opcode as O;

const U: Ty = Ty::B32;
const H: Ty = Ty::B16;
const Q: Ty = Ty::B64;

fn map(src: [Ty; 3], n: usize, dst: Ty, f: LaneFn) -> Option<Kind> {
    Some(Kind::Map {
        src,
        n,
        dst,
        f,
        float: false,
    })
}

fn u1(f: LaneFn) -> Option<Kind> {
    map([U; 3], 1, U, f)
}
fn u2(f: LaneFn) -> Option<Kind> {
    map([U; 3], 2, U, f)
}
fn u3(f: LaneFn) -> Option<Kind> {
    map([U; 3], 3, U, f)
}
fn h2(f: LaneFn) -> Option<Kind> {
    map([H; 3], 2, H, f)
}
fn h3(f: LaneFn) -> Option<Kind> {
    map([H; 3], 3, H, f)
}

fn carry(f: fn(u32, u32, bool) -> (u32, bool), carry_in: bool) -> Option<Kind> {
    Some(Kind::Carry { f, carry_in })
}

#[inline]
fn a(s: &[u64; 3]) -> u32 {
    s[0] as u32
}
#[inline]
fn b(s: &[u64; 3]) -> u32 {
    s[1] as u32
}
#[inline]
fn c(s: &[u64; 3]) -> u32 {
    s[2] as u32
}
#[inline]
fn i24(v: u32) -> i64 {
    (((v << 8) as i32) >> 8) as i64
}
#[inline]
fn u24(v: u32) -> u64 {
    (v & 0xff_ffff) as u64
}

fn med3<T: Ord + Copy>(x: T, y: T, z: T) -> T {
    x.max(y).min(x.min(y).max(z))
}

/// The lane function of an integer opcode.
pub(crate) fn kind(op: O) -> Option<Kind> {
    match op {
        O::VMovB32 | O::VAccvgprMovB32 => u1(|s| a(s) as u64),
        O::VMovB64 => map([Q; 3], 1, Q, |s| s[0]),
        O::VNotB32 => u1(|s| !a(s) as u64),
        O::VBfrevB32 => u1(|s| a(s).reverse_bits() as u64),
        O::VFfbhU32 => u1(|s| {
            if a(s) == 0 {
                u32::MAX as u64
            } else {
                a(s).leading_zeros() as u64
            }
        }),
        O::VFfblB32 => u1(|s| {
            if a(s) == 0 {
                u32::MAX as u64
            } else {
                a(s).trailing_zeros() as u64
            }
        }),
        O::VFfbhI32 => u1(|s| {
            let v = a(s);
            let n = if (v as i32) < 0 {
                (!v).leading_zeros()
            } else {
                v.leading_zeros()
            };
            if n == 32 {
                u32::MAX as u64
            } else {
                n as u64
            }
        }),
        O::VAddU32 => u2(|s| a(s).wrapping_add(b(s)) as u64),
        O::VSubU32 => u2(|s| a(s).wrapping_sub(b(s)) as u64),
        O::VSubrevU32 => u2(|s| b(s).wrapping_sub(a(s)) as u64),
        O::VAddI32 => u2(|s| a(s).wrapping_add(b(s)) as u64),
        O::VSubI32 => u2(|s| a(s).wrapping_sub(b(s)) as u64),
        O::VAddCoU32 => carry(|x, y, _| x.overflowing_add(y), false),
        O::VSubCoU32 => carry(|x, y, _| x.overflowing_sub(y), false),
        O::VSubrevCoU32 => carry(|x, y, _| y.overflowing_sub(x), false),
        O::VAddcCoU32 => carry(
            |x, y, ci| {
                let r = x as u64 + y as u64 + ci as u64;
                (r as u32, r >> 32 != 0)
            },
            true,
        ),
        O::VSubbCoU32 => carry(
            |x, y, ci| {
                let r = (x as u64).wrapping_sub(y as u64 + ci as u64);
                (r as u32, y as u64 + ci as u64 > x as u64)
            },
            true,
        ),
        O::VSubbrevCoU32 => carry(
            |x, y, ci| {
                let r = (y as u64).wrapping_sub(x as u64 + ci as u64);
                (r as u32, x as u64 + ci as u64 > y as u64)
            },
            true,
        ),
        O::VAndB32 => u2(|s| (a(s) & b(s)) as u64),
        O::VOrB32 => u2(|s| (a(s) | b(s)) as u64),
        O::VXorB32 => u2(|s| (a(s) ^ b(s)) as u64),
        O::VXnorB32 => u2(|s| !(a(s) ^ b(s)) as u64),
        O::VLshlrevB32 => u2(|s| (b(s) << (a(s) & 31)) as u64),
        O::VLshrrevB32 => u2(|s| (b(s) >> (a(s) & 31)) as u64),
        O::VAshrrevI32 => u2(|s| ((b(s) as i32) >> (a(s) & 31)) as u32 as u64),
        O::VLshlrevB64 => map([U, Q, U], 2, Q, |s| s[1] << (a(s) & 63)),
        O::VLshrrevB64 => map([U, Q, U], 2, Q, |s| s[1] >> (a(s) & 63)),
        O::VAshrrevI64 => map([U, Q, U], 2, Q, |s| ((s[1] as i64) >> (a(s) & 63)) as u64),
        O::VLshlAddU64 => map([Q, U, Q], 3, Q, |s| (s[0] << (b(s) & 7)).wrapping_add(s[2])),
        O::VMinI32 => u2(|s| (a(s) as i32).min(b(s) as i32) as u32 as u64),
        O::VMaxI32 => u2(|s| (a(s) as i32).max(b(s) as i32) as u32 as u64),
        O::VMinU32 => u2(|s| a(s).min(b(s)) as u64),
        O::VMaxU32 => u2(|s| a(s).max(b(s)) as u64),
        O::VMulI32I24 => u2(|s| (i24(a(s)) * i24(b(s))) as u32 as u64),
        O::VMulHiI32I24 => u2(|s| ((i24(a(s)) * i24(b(s))) >> 32) as u32 as u64),
        O::VMulU32U24 => u2(|s| (u24(a(s)) * u24(b(s))) as u32 as u64),
        O::VMulHiU32U24 => u2(|s| ((u24(a(s)) * u24(b(s))) >> 32) as u32 as u64),
        O::VMulLoU32 => u2(|s| a(s).wrapping_mul(b(s)) as u64),
        O::VMulHiU32 => u2(|s| ((a(s) as u64 * b(s) as u64) >> 32) as u32 as u64),
        O::VMulHiI32 => u2(|s| ((a(s) as i32 as i64 * b(s) as i32 as i64) >> 32) as u32 as u64),
        O::VMadU32U24 => u3(|s| (u24(a(s)) * u24(b(s))).wrapping_add(c(s) as u64) as u32 as u64),
        O::VMadI32I24 => {
            u3(|s| (i24(a(s)) * i24(b(s))).wrapping_add(c(s) as i32 as i64) as u32 as u64)
        }
        O::VAdd3U32 => u3(|s| a(s).wrapping_add(b(s)).wrapping_add(c(s)) as u64),
        O::VLshlAddU32 => u3(|s| (a(s) << (b(s) & 31)).wrapping_add(c(s)) as u64),
        O::VAddLshlU32 => u3(|s| (a(s).wrapping_add(b(s)) << (c(s) & 31)) as u64),
        O::VLshlOrB32 => u3(|s| ((a(s) << (b(s) & 31)) | c(s)) as u64),
        O::VAndOrB32 => u3(|s| ((a(s) & b(s)) | c(s)) as u64),
        O::VOr3B32 => u3(|s| (a(s) | b(s) | c(s)) as u64),
        O::VXadU32 => u3(|s| (a(s) ^ b(s)).wrapping_add(c(s)) as u64),
        O::VBfeU32 => u3(|s| {
            let (off, width) = (b(s) & 31, c(s) & 31);
            ((a(s) >> off) as u64 & ((1u64 << width) - 1)) as u32 as u64
        }),
        O::VBfeI32 => u3(|s| bfe_signed(a(s) as u64, b(s) & 31, c(s) & 31, 32) as u32 as u64),
        O::VBfiB32 => u3(|s| ((a(s) & b(s)) | (!a(s) & c(s))) as u64),
        O::VBfmB32 => u2(|s| ((((1u64 << (a(s) & 31)) - 1) as u32) << (b(s) & 31)) as u64),
        O::VAlignbitB32 => {
            u3(|s| ((((a(s) as u64) << 32 | b(s) as u64) >> (c(s) & 31)) as u32) as u64)
        }
        O::VAlignbyteB32 => {
            u3(|s| ((((a(s) as u64) << 32 | b(s) as u64) >> (8 * (c(s) & 3))) as u32) as u64)
        }
        O::VBcntU32B32 => u2(|s| a(s).count_ones().wrapping_add(b(s)) as u64),
        O::VMin3I32 => u3(|s| (a(s) as i32).min(b(s) as i32).min(c(s) as i32) as u32 as u64),
        O::VMax3I32 => u3(|s| (a(s) as i32).max(b(s) as i32).max(c(s) as i32) as u32 as u64),
        O::VMed3I32 => u3(|s| med3(a(s) as i32, b(s) as i32, c(s) as i32) as u32 as u64),
        O::VMin3U32 => u3(|s| a(s).min(b(s)).min(c(s)) as u64),
        O::VMax3U32 => u3(|s| a(s).max(b(s)).max(c(s)) as u64),
        O::VMed3U32 => u3(|s| med3(a(s), b(s), c(s)) as u64),
        O::VPermB32 => u3(|s| {
            // Byte select from {S0, S1} by S2's bytes (Vega 7nm ISA
            // V_PERM_B32): 0-7 a byte, 8-11 sign replicate, 12 zero, 13+
            // 0xff.
            let bytes = (a(s) as u64) << 32 | b(s) as u64;
            let mut d = 0u32;
            for k in 0..4 {
                let sel = (c(s) >> (8 * k)) & 0xff;
                let v = match sel {
                    0..=7 => (bytes >> (8 * sel)) as u8,
                    8..=11 => {
                        let src_byte = (bytes >> (8 * (2 * (sel - 8) + 1))) as u8;
                        if src_byte & 0x80 != 0 {
                            0xff
                        } else {
                            0
                        }
                    }
                    12 => 0,
                    _ => 0xff,
                };
                d |= (v as u32) << (8 * k);
            }
            d as u64
        }),
        // 16-bit integer operations.
        O::VAddU16 => h2(|s| (s[0] as u16).wrapping_add(s[1] as u16) as u64),
        O::VSubU16 => h2(|s| (s[0] as u16).wrapping_sub(s[1] as u16) as u64),
        O::VSubrevU16 => h2(|s| (s[1] as u16).wrapping_sub(s[0] as u16) as u64),
        O::VAddI16 => h2(|s| (s[0] as u16).wrapping_add(s[1] as u16) as u64),
        O::VSubI16 => h2(|s| (s[0] as u16).wrapping_sub(s[1] as u16) as u64),
        O::VMulLoU16 => h2(|s| (s[0] as u16).wrapping_mul(s[1] as u16) as u64),
        O::VLshlrevB16 => h2(|s| ((s[1] as u16) << (s[0] & 15)) as u64),
        O::VLshrrevB16 => h2(|s| ((s[1] as u16) >> (s[0] & 15)) as u64),
        O::VAshrrevI16 => h2(|s| ((s[1] as u16 as i16) >> (s[0] & 15)) as u16 as u64),
        O::VMinI16 => h2(|s| (s[0] as u16 as i16).min(s[1] as u16 as i16) as u16 as u64),
        O::VMaxI16 => h2(|s| (s[0] as u16 as i16).max(s[1] as u16 as i16) as u16 as u64),
        O::VMinU16 => h2(|s| (s[0] as u16).min(s[1] as u16) as u64),
        O::VMaxU16 => h2(|s| (s[0] as u16).max(s[1] as u16) as u64),
        O::VMadU16 => h3(|s| {
            (s[0] as u16)
                .wrapping_mul(s[1] as u16)
                .wrapping_add(s[2] as u16) as u64
        }),
        O::VMadI16 => h3(|s| {
            (s[0] as u16)
                .wrapping_mul(s[1] as u16)
                .wrapping_add(s[2] as u16) as u64
        }),
        O::VMadU32U16 => map([H, H, U], 3, U, |s| {
            ((s[0] as u16 as u32) * (s[1] as u16 as u32)).wrapping_add(c(s)) as u64
        }),
        O::VMadI32I16 => map([H, H, U], 3, U, |s| {
            ((s[0] as u16 as i16 as i32) * (s[1] as u16 as i16 as i32)).wrapping_add(c(s) as i32)
                as u32 as u64
        }),
        O::VMadU64U32 | O::VMadI64I32 | O::VReadlaneB32 | O::VWritelaneB32 => Some(Kind::Special),
        O::VReadfirstlaneB32 | O::VCndmaskB32 | O::VMbcntLoU32B32 | O::VMbcntHiU32B32 => {
            Some(Kind::Special)
        }
        O::VSwapB32 | O::VNop => Some(Kind::Special),
        _ => None,
    }
}

/// `v_mad_u64_u32` / `v_mad_i64_i32` (VOP3b): D.u64 = S0 * S1 + S2.u64,
/// the carry out of the 64-bit add to SDST (Vega ISA 12.10).
pub(crate) fn mad64(w: &mut Wave, v: &Vop, exec: u64) -> Exec {
    let signed = v.op.opcode == O::VMadI64I32;
    let missing = Fail::Unimplemented("missing source");
    let s0 = w.src(&v.srcs[0].ok_or(missing)?, Ty::B32)?;
    let s1 = w.src(&v.srcs[1].ok_or(missing)?, Ty::B32)?;
    let s2 = w.src(&v.srcs[2].ok_or(missing)?, Ty::B64)?;
    if v.clamp {
        return Err(Fail::Unimplemented("CLAMP on v_mad_*64"));
    }
    let d = w.vdst(&v.vdst.ok_or(Fail::Unimplemented("no destination"))?, 2)?;
    let mut cout = 0u64;
    for lane in lanes(exec) {
        let (x, y, z) = (
            w.lane(s0, lane, false) as u32,
            w.lane(s1, lane, false) as u32,
            w.lane(s2, lane, true),
        );
        let (r, c) = if signed {
            let p = x as i32 as i128 * y as i32 as i128 + z as i64 as i128;
            (p as u64, p < i64::MIN as i128 || p > i64::MAX as i128)
        } else {
            let p = x as u128 * y as u128 + z as u128;
            (p as u64, p >> 64 != 0)
        };
        w.set_lane(d, lane, r as u32);
        w.set_lane((d.0 + 1, d.1), lane, (r >> 32) as u32);
        cout |= (c as u64) << lane;
    }
    match &v.sdst {
        Some(op) => w.write_scalar(op, cout, true),
        None => {
            w.set_vcc(cout);
            Ok(())
        }
    }
}
