//! The engine's options: the seven `KFD_*_CHECK` switches of the device
//! checks (the switches themselves are `amdgpu-topology`'s
//! [`CheckOptions`]), the staging bound `KFD_MAX_BUFFER_SIZE` and the
//! device map `KFD_DEVICE_MAP`.
//!
//! # Two sources
//!
//! Every option has a name on CRIU's command line,
//! `--plugin-option amdgpu.NAME=VALUE` (CRIU after criu#3138 hands plugins
//! these strings through `criu_plugin_get_options`), and an environment
//! variable; [`OPTIONS`] lists them, one row per option, so a new option is
//! one row and one field. [`Options::resolve`] reads the environment and
//! [`Options::with_command_line`] applies CRIU's entries on top: a
//! command-line value overrides the environment, and [`Options::describe`]
//! says where each value came from. On the command line an unknown `amdgpu.*` name or
//! a bad value is an error ([`OptionError`]) naming the option and what it
//! accepts: a mistyped option silently ignored could restore onto the wrong
//! GPUs. Entries of other plugins (`cuda.device-map=...`) are not ours and
//! are left alone.
//!
//! In the environment the seven checks and `KFD_MAX_BUFFER_SIZE` keep the
//! C plugin's leniency: an invalid value keeps the default and yields an
//! [`InvalidOption`] for the caller to log (deployments that set them for
//! the C plugin keep working). `KFD_DEVICE_MAP` is new and strict: a map
//! that does not parse is an [`OptionError`] wherever it comes from.
//!
//! Staging: BO contents move between GPU memory and image files through
//! host staging buffers, several per GPU so that SDMA copies overlap the
//! file I/O of the chunks before them.
//! - `KFD_MAX_BUFFER_SIZE` unset (or `0`): 4 × 8 MiB per GPU. Unlike the C
//!   plugin, there is no unbounded mode (C sized the buffer by the largest
//!   BO, gigabytes for large models). The default used to be 2 × 32 MiB;
//!   four 8 MiB buffers hold half the memory (every dumper and restorer
//!   faults it in fresh: a CRIU process per dump, a task per restore) and
//!   keep three copies in flight while one is written out (the A/B is in
//!   the performance history of `CHANGELOG.md`, 2026-12-02). A buffer fits
//!   a last-level cache, but with three copies landing behind it, its bytes
//!   are mostly out of cache by the time they are hashed (a profile of the
//!   unchanged incremental dump, 2026-12-02: 16 GiB/s, against 40 on a
//!   cache-resident buffer).
//! - set: the total staging memory per GPU is at most the value, rounded
//!   down to 4 KiB pages, minimum one page. With room for two pages or more
//!   it is split into two equal page-aligned buffers; with a single page
//!   copies and writes take turns.
//! - Buffers never exceed the largest BO (rounded up to a page) they serve
//!   ([`Staging::for_largest_bo`]).
//!
//! This module reads the environment only in [`Options::from_env`] and
//! [`Options::resolve_env`].

use std::fmt;

pub use amdgpu_topology::device_map::DeviceMap;
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
/// `KFD_DEVICE_MAP`: pins of checkpointed GPUs to local GPUs at restore.
pub const DEVICE_MAP: &str = "KFD_DEVICE_MAP";
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
    /// What is wrong with it.
    pub why: String,
    /// What was expected, e.g. `YES/NO`.
    pub expected: &'static str,
    /// The value kept, as text (e.g. `YES`, `0`).
    pub kept: String,
}

impl fmt::Display for InvalidOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ignoring invalid value {:?} of {} ({}), expecting {}; keeping {}",
            self.value, self.variable, self.why, self.expected, self.kept
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
    let checks = check_flags(&CheckOptions::all()).map(|(variable, _)| variable);
    let (options, invalid) = read_options(lookup, |spec| checks.contains(&spec.variable));
    (options.checks, invalid)
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
    let (options, mut invalid) = read_options(lookup, |spec| spec.variable == MAX_BUFFER_SIZE);
    (options.max_buffer_size, invalid.pop())
}

/// Reads `KFD_MAX_BUFFER_SIZE` from the process environment.
pub fn max_buffer_size_from_env() -> (u64, Option<InvalidOption>) {
    max_buffer_size_from_lookup(|name| std::env::var(name).ok())
}

