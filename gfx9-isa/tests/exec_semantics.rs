//! Hand-assembled instruction sequences (encodings as LLVM's assembler
//! gives them, the assembly beside each) run on one wave and checked
//! against the ISA guides' semantics: carries and SCC, EXEC masking and
//! branches, f32 rounding and modifiers, DPP and SDWA, lane access, LDS
//! cross-lane ops, scratch, and instructions that must stop by name.

#![allow(clippy::needless_range_loop)]

mod support;

use gfx9_isa::exec::{
    run_waves, AqlDispatch, CodeCache, Dispatch, DispatchError, ExecError, KernelDescriptor, Lds,
    Stop, Wave, WorkgroupOutcome,
};
use gfx9_isa::Target;
use support::exec::{Mem, Ticks};

const CODE: u64 = 0x10_0000_0000;
const END: [u8; 4] = [0x00, 0x00, 0x81, 0xbf]; // s_endpgm

/// Runs `code` (then s_endpgm) on a wave `setup` prepares.
fn run_on(
    target: Target,
    code: &[&[u8]],
    mem: &mut Mem,
    setup: impl FnOnce(&mut Wave),
) -> (Wave, Result<Stop, ExecError>) {
    let mut bytes: Vec<u8> = code.iter().flat_map(|c| c.iter().copied()).collect();
    bytes.extend_from_slice(&END);
    mem.map(CODE, bytes);
    let mut w = Wave::new(target, CODE, 64, 8);
    setup(&mut w);
    let mut lds = Lds::new(4096);
    let r = w.run(
        &mut CodeCache::new(),
        mem,
        &mut lds,
        &Ticks::default(),
        1000,
    );
    (w, r)
}

fn run(code: &[&[u8]], setup: impl FnOnce(&mut Wave)) -> Wave {
    let mut mem = Mem::new();
    let (w, r) = run_on(Target::Gfx90a, code, &mut mem, setup);
    assert_eq!(r, Ok(Stop::Endpgm));
    w
}

fn lanes_of(w: &Wave, v: usize) -> [u32; 64] {
    w.vgprs[v]
}

#[test]
fn scalar_carry_and_scc() {
    let w = run(
        &[
            &[0x01, 0x02, 0x00, 0x80],                         // s_add_u32 s0, s1, s2
            &[0x04, 0x05, 0x03, 0x82],                         // s_addc_u32 s3, s4, s5
            &[0x07, 0x08, 0x86, 0x80],                         // s_sub_u32 s6, s7, s8
            &[0x81, 0x82, 0x09, 0x85],                         // s_cselect_b32 s9, 1, 2
            &[0x1b, 0xff, 0x9a, 0x92, 0x04, 0x00, 0x05, 0x00], // s_bfe_u32 s26, s27, 0x50004
        ],
        |w| {
            w.sregs[1] = u32::MAX;
            w.sregs[2] = 2;
            w.sregs[4] = 10;
            w.sregs[5] = 20;
            w.sregs[7] = 1;
            w.sregs[8] = 2;
            w.sregs[27] = 0xabcd_ef12;
        },
    );
    assert_eq!(w.sregs[0], 1); // 0xffffffff + 2 wraps, carry out
    assert_eq!(w.sregs[3], 31); // 10 + 20 + carry in
    assert_eq!(w.sregs[6], u32::MAX); // 1 - 2 borrows: SCC = 1
    assert_eq!(w.sregs[9], 1); // SCC from the borrow selects S0
    assert_eq!(w.sregs[26], (0xabcd_ef12 >> 4) & 0x1f);
    assert!(w.scc, "s_bfe_u32 sets SCC for a non-zero result");
}

#[test]
fn vector_carry_chain_is_a_64_bit_add() {
    let w = run(
        &[
            &[0x00, 0x09, 0x04, 0x32], // v_add_co_u32_e32 v2, vcc, v0, v4
            &[0x01, 0x0b, 0x06, 0x38], // v_addc_co_u32_e32 v3, vcc, v1, v5, vcc
        ],
        |w| {
            for l in 0..64 {
                let a = (l as u64) << 31 | 0xffff_fff0;
                let b = 0x1_0000_0017u64 * l as u64;
                w.vgprs[0][l] = a as u32;
                w.vgprs[1][l] = (a >> 32) as u32;
                w.vgprs[4][l] = b as u32;
                w.vgprs[5][l] = (b >> 32) as u32;
            }
        },
    );
    let mut carry_out = 0u64;
    for l in 0..64 {
        let a = (l as u64) << 31 | 0xffff_fff0;
        let b = 0x1_0000_0017u64 * l as u64;
        let (sum, c) = a.overflowing_add(b);
        assert_eq!(
            w.vgprs[2][l] as u64 | (w.vgprs[3][l] as u64) << 32,
            sum,
            "lane {l}"
        );
        carry_out |= (c as u64) << l;
    }
    assert_eq!(w.vcc(), carry_out);
}

