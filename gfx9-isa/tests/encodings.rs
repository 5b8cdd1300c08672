//! Tricky encodings, each checked against the text LLVM 15's AMDGPU
//! disassembler (`llvm-mc --disassemble`) gives for the same bytes, and the
//! decoded fields a simulator will read.

use gfx9_isa::inst::{Instruction, Segment, VopExt};
use gfx9_isa::operand::RegRange;
use gfx9_isa::{decode, Operand, Target};

fn bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Decodes `words` for `target`: its text and length.
fn dis(target: Target, words: &[u32]) -> (String, usize) {
    let d = decode(target, &bytes(words)).unwrap_or_else(|e| panic!("{words:08x?}: {e}"));
    (d.inst.to_string(), d.len)
}

#[track_caller]
fn same(target: Target, words: &[u32], text: &str, len: usize) {
    assert_eq!(dis(target, words), (text.to_string(), len), "{words:08x?}");
}

#[test]
fn literals() {
    for t in [Target::Gfx900, Target::Gfx90a] {
        // A literal equal to an inline constant prints as the constant.
        same(t, &[0x8000ff04, 0x3f800000], "s_add_u32 s0, s4, 1.0", 8);
        same(
            t,
            &[0x8000ff04, 0x12345678],
            "s_add_u32 s0, s4, 0x12345678",
            8,
        );
        // A 64-bit operand's literal is 32 bits, printed in hex.
        same(
            t,
            &[0xbe8a01ff, 0xfffffff0],
            "s_mov_b64 s[10:11], 0xfffffff0",
            8,
        );
        // 16-bit operands take the literal's low half.
        same(
            t,
            &[0x3e1408ff, 0x12345678],
            "v_add_f16_e32 v10, 0x5678, v4",
            8,
        );
        same(
            t,
            &[0x4c1408ff, 0x00003c00],
            "v_add_u16_e32 v10, 0x3c00, v4",
            8,
        );
    }
    let d = decode(Target::Gfx90a, &bytes(&[0x8000ff04, 0x12345678])).unwrap();
    let Instruction::Sop2(s) = d.inst else {
        panic!("not SOP2")
    };
    assert_eq!(s.ssrc1, Operand::Literal(0x12345678));
}

#[test]
fn truncated_literal_is_an_error() {
    let err = decode(Target::Gfx90a, &bytes(&[0x8000ff04])).unwrap_err();
    assert_eq!(err.to_string(), "instruction needs 8 bytes, 4 left");
}

#[test]
fn dpp_and_sdwa() {
    for t in [Target::Gfx900, Target::Gfx90a] {
        same(
            t,
            &[0x7e1402fa, 0xff001b08],
            "v_mov_b32_dpp v10, v8 quad_perm:[3,2,1,0] row_mask:0xf bank_mask:0xf",
            8,
        );
        same(
            t,
            &[0x7e1402fa, 0xff08e108],
            "v_mov_b32_dpp v10, v8 quad_perm:[1,0,2,3] row_mask:0xf bank_mask:0xf bound_ctrl:1",
            8,
        );
        same(
            t,
            &[0x2a1410f9, 0x06050608],
            "v_xor_b32_sdwa v10, v8, v8 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1 src1_sel:DWORD",
            8,
        );
        // SDWA src0 from an SGPR (S0 bit).
        same(
            t,
            &[0x7c9408f9, 0x0086000b],
            "v_cmp_nlg_f32_sdwa vcc, s11, v4 src0_sel:DWORD src1_sel:BYTE_0",
            8,
        );
    }
    let d = decode(Target::Gfx90a, &bytes(&[0x7e1402fa, 0xff001b08])).unwrap();
    let Instruction::Vop1(v) = d.inst else {
        panic!("not VOP1")
    };
    let VopExt::Dpp(dpp) = v.ext else {
        panic!("no DPP")
    };
    assert_eq!((dpp.ctrl, dpp.row_mask, dpp.bank_mask), (0x1b, 0xf, 0xf));
}

#[test]
fn vop3_modifiers_and_64_bit_operands() {
    for t in [Target::Gfx900, Target::Gfx90a] {
        same(
            t,
            &[0xd280000a, 0x60020908],
            "v_add_f64 v[10:11], -v[8:9], -v[4:5]",
            8,
        );
        same(
            t,
            &[0xd280830a, 0x18020908],
            "v_add_f64 v[10:11], |v[8:9]|, |v[4:5]| clamp div:2",
            8,
        );
        // VOP3b: the carry-out SGPR pair sits where VOP3a has ABS/OP_SEL.
        same(
            t,
            &[0xd1e80a0a, 0x04321108],
            "v_mad_u64_u32 v[10:11], s[10:11], v8, v8, v[12:13]",
            8,
        );
        same(t, &[0xd1c1000a, 0x04120d08], "v_mad_f32 v10, v8, v6, v4", 8);
    }
    let d = decode(Target::Gfx90a, &bytes(&[0xd1e80a0a, 0x04321108])).unwrap();
    let Instruction::Vop3(v) = d.inst else {
        panic!("not VOP3")
    };
    assert_eq!(
        v.sdst,
        Some(Operand::Sgpr(RegRange {
            first: 10,
            count: 2
        }))
    );
    assert_eq!(
        v.src[2],
        Some(Operand::Vgpr(RegRange {
            first: 12,
            count: 2
        }))
    );
}

