//! Floating-point helpers: IEEE half precision conversions (round to
//! nearest even), the exponent and mantissa splits the ISA's `frexp`,
//! `ldexp` and `div_*` instructions use.

/// The f32 value of an f16 bit pattern (exact).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = (h as u32 & 0x8000) << 16;
    let exp = (h >> 10) & 0x1f;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m * 2^-24, exact in f32.
            let v = m as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
        (31, 0) => sign | 0x7f80_0000,
        // NaN payload and quiet bit (bit 9 -> bit 22) kept.
        (31, m) => sign | 0x7f80_0000 | m << 13,
        (e, m) => sign | ((e as u32 + 112) << 23) | m << 13,
    };
    f32::from_bits(bits)
}

/// An f64 rounded to f16 (nearest even). `sticky` says the exact value
/// lies strictly beyond `x` in the direction of its sign (+1), strictly
/// short of it (-1) or is `x` (0): it breaks the ties a prior rounding to
/// f64 may have made.
pub(crate) fn f64_to_f16_sticky(x: f64, sticky: i8) -> u16 {
    let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
    if x.is_nan() {
        return 0x7e00 | sign;
    }
    let a = x.abs();
    if a.is_infinite() {
        return sign | 0x7c00;
    }
    if a == 0.0 {
        return sign;
    }
    // Scale so that the f16 ulp at this magnitude is 1.
    let e = a.log2().floor() as i32;
    let e = if a < 2f64.powi(e) {
        e - 1
    } else if a >= 2f64.powi(e + 1) {
        e + 1
    } else {
        e
    };
    let ulp_exp = if e < -14 { -24 } else { e - 10 };
    let scaled = a / 2f64.powi(ulp_exp); // exact: a power-of-two scaling
    let int = scaled.floor();
    let frac = scaled - int;
    let mut q = int as u64;
    let half = if frac > 0.5 {
        true
    } else if frac < 0.5 {
        false
    } else {
        match sticky {
            1 => true,
            -1 => false,
            _ => q & 1 == 1,
        }
    };
    if half {
        q += 1;
    }
    // Rebuild from q * 2^ulp_exp.
    let v = q as f64 * 2f64.powi(ulp_exp);
    if v >= 65520.0 {
        return sign | 0x7c00;
    }
    if v < 2f64.powi(-14) {
        return sign | q as u16;
    }
    let e = v.log2().floor() as i32;
    let m = (v / 2f64.powi(e - 10)) as u64 - 1024;
    sign | (((e + 15) as u16) << 10) | m as u16
}

/// An f32 rounded to f16 (nearest even).
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    f64_to_f16_sticky(x as f64, 0)
}

/// An f32 rounded toward zero to f16 (`v_cvt_pkrtz_f16_f32`): overflow
/// gives the largest finite f16, NaN stays NaN.
pub(crate) fn f32_to_f16_rtz(x: f32) -> u16 {
    let h = f32_to_f16(x);
    if x.is_nan() {
        return h;
    }
    if x.is_infinite() {
        return h;
    }
    // Nearest-even went away from zero: step back one ulp toward zero
    // (the bit pattern's magnitude is monotonic).
    if f16_to_f32(h).abs() > x.abs() {
        h - 1
    } else {
        h
    }
}

/// `fma(a, b, c)` in f16: exact product in f64, the sum's rounding error
/// kept as a sticky direction so the single rounding to f16 is right.
pub(crate) fn fma_f16(a: u16, b: u16, c: u16) -> u16 {
    let p = f16_to_f32(a) as f64 * f16_to_f32(b) as f64; // exact: 22 bits
    let c = f16_to_f32(c) as f64;
    let s = p + c;
    // TwoSum: the exact error of s.
    let bb = s - p;
    let err = (p - (s - bb)) + (c - bb);
    let sticky = if err == 0.0 || s == 0.0 {
        0
    } else if (err > 0.0) == (s > 0.0) {
        1
    } else {
        -1
    };
    f64_to_f16_sticky(s, sticky)
}

/// The biased exponent field of an f32.
pub(crate) fn exp32(x: u32) -> i32 {
    ((x >> 23) & 0xff) as i32
}

/// The biased exponent field of an f64.
pub(crate) fn exp64(x: u64) -> i32 {
    ((x >> 52) & 0x7ff) as i32
}