#[test]
fn exec_masking_and_saveexec_branch() {
    let w = run(
        &[
            &[0xa0, 0x00, 0x98, 0x7d], // v_cmp_gt_u32_e32 vcc, 32, v0
            &[0x6a, 0x20, 0x8c, 0xbe], // s_and_saveexec_b64 s[12:13], vcc
            &[0x02, 0x00, 0x88, 0xbf], // s_cbranch_execz 2
            &[0x81, 0x02, 0x1e, 0x7e], // v_mov_b32_e32 v15, 1
            &[0x7e, 0x0c, 0xfe, 0x87], // s_or_b64 exec, exec, s[12:13]
        ],
        |w| {
            for l in 0..64 {
                w.vgprs[0][l] = l as u32;
                w.vgprs[15][l] = 7;
            }
            w.set_exec(0x0000_ffff_0000_ffff);
        },
    );
    // Lanes below 32 that were active took the move; the rest kept 7.
    for l in 0..64 {
        let want = if l < 16 { 1 } else { 7 };
        assert_eq!(w.vgprs[15][l], want, "lane {l}");
    }
    assert_eq!(w.sreg64(12), 0x0000_ffff_0000_ffff, "saved EXEC");
    assert_eq!(w.exec(), 0x0000_ffff_0000_ffff, "EXEC restored");
    // Compares write 0 for inactive lanes.
    assert_eq!(w.vcc(), 0xffff);
}

#[test]
fn execz_branch_skips_when_no_lane_is_left() {
    let w = run(
        &[
            &[0xa0, 0x00, 0x98, 0x7d], // v_cmp_gt_u32_e32 vcc, 32, v0
            &[0x6a, 0x20, 0x8c, 0xbe], // s_and_saveexec_b64 s[12:13], vcc
            &[0x02, 0x00, 0x88, 0xbf], // s_cbranch_execz 2 (over the two next)
            &[0x81, 0x02, 0x1e, 0x7e], // v_mov_b32_e32 v15, 1
            &[0x87, 0x02, 0x02, 0x7e], // v_mov_b32_e32 v1, 7
        ],
        |w| {
            for l in 0..64 {
                w.vgprs[0][l] = 100;
            }
        },
    );
    assert_eq!(w.exec(), 0);
    assert!(lanes_of(&w, 15).iter().all(|&v| v == 0));
    assert!(lanes_of(&w, 1).iter().all(|&v| v == 0));
}

#[test]
fn f32_rounding_fma_and_modifiers() {
    let one = 1.0f32.to_bits();
    let ulp_half = 2f32.powi(-24).to_bits();
    let w = run(
        &[
            &[0x07, 0x11, 0x0c, 0x02], // v_add_f32_e32 v6, v7, v8
            &[0x09, 0x00, 0xcb, 0xd1, 0x07, 0x11, 0x2a, 0x04], // v_fma_f32 v9, v7, v8, v10
            &[0x07, 0x11, 0x16, 0x0a], // v_mul_f32_e32 v11, v7, v8
            &[0x0c, 0x80, 0x01, 0xd1, 0x07, 0x11, 0x02, 0x00], // v_add_f32_e64 v12, v7, v8 clamp
            &[0x0d, 0x00, 0x05, 0xd1, 0x07, 0x11, 0x02, 0x08], // v_mul_f32_e64 v13, v7, v8 mul:2
            &[0x0e, 0x02, 0x01, 0xd1, 0x07, 0x11, 0x02, 0x20], // v_add_f32_e64 v14, -v7, |v8|
        ],
        |w| {
            // lane 0: 1 + 2^-24 (a tie: to even, 1.0); lane 1: 1 + 3 * 2^-24
            // (a tie: to even, 1 + 2^-22); lane 2: fma keeps what mul drops.
            w.vgprs[7][0] = one;
            w.vgprs[8][0] = ulp_half;
            w.vgprs[7][1] = (1.0f32 + 2f32.powi(-23)).to_bits();
            w.vgprs[8][1] = ulp_half;
            let x = 1.0f32 + 2f32.powi(-12);
            w.vgprs[7][2] = x.to_bits();
            w.vgprs[8][2] = x.to_bits();
            w.vgprs[10][2] = (-(x * x)).to_bits();
            w.vgprs[7][3] = 0.75f32.to_bits();
            w.vgprs[8][3] = (-0.5f32).to_bits();
        },
    );
    assert_eq!(w.vgprs[6][0], one);
    assert_eq!(f32::from_bits(w.vgprs[6][1]), 1.0 + 2f32.powi(-22));
    // fma(x, x, -(x*x)) is the rounding error of x*x: 2^-24.
    assert_eq!(f32::from_bits(w.vgprs[9][2]), 2f32.powi(-24));
    assert_eq!(f32::from_bits(w.vgprs[11][3]), -0.375);
    // clamp: 0.75 + -0.5 = 0.25 stays, 1 + 2^-24 -> 1.0
    assert_eq!(f32::from_bits(w.vgprs[12][3]), 0.25);
    assert_eq!(f32::from_bits(w.vgprs[12][0]), 1.0);
    // omod mul:2
    assert_eq!(f32::from_bits(w.vgprs[13][3]), -0.75);
    // -0.75 + |-0.5|
    assert_eq!(f32::from_bits(w.vgprs[14][3]), -0.25);
}

#[test]
fn clamp_saturates_to_one_and_zero() {
    let w = run(
        &[&[0x0c, 0x80, 0x01, 0xd1, 0x07, 0x11, 0x02, 0x00]], // v_add_f32_e64 v12, v7, v8 clamp
        |w| {
            w.vgprs[7][0] = 2.0f32.to_bits();
            w.vgprs[7][1] = (-3.0f32).to_bits();
            w.vgprs[7][2] = f32::NAN.to_bits();
        },
    );
    assert_eq!(f32::from_bits(w.vgprs[12][0]), 1.0);
    assert_eq!(f32::from_bits(w.vgprs[12][1]), 0.0);
    assert_eq!(
        f32::from_bits(w.vgprs[12][2]),
        0.0,
        "NaN clamps to 0 in DX10 mode"
    );
}

