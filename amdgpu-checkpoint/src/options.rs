//! The engine's options: the seven `KFD_*_CHECK` switches of the device
//! checks (the switches themselves are `amdgpu-topology`'s
//! [`CheckOptions`]) and the staging bound `KFD_MAX_BUFFER_SIZE`.
//!
//! Parsing follows the C plugin and, like it, never fails: an invalid value
//! keeps the default and yields an [`InvalidOption`] for the caller to log.
//! Everything takes a lookup function (name to value), so the same parsing
//! serves the environment, CRIU's plugin options and tests; only the
//! `*_from_env` functions read the process environment.
//!
//! Staging: BO contents move between GPU memory and image files through
//! host staging buffers, two per GPU so that the SDMA copy of one chunk
//! overlaps the file I/O of the previous one.
//! - `KFD_MAX_BUFFER_SIZE` unset (or `0`): 2 × 32 MiB per GPU. Unlike the C
//!   plugin, there is no unbounded mode (C sized the buffer by the largest
//!   BO, gigabytes for large models).
//! - set: the total staging memory per GPU is at most the value, rounded
//!   down to 4 KiB pages, minimum one page. With room for two pages or more
//!   it is split into two equal page-aligned buffers; with a single page
//!   copies and writes take turns.
//! - Buffers never exceed the largest BO (rounded up to a page) they serve
//!   ([`Staging::for_largest_bo`]).
//!
//! An invalid value is reported naming the variable and the default is
//! kept. This module reads the environment only in [`Options::from_env`].

use std::fmt;

pub use amdgpu_topology::options::CheckOptions;

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
/// `KFD_DEDUP`: write each distinct chunk of a dump once (off by default:
/// a deduplicated set needs this plugin to restore; plugin option
/// `amdgpu.dedup`).
pub const DEDUP: &str = "KFD_DEDUP";

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

/// Reads the seven `KFD_*_CHECK` variables from the process environment.
pub fn checks_from_env() -> (CheckOptions, Vec<InvalidOption>) {
    checks_from_lookup(|name| std::env::var(name).ok())
}

