//! Vector compares (VOPC and their VOP3 forms, Vega ISA 12.9): the
//! condition and type are read from the mnemonic (`v_cmp[x]_<cond>_<type>`),
//! so the 198 compare opcodes share one table of conditions.

use super::float::{f16_to_f32, quiet32};
use super::operands::Ty;
use super::valu::shape::Kind;
use super::valu_float::{class_by, class_of};
use crate::opcodes::Opcode;

/// Float conditions in opcode order (Vega ISA 12.9): F, LT, EQ, LE, GT,
/// LG, GE, O, U, NGE, NLG, NGT, NLE, NEQ, NLT, TRU.
fn fcond<const C: u8>(a: f64, b: f64) -> bool {
    let un = a.is_nan() || b.is_nan();
    match C {
        0 => false,
        1 => a < b,
        2 => a == b,
        3 => a <= b,
        4 => a > b,
        5 => !un && a != b,
        6 => a >= b,
        7 => !un,
        8 => un,
        9 => un || a < b,
        10 => un || a == b,
        11 => un || a <= b,
        12 => un || a > b,
        13 => un || a != b,
        14 => un || a >= b,
        _ => true,
    }
}

/// Integer conditions: F, LT, EQ, LE, GT, NE, GE, T.
fn icond<const C: u8, T: Ord>(a: T, b: T) -> bool {
    match C {
        0 => false,
        1 => a < b,
        2 => a == b,
        3 => a <= b,
        4 => a > b,
        5 => a != b,
        6 => a >= b,
        _ => true,
    }
}

fn f32c<const C: u8>(a: u64, b: u64) -> bool {
    fcond::<C>(
        f32::from_bits(a as u32) as f64,
        f32::from_bits(b as u32) as f64,
    )
}
fn f64c<const C: u8>(a: u64, b: u64) -> bool {
    fcond::<C>(f64::from_bits(a), f64::from_bits(b))
}
fn f16c<const C: u8>(a: u64, b: u64) -> bool {
    fcond::<C>(f16_to_f32(a as u16) as f64, f16_to_f32(b as u16) as f64)
}
fn i16c<const C: u8>(a: u64, b: u64) -> bool {
    icond::<C, i16>(a as u16 as i16, b as u16 as i16)
}
fn u16c<const C: u8>(a: u64, b: u64) -> bool {
    icond::<C, u16>(a as u16, b as u16)
}
fn i32c<const C: u8>(a: u64, b: u64) -> bool {
    icond::<C, i32>(a as u32 as i32, b as u32 as i32)
}
fn u32c<const C: u8>(a: u64, b: u64) -> bool {
    icond::<C, u32>(a as u32, b as u32)
}
fn i64c<const C: u8>(a: u64, b: u64) -> bool {
    icond::<C, i64>(a as i64, b as i64)
}
fn u64c<const C: u8>(a: u64, b: u64) -> bool {
    icond::<C, u64>(a, b)
}

fn class32(a: u64, mask: u64) -> bool {
    let x = f32::from_bits(a as u32);
    let snan = x.is_nan() && quiet32(a as u32) != a as u32;
    class_by(x.classify(), x.is_sign_negative(), snan) as u64 & mask != 0
}
fn class64(a: u64, mask: u64) -> bool {
    let x = f64::from_bits(a);
    let snan = x.is_nan() && a & 0x0008_0000_0000_0000 == 0;
    class_of(x, snan) as u64 & mask != 0
}
fn class16(a: u64, mask: u64) -> bool {
    let x = f16_to_f32(a as u16);
    let snan = x.is_nan() && a & 0x200 == 0;
    // An f16 subnormal is normal as an f32: classify by the f16 fields.
    let bits = a as u16;
    let cls = if bits & 0x7c00 == 0 && bits & 0x3ff != 0 {
        if bits & 0x8000 != 0 {
            1 << 4
        } else {
            1 << 7
        }
    } else {
        class_of(x as f64, snan)
    };
    cls as u64 & mask != 0
}

macro_rules! by_cond {
    ($f:ident, $c:expr) => {
        match $c {
            0 => $f::<0> as fn(u64, u64) -> bool,
            1 => $f::<1>,
            2 => $f::<2>,
            3 => $f::<3>,
            4 => $f::<4>,
            5 => $f::<5>,
            6 => $f::<6>,
            7 => $f::<7>,
            8 => $f::<8>,
            9 => $f::<9>,
            10 => $f::<10>,
            11 => $f::<11>,
            12 => $f::<12>,
            13 => $f::<13>,
            14 => $f::<14>,
            _ => $f::<15>,
        }
    };
}

/// The compare an opcode names, if it is one.
pub(crate) fn kind(op: Opcode) -> Option<Kind> {
    let name = op.name();
    let (x, rest) = if let Some(r) = name.strip_prefix("v_cmpx_") {
        (true, r)
    } else if let Some(r) = name.strip_prefix("v_cmp_") {
        (false, r)
    } else {
        return None;
    };
    let (cond, ty) = rest.rsplit_once('_')?;
    if cond == "class" {
        let (t, f): (Ty, fn(u64, u64) -> bool) = match ty {
            "f16" => (Ty::F16, class16),
            "f32" => (Ty::F32, class32),
            "f64" => (Ty::F64, class64),
            _ => return None,
        };
        return Some(Kind::Cmp {
            ty: t,
            src1: Ty::B32,
            f,
            x,
        });
    }
    const FCONDS: [&str; 16] = [
        "f", "lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt", "nle", "neq",
        "nlt", "tru",
    ];
    const ICONDS: [&str; 8] = ["f", "lt", "eq", "le", "gt", "ne", "ge", "t"];
    let is_float = ty.starts_with('f');
    let c = if is_float {
        FCONDS.iter().position(|&n| n == cond)?
    } else {
        ICONDS.iter().position(|&n| n == cond)?
    } as u8;
    let (t, f) = match ty {
        "f16" => (Ty::F16, by_cond!(f16c, c)),
        "f32" => (Ty::F32, by_cond!(f32c, c)),
        "f64" => (Ty::F64, by_cond!(f64c, c)),
        "i16" => (Ty::B16, by_cond!(i16c, c)),
        "u16" => (Ty::B16, by_cond!(u16c, c)),
        "i32" => (Ty::B32, by_cond!(i32c, c)),
        "u32" => (Ty::B32, by_cond!(u32c, c)),
        "i64" => (Ty::B64, by_cond!(i64c, c)),
        "u64" => (Ty::B64, by_cond!(u64c, c)),
        _ => return None,
    };
    Some(Kind::Cmp {
        ty: t,
        src1: t,
        f,
        x,
    })
}
