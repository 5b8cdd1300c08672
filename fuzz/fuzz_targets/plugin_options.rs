//! Fuzz target `plugin_options`: the engine's options (`KFD_*` environment
//! values and CRIU plugin options) through `amdgpu_checkpoint::options`.
//! The input is `NAME=value` lines. Never panics; rejected values keep the
//! default and are reported; the staging memory never exceeds the limit a
//! valid `KFD_MAX_BUFFER_SIZE` asked for.
#![no_main]

use std::collections::HashMap;

use amdgpu_checkpoint::options::{parse_buffer_size, Options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut values = HashMap::new();
    for line in text.lines() {
        if let Some((name, value)) = line.split_once('=') {
            values.insert(name.to_owned(), value.to_owned());
        }
        let _ = parse_buffer_size(line);
    }
    let (options, invalid) = Options::from_lookup(|name| values.get(name).cloned());
    for bad in &invalid {
        let _ = bad.to_string();
    }
    let _ = options.describe();
    let _ = options.staging.total();
    if let Some(Ok(limit)) = values.get("KFD_MAX_BUFFER_SIZE").map(|v| parse_buffer_size(v)) {
        if limit > 0 && invalid.iter().all(|i| !i.to_string().contains("KFD_MAX_BUFFER_SIZE")) {
            assert!(
                options.staging.total() <= limit.max(options.staging.buffer_size),
                "staging {} exceeds the limit {limit}",
                options.staging.total()
            );
        }
    }
});