#[test]
fn dpp_row_shift_and_quad_perm() {
    let w = run(
        &[
            &[0xfa, 0x02, 0x20, 0x7e, 0x00, 0x11, 0x01, 0xff], // v_mov_b32_dpp v16, v0 row_shr:1
            &[0xfa, 0x02, 0x22, 0x7e, 0x00, 0x1b, 0x00, 0xff], // v_mov_b32_dpp v17, v0 quad_perm:[3,2,1,0]
            &[0xfa, 0x02, 0x24, 0x7e, 0x00, 0x11, 0x09, 0xff], // v_mov_b32_dpp v18, v0 row_shr:1 bound_ctrl
        ],
        |w| {
            for l in 0..64 {
                w.vgprs[0][l] = 100 + l as u32;
                w.vgprs[16][l] = 7;
                w.vgprs[18][l] = 7;
            }
        },
    );
    for l in 0..64 {
        // row_shr:1: lane l reads l - 1 within its row of 16; the first
        // lane of a row has no source: unwritten, or 0 with BOUND_CTRL.
        let (want, want_bc) = if l % 16 == 0 {
            (7, 0)
        } else {
            (100 + l as u32 - 1, 100 + l as u32 - 1)
        };
        assert_eq!(w.vgprs[16][l], want, "row_shr lane {l}");
        assert_eq!(w.vgprs[18][l], want_bc, "row_shr bound_ctrl lane {l}");
        assert_eq!(
            w.vgprs[17][l],
            100 + ((l & !3) | (3 - (l & 3))) as u32,
            "quad_perm lane {l}"
        );
    }
}

#[test]
fn sdwa_selects_and_preserves() {
    let w = run(
        &[
            &[0xf9, 0x02, 0x26, 0x7e, 0x14, 0x06, 0x01, 0x00], // v_mov_b32_sdwa v19, v20 src0_sel:BYTE_1
            &[0xf9, 0x28, 0x2a, 0x68, 0x14, 0x15, 0x00, 0x01], // v_add_u32_sdwa v21, v20, v20 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_0 src1_sel:BYTE_1
        ],
        |w| {
            w.vgprs[20][0] = 0x1122_33f4;
            w.vgprs[21][0] = 0xaaaa_bbbb;
        },
    );
    assert_eq!(w.vgprs[19][0], 0x33);
    // 0xf4 + 0x33 = 0x127 into the high word, the low word kept.
    assert_eq!(w.vgprs[21][0], 0x0127_bbbb);
}

#[test]
fn lane_reads_and_writes() {
    let w = run(
        &[
            &[0x0e, 0x00, 0x89, 0xd2, 0x00, 0x0b, 0x01, 0x00], // v_readlane_b32 s14, v0, 5
            &[0x16, 0x00, 0x8a, 0xd2, 0x0f, 0x12, 0x01, 0x00], // v_writelane_b32 v22, s15, 9
            &[0x00, 0x05, 0x20, 0x7e],                         // v_readfirstlane_b32 s16, v0
        ],
        |w| {
            for l in 0..64 {
                w.vgprs[0][l] = 1000 + l as u32;
            }
            w.sregs[15] = 0xdead;
            // v_writelane ignores EXEC; v_readfirstlane reads the first
            // active lane.
            w.set_exec(0xff00);
        },
    );
    assert_eq!(w.sregs[14], 1005);
    assert_eq!(w.vgprs[22][9], 0xdead);
    assert_eq!(w.sregs[16], 1008);
}

#[test]
fn ds_swizzle_swaps_neighbours_and_lds_round_trips() {
    let w = run(
        &[
            &[0x1f, 0x04, 0x7a, 0xd8, 0x00, 0x00, 0x00, 0x1a], // ds_swizzle_b32 v26, v0 offset:swizzle(SWAP,1)
            &[0x00, 0x00, 0x1a, 0xd8, 0x22, 0x00, 0x00, 0x00], // ds_write_b32 v34, v0
            &[0x00, 0x00, 0x6c, 0xd8, 0x24, 0x00, 0x00, 0x23], // ds_read_b32 v35, v36
        ],
        |w| {
            for l in 0..64 {
                w.vgprs[0][l] = l as u32 * 10;
                w.vgprs[34][l] = 4 * l as u32;
                w.vgprs[36][l] = 4 * (63 - l as u32);
            }
        },
    );
    for l in 0..64 {
        assert_eq!(w.vgprs[26][l], (l ^ 1) as u32 * 10, "swizzle lane {l}");
        assert_eq!(w.vgprs[35][l], (63 - l) as u32 * 10, "lds lane {l}");
    }
}

#[test]
fn scratch_is_private_per_lane() {
    let mut mem = Mem::new();
    let scratch = mem.alloc(64 * 64);
    let (w, r) = run_on(
        Target::Gfx90a,
        &[
            &[0x08, 0x40, 0x70, 0xdc, 0x1b, 0x1c, 0x7f, 0x00], // scratch_store_dword v27, v28, off offset:8
            &[0x08, 0x40, 0x50, 0xdc, 0x1b, 0x00, 0x7f, 0x1d], // scratch_load_dword v29, v27, off offset:8
        ],
        &mut mem,
        |w| {
            w.set_sreg64(102, scratch);
            for l in 0..64 {
                w.vgprs[27][l] = 0; // every lane uses private offset 8
                w.vgprs[28][l] = 500 + l as u32;
            }
        },
    );
    assert_eq!(r, Ok(Stop::Endpgm));
    for l in 0..64 {
        assert_eq!(w.vgprs[29][l], 500 + l as u32);
    }
    // Swizzled: dword 2 of lane l at base + 2 * 256 + 4 * l.
    assert_eq!(mem.get_u32s(scratch + 512, 64)[5], 505);
}