/// Page size for staging buffers (userptr BOs must be page aligned).
pub const STAGING_PAGE: u64 = 4096;

/// Default size of one staging buffer.
pub const DEFAULT_STAGING_BUFFER: u64 = 8 << 20;

/// Default number of staging buffers per GPU.
pub const DEFAULT_STAGING_BUFFERS: usize = 4;

/// Host staging memory for one GPU's transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staging {
    /// Size of each buffer in bytes, a multiple of [`STAGING_PAGE`].
    pub buffer_size: u64,
    /// Number of buffers: [`DEFAULT_STAGING_BUFFERS`] by default; 1 or 2
    /// under a `KFD_MAX_BUFFER_SIZE` limit.
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

/// Everything the options configure.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    /// Device compatibility checks for restore.
    pub checks: CheckOptions,
    /// Staging memory per GPU.
    pub staging: Staging,
    /// The staging bound as given (`KFD_MAX_BUFFER_SIZE`, 0 = default).
    pub max_buffer_size: u64,
    /// Pins of checkpointed GPUs to local GPUs (`KFD_DEVICE_MAP`).
    pub device_map: DeviceMap,
    /// Where each value came from, by option name ([`OptionSpec::name`]);
    /// an option not listed has its default.
    pub sources: std::collections::BTreeMap<&'static str, Source>,
    /// `KFD_DEDUP`: chunks already written for another BO, GPU or process
    /// of the same dump are referenced instead of written again.
    pub dedup: bool,
}

impl Options {
    /// Reads the options through `lookup` (name to value, `None` when unset);
    /// returns them with every value that was rejected (the default was kept).
    ///
    /// Never fails: a `KFD_DEVICE_MAP` that does not parse is reported like
    /// the others and no GPU is pinned. The plugin uses the strict
    /// [`Options::resolve`] instead.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Options, Vec<InvalidOption>) {
        read_options(lookup, |_| true)
    }

    /// Reads the options from the process environment.
    pub fn from_env() -> (Options, Vec<InvalidOption>) {
        Options::from_lookup(|name| std::env::var(name).ok())
    }

    /// One `param:` line per option: its command-line name, its
    /// environment variable, its value and where the value came from.
    pub fn describe(&self) -> Vec<String> {
        OPTIONS
            .iter()
            .map(|spec| {
                format!(
                    "param: {PLUGIN_PREFIX}{} ({}) = {} ({})",
                    spec.name,
                    spec.variable,
                    (spec.show)(self),
                    self.source(spec.name)
                )
            })
            .collect()
    }

    /// Where the value of option `name` came from.
    pub fn source(&self, name: &str) -> Source {
        self.sources.get(name).copied().unwrap_or(Source::Default)
    }

    /// These options with CRIU's plugin options (`argv`, every plugin's
    /// entries; only `amdgpu.*` ones are read) applied on top: a
    /// command-line value overrides the environment's. The last of repeated
    /// entries wins (CRIU keeps them in order; RPC and libcriu append to the
    /// command line's). Nothing changes on error.
    pub fn with_command_line(&self, argv: &[String]) -> Result<Options, OptionError> {
        let mut options = self.clone();
        for (spec, value) in plugin_options(argv)? {
            (spec.apply)(&mut options, &value).map_err(|why| OptionError::BadValue {
                option: format!("{PLUGIN_PREFIX}{}", spec.name),
                value: value.clone(),
                accepted: spec.accepted,
                why,
            })?;
            options.sources.insert(spec.name, Source::CommandLine);
        }
        Ok(options)
    }

    /// The options from the environment read through `env`, strictly for
    /// the strict options ([`OptionSpec::strict`]: an invalid
    /// `KFD_DEVICE_MAP` is an error) and leniently for the C plugin's
    /// variables (an invalid value keeps the default and is returned).
    pub fn resolve(
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<(Options, Vec<InvalidOption>), OptionError> {
        for spec in OPTIONS.iter().filter(|spec| spec.strict) {
            if let Some(value) = env(spec.variable) {
                let mut scratch = Options::default();
                (spec.apply)(&mut scratch, &value).map_err(|why| OptionError::BadValue {
                    option: spec.variable.to_owned(),
                    value,
                    accepted: spec.accepted,
                    why,
                })?;
            }
        }
        Ok(Options::from_lookup(env))
    }

    /// [`Options::resolve`] over the process environment.
    pub fn resolve_env() -> Result<(Options, Vec<InvalidOption>), OptionError> {
        Options::resolve(|name| std::env::var(name).ok())
    }
}