#[test]
fn flat_segments() {
    for t in [Target::Gfx900, Target::Gfx90a] {
        same(
            t,
            &[0xdc5c8000, 0x0a7f0002],
            "global_load_dwordx4 v[10:13], v[2:3], off",
            8,
        );
        // With SADDR the VGPR address is a 32-bit offset; the 13-bit offset
        // is signed for GLOBAL (4095 here).
        same(
            t,
            &[0xdc508fff, 0x0a040002],
            "global_load_dword v10, v2, s[4:5] offset:4095",
            8,
        );
        // SCRATCH with SADDR takes no VGPR address.
        same(
            t,
            &[0xdc504000, 0x0a040000],
            "scratch_load_dword v10, off, s4",
            8,
        );
        same(
            t,
            &[0xdc700000, 0x00000802],
            "flat_store_dword v[2:3], v8",
            8,
        );
    }
    let d = decode(Target::Gfx90a, &bytes(&[0xdc509fff, 0x0a7f0002])).unwrap();
    let Instruction::Flat(f) = d.inst else {
        panic!("not FLAT")
    };
    assert_eq!((f.seg, f.offset), (Segment::Global, -1));
}

#[test]
fn ds_offsets() {
    same(
        Target::Gfx90a,
        &[0xd86c0010, 0x0a000002],
        "ds_read_b32 v10, v2 offset:16",
        8,
    );
    same(
        Target::Gfx90a,
        &[0xd8ee0201, 0x0a000002],
        "ds_read2_b64 v[10:13], v2 offset0:1 offset1:2",
        8,
    );
}

#[test]
fn gfx90a_agprs_and_acc_bits() {
    let t = Target::Gfx90a;
    same(t, &[0xd3d84000, 0x18000108], "v_accvgpr_read_b32 v0, a8", 8);
    same(
        t,
        &[0xd3d9400a, 0x18000108],
        "v_accvgpr_write_b32 a10, v8",
        8,
    );
    // MFMA: ACC (bits 59-60) picks AGPRs for SRCA/SRCB, ACC_CD (bit 15) for
    // VDST and SRCC.
    same(
        t,
        &[0xd3c40000, 0x0c020902],
        "v_mfma_f32_32x32x2f32 v[0:15], a2, v4, v[0:15]",
        8,
    );
    same(
        t,
        &[0xd3c48000, 0x0c020902],
        "v_mfma_f32_32x32x2f32 a[0:15], a2, v4, a[0:15]",
        8,
    );
    // The ACC bit of a memory instruction (bit 55) makes VDST an AGPR.
    same(
        t,
        &[0xdc508000, 0x0aff0002],
        "global_load_dword a10, v[2:3], off",
        8,
    );
    same(
        t,
        &[0xd3b0000a, 0x1c120908],
        "v_pk_fma_f32 v[10:11], v[8:9], v[4:5], v[4:5] op_sel_hi:[1,1,0]",
        8,
    );
    // gfx900 has no ACC bit there (it is NV) and no AGPRs.
    same(
        Target::Gfx900,
        &[0xdc508000, 0x0a7f0002],
        "global_load_dword v10, v[2:3], off",
        8,
    );
    assert!(decode(Target::Gfx900, &bytes(&[0xd3d84000, 0x18000108])).is_err());
}

#[test]
fn program_control() {
    same(
        Target::Gfx90a,
        &[0xbf8c0070],
        "s_waitcnt vmcnt(0) lgkmcnt(0)",
        4,
    );
    same(Target::Gfx90a, &[0xbf8cc07f], "s_waitcnt lgkmcnt(0)", 4);
    same(
        Target::Gfx90a,
        &[0xb9001801],
        "s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s0",
        4,
    );
    same(
        Target::Gfx90a,
        &[0xb8850801],
        "s_getreg_b32 s5, hwreg(HW_REG_MODE, 0, 2)",
        4,
    );
    same(Target::Gfx90a, &[0xbf810000], "s_endpgm", 4);
}

#[test]
fn mix_names_differ_by_target() {
    same(
        Target::Gfx90a,
        &[0xd3a1400a, 0x0c120908],
        "v_fma_mixlo_f16 v10, v8, v4, v4 op_sel_hi:[1,0,1]",
        8,
    );
    same(
        Target::Gfx900,
        &[0xd3a1400a, 0x0c120908],
        "v_mad_mixlo_f16 v10, v8, v4, v4 op_sel_hi:[1,0,1]",
        8,
    );
}