#[test]
fn f16_fma_rounds_once() {
    let w = run(
        &[&[0x1e, 0x00, 0x06, 0xd2, 0x1f, 0x41, 0x86, 0x04]], // v_fma_f16 v30, v31, v32, v33
        |w| {
            w.vgprs[31][0] = 0x3c01; // 1 + 2^-10
            w.vgprs[32][0] = 0x3c01;
            w.vgprs[33][0] = 0xbc00; // -1
            w.vgprs[30][0] = 0xffff_0000;
        },
    );
    // (1 + 2^-10)^2 - 1 = 2^-9 + 2^-20, exactly half an f16 ulp (2^-19)
    // above 2^-9: one rounding ties to even, 0x1800.
    assert_eq!(
        w.vgprs[30][0], 0x1800,
        "16-bit results zero the high half on gfx9"
    );
}

#[test]
fn mad_u64_u32_and_cmpx() {
    let w = run(
        &[
            &[0x28, 0x14, 0xe8, 0xd1, 0x2a, 0x57, 0xb2, 0x04], // v_mad_u64_u32 v[40:41], s[20:21], v42, v43, v[44:45]
            &[0x83, 0x00, 0xb2, 0x7d],                         // v_cmpx_lt_u32_e32 vcc, 3, v0
        ],
        |w| {
            for l in 0..64 {
                w.vgprs[0][l] = l as u32;
                w.vgprs[42][l] = u32::MAX;
                w.vgprs[43][l] = u32::MAX;
                w.vgprs[44][l] = if l == 1 { u32::MAX } else { l as u32 };
                w.vgprs[45][l] = if l == 1 { u32::MAX } else { 0 };
            }
        },
    );
    let p = u32::MAX as u64 * u32::MAX as u64;
    assert_eq!(w.vgprs[40][0] as u64 | (w.vgprs[41][0] as u64) << 32, p);
    assert_eq!(w.sreg64(20), 0b10, "lane 1's add carries out");
    let want = !0b1111u64;
    assert_eq!(w.exec(), want, "v_cmpx writes EXEC");
    assert_eq!(w.vcc(), want, "and VCC on gfx9");
}

#[test]
fn calls_through_getpc_swappc() {
    let mut mem = Mem::new();
    let (w, r) = run_on(
        Target::Gfx900,
        &[
            &[0x00, 0x1c, 0x96, 0xbe], // s_getpc_b64 s[22:23]      (pc 0)
            &[0x16, 0x1e, 0x98, 0xbe], // s_swappc_b64 s[24:25], s[22:23]  (pc 4): jumps to 4
        ],
        &mut mem,
        |_| {},
    );
    // s_getpc gives the next instruction's address (4); swappc jumps there
    // and leaves the return address (8) in s[24:25]; executing it again
    // makes an endless loop, cut by the budget.
    assert_eq!(r, Ok(Stop::Yield));
    assert_eq!(w.sreg64(22), CODE + 4);
    assert_eq!(w.sreg64(24), CODE + 8);
}

#[test]
fn getreg_mode_and_trap() {
    let mut mem = Mem::new();
    let (w, r) = run_on(
        Target::Gfx90a,
        &[
            &[0x01, 0xf8, 0x91, 0xb8], // s_getreg_b32 s17, hwreg(HW_REG_MODE)
            &[0x02, 0x00, 0x92, 0xbf], // s_trap 2
        ],
        &mut mem,
        |_| {},
    );
    assert_eq!(r, Ok(Stop::Trap(2)));
    assert_eq!(w.sregs[17], w.mode);
    assert_eq!(w.pc, CODE + 8);
}

#[test]
fn mfma_and_faults_stop_by_name() {
    let mut mem = Mem::new();
    let (_, r) = run_on(
        Target::Gfx90a,
        &[
            &[0x00, 0x00, 0x80, 0xbf],                         // s_nop 0
            &[0x00, 0x80, 0xc2, 0xd3, 0x00, 0x03, 0x02, 0x04], // v_mfma_f32_4x4x1f32 a[0:3], v0, v1, a[0:3]
        ],
        &mut mem,
        |_| {},
    );
    match r {
        Err(ExecError::Unimplemented { opcode, pc, .. }) => {
            assert_eq!(opcode, "v_mfma_f32_4x4x1f32");
            assert_eq!(pc, CODE + 4);
        }
        other => panic!("{other:?}"),
    }
    let mut mem = Mem::new();
    let (_, r) = run_on(
        Target::Gfx90a,
        &[&[0x00, 0x80, 0x50, 0xdc, 0x18, 0x00, 0x7f, 0x17]], // global_load_dword v23, v[24:25], off
        &mut mem,
        |w| {
            w.set_exec(1 << 3);
            w.vgprs[24][3] = 0x1234_5000;
            w.vgprs[25][3] = 0x77;
        },
    );
    assert_eq!(
        r,
        Err(ExecError::MemoryFault {
            addr: 0x77_1234_5000,
            access: "read",
            opcode: "global_load_dword",
            pc: CODE,
        })
    );
}

