//! The kernels of `test-programs/kernels.hip`, compiled with hipcc for
//! gfx90a and gfx900, run on the interpreter (code object loaded into an
//! in-memory implementation of the memory trait, dispatch set up from the
//! kernel descriptor, workgroups run by the interpreter's runner), their
//! results compared with the same computation done on the host.

#![allow(clippy::needless_range_loop)]

mod support;

use std::sync::OnceLock;

use support::exec::{launch, load, Args, Launch, Loaded, Mem};

/// The gfx9 code objects of kernels.hip, built once per test binary;
/// `None` when hipcc is missing (the skip is reported by each test).
fn code_objects() -> Option<&'static Vec<Vec<u8>>> {
    static OBJECTS: OnceLock<Option<Vec<Vec<u8>>>> = OnceLock::new();
    OBJECTS
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let exe = support::hip::compile(dir.path(), "kernels.hip")?;
            let found =
                support::code_objects::from_fatbin(&exe, |_, _| true).expect("read the fat binary");
            assert!(found.len() >= 2, "expected gfx90a and gfx900 code objects");
            Some(found.into_iter().map(|c| c.elf).collect())
        })
        .as_ref()
}

/// Runs `body` on a fresh memory with each code object loaded.
fn each_target(body: impl Fn(&mut Mem, &Loaded)) {
    let Some(objects) = code_objects() else {
        test_env::skip("hipcc is not installed (apt-get install hipcc)");
        return;
    };
    for elf in objects {
        let mut mem = Mem::new();
        let co = load(&mut mem, elf, 0x7000_0000_0000);
        body(&mut mem, &co);
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn saxpy() {
    each_target(|mem, co| {
        let n = 1000; // not a multiple of the workgroup: the last one is partial
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
        let y: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 / 7.0).collect();
        let dx = mem.alloc(n * 4);
        let dy = mem.alloc(n * 4);
        mem.put(dx, &f32_bytes(&x));
        mem.put(dy, &f32_bytes(&y));
        let a = 2.5f32;
        let args = Args::default().i32(n as i32).f32(a).ptr(dx).ptr(dy);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z5saxpyifPKfPf",
                grid: [1024, 1, 1],
                workgroup: [256, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let got = mem.get_f32s(dy, n);
        for i in 0..n {
            // fmac: one rounding of a * x + y.
            let want = a.mul_add(x[i], y[i]);
            assert_eq!(got[i].to_bits(), want.to_bits(), "{} saxpy[{i}]", co.target);
        }
    });
}

#[test]
fn reduce_lds() {
    each_target(|mem, co| {
        let n = 1024;
        let input: Vec<i32> = (0..n).map(|i| (i * 7 % 101) - 50).collect();
        let din = mem.alloc(n as usize * 4);
        let dout = mem.alloc(4 * 4);
        mem.put(din, &i32_bytes(&input));
        let args = Args::default().ptr(din).ptr(dout).i32(n);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z10reduce_ldsPKiPii",
                grid: [1024, 1, 1],
                workgroup: [256, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let got = mem.get_u32s(dout, 4);
        for b in 0..4 {
            let want: i32 = input[b * 256..(b + 1) * 256].iter().sum();
            assert_eq!(got[b] as i32, want, "{} block {b}", co.target);
        }
    });
}

#[test]
fn atomics() {
    each_target(|mem, co| {
        let n = 1024u32;
        let counter = mem.alloc(8);
        let sum64 = mem.alloc(8);
        let maxv = mem.alloc(4);
        let bits = mem.alloc(4);
        let args = Args::default().ptr(counter).ptr(sum64).ptr(maxv).ptr(bits);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z7atomicsPiPyS_Pj",
                grid: [n, 1, 1],
                workgroup: [256, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let c = mem.get_u32s(counter, 2);
        assert_eq!(c[0], n, "{} counter", co.target);
        // The first CAS to land wins: lane 0 of the first wave runs first.
        assert_eq!(c[1], 1, "{} cas", co.target);
        assert_eq!(mem.get_u64s(sum64, 1)[0], (n as u64) * (n as u64 - 1) / 2);
        assert_eq!(mem.get_u32s(maxv, 1)[0], n - 1);
        assert_eq!(mem.get_u32s(bits, 1)[0], u32::MAX);
    });
}

#[test]
fn shuffles() {
    each_target(|mem, co| {
        let n = 256usize;
        let input: Vec<i32> = (0..n as i32).map(|i| i * 3 + (i % 5)).collect();
        let din = mem.alloc(n * 4);
        let dout = mem.alloc(n * 4);
        let dballots = mem.alloc(n / 64 * 8);
        mem.put(din, &i32_bytes(&input));
        let args = Args::default().ptr(din).ptr(dout).ptr(dballots);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z8shufflesPKiPiPy",
                grid: [n as u32, 1, 1],
                workgroup: [64, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let got = mem.get_u32s(dout, n);
        let ballots = mem.get_u64s(dballots, n / 64);
        for blk in 0..n / 64 {
            let v = &input[blk * 64..(blk + 1) * 64];
            let sum: i32 = v.iter().sum();
            let ballot = (0..64)
                .filter(|&t| v[t] & 1 != 0)
                .fold(0u64, |b, t| b | 1 << t);
            assert_eq!(ballots[blk], ballot, "{} ballot {blk}", co.target);
            for t in 0..64 {
                let up = if t > 0 { v[t - 1] } else { v[t] };
                let down = if t < 63 { v[t + 1] } else { v[t] };
                let want = sum + up - down + v[0] + ballot.count_ones() as i32;
                assert_eq!(
                    got[blk * 64 + t] as i32,
                    want,
                    "{} shuffle[{blk}][{t}]",
                    co.target
                );
            }
        }
    });
}

#[test]
fn grid2d() {
    each_target(|mem, co| {
        let (w, h) = (100u32, 37u32);
        let img = mem.alloc((w * h) as usize * 4);
        let args = Args::default().ptr(img).i32(w as i32).i32(h as i32);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z6grid2dPfii",
                grid: [w.div_ceil(16) * 16, h.div_ceil(16) * 16, 1],
                workgroup: [16, 16, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let got = mem.get_f32s(img, (w * h) as usize);
        for y in 0..h {
            for x in 0..w {
                let want = (x * 3 + y * 7) as f32 / (w + h) as f32;
                let v = got[(y * w + x) as usize];
                assert_eq!(v.to_bits(), want.to_bits(), "{} grid2d[{x},{y}]", co.target);
            }
        }
    });
}

#[test]
fn dynamic_lds() {
    each_target(|mem, co| {
        let n = 1000usize;
        let input: Vec<f32> = (0..n).map(|i| i as f32 / 3.0).collect();
        let din = mem.alloc(n * 4);
        let dout = mem.alloc(n * 4);
        mem.put(din, &f32_bytes(&input));
        let args = Args::default().ptr(din).ptr(dout).i32(n as i32);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z11dynamic_ldsPKfPfi",
                grid: [1024, 1, 1],
                workgroup: [128, 1, 1],
                dynamic_lds: 128 * 4,
                kernargs: &args.0,
            },
        );
        let got = mem.get_f32s(dout, n);
        for i in 0..n {
            let (blk, t) = (i / 128, i % 128);
            let src = blk * 128 + 127 - t;
            let v = if src < n { input[src] } else { 0.0 };
            assert_eq!(got[i], v * 2.0 + 1.0, "{} dynamic_lds[{i}]", co.target);
        }
    });
}

/// The f16 bits of a value exactly representable as a normal f16.
fn f16_exact(v: f32) -> u16 {
    if v == 0.0 {
        return 0;
    }
    let bits = v.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    assert!(
        (1..31).contains(&exp) && bits & 0x1fff == 0,
        "{v} is not an exact f16"
    );
    ((bits >> 16) & 0x8000) as u16 | (exp as u16) << 10 | ((bits >> 13) & 0x3ff) as u16
}

#[test]
fn half_math() {
    each_target(|mem, co| {
        let n = 1024usize;
        let a: Vec<u16> = (0..n).map(|i| f16_exact((i % 17) as f32)).collect();
        let b: Vec<u16> = (0..n)
            .map(|i| f16_exact(0.25 * (1 + i % 3) as f32))
            .collect();
        let (da, db, dc) = (mem.alloc(n * 2), mem.alloc(n * 2), mem.alloc(n * 2));
        mem.put(
            da,
            &a.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        );
        mem.put(
            db,
            &b.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        );
        let args = Args::default().ptr(da).ptr(db).ptr(dc).i32(n as i32);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z9half_mathPK6__halfS1_PS_i",
                grid: [n as u32, 1, 1],
                workgroup: [256, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let got = mem.get(dc, n * 2);
        for i in 0..n {
            let want = f16_exact((i % 17) as f32 * 0.25 * (1 + i % 3) as f32 + 0.5);
            let v = u16::from_le_bytes([got[2 * i], got[2 * i + 1]]);
            assert_eq!(v, want, "{} half_math[{i}]", co.target);
        }
    });
}

#[test]
fn scratch_calls() {
    each_target(|mem, co| {
        let dout = mem.alloc(256 * 4);
        let n = 48;
        let args = Args::default().ptr(dout).i32(n);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z13scratch_callsPii",
                grid: [256, 1, 1],
                workgroup: [64, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let got = mem.get_u32s(dout, 256);
        for t in 0..256i32 {
            let a: Vec<i32> = (0..64).map(|k| k * t + 1).collect();
            let s: i32 = (0..n).map(|k| a[((k * (t | 1)) % n) as usize]).sum();
            assert_eq!(got[t as usize] as i32, s, "{} scratch[{t}]", co.target);
        }
    });
}

#[test]
fn dgemv() {
    each_target(|mem, co| {
        let m = 64usize;
        let mat: Vec<f64> = (0..m * m).map(|i| (i % 7) as f64 * 0.25 - 0.5).collect();
        let v: Vec<f64> = (0..m).map(|i| 1.0 / (i + 1) as f64).collect();
        let (dm, dv, dr) = (mem.alloc(m * m * 8), mem.alloc(m * 8), mem.alloc(m * 8));
        mem.put(
            dm,
            &mat.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        );
        mem.put(
            dv,
            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        );
        let args = Args::default().ptr(dm).ptr(dv).ptr(dr).i32(m as i32);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z5dgemvPKdS0_Pdi",
                grid: [m as u32, 1, 1],
                workgroup: [m as u16, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let got: Vec<f64> = mem
            .get_u64s(dr, m)
            .into_iter()
            .map(f64::from_bits)
            .collect();
        for row in 0..m {
            let mut acc = 0.0f64;
            for k in 0..m {
                acc = mat[row * m + k].mul_add(v[k], acc);
            }
            let want = acc.abs().sqrt() / (1.0 + acc * acc);
            // sqrt and division are correctly rounded sequences on the GPU.
            assert_eq!(
                got[row].to_bits(),
                want.to_bits(),
                "{} dgemv[{row}]: {} vs {want}",
                co.target,
                got[row]
            );
        }
    });
}

#[test]
fn transcendentals() {
    each_target(|mem, co| {
        let n = 1024usize;
        let x: Vec<f32> = (0..n).map(|i| i as f32 / n as f32).collect();
        let (dx, dy, dyd) = (mem.alloc(n * 4), mem.alloc(n * 4), mem.alloc(n * 8));
        mem.put(dx, &f32_bytes(&x));
        let args = Args::default().ptr(dx).ptr(dy).ptr(dyd).i32(n as i32);
        launch(
            mem,
            co,
            &Launch {
                kernel: "_Z15transcendentalsPKfPfPdi",
                grid: [n as u32, 1, 1],
                workgroup: [256, 1, 1],
                dynamic_lds: 0,
                kernargs: &args.0,
            },
        );
        let y = mem.get_f32s(dy, n);
        let yd: Vec<f64> = mem
            .get_u64s(dyd, n)
            .into_iter()
            .map(f64::from_bits)
            .collect();
        for i in 0..n {
            let v = x[i];
            let want =
                v.sin() + v.cos() * (-v).exp() + (1.0 + v * v).ln() + v.abs().powf(0.3) + v.tanh();
            let vd = v as f64;
            let wantd = vd.exp() - (vd * vd).ln_1p() + vd.sin();
            assert!(
                (y[i] - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{} transcendentals f32[{i}]: {} vs {want}",
                co.target,
                y[i]
            );
            assert!(
                (yd[i] - wantd).abs() <= 1e-14 * wantd.abs().max(1.0),
                "{} transcendentals f64[{i}]: {} vs {wantd}",
                co.target,
                yd[i]
            );
        }
    });
}