/// The options of [`OPTIONS`] that `only` selects, read through `lookup`
/// (variable to value, `None` when unset) over the defaults: a value an
/// option does not accept keeps its default and is returned.
fn read_options(
    lookup: impl Fn(&str) -> Option<String>,
    only: impl Fn(&OptionSpec) -> bool,
) -> (Options, Vec<InvalidOption>) {
    let mut options = Options::default();
    let mut invalid = Vec::new();
    for spec in OPTIONS.iter().filter(|spec| only(spec)) {
        let Some(value) = lookup(spec.variable) else {
            continue;
        };
        match (spec.apply)(&mut options, &value) {
            Ok(()) => {
                options.sources.insert(spec.name, Source::Environment);
            }
            Err(why) => invalid.push(InvalidOption {
                variable: spec.variable,
                value,
                why,
                expected: spec.accepted,
                kept: (spec.show)(&options),
            }),
        }
    }
    (options, invalid)
}

/// The prefix of this plugin's entries among CRIU's plugin options.
pub const PLUGIN_PREFIX: &str = "amdgpu.";

/// Where an option's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Nothing set it (or its environment value was invalid and ignored).
    Default,
    /// Its environment variable.
    Environment,
    /// `--plugin-option amdgpu.NAME=VALUE`.
    CommandLine,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Default => "default",
            Source::Environment => "environment",
            Source::CommandLine => "command line",
        })
    }
}

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
    /// Sets the option from a value; `Err` says why the value is bad.
    apply: fn(&mut Options, &str) -> Result<(), String>,
    /// The option's current value as text.
    show: fn(&Options) -> String,
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
            let limit = parse_buffer_size(v).map_err(|e| e.to_string())?;
            o.max_buffer_size = limit;
            o.staging = Staging::from_limit(limit);
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
];

/// Why the plugin options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionError {
    /// An `amdgpu.*` entry names no option.
    #[error("unknown plugin option {option:?}; the amdgpu plugin's options are {known}")]
    Unknown {
        /// The entry's name, with its prefix.
        option: String,
        /// Every option's full name.
        known: String,
    },
    /// A value the option does not accept.
    #[error("plugin option {option}={value:?}: {why}; expecting {accepted}")]
    BadValue {
        /// `amdgpu.NAME` or the environment variable.
        option: String,
        /// The value given.
        value: String,
        /// What the option accepts.
        accepted: &'static str,
        /// What is wrong with the value.
        why: String,
    },
}