/// `frexp` as `v_frexp_mant`/`v_frexp_exp` define it (Vega ISA 12.7):
/// mantissa in [0.5, 1), exponent such that x = m * 2^e; NaN and infinity
/// give themselves and exponent 0.
pub(crate) fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let bits = x.to_bits();
    let e = exp64(bits);
    if e == 0 {
        // Subnormal: normalise first.
        let (m, e) = frexp(x * 2f64.powi(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, e - 1022)
}

/// `ldexp(x, e)` with one rounding (f64).
pub(crate) fn ldexp64(x: f64, e: i32) -> f64 {
    let e = e.clamp(-2200, 2200);
    // Split the scaling so no intermediate power over- or underflows
    // before the last step (which is the only inexact one).
    let mut v = x;
    let mut e = e;
    while e > 1000 {
        v *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        // Scaling down in steps that stay normal keeps one rounding only
        // when the final step is the one into the subnormal range.
        if v.abs() * 2f64.powi(-1000) < f64::MIN_POSITIVE {
            break;
        }
        v *= 2f64.powi(-1000);
        e += 1000;
    }
    if e < -1000 {
        // One rounding: scale in two halves only if exact.
        let half = e / 2;
        let t = v * 2f64.powi(half);
        if t.abs() >= f64::MIN_POSITIVE {
            return t * 2f64.powi(e - half);
        }
        return v * 2f64.powi(e);
    }
    v * 2f64.powi(e)
}

/// `ldexp(x, e)` with one rounding (f32): exact in f64, then one rounding.
pub(crate) fn ldexp32(x: f32, e: i32) -> f32 {
    let e = e.clamp(-400, 400);
    (x as f64 * 2f64.powi(e)) as f32
}

/// A quiet NaN of f32 from a NaN input (the quiet bit set).
pub(crate) fn quiet32(x: u32) -> u32 {
    x | 0x0040_0000
}

/// floor(2/pi * 2^1201): 2/pi's first 1201 fraction bits, most significant
/// word first (bit 1200 is the first fraction bit), for `v_trig_preop_f64`.
const TWO_OVER_PI: [u32; 38] = [
    0x000145f3, 0x06dc9c88, 0x2a53f84e, 0xafa3ea69, 0xbb81b6c5, 0x2b327887, 0x2083fca2, 0xc757bd77,
    0x8ac36e48, 0xdc74849b, 0xa5c00c92, 0x5dd413a3, 0x2439fc3b, 0xd6396253, 0x4e7dd104, 0x6bea5d76,
    0x8909d338, 0xe04d68be, 0xfc827323, 0xac7306a6, 0x73e93908, 0xbf177bf2, 0x50763ff1, 0x2fffbc0b,
    0x301fde5e, 0x2316b414, 0xda3eda6c, 0xfd9e4f96, 0x136e9e8c, 0x7ecd3cbf, 0xd45aea4f, 0x758fd7cb,
    0xe2f67a0e, 0x73ef14a5, 0x25d4d7f6, 0xbf623f1a, 0xba10ac06, 0x608df8f6,
];

fn two_over_pi_bit(i: i64) -> u64 {
    if !(0..1201).contains(&i) {
        return 0;
    }
    let i = i as usize;
    (TWO_OVER_PI[37 - i / 32] >> (i % 32)) as u64 & 1
}

/// `v_trig_preop_f64` (Vega ISA 12.10): segment S1(bits 4:0) of 2/pi as 53
/// bits, scaled so the segments add up to 2/pi; for large S0 the window
/// moves down by exponent(S0) - 1077 bits (and the scale up by 128 from
/// exponent 1968).
pub(crate) fn trig_preop(x: f64, seg: u32) -> f64 {
    let e = exp64(x.to_bits()) as i64;
    let mut shift = (seg & 31) as i64 * 53;
    if e > 1077 {
        shift += e - 1077;
    }
    let mut bits = 0u64;
    for k in 0..53 {
        bits = bits << 1 | two_over_pi_bit(1200 - shift - k);
    }
    let mut scale = -53 - shift;
    if e >= 1968 {
        scale += 128;
    }
    ldexp64(bits as f64, scale as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_round_trip_of_every_pattern() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: even.
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_f16(2f32.powi(-25) * 1.5), 0x0001);
    }

    #[test]
    fn fma_f16_rounds_once() {
        // a*b + c where the f64 sum rounds onto an f16 midpoint: 2048 +
        // 1 + 2^-60 must round up to 2050 (f16 ulp at 2048 is 2).
        let big = 0x6800; // 2048
        let one = 0x3c00;
        assert_eq!(fma_f16(one, one, big), 0x6800); // 2049 -> tie -> even 2048
        assert_eq!(fma_f16(0x3c00, 0x4000, 0x6800), 0x6801); // 2050
    }

    #[test]
    fn trig_preop_segments_add_up_to_two_over_pi() {
        let first = trig_preop(1.0, 0);
        assert_eq!(first, f64::from_bits(0x3fe4_5f30_6dc9_c882)); // 2/pi
        let second = trig_preop(1.0, 1);
        assert!(second > 0.0 && second < first * 2f64.powi(-52));
    }

    #[test]
    fn f16_toward_zero() {
        // 1 + 3 * 2^-11 is a tie that nearest-even rounds up; toward zero
        // keeps 1 + 2^-10.
        assert_eq!(f32_to_f16_rtz(1.0 + 3.0 * 2f32.powi(-11)), 0x3c01);
        assert_eq!(f32_to_f16_rtz(-(1.0 + 3.0 * 2f32.powi(-11))), 0xbc01);
        assert_eq!(f32_to_f16_rtz(1e6), 0x7bff);
        assert_eq!(f32_to_f16_rtz(-1e6), 0xfbff);
        assert_eq!(f32_to_f16_rtz(0.5), 0x3800);
    }

    #[test]
    fn frexp_splits() {
        assert_eq!(frexp(8.0), (0.5, 4));
        assert_eq!(frexp(-0.75), (-0.75, 0));
        assert_eq!(frexp(f64::from_bits(1)), (0.5, -1073));
    }
}
