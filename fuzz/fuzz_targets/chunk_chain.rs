//! Fuzz target `chunk_chain`: runs `amdgpu_image::fuzz_support::check_chunk_chain`
//! (a child image set and its parent in scratch directories: parent-chain
//! and deduplication references verified, read through and flattened; the
//! same check `cargo test -p amdgpu-image` replays on fuzz/corpus/chunk_chain/).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    amdgpu_image::fuzz_support::check_chunk_chain(data);
});