#[test]
fn barrier_orders_lds_between_waves() {
    // Wave k writes its lane ids to LDS, meets the other at the barrier,
    // then reads the other wave's values.
    let code: Vec<u8> = [
        &[0x00, 0x00, 0x1a, 0xd8, 0x22, 0x00, 0x00, 0x00][..], // ds_write_b32 v34, v0
        &[0x00, 0x00, 0x8a, 0xbf],                             // s_barrier
        &[0x00, 0x00, 0x6c, 0xd8, 0x24, 0x00, 0x00, 0x23],     // ds_read_b32 v35, v36
        &END,
    ]
    .concat();
    let mut mem = Mem::new();
    mem.map(CODE, code);
    let mut waves: Vec<Wave> = (0..2)
        .map(|k| {
            let mut w = Wave::new(Target::Gfx900, CODE, 40, 0);
            for l in 0..64 {
                let id = k * 64 + l as u32;
                w.vgprs[0][l] = id;
                w.vgprs[34][l] = 4 * id;
                w.vgprs[36][l] = 4 * ((id + 64) % 128);
            }
            w
        })
        .collect();
    let mut lds = Lds::new(512);
    let out = run_waves(
        &mut waves,
        &mut lds,
        &mut mem,
        &mut CodeCache::new(),
        &Ticks::default(),
        1000,
    );
    assert!(
        matches!(out, WorkgroupOutcome::Completed { instructions: 8 }),
        "{out:?}"
    );
    for k in 0..2u32 {
        for l in 0..64 {
            assert_eq!(
                waves[k as usize].vgprs[35][l],
                (k * 64 + l as u32 + 64) % 128
            );
        }
    }
}

#[test]
fn dispatch_sets_user_and_system_sgprs_and_ids() {
    let mut kd = [0u8; 64];
    kd[0..4].copy_from_slice(&256u32.to_le_bytes()); // group segment
    kd[4..8].copy_from_slice(&16u32.to_le_bytes()); // private segment
    kd[16..24].copy_from_slice(&0x100i64.to_le_bytes());
    // rsrc1: 2 VGPR granules; rsrc2: private segment, 10 user SGPRs,
    // workgroup ids x and z, work-item ids x, y, z.
    kd[48..52].copy_from_slice(&(0x00af_0000u32 | 2).to_le_bytes());
    let rsrc2: u32 = 1 | 10 << 1 | 1 << 7 | 1 << 9 | 2 << 11;
    kd[52..56].copy_from_slice(&rsrc2.to_le_bytes());
    // private segment buffer, dispatch ptr, kernarg ptr, flat scratch init
    kd[56..58].copy_from_slice(&(1u16 | 2 | 8 | 32).to_le_bytes());
    let descriptor = KernelDescriptor::parse(&kd).unwrap();
    let d = |target| Dispatch {
        target,
        descriptor,
        kernel_object: 0x5000,
        grid: [40, 3, 2],
        workgroup: [8, 3, 2],
        group_segment_size: 256,
        kernarg_address: 0xaaaa_0000_1111,
        dispatch_packet: 0xbbbb_0000_2222,
        queue: 0,
        dispatch_id: 0,
        private_segment_buffer: Dispatch::scratch_descriptor(0xcc_0000_0000),
        scratch_base: 0xcc_0000_0000,
        scratch_wave_bytes: 1024,
        apertures: Default::default(),
    };
    let dispatch = d(Target::Gfx900);
    assert_eq!(dispatch.workgroups(), [5, 1, 1]);
    let w = dispatch.wave([4, 0, 0], 0, 3).unwrap();
    assert_eq!(w.pc, 0x5100);
    assert_eq!(
        &w.sregs[0..4],
        &Dispatch::scratch_descriptor(0xcc_0000_0000)
    );
    assert_eq!(w.sreg64(4), 0xbbbb_0000_2222);
    assert_eq!(w.sreg64(6), 0xaaaa_0000_1111);
    assert_eq!(w.sreg64(8), 0xcc_0000_0000);
    assert_eq!(w.sregs[10], 4, "workgroup id x after the 10 user SGPRs");
    assert_eq!(w.sregs[11], 0, "workgroup id z (y is not enabled)");
    assert_eq!(w.sregs[12], 3 * 1024, "private segment wave offset");
    // 8 x 3 x 2 = 48 work-items: 48 lanes active, ids x fastest.
    assert_eq!(w.exec(), (1 << 48) - 1);
    assert_eq!((w.vgprs[0][13], w.vgprs[1][13], w.vgprs[2][13]), (5, 1, 0));
    assert_eq!((w.vgprs[0][47], w.vgprs[1][47], w.vgprs[2][47]), (7, 2, 1));
    // gfx90a packs the ids into v0.
    let w = d(Target::Gfx90a).wave([0, 0, 0], 0, 0).unwrap();
    assert_eq!(w.vgprs[0][47], 7 | 2 << 10 | 1 << 20);
    assert!(d(Target::Gfx900).wave([5, 0, 0], 0, 0).is_err());
    // gfx940's architected flat scratch: FLAT_SCRATCH is the wave's own.
    assert_eq!(w.flat_scratch(), 0, "set by the prologue before gfx940");
    let w = d(Target::Gfx940).wave([1, 0, 0], 0, 2).unwrap();
    assert_eq!(w.flat_scratch(), 0xcc_0000_0000 + 2 * 1024);
    // The packet the dispatch describes parses back to its fields.
    let p = AqlDispatch::parse(&dispatch.packet_bytes(0x77)).unwrap();
    assert_eq!((p.grid, p.workgroup), (dispatch.grid, dispatch.workgroup));
    assert_eq!(
        (p.kernel_object, p.kernarg_address),
        (0x5000, 0xaaaa_0000_1111)
    );
    assert_eq!(
        (p.group_segment_size, p.completion_signal, p.setup),
        (256, 0x77, 3)
    );
    let mut barrier_and = dispatch.packet_bytes(0);
    barrier_and[0] = 3;
    assert_eq!(
        AqlDispatch::parse(&barrier_and),
        Err(DispatchError::NotKernelDispatch { packet_type: 3 })
    );
}

