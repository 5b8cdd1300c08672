//! The check the `gfx9_decode` fuzz target runs, and that
//! `tests/fuzz_corpus.rs` replays on `fuzz/corpus/gfx9_decode/` on stable
//! Rust. For fuzzing and tests, not part of the supported API.

use crate::{decode, Target};

/// Decodes `data` as an instruction stream for every target: decoding never
/// panics, a decoded length is 4, 8 or 12 bytes and within the input, and
/// every decoded instruction prints.
pub fn check_decode(data: &[u8]) {
    for target in Target::ALL {
        let mut at = 0;
        while at < data.len() {
            match decode(target, &data[at..]) {
                Ok(d) => {
                    assert!(matches!(d.len, 4 | 8 | 12), "length {} at {at}", d.len);
                    assert!(
                        d.len <= data.len() - at,
                        "length {} past the input at {at}",
                        d.len
                    );
                    let text = d.inst.to_string();
                    assert!(text.starts_with(d.inst.desc().name()), "{text}");
                    at += d.len;
                }
                Err(e) => {
                    let _ = e.to_string();
                    at += 4;
                }
            }
        }
    }
}
