//! The plugin's environment options that govern restore: the seven
//! `KFD_*_CHECK` switches and `KFD_MAX_BUFFER_SIZE`.
//!
//! Parsing follows the C plugin (upstream-plugin.md §9) and, like it, never
//! fails: an invalid value keeps the default and yields an [`InvalidOption`]
//! for the caller to log. This module reads the process environment only in
//! the `from_env` functions; everything else takes a lookup function so it can
//! be tested without touching the environment.

use std::fmt;

/// `KFD_FW_VER_CHECK`: checkpointed MEC firmware version must be `<=` local.
pub const FW_VERSION_CHECK: &str = "KFD_FW_VER_CHECK";
/// `KFD_SDMA_FW_VER_CHECK`: checkpointed SDMA firmware version must be `<=` local.
pub const SDMA_FW_VERSION_CHECK: &str = "KFD_SDMA_FW_VER_CHECK";
/// `KFD_CACHES_COUNT_CHECK`: checkpointed cache count must be `<=` local.
pub const CACHES_COUNT_CHECK: &str = "KFD_CACHES_COUNT_CHECK";
/// `KFD_NUM_GWS_CHECK`: checkpointed global wave sync count must be `<=` local.
pub const NUM_GWS_CHECK: &str = "KFD_NUM_GWS_CHECK";
/// `KFD_VRAM_SIZE_CHECK`: checkpointed VRAM size must be `<=` local.
pub const VRAM_SIZE_CHECK: &str = "KFD_VRAM_SIZE_CHECK";
/// `KFD_NUMA_CHECK`: GPUs must keep their placement relative to CPU nodes.
pub const NUMA_CHECK: &str = "KFD_NUMA_CHECK";
/// `KFD_CAPABILITY_CHECK`: the `capability` bits must be equal.
pub const CAPABILITY_CHECK: &str = "KFD_CAPABILITY_CHECK";
/// `KFD_MAX_BUFFER_SIZE`: cap on the staging buffer of BO transfers (0 = none).
pub const MAX_BUFFER_SIZE: &str = "KFD_MAX_BUFFER_SIZE";

/// Which of the switchable device checks are on. All are on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// `KFD_FW_VER_CHECK`.
    pub fw_version: bool,
    /// `KFD_SDMA_FW_VER_CHECK`.
    pub sdma_fw_version: bool,
    /// `KFD_CACHES_COUNT_CHECK`.
    pub caches_count: bool,
    /// `KFD_NUM_GWS_CHECK`.
    pub num_gws: bool,
    /// `KFD_VRAM_SIZE_CHECK`.
    pub vram_size: bool,
    /// `KFD_NUMA_CHECK`.
    pub numa: bool,
    /// `KFD_CAPABILITY_CHECK`.
    pub capability: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self::all()
    }
}

/// An environment variable whose value was not understood; the default was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidOption {
    /// The variable's name.
    pub variable: &'static str,
    /// The value found.
    pub value: String,
    /// What was expected, e.g. `YES/NO`.
    pub expected: &'static str,
    /// The value kept, as text (e.g. `YES`, `0`).
    pub kept: String,
}

impl fmt::Display for InvalidOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ignoring invalid value {:?} of {}, expecting {}; keeping {}",
            self.value, self.variable, self.expected, self.kept
        )
    }
}

impl CheckOptions {
    /// Every check on (the default).
    pub const fn all() -> Self {
        Self {
            fw_version: true,
            sdma_fw_version: true,
            caches_count: true,
            num_gws: true,
            vram_size: true,
            numa: true,
            capability: true,
        }
    }

    /// Every check off: only the always-compared properties are checked.
    pub const fn none() -> Self {
        Self {
            fw_version: false,
            sdma_fw_version: false,
            caches_count: false,
            num_gws: false,
            vram_size: false,
            numa: false,
            capability: false,
        }
    }