#[test]
fn flat_addresses_reach_lds_and_scratch_by_aperture() {
    let mut mem = Mem::new();
    let scratch = mem.alloc(64 * 64);
    let ap = gfx9_isa::exec::Apertures::default();
    let (w, r) = run_on(
        Target::Gfx90a,
        &[
            &[0x00, 0x00, 0x70, 0xdc, 0x00, 0x02, 0x00, 0x00], // flat_store_dword v[0:1], v2
            &[0x00, 0x00, 0x50, 0xdc, 0x00, 0x00, 0x00, 0x03], // flat_load_dword v3, v[0:1]
        ],
        &mut mem,
        |w| {
            w.apertures = ap;
            w.set_sreg64(102, scratch);
            for l in 0..64 {
                // Lanes 0-31 address LDS dword 63 - l, lanes 32-63 their
                // own private dword 1.
                let addr = if l < 32 {
                    ap.shared_base + 4 * (63 - l as u64)
                } else {
                    ap.private_base + 4
                };
                w.vgprs[0][l] = addr as u32;
                w.vgprs[1][l] = (addr >> 32) as u32;
                w.vgprs[2][l] = 9000 + l as u32;
            }
        },
    );
    assert_eq!(r, Ok(Stop::Endpgm));
    for l in 0..64 {
        assert_eq!(w.vgprs[3][l], 9000 + l as u32, "lane {l}");
    }
    // Private dword 1 of lane l is at base + 256 + 4 * l.
    assert_eq!(mem.get_u32s(scratch + 256 + 4 * 40, 1)[0], 9040);
}

#[test]
fn global_atomic_returns_the_old_value_in_lane_order() {
    let mut mem = Mem::new();
    let counter = mem.alloc(8);
    mem.put(counter, &100u32.to_le_bytes());
    let (w, r) = run_on(
        Target::Gfx90a,
        &[&[0x00, 0x80, 0x09, 0xdd, 0x06, 0x08, 0x7f, 0x04]], // global_atomic_add v4, v[6:7], v8, off glc
        &mut mem,
        |w| {
            w.set_exec(0b1011);
            for l in 0..64 {
                w.vgprs[6][l] = counter as u32;
                w.vgprs[7][l] = (counter >> 32) as u32;
                w.vgprs[8][l] = 1 << (l % 16);
            }
        },
    );
    assert_eq!(r, Ok(Stop::Endpgm));
    assert_eq!(w.vgprs[4][0], 100);
    assert_eq!(w.vgprs[4][1], 101);
    assert_eq!(w.vgprs[4][3], 103);
    assert_eq!(w.vgprs[4][2], 0, "inactive lane untouched");
    assert_eq!(mem.get_u32s(counter, 1)[0], 100 + 0b1011);
}

#[test]
fn scalar_loads_and_the_clock() {
    let mut mem = Mem::new();
    let data = mem.alloc(64);
    mem.put(data + 8, &0x1122_3344_5566_7788u64.to_le_bytes());
    let (w, r) = run_on(
        Target::Gfx90a,
        &[
            &[0x01, 0x00, 0x06, 0xc0, 0x08, 0x00, 0x00, 0x00], // s_load_dwordx2 s[0:1], s[2:3], 0x8
            &[0x00, 0x01, 0x90, 0xc0, 0x00, 0x00, 0x00, 0x00], // s_memtime s[4:5]
            &[0x70, 0x00, 0x8c, 0xbf],                         // s_waitcnt vmcnt(0) lgkmcnt(0)
        ],
        &mut mem,
        |w| w.set_sreg64(2, data),
    );
    assert_eq!(r, Ok(Stop::Endpgm));
    assert_eq!(w.sreg64(0), 0x1122_3344_5566_7788);
    assert_eq!(w.sreg64(4), 1, "the first tick of the caller's clock");
}

#[test]
fn class_compare_and_conversions() {
    let w = run(
        &[
            &[0x06, 0x00, 0x10, 0xd0, 0x0a, 0x17, 0x02, 0x00], // v_cmp_class_f32_e64 s[6:7], v10, v11
            &[0x09, 0x0d, 0x10, 0x7e],                         // v_cvt_f32_u32_e32 v8, v9
        ],
        |w| {
            let vals = [
                f32::NAN,
                f32::NEG_INFINITY,
                -1.5,
                -1e-40,
                -0.0,
                0.0,
                1e-40,
                2.0,
                f32::INFINITY,
            ];
            for (l, v) in vals.iter().enumerate() {
                w.vgprs[10][l] = v.to_bits();
                // Ask each lane for its own class (quiet NaN is bit 1).
                w.vgprs[11][l] = 1 << (l + 1);
                w.vgprs[10][l + 16] = v.to_bits();
                w.vgprs[11][l + 16] = !(1 << (l + 1)) & 0x3ff;
            }
            w.vgprs[9][0] = u32::MAX;
            w.vgprs[9][1] = 16_777_217;
        },
    );
    assert_eq!(w.sreg64(6) & 0x1ff, 0x1ff, "each value in its own class");
    assert_eq!(w.sreg64(6) >> 16 & 0x1ff, 0, "and in no other");
    assert_eq!(f32::from_bits(w.vgprs[8][0]), 4294967296.0);
    assert_eq!(f32::from_bits(w.vgprs[8][1]), 16_777_216.0, "ties to even");
}

