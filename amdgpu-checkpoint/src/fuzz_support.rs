//! The checks of the fuzz targets over the engine's parsers of outside
//! input, shared by the cargo-fuzz targets (fuzz/) and the replay of their
//! corpora on stable Rust, so both run the same code. Not part of the API.

use std::collections::HashMap;

use crate::options::{parse_buffer_size, Options, OPTIONS};

/// The `plugin_options` target: `NAME=value` lines through the options
/// parser. Never panics; rejected values of the C plugin's variables keep
/// the default and are reported, those of the strict ones are errors; the
/// staging memory never exceeds the limit a valid `KFD_MAX_BUFFER_SIZE`
/// asked for.
pub fn check_plugin_options(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut values = HashMap::new();
    for line in text.lines() {
        if let Some((name, value)) = line.split_once('=') {
            values.insert(name.to_owned(), value.to_owned());
        }
        let _ = parse_buffer_size(line);
    }
    // The C plugin's variables never fail a reading: a rejected value
    // keeps the default and is reported.
    let lenient = |name: &str| {
        OPTIONS
            .iter()
            .any(|spec| spec.variable == name && !spec.strict)
            .then(|| values.get(name).cloned())
            .flatten()
    };
    let (options, invalid) = Options::default()
        .read(lenient, &[])
        .unwrap_or_else(|e| panic!("a lenient variable failed the reading: {e}"));
    // Every variable, the strict ones too: options or an error.
    let base = match Options::default().read(|name| values.get(name).cloned(), &[]) {
        Ok((all, _)) => all,
        Err(e) => {
            let _ = e.to_string();
            options.clone()
        }
    };
    // The same lines as CRIU's plugin options: never a panic; what is
    // accepted says it came from the command line.
    let argv: Vec<String> = text.lines().map(str::to_owned).collect();
    match base.read(|_| None, &argv) {
        Ok((overridden, _)) => {
            for line in &argv {
                let Some(name) = line
                    .strip_prefix(crate::options::PLUGIN_PREFIX)
                    .and_then(|rest| rest.split_once('='))
                    .map(|(name, _)| name)
                else {
                    continue;
                };
                assert_eq!(
                    overridden.source(name),
                    crate::options::Source::CommandLine,
                    "{line:?}"
                );
            }
            let _ = overridden.describe();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    for bad in &invalid {
        let _ = bad.to_string();
    }
    let _ = options.describe();
    let _ = options.staging().total();
    if let Some(Ok(limit)) = values
        .get("KFD_MAX_BUFFER_SIZE")
        .map(|v| parse_buffer_size(v))
    {
        if limit > 0
            && invalid
                .iter()
                .all(|i| !i.to_string().contains("KFD_MAX_BUFFER_SIZE"))
        {
            assert!(
                options.staging().total() <= limit.max(options.staging().buffer_size),
                "staging {} exceeds the limit {limit}",
                options.staging().total()
            );
        }
    }
}