    /// Reads the seven `KFD_*_CHECK` variables from the process environment.
    pub fn from_env() -> (Self, Vec<InvalidOption>) {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the seven variables through `lookup` (name to value, `None` when
    /// unset). Unset means the default (on). `0` or `NO` (any case) switch a
    /// check off, `1` or `YES` (any case) on; any other value keeps the
    /// default and is returned as an [`InvalidOption`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Self, Vec<InvalidOption>) {
        let mut options = Self::all();
        let mut invalid = Vec::new();
        for (variable, flag) in options.flags_mut() {
            let Some(value) = lookup(variable) else {
                continue;
            };
            match parse_bool(&value) {
                Some(on) => *flag = on,
                None => invalid.push(InvalidOption {
                    variable,
                    value,
                    expected: "YES/NO or 1/0",
                    kept: if *flag { "YES" } else { "NO" }.to_owned(),
                }),
            }
        }
        (options, invalid)
    }

    /// `(variable, value)` for each switch, in the C plugin's order.
    pub fn flags(&self) -> [(&'static str, bool); 7] {
        [
            (FW_VERSION_CHECK, self.fw_version),
            (SDMA_FW_VERSION_CHECK, self.sdma_fw_version),
            (CACHES_COUNT_CHECK, self.caches_count),
            (NUM_GWS_CHECK, self.num_gws),
            (VRAM_SIZE_CHECK, self.vram_size),
            (NUMA_CHECK, self.numa),
            (CAPABILITY_CHECK, self.capability),
        ]
    }

    fn flags_mut(&mut self) -> [(&'static str, &mut bool); 7] {
        [
            (FW_VERSION_CHECK, &mut self.fw_version),
            (SDMA_FW_VERSION_CHECK, &mut self.sdma_fw_version),
            (CACHES_COUNT_CHECK, &mut self.caches_count),
            (NUM_GWS_CHECK, &mut self.num_gws),
            (VRAM_SIZE_CHECK, &mut self.vram_size),
            (NUMA_CHECK, &mut self.numa),
            (CAPABILITY_CHECK, &mut self.capability),
        ]
    }
}

fn parse_bool(value: &str) -> Option<bool> {
    if value == "1" || value.eq_ignore_ascii_case("yes") {
        Some(true)
    } else if value == "0" || value.eq_ignore_ascii_case("no") {
        Some(false)
    } else {
        None
    }
}

/// Why a `KFD_MAX_BUFFER_SIZE` value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BufferSizeError {
    /// No digits where the number should start.
    #[error("buffer size {value:?}: expecting a positive integer")]
    NotANumber {
        /// The text given.
        value: String,
    },
    /// Something other than a single `K`, `M` or `G` after the number.
    #[error("buffer size {value:?}: invalid size suffix {suffix:?}, expecting one of K, M, G")]
    InvalidSuffix {
        /// The text given.
        value: String,
        /// What followed the digits.
        suffix: String,
    },
    /// The value does not fit in 64 bits.
    #[error("buffer size {value:?} overflows 64 bits")]
    Overflow {
        /// The text given.
        value: String,
    },
}

/// Parses a `KFD_MAX_BUFFER_SIZE` value: a number in decimal, `0x` hex or
/// leading-`0` octal (as C's `strtoul` with base 0), optionally followed by
/// exactly one suffix `K`/`k` (×2^10), `M`/`m` (×2^20) or `G`/`g` (×2^30).
///
/// Differences from the C plugin, all on purpose: lower-case `m` and `g` are
/// accepted (C rejects them although it accepts `k`); leading white space and
/// a sign are rejected (C's `strtoul` accepts them and turns `-1` into a huge
/// number); overflow of the number itself, not only of the shift, is an error.
pub fn parse_buffer_size(value: &str) -> Result<u64, BufferSizeError> {
    let (radix, digits) = if let Some(hex) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        (16, hex)
    } else if value.len() > 1 && value.starts_with('0') {
        (8, &value[1..])
    } else {
        (10, value)
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    let (number, suffix) = digits.split_at(end);
    if number.is_empty() {
        return Err(BufferSizeError::NotANumber {
            value: value.to_owned(),
        });
    }
    let number = u64::from_str_radix(number, radix).map_err(|_| BufferSizeError::Overflow {
        value: value.to_owned(),
    })?;
    let shift = match suffix {
        "" => 0,
        "k" | "K" => 10,
        "m" | "M" => 20,
        "g" | "G" => 30,
        _ => {
            return Err(BufferSizeError::InvalidSuffix {
                value: value.to_owned(),
                suffix: suffix.to_owned(),
            })
        }
    };
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| BufferSizeError::Overflow {
            value: value.to_owned(),
        })
}

/// Reads `KFD_MAX_BUFFER_SIZE` through `lookup`: 0 (no cap) when unset; an
/// invalid value keeps 0 and is returned as an [`InvalidOption`].
pub fn max_buffer_size_from_lookup(
    lookup: impl Fn(&str) -> Option<String>,
) -> (u64, Option<InvalidOption>) {
    let Some(value) = lookup(MAX_BUFFER_SIZE) else {
        return (0, None);
    };
    match parse_buffer_size(&value) {
        Ok(size) => (size, None),
        Err(err) => (
            0,
            Some(InvalidOption {
                variable: MAX_BUFFER_SIZE,
                expected: match err {
                    BufferSizeError::InvalidSuffix { .. } => "a size suffix K, M or G",
                    BufferSizeError::Overflow { .. } => "a size that fits in 64 bits",
                    BufferSizeError::NotANumber { .. } => "a positive integer",
                },
                value,
                kept: "0".to_owned(),
            }),
        ),
    }
}

/// Reads `KFD_MAX_BUFFER_SIZE` from the process environment.
pub fn max_buffer_size_from_env() -> (u64, Option<InvalidOption>) {
    max_buffer_size_from_lookup(|name| std::env::var(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn unset_means_every_check_on() {
        let (options, invalid) = CheckOptions::from_lookup(|_| None);
        assert_eq!(options, CheckOptions::all());
        assert!(invalid.is_empty());
    }

    #[test]
    fn booleans_accept_digits_and_words_in_any_case() {
        let (options, invalid) = CheckOptions::from_lookup(lookup(&[
            ("KFD_FW_VER_CHECK", "0"),
            ("KFD_SDMA_FW_VER_CHECK", "no"),
            ("KFD_CACHES_COUNT_CHECK", "No"),
            ("KFD_NUM_GWS_CHECK", "NO"),
            ("KFD_VRAM_SIZE_CHECK", "yes"),
            ("KFD_NUMA_CHECK", "1"),
            ("KFD_CAPABILITY_CHECK", "nO"),
        ]));
        assert!(invalid.is_empty());
        assert_eq!(
            options,
            CheckOptions {
                fw_version: false,
                sdma_fw_version: false,
                caches_count: false,
                num_gws: false,
                vram_size: true,
                numa: true,
                capability: false,
            }
        );
    }

    #[test]
    fn each_variable_switches_only_its_flag() {
        for (i, (variable, _)) in CheckOptions::all().flags().iter().enumerate() {
            let (options, _) = CheckOptions::from_lookup(lookup(&[(variable, "0")]));
            for (j, (other, on)) in options.flags().iter().enumerate() {
                assert_eq!(*on, i != j, "{variable} set to 0, looking at {other}");
            }
        }
    }

    #[test]
    fn invalid_boolean_names_the_variable_and_keeps_the_default() {
        let (options, invalid) = CheckOptions::from_lookup(lookup(&[
            ("KFD_NUMA_CHECK", "off"),
            ("KFD_VRAM_SIZE_CHECK", "2"),
            ("KFD_FW_VER_CHECK", ""),
        ]));
        assert_eq!(options, CheckOptions::all());
        let names: Vec<_> = invalid.iter().map(|w| w.variable).collect();
        assert_eq!(
            names,
            ["KFD_FW_VER_CHECK", "KFD_VRAM_SIZE_CHECK", "KFD_NUMA_CHECK"]
        );
        let text = invalid[2].to_string();
        assert!(text.contains("KFD_NUMA_CHECK") && text.contains("\"off\""));
        assert!(text.contains("keeping YES"), "{text}");
    }

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_size("0"), Ok(0));
        assert_eq!(parse_buffer_size("4096"), Ok(4096));
        assert_eq!(parse_buffer_size("0x1000"), Ok(4096));
        assert_eq!(parse_buffer_size("0X10k"), Ok(16 << 10));
        assert_eq!(parse_buffer_size("010"), Ok(8));
        assert_eq!(parse_buffer_size("64k"), Ok(64 << 10));
        assert_eq!(parse_buffer_size("64K"), Ok(64 << 10));
        assert_eq!(parse_buffer_size("3M"), Ok(3 << 20));
        assert_eq!(parse_buffer_size("3m"), Ok(3 << 20));
        assert_eq!(parse_buffer_size("2G"), Ok(2 << 30));
        assert_eq!(parse_buffer_size("2g"), Ok(2 << 30));
        assert_eq!(
            parse_buffer_size("18446744073709551615"),
            Ok(18446744073709551615)
        );
    }

    #[test]
    fn bad_buffer_sizes_are_errors() {
        for bad in ["", "k", "-1", " 1", "+1", "0x", "1KB", "1 ", "1T", "08"] {
            assert!(parse_buffer_size(bad).is_err(), "{bad:?} accepted");
        }
        assert!(matches!(
            parse_buffer_size("18446744073709551616"),
            Err(BufferSizeError::Overflow { .. })
        ));
        assert!(matches!(
            parse_buffer_size("17179869184G"),
            Err(BufferSizeError::Overflow { .. })
        ));
        assert!(matches!(
            parse_buffer_size("1KB"),
            Err(BufferSizeError::InvalidSuffix { .. })
        ));
    }

    #[test]
    fn buffer_size_variable() {
        assert_eq!(max_buffer_size_from_lookup(|_| None), (0, None));
        assert_eq!(
            max_buffer_size_from_lookup(lookup(&[("KFD_MAX_BUFFER_SIZE", "1M")])),
            (1 << 20, None)
        );
        let (size, invalid) =
            max_buffer_size_from_lookup(lookup(&[("KFD_MAX_BUFFER_SIZE", "12 MB")]));
        assert_eq!(size, 0);
        let invalid = invalid.expect("reported");
        assert_eq!(invalid.variable, "KFD_MAX_BUFFER_SIZE");
        assert!(invalid.to_string().contains("keeping 0"));
    }
}