/// This plugin's entries among CRIU's plugin options, in order: each
/// `amdgpu.NAME=VALUE` with its option. Other plugins' entries (another
/// prefix) are skipped; an `amdgpu.` entry without `=` or with an unknown
/// name is an error.
pub fn plugin_options(argv: &[String]) -> Result<Vec<(&'static OptionSpec, String)>, OptionError> {
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
        assert!(on
            .describe()
            .contains(&"param: amdgpu.dedup (KFD_DEDUP) = YES (environment)".to_owned()));
        // A new option: the plugin refuses a bad value instead of ignoring it.
        let err = Options::resolve(lookup(&[(DEDUP, "maybe")])).unwrap_err();
        assert!(err.to_string().contains("KFD_DEDUP"), "{err}");
        let cli = Options::default()
            .with_command_line(&["amdgpu.dedup=1".to_owned()])
            .unwrap();
        assert!(cli.dedup && cli.source("dedup") == Source::CommandLine);
    }

    #[test]
    fn defaults_bound_staging_to_four_8mib_buffers() {
        let (options, invalid) = Options::from_lookup(|_| None);
        assert!(invalid.is_empty());
        assert_eq!(options.checks, CheckOptions::all());
        assert_eq!(options.staging.buffers, 4);
        assert_eq!(options.staging.buffer_size, 8 << 20);
        assert_eq!(options.staging.total(), 32 << 20);
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
            8 << 20
        );
    }

    #[test]
    fn describe_lists_every_option() {
        let lines = Options::default().describe();
        assert_eq!(lines.len(), OPTIONS.len());
        assert!(
            lines.contains(&"param: amdgpu.numa-check (KFD_NUMA_CHECK) = YES (default)".to_owned())
        );
        assert!(lines.contains(&"param: amdgpu.dedup (KFD_DEDUP) = NO (default)".to_owned()));
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

#[cfg(test)]
mod command_line_tests {
    use super::*;

    fn argv(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|e| (*e).to_owned()).collect()
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

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
                "dedup"
            ]
        );
        for spec in OPTIONS {
            assert!(spec.variable.starts_with("KFD_"), "{}", spec.name);
        }
    }

    #[test]
    fn the_command_line_overrides_the_environment_and_says_so() {
        let (base, invalid) =
            Options::resolve(env(&[("KFD_NUMA_CHECK", "NO"), ("KFD_FW_VER_CHECK", "0")])).unwrap();
        assert!(invalid.is_empty());
        assert!(!base.checks.numa);
        let options = base
            .with_command_line(&argv(&[
                "cuda.device-map=0=1",
                "amdgpu.numa-check=yes",
                "amdgpu.max-buffer-size=1M",
                "amdgpu.max-buffer-size=2M",
            ]))
            .unwrap();
        assert!(options.checks.numa, "command line wins");
        assert!(!options.checks.fw_version, "environment kept");
        assert_eq!(options.max_buffer_size, 2 << 20, "the last entry wins");
        let lines = options.describe();
        for expected in [
            "param: amdgpu.numa-check (KFD_NUMA_CHECK) = YES (command line)",
            "param: amdgpu.fw-ver-check (KFD_FW_VER_CHECK) = NO (environment)",
            "param: amdgpu.vram-size-check (KFD_VRAM_SIZE_CHECK) = YES (default)",
            "param: amdgpu.max-buffer-size (KFD_MAX_BUFFER_SIZE) = 2097152 (command line)",
            "param: amdgpu.device-map (KFD_DEVICE_MAP) = none (default)",
        ] {
            assert!(
                lines.iter().any(|l| l == expected),
                "{expected} not in {lines:#?}"
            );
        }
    }

    #[test]
    fn other_plugins_entries_are_ignored() {
        let options = Options::default()
            .with_command_line(&argv(&[
                "cuda.device-map=0=1",
                "amdgpu",
                "noprefix=1",
                "amdgpux.y=1",
            ]))
            .unwrap();
        assert_eq!(options, Options::default());
    }

    #[test]
    fn unknown_names_and_bad_values_fail_naming_the_option_and_what_it_accepts() {
        let err = Options::default()
            .with_command_line(&argv(&["amdgpu.numa-chek=no"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown plugin option \"amdgpu.numa-chek\""),
            "{err}"
        );
        assert!(
            err.contains("amdgpu.numa-check") && err.contains("amdgpu.device-map"),
            "{err}"
        );

        for (entry, accepted) in [
            ("amdgpu.numa-check=maybe", "YES/NO or 1/0"),
            ("amdgpu.numa-check", "YES/NO or 1/0"),
            ("amdgpu.max-buffer-size=12MB", "K, M or G suffix"),
            ("amdgpu.device-map=1", "SRC=DST"),
        ] {
            let err = Options::default()
                .with_command_line(&argv(&[entry]))
                .unwrap_err()
                .to_string();
            let name = entry.split('=').next().unwrap();
            assert!(err.contains(name), "{entry}: {err}");
            assert!(err.contains(accepted), "{entry}: {err}");
        }
    }

    #[test]
    fn the_device_map_is_strict_in_the_environment_too() {
        let err = Options::resolve(env(&[("KFD_DEVICE_MAP", "0x1=")])).unwrap_err();
        assert!(err.to_string().contains("KFD_DEVICE_MAP"), "{err}");
        let (options, _) = Options::resolve(env(&[("KFD_DEVICE_MAP", "0x1=0x2")])).unwrap();
        assert_eq!(options.device_map.to_string(), "1=2");
        assert_eq!(options.source("device-map"), Source::Environment);
        // The C plugin's variables stay lenient.
        let (options, invalid) = Options::resolve(env(&[("KFD_NUMA_CHECK", "maybe")])).unwrap();
        assert!(options.checks.numa);
        assert_eq!(invalid.len(), 1);
        assert_eq!(options.source("numa-check"), Source::Default);
    }
}
