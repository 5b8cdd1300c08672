//! Replays fuzz/corpus/gfx9_decode/ through the fuzz target's check, so an
//! input the fuzzer found to crash stays a regression test once added there.

#[test]
fn corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/gfx9_decode");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/corpus/gfx9_decode") {
        let data = std::fs::read(entry.expect("corpus entry").path()).expect("corpus file");
        gfx9_isa::fuzz_support::check_decode(&data);
        n += 1;
    }
    assert!(n > 0, "the corpus is empty");
}

#[test]
fn every_dword_pattern_family_decodes_without_panicking() {
    // Every value of the top 12 bits (format and opcode fields), with the
    // rest of the word and a second and third dword varied.
    let fills = [0u32, 0xffff_ffff, 0x5555_5555, 0xaaaa_aaaa, 0x00ff_00ff];
    for top in 0u32..4096 {
        for &fill in &fills {
            let w0 = (top << 20) | (fill & 0x000f_ffff);
            let mut bytes = Vec::new();
            for w in [w0, fill, !fill] {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
            gfx9_isa::fuzz_support::check_decode(&bytes);
        }
    }
}
