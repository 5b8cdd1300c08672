//! The table of options ([`OPTIONS`], one row per option: its names, what
//! it accepts, how it sets [`Options`] and shows its value) and the reading
//! of this plugin's entries among CRIU's plugin options. A new option is a
//! row here and a field of [`Options`]; nothing here reads the environment.

use super::{
    parse_buffer_size, OptionError, Options, CACHES_COUNT_CHECK, CAPABILITY_CHECK, DEDUP,
    DEVICE_MAP, FW_VERSION_CHECK, MAX_BUFFER_SIZE, NUMA_CHECK, NUM_GWS_CHECK, PARALLEL_RESTORE,
    PLUGIN_PREFIX, SDMA_FW_VERSION_CHECK, VRAM_SIZE_CHECK,
};

/// One option: its names, what it accepts and how it sets [`Options`].
#[derive(Debug)]
pub struct OptionSpec {
    /// The name after `amdgpu.` on CRIU's command line.
    pub name: &'static str,
    /// The environment variable.
    pub variable: &'static str,
    /// What it accepts, for error messages.
    pub accepted: &'static str,
    /// Whether an invalid environment value is an error (new options)
    /// rather than ignored with a logged error (the C plugin's variables).
    pub strict: bool,
    /// Sets the option from a value; `Err` says why the value is bad (and
    /// nothing changed).
    pub(super) apply: fn(&mut Options, &str) -> Result<(), String>,
    /// The option's current value as text.
    pub(super) show: fn(&Options) -> String,
}

pub(super) fn parse_bool(value: &str) -> Option<bool> {
    if value == "1" || value.eq_ignore_ascii_case("yes") {
        Some(true)
    } else if value == "0" || value.eq_ignore_ascii_case("no") {
        Some(false)
    } else {
        None
    }
}

macro_rules! check_option {
    ($name:literal, $variable:expr, $field:ident) => {
        OptionSpec {
            name: $name,
            variable: $variable,
            accepted: BOOLEAN,
            strict: false,
            apply: |o, v| {
                o.checks.$field = parse_bool(v).ok_or_else(|| "not a boolean".to_owned())?;
                Ok(())
            },
            show: |o| yes_no(o.checks.$field),
        }
    };
}

const BOOLEAN: &str = "YES/NO or 1/0";

fn yes_no(on: bool) -> String {
    if on { "YES" } else { "NO" }.to_owned()
}

/// Every option, in the order the log lists them.
pub static OPTIONS: &[OptionSpec] = &[
    check_option!("fw-ver-check", FW_VERSION_CHECK, fw_version),
    check_option!("sdma-fw-ver-check", SDMA_FW_VERSION_CHECK, sdma_fw_version),
    check_option!("caches-count-check", CACHES_COUNT_CHECK, caches_count),
    check_option!("num-gws-check", NUM_GWS_CHECK, num_gws),
    check_option!("vram-size-check", VRAM_SIZE_CHECK, vram_size),
    check_option!("numa-check", NUMA_CHECK, numa),
    check_option!("capability-check", CAPABILITY_CHECK, capability),
    OptionSpec {
        name: "max-buffer-size",
        variable: MAX_BUFFER_SIZE,
        accepted:
            "a byte count, decimal or 0x hex, with an optional K, M or G suffix (0: the default)",
        strict: false,
        apply: |o, v| {
            // The staging memory follows from the bound (`Options::staging`).
            o.max_buffer_size = parse_buffer_size(v).map_err(|e| e.to_string())?;
            Ok(())
        },
        show: |o| o.max_buffer_size.to_string(),
    },
    OptionSpec {
        name: "device-map",
        variable: DEVICE_MAP,
        accepted: amdgpu_topology::device_map::ACCEPTED,
        strict: true,
        apply: |o, v| {
            use amdgpu_topology::device_map::DeviceMapError;
            o.device_map = v.parse().map_err(|e: DeviceMapError| match e {
                // The accepted form follows in the option's own error.
                DeviceMapError::Syntax { text, why } => format!("{why} in {text:?}"),
                other => other.to_string(),
            })?;
            Ok(())
        },
        show: |o| {
            if o.device_map.is_empty() {
                "none".to_owned()
            } else {
                o.device_map.to_string()
            }
        },
    },
    OptionSpec {
        name: "dedup",
        variable: DEDUP,
        accepted: BOOLEAN,
        strict: true,
        apply: |o, v| {
            o.dedup = parse_bool(v).ok_or_else(|| "not a boolean".to_owned())?;
            Ok(())
        },
        show: |o| yes_no(o.dedup),
    },
    OptionSpec {
        name: "parallel-restore",
        variable: PARALLEL_RESTORE,
        accepted: BOOLEAN,
        // As the plugin read it before it was an option: a value it does
        // not understand leaves parallel restore allowed.
        strict: false,
        apply: |o, v| {
            o.parallel_restore = parse_bool(v).ok_or_else(|| "not a boolean".to_owned())?;
            Ok(())
        },
        show: |o| yes_no(o.parallel_restore),
    },
];

/// This plugin's entries among CRIU's plugin options, in order: each
/// `amdgpu.NAME=VALUE` with its option. Other plugins' entries (another
/// prefix) are skipped; an `amdgpu.` entry without `=` or with an unknown
/// name is an error.
pub(super) fn plugin_options(
    argv: &[String],
) -> Result<Vec<(&'static OptionSpec, String)>, OptionError> {
    let mut ours = Vec::new();
    for entry in argv {
        let Some(rest) = entry.strip_prefix(PLUGIN_PREFIX) else {
            continue;
        };
        let (name, value) = rest.split_once('=').unwrap_or((rest, ""));
        let Some(spec) = OPTIONS.iter().find(|s| s.name == name) else {
            return Err(OptionError::Unknown {
                option: format!("{PLUGIN_PREFIX}{name}"),
                known: OPTIONS
                    .iter()
                    .map(|s| format!("{PLUGIN_PREFIX}{}", s.name))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if !rest.contains('=') {
            return Err(OptionError::BadValue {
                option: entry.clone(),
                value: String::new(),
                accepted: spec.accepted,
                why: "no value (write NAME=VALUE)".to_owned(),
            });
        }
        ours.push((spec, value.to_owned()));
    }
    Ok(ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_has_a_name_and_a_variable() {
        let names: Vec<&str> = OPTIONS.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "fw-ver-check",
                "sdma-fw-ver-check",
                "caches-count-check",
                "num-gws-check",
                "vram-size-check",
                "numa-check",
                "capability-check",
                "max-buffer-size",
                "device-map",
                "dedup",
                "parallel-restore"
            ]
        );
        for spec in OPTIONS {
            assert!(
                spec.variable.starts_with("KFD_") || spec.variable.starts_with("AMDGPU_PLUGIN_"),
                "{}",
                spec.name
            );
        }
    }
}
