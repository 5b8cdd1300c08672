//! Fuzz target `gfx9_decode`: runs `gfx9_isa::fuzz_support::check_decode`
//! (the same check `cargo test -p gfx9-isa --test fuzz_corpus` replays on
//! fuzz/corpus/gfx9_decode/).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gfx9_isa::fuzz_support::check_decode(data));