#[test]
fn div_scale_passes_operands_in_range_and_stops_outside() {
    let code: &[&[u8]] = &[&[0x0c, 0x6a, 0xe0, 0xd1, 0x0d, 0x1d, 0x36, 0x04]]; // v_div_scale_f32 v12, vcc, v13, v14, v13
    let w = run(code, |w| {
        w.set_exec(1);
        w.vgprs[13][0] = 3.0f32.to_bits();
        w.vgprs[14][0] = 7.0f32.to_bits();
    });
    assert_eq!(f32::from_bits(w.vgprs[12][0]), 3.0);
    assert_eq!(w.vcc(), 0);
    let mut mem = Mem::new();
    let (_, r) = run_on(Target::Gfx90a, code, &mut mem, |w| {
        w.set_exec(1);
        w.vgprs[13][0] = 1e30f32.to_bits();
        w.vgprs[14][0] = 1e-30f32.to_bits();
    });
    assert!(
        matches!(
            r,
            Err(ExecError::Unimplemented {
                opcode: "v_div_scale_f32",
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn dot4_pkrtz_and_f16_reciprocal() {
    let w = run(
        &[
            &[0x01, 0x40, 0xa8, 0xd3, 0x02, 0x07, 0x12, 0x1c], // v_dot4_i32_i8 v1, v2, v3, v4
            &[0x05, 0x00, 0x96, 0xd2, 0x06, 0x0f, 0x02, 0x00], // v_cvt_pkrtz_f16_f32 v5, v6, v7
            &[0x09, 0x7b, 0x10, 0x7e],                         // v_rcp_f16_e32 v8, v9
        ],
        |w| {
            w.vgprs[2][0] = u32::from_le_bytes([1, 0xff, 3, 0x80]); // 1, -1, 3, -128
            w.vgprs[3][0] = u32::from_le_bytes([5, 6, 0xfe, 2]); // 5, 6, -2, 2
            w.vgprs[4][0] = 1000;
            w.vgprs[6][0] = (1.0f32 + 3.0 * 2f32.powi(-11)).to_bits();
            w.vgprs[7][0] = (-1e6f32).to_bits();
            w.vgprs[9][0] = 0x4400; // 4.0
        },
    );
    assert_eq!(w.vgprs[1][0] as i32, 1000 + 5 - 6 - 6 - 256);
    assert_eq!(w.vgprs[5][0], 0x3c01 | 0xfbff << 16);
    assert_eq!(w.vgprs[8][0], 0x3400, "1/4 in f16");
}

#[test]
fn ieee_mode_min_max_quiet_a_signaling_nan() {
    let snan32 = 0x7f80_0001u32;
    let snan64 = 0x7ff0_0000_0000_0001u64;
    let w = run(
        &[
            &[0x02, 0x07, 0x02, 0x16], // v_max_f32_e32 v1, v2, v3
            &[0x04, 0x00, 0x82, 0xd2, 0x06, 0x11, 0x02, 0x00], // v_min_f64 v[4:5], v[6:7], v[8:9]
        ],
        |w| {
            // lane 0: sNaN and 1.0 -> qNaN; lane 1: qNaN and 1.0 -> 1.0
            w.vgprs[2][0] = snan32;
            w.vgprs[3][0] = 1.0f32.to_bits();
            w.vgprs[2][1] = f32::NAN.to_bits();
            w.vgprs[3][1] = 1.0f32.to_bits();
            w.vgprs[6][0] = snan64 as u32;
            w.vgprs[7][0] = (snan64 >> 32) as u32;
            w.vgprs[8][0] = 0;
            w.vgprs[9][0] = 2.0f64.to_bits().wrapping_shr(32) as u32;
        },
    );
    assert_eq!(w.vgprs[1][0], snan32 | 0x0040_0000);
    assert_eq!(f32::from_bits(w.vgprs[1][1]), 1.0);
    let r = w.vgprs[4][0] as u64 | (w.vgprs[5][0] as u64) << 32;
    assert_eq!(r, snan64 | 0x0008_0000_0000_0000);
}

#[test]
fn scalar_buffer_load_range_checks_per_dword() {
    let mut mem = Mem::new();
    let data = mem.alloc(64);
    mem.put(
        data,
        &(1..=16u32)
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    let (w, r) = run_on(
        Target::Gfx90a,
        &[&[0x02, 0x02, 0x2a, 0xc0, 0x08, 0x00, 0x00, 0x00]], // s_buffer_load_dwordx4 s[8:11], s[4:7], 0x8
        &mut mem,
        |w| {
            // NUM_RECORDS 16 bytes: of dwords 2-5 only 2 and 3 are in range.
            w.sregs[4] = data as u32;
            w.sregs[5] = (data >> 32) as u32;
            w.sregs[6] = 16;
            w.sregs[8..12].copy_from_slice(&[9, 9, 9, 9]);
        },
    );
    assert_eq!(r, Ok(Stop::Endpgm));
    assert_eq!(&w.sregs[8..12], &[3, 4, 0, 0]);
}

#[test]
fn raw_buffer_load_range_checks_per_dword() {
    let mut mem = Mem::new();
    let data = mem.alloc(64);
    mem.put(
        data,
        &(1..=16u32)
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    let (w, r) = run_on(
        Target::Gfx90a,
        &[&[0x00, 0x10, 0x5c, 0xe0, 0x04, 0x00, 0x01, 0x80]], // buffer_load_dwordx4 v[0:3], v4, s[4:7], 0 offen
        &mut mem,
        |w| {
            // A raw buffer of 24 bytes; lane 0 reads from byte 0 (all in
            // range), lane 1 from byte 16 (two dwords in), lane 2 from 32.
            w.sregs[4] = data as u32;
            w.sregs[5] = (data >> 32) as u32;
            w.sregs[6] = 24;
            w.set_exec(0b111);
            w.vgprs[4][0] = 0;
            w.vgprs[4][1] = 16;
            w.vgprs[4][2] = 32;
            for v in 0..4 {
                w.vgprs[v][..3].copy_from_slice(&[9, 9, 9]);
            }
        },
    );
    assert_eq!(r, Ok(Stop::Endpgm));
    let lane = |l: usize| [w.vgprs[0][l], w.vgprs[1][l], w.vgprs[2][l], w.vgprs[3][l]];
    assert_eq!(lane(0), [1, 2, 3, 4]);
    assert_eq!(lane(1), [5, 6, 0, 0]);
    assert_eq!(lane(2), [0, 0, 0, 0]);
}

#[test]
fn f32_denormal_flush_mode_and_unfused_mad() {
    let tiny = f32::from_bits(0x0000_0100); // an f32 denormal
    let code: &[&[u8]] = &[
        &[0x01, 0x00, 0xc1, 0xd1, 0x02, 0x07, 0x12, 0x04], // v_mad_f32 v1, v2, v3, v4
        &[0x06, 0x0f, 0x0a, 0x02],                         // v_add_f32_e32 v5, v6, v7
        &[0x80, 0x0c, 0x84, 0x7c],                         // v_cmp_eq_f32_e32 vcc, 0, v6
    ];
    let setup = |flush: bool| {
        move |w: &mut Wave| {
            if flush {
                w.mode &= !0x30; // FP_DENORM f32 = 0
            }
            w.set_exec(0b11);
            // lane 0: mad rounds the product first: (1 + 2^-12)^2 - (1 +
            // 2^-11) is 2^-24 fused, 0 unfused.
            let x = 1.0f32 + 2f32.powi(-12);
            w.vgprs[2][0] = x.to_bits();
            w.vgprs[3][0] = x.to_bits();
            w.vgprs[4][0] = (-(1.0f32 + 2f32.powi(-11))).to_bits();
            // lane 1: a denormal input.
            w.vgprs[2][1] = tiny.to_bits();
            w.vgprs[3][1] = 1.0f32.to_bits();
            w.vgprs[6][1] = tiny.to_bits();
        }
    };
    let kept = run(code, setup(false));
    assert_eq!(kept.vgprs[1][0], 0, "v_mad_f32 rounds the product");
    assert_eq!(
        kept.vgprs[1][1], 0,
        "v_mad_f32 flushes denormals in any mode"
    );
    assert_eq!(kept.vgprs[5][1], tiny.to_bits(), "v_add_f32 keeps them");
    assert_eq!(kept.vcc() & 0b10, 0);
    let flushed = run(code, setup(true));
    assert_eq!(flushed.vgprs[5][1], 0, "flushed on input");
    assert_eq!(flushed.vcc() & 0b10, 0b10, "compares see the flushed zero");
}

#[test]
fn mixed_precision_fma() {
    let w = run(
        &[
            &[0x01, 0x08, 0xa0, 0xd3, 0x02, 0x07, 0x12, 0x1c], // v_fma_mix_f32 v1, v2, v3, v4 op_sel:[1,0,0] op_sel_hi:[1,1,0]
            &[0x05, 0x40, 0xa1, 0xd3, 0x02, 0x07, 0x12, 0x1c], // v_fma_mixlo_f16 v5, v2, v3, v4 op_sel_hi:[1,1,1]
            &[0x05, 0x42, 0xa2, 0xd3, 0x02, 0x07, 0x12, 0x3c], // v_fma_mixhi_f16 v5, -v2, |v3|, v4 op_sel_hi:[1,1,1]
        ],
        |w| {
            // v2 = {lo 2.0, hi 3.0} as f16, v3 = {lo -0.5} f16,
            // v4 = 1.0 as f32 for the first, {lo 0.25} as f16 after.
            w.vgprs[2][0] = 0x4000 | 0x4200 << 16;
            w.vgprs[3][0] = 0xb800;
            w.vgprs[4][0] = 1.0f32.to_bits();
        },
    );
    // 3.0 * -0.5 + 1.0
    assert_eq!(f32::from_bits(w.vgprs[1][0]), -0.5);
    // lo: 2.0 * -0.5 + f16(low half of 1.0f32 = 0x0000) = -1.0 (0xbc00);
    // hi: -2.0 * |-0.5| + 0.0 = -1.0.
    assert_eq!(w.vgprs[5][0], 0xbc00 | 0xbc00 << 16);
}