/// Reads the seven variables through `lookup` (name to value, `None` when
/// unset). Unset means the default (on). `0` or `NO` (any case) switch a
/// check off, `1` or `YES` (any case) on; any other value keeps the
/// default and is returned as an [`InvalidOption`].
pub fn checks_from_lookup(
    lookup: impl Fn(&str) -> Option<String>,
) -> (CheckOptions, Vec<InvalidOption>) {
    let mut options = CheckOptions::all();
    let mut invalid = Vec::new();
    for (variable, flag) in check_flags_mut(&mut options) {
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
pub fn check_flags(options: &CheckOptions) -> [(&'static str, bool); 7] {
    [
        (FW_VERSION_CHECK, options.fw_version),
        (SDMA_FW_VERSION_CHECK, options.sdma_fw_version),
        (CACHES_COUNT_CHECK, options.caches_count),
        (NUM_GWS_CHECK, options.num_gws),
        (VRAM_SIZE_CHECK, options.vram_size),
        (NUMA_CHECK, options.numa),
        (CAPABILITY_CHECK, options.capability),
    ]
}

fn check_flags_mut(options: &mut CheckOptions) -> [(&'static str, &mut bool); 7] {
    [
        (FW_VERSION_CHECK, &mut options.fw_version),
        (SDMA_FW_VERSION_CHECK, &mut options.sdma_fw_version),
        (CACHES_COUNT_CHECK, &mut options.caches_count),
        (NUM_GWS_CHECK, &mut options.num_gws),
        (VRAM_SIZE_CHECK, &mut options.vram_size),
        (NUMA_CHECK, &mut options.numa),
        (CAPABILITY_CHECK, &mut options.capability),
    ]
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

/// Page size for staging buffers (userptr BOs must be page aligned).
pub const STAGING_PAGE: u64 = 4096;

/// Default size of one staging buffer.
pub const DEFAULT_STAGING_BUFFER: u64 = 32 << 20;

/// Default number of staging buffers per GPU.
pub const DEFAULT_STAGING_BUFFERS: usize = 2;

/// Host staging memory for one GPU's transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staging {
    /// Size of each buffer in bytes, a multiple of [`STAGING_PAGE`].
    pub buffer_size: u64,
    /// Number of buffers (1 or 2).
    pub buffers: usize,
}

impl Default for Staging {
    fn default() -> Self {
        Staging {
            buffer_size: DEFAULT_STAGING_BUFFER,
            buffers: DEFAULT_STAGING_BUFFERS,
        }
    }
}

impl Staging {
    /// The staging for a `KFD_MAX_BUFFER_SIZE` of `limit` bytes (0 = default).
    pub fn from_limit(limit: u64) -> Staging {
        if limit == 0 {
            return Staging::default();
        }
        let total = (limit / STAGING_PAGE).max(1) * STAGING_PAGE;
        if total >= 2 * STAGING_PAGE {
            Staging {
                buffer_size: total / 2 / STAGING_PAGE * STAGING_PAGE,
                buffers: 2,
            }
        } else {
            Staging {
                buffer_size: total,
                buffers: 1,
            }
        }
    }

    /// This staging shrunk so no buffer exceeds the largest BO it will carry
    /// (rounded up to a page). `largest_bo == 0` keeps one page.
    pub fn for_largest_bo(self, largest_bo: u64) -> Staging {
        let needed = largest_bo
            .div_ceil(STAGING_PAGE)
            .max(1)
            .saturating_mul(STAGING_PAGE);
        Staging {
            buffer_size: self.buffer_size.min(needed),
            buffers: self.buffers,
        }
    }

    /// Total host memory of the buffers.
    pub fn total(&self) -> u64 {
        self.buffer_size * self.buffers as u64
    }
}

/// Everything the environment configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Device compatibility checks for restore.
    pub checks: CheckOptions,
    /// Staging memory per GPU.
    pub staging: Staging,
    /// `KFD_DEDUP`: chunks already written for another BO, GPU or process
    /// of the same dump are referenced instead of written again.
    pub dedup: bool,
}

impl Options {
    /// Reads the options through `lookup` (name to value, `None` when unset);
    /// returns them with every value that was rejected (the default was kept).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Options, Vec<InvalidOption>) {
        let (checks, mut invalid) = checks_from_lookup(&lookup);
        let (limit, bad_limit) = max_buffer_size_from_lookup(&lookup);
        invalid.extend(bad_limit);
        let dedup = match lookup(DEDUP) {
            None => false,
            Some(value) => parse_bool(&value).unwrap_or_else(|| {
                invalid.push(InvalidOption {
                    variable: DEDUP,
                    value,
                    expected: "YES/NO or 1/0",
                    kept: "NO".to_owned(),
                });
                false
            }),
        };
        let options = Options {
            checks,
            staging: Staging::from_limit(limit),
            dedup,
        };
        (options, invalid)
    }

    /// Reads the options from the process environment.
    pub fn from_env() -> (Options, Vec<InvalidOption>) {
        Options::from_lookup(|name| std::env::var(name).ok())
    }

    /// One `param: NAME:value` line per option, as the C plugin logs them.
    pub fn describe(&self) -> Vec<String> {
        let mut lines: Vec<String> = check_flags(&self.checks)
            .iter()
            .map(|(name, on)| format!("param: {name}:{}", if *on { 'Y' } else { 'N' }))
            .collect();
        lines.push(format!(
            "param: {MAX_BUFFER_SIZE}: {} staging buffer(s) of {:#x} bytes per GPU",
            self.staging.buffers, self.staging.buffer_size
        ));
        lines.push(format!(
            "param: {DEDUP}:{}",
            if self.dedup { 'Y' } else { 'N' }
        ));
        lines
    }
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
    fn dedup_is_off_by_default_and_parsed_like_the_checks() {
        assert!(!Options::from_lookup(|_| None).0.dedup);
        let (on, invalid) = Options::from_lookup(lookup(&[(DEDUP, "yes")]));
        assert!(on.dedup && invalid.is_empty());
        let (bad, invalid) = Options::from_lookup(lookup(&[(DEDUP, "maybe")]));
        assert!(!bad.dedup);
        assert_eq!(invalid.len(), 1);
        assert!(invalid[0].to_string().contains("KFD_DEDUP"));
        assert!(on.describe().contains(&"param: KFD_DEDUP:Y".to_owned()));
    }

    #[test]
    fn defaults_bound_staging_to_two_32mib_buffers() {
        let (options, invalid) = Options::from_lookup(|_| None);
        assert!(invalid.is_empty());
        assert_eq!(options.checks, CheckOptions::all());
        assert_eq!(options.staging.buffers, 2);
        assert_eq!(options.staging.buffer_size, 32 << 20);
        assert_eq!(options.staging.total(), 64 << 20);
    }

    #[test]
    fn a_limit_bounds_the_total_per_gpu_in_whole_pages() {
        for (value, buffers, size) in [
            ("1M", 2, 512 << 10),
            ("10000", 2, 4096),
            ("8192", 2, 4096),
            ("8191", 1, 4096),
            ("1", 1, 4096),
            ("0x3000", 2, 4096),
            ("3G", 2, 1536 << 20),
        ] {
            let (options, invalid) = Options::from_lookup(lookup(&[(MAX_BUFFER_SIZE, value)]));
            assert!(invalid.is_empty(), "{value}: {invalid:?}");
            assert_eq!(
                (options.staging.buffers, options.staging.buffer_size),
                (buffers, size),
                "{value}"
            );
            assert_eq!(options.staging.buffer_size % STAGING_PAGE, 0);
            let limit = parse_buffer_size(value).unwrap();
            assert!(
                options.staging.total() <= limit.max(STAGING_PAGE),
                "{value}"
            );
        }
    }

    #[test]
    fn invalid_values_name_the_variable_and_keep_defaults() {
        let (options, invalid) = Options::from_lookup(lookup(&[
            (MAX_BUFFER_SIZE, "12KB"),
            ("KFD_NUMA_CHECK", "maybe"),
            ("KFD_VRAM_SIZE_CHECK", "no"),
        ]));
        assert_eq!(options.staging, Staging::default());
        assert!(options.checks.numa);
        assert!(!options.checks.vram_size);
        let text: Vec<String> = invalid.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text.iter().any(|t| t.contains(MAX_BUFFER_SIZE)), "{text:?}");
        assert!(
            text.iter().any(|t| t.contains("KFD_NUMA_CHECK")),
            "{text:?}"
        );
    }

    #[test]
    fn buffers_shrink_to_the_largest_bo() {
        let staging = Staging::default().for_largest_bo(10_000);
        assert_eq!(staging.buffer_size, 12288);
        assert_eq!(Staging::default().for_largest_bo(0).buffer_size, 4096);
        assert_eq!(
            Staging::default().for_largest_bo(1 << 40).buffer_size,
            32 << 20
        );
    }

    #[test]
    fn describe_lists_every_option() {
        let lines = Options::default().describe();
        assert_eq!(lines.len(), 9);
        assert!(lines.contains(&"param: KFD_NUMA_CHECK:Y".to_owned()));
        assert!(lines.contains(&"param: KFD_DEDUP:N".to_owned()));
    }
}

#[cfg(test)]
mod env_tests {
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
        let (options, invalid) = checks_from_lookup(|_| None);
        assert_eq!(options, CheckOptions::all());
        assert!(invalid.is_empty());
    }

    #[test]
    fn booleans_accept_digits_and_words_in_any_case() {
        let (options, invalid) = checks_from_lookup(lookup(&[
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
        for (i, (variable, _)) in check_flags(&CheckOptions::all()).iter().enumerate() {
            let (options, _) = checks_from_lookup(lookup(&[(variable, "0")]));
            for (j, (other, on)) in check_flags(&options).iter().enumerate() {
                assert_eq!(*on, i != j, "{variable} set to 0, looking at {other}");
            }
        }
    }

    #[test]
    fn invalid_boolean_names_the_variable_and_keeps_the_default() {
        let (options, invalid) = checks_from_lookup(lookup(&[
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
