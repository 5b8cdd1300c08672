//! The engine's options: the seven `KFD_*_CHECK` switches of the device
//! checks (the switches themselves are `amdgpu-topology`'s
//! [`CheckOptions`]), the staging bound `KFD_MAX_BUFFER_SIZE`, the device
//! map `KFD_DEVICE_MAP`, `KFD_DEDUP` and the parallel restore switch
//! `AMDGPU_PLUGIN_PARALLEL_RESTORE`.
//!
//! # Two sources, one reader
//!
//! Every option has a name on CRIU's command line,
//! `--plugin-option amdgpu.NAME=VALUE` (CRIU after criu#3138 hands plugins
//! these strings through `criu_plugin_get_options`), and an environment
//! variable; [`OPTIONS`] lists them, one row per option, so a new option is
//! one row and one field. [`Options::read`] is the one way in: it reads the
//! environment through a lookup and applies CRIU's entries on top, so a
//! command-line value overrides the environment, and
//! [`Options::describe`] says where each value came from. Programs that
//! set options themselves start from [`Options::default`] and the `with_*`
//! setters. On the command line an unknown `amdgpu.*` name or a bad value
//! is an error ([`OptionError`]) naming the option and what it accepts: a
//! mistyped option silently ignored could restore onto the wrong GPUs.
//! Entries of other plugins (`cuda.device-map=...`) are not ours and are
//! left alone.
//!
//! In the environment the seven checks, `KFD_MAX_BUFFER_SIZE` and
//! `AMDGPU_PLUGIN_PARALLEL_RESTORE` keep their first readers' leniency: an invalid value keeps the default and yields an
//! [`InvalidOption`] for the caller to log (deployments that set them for
//! the C plugin keep working). `KFD_DEVICE_MAP` and `KFD_DEDUP` are new and
//! strict: a value that does not parse is an [`OptionError`] wherever it
//! comes from.
//!
//! Staging: BO contents move between GPU memory and image files through
//! host staging buffers, several per GPU so that SDMA copies overlap the
//! file I/O of the chunks before them. The staging memory follows from
//! the bound ([`Options::staging`]); it is never set apart from it.
//! - `KFD_MAX_BUFFER_SIZE` unset (or `0`): 4 × 8 MiB per GPU. Unlike the C
//!   plugin, there is no unbounded mode (C sized the buffer by the largest
//!   BO, gigabytes for large models). The default used to be 2 × 32 MiB;
//!   four 8 MiB buffers hold half the memory (every dumper and restorer
//!   faults it in fresh: a CRIU process per dump, a task per restore) and
//!   keep three copies in flight while one is written out (the A/B is in
//!   `CHANGELOG.md`, performance history, 2026-12-02). A buffer fits a
//!   last-level cache, but with three copies landing behind it, its bytes
//!   are mostly out of cache by the time they are hashed (a profile of the
//!   dump's hashing: 16 GiB/s, against 40 on a cache-resident buffer).
//! - set: the total staging memory per GPU is at most the value, rounded
//!   down to 4 KiB pages, minimum one page. With room for two pages or more
//!   it is split into two equal page-aligned buffers; with a single page
//!   copies and writes take turns.
//! - Buffers never exceed the largest BO (rounded up to a page) they serve
//!   ([`Staging::for_largest_bo`]).
//!
//! This module never reads the process environment itself: a caller
//! hands [`Options::read`] the lookup (`|name| std::env::var(name).ok()`
//! for its own environment).

use std::collections::BTreeMap;
use std::fmt;

pub use amdgpu_topology::device_map::DeviceMap;
pub use amdgpu_topology::options::CheckOptions;

mod buffer_size;
mod table;

pub use buffer_size::{
    parse_buffer_size, BufferSizeError, Staging, DEFAULT_STAGING_BUFFER, DEFAULT_STAGING_BUFFERS,
    STAGING_PAGE,
};
pub use table::{OptionSpec, OPTIONS};

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
/// `AMDGPU_PLUGIN_PARALLEL_RESTORE`: whether CRIU's main process may copy
/// the BO contents of a single-process tree while the task restores (on by
/// default; plugin option `amdgpu.parallel-restore`; see
/// [`crate::parallel`]).
pub const PARALLEL_RESTORE: &str = "AMDGPU_PLUGIN_PARALLEL_RESTORE";

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

/// `lookup` seen through the seven `KFD_*_CHECK` variables only: for a
/// tool that answers whether a restore's device checks pass and must not
/// read (or fail on) the variables that shape a dump or restore. The
/// result goes to [`Options::read`]; with it nothing strict is read, so
/// the reading never fails on the environment.
pub fn checks_only(lookup: impl Fn(&str) -> Option<String>) -> impl Fn(&str) -> Option<String> {
    move |name| {
        check_flags(&CheckOptions::all())
            .iter()
            .any(|(variable, _)| *variable == name)
            .then(|| lookup(name))
            .flatten()
    }
}

/// Everything the options configure. Built by [`Options::read`] (the
/// environment and CRIU's plugin options) or by a program through
/// [`Options::default`] and the `with_*` setters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Device compatibility checks for restore.
    checks: CheckOptions,
    /// The staging bound as given (`KFD_MAX_BUFFER_SIZE`, 0 = default);
    /// the staging memory follows from it.
    max_buffer_size: u64,
    /// Pins of checkpointed GPUs to local GPUs (`KFD_DEVICE_MAP`).
    device_map: DeviceMap,
    /// `KFD_DEDUP`: chunks already written for another BO, GPU or process
    /// of the same dump are referenced instead of written again.
    dedup: bool,
    /// `AMDGPU_PLUGIN_PARALLEL_RESTORE`: whether CRIU's main process may
    /// copy BO contents while the task restores (where
    /// [`crate::parallel::ParallelFacts`] allow it).
    parallel_restore: bool,
    /// Where each value came from, by option name ([`OptionSpec::name`]);
    /// an option not listed has its default.
    sources: BTreeMap<&'static str, Source>,
}

impl Default for Options {
    /// Every device check on, the default staging, no device map, no
    /// deduplication, parallel restore allowed.
    fn default() -> Options {
        Options {
            checks: CheckOptions::default(),
            max_buffer_size: 0,
            device_map: DeviceMap::default(),
            dedup: false,
            parallel_restore: true,
            sources: BTreeMap::new(),
        }
    }
}

impl Options {
    /// These options with the environment read through `env` (variable to
    /// value, `None` when unset) over them, then CRIU's plugin options
    /// (`plugin_options`, every plugin's entries; only `amdgpu.*` ones are
    /// read) over those: a command-line value overrides the environment's,
    /// and the last of repeated entries wins (CRIU keeps them in order; RPC
    /// and libcriu append to the command line's). Start from
    /// [`Options::default`] unless a program set options of its own.
    ///
    /// In the environment, an invalid value of one of the C plugin's
    /// variables keeps the value it had and is returned as an
    /// [`InvalidOption`] for the caller to log; an invalid value of a
    /// strict option ([`OptionSpec::strict`]: `KFD_DEVICE_MAP`,
    /// `KFD_DEDUP`) is an error. On the command line every bad entry is an
    /// error. `self` never changes.
    pub fn read(
        &self,
        env: impl Fn(&str) -> Option<String>,
        plugin_options: &[String],
    ) -> Result<(Options, Vec<InvalidOption>), OptionError> {
        let mut options = self.clone();
        let mut invalid = Vec::new();
        for spec in OPTIONS {
            let Some(value) = env(spec.variable) else {
                continue;
            };
            match (spec.apply)(&mut options, &value) {
                Ok(()) => {
                    options.sources.insert(spec.name, Source::Environment);
                }
                Err(why) if spec.strict => {
                    return Err(OptionError::BadValue {
                        option: spec.variable.to_owned(),
                        value,
                        accepted: spec.accepted,
                        why,
                    })
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
        for (spec, value) in table::plugin_options(plugin_options)? {
            (spec.apply)(&mut options, &value).map_err(|why| OptionError::BadValue {
                option: format!("{PLUGIN_PREFIX}{}", spec.name),
                value: value.clone(),
                accepted: spec.accepted,
                why,
            })?;
            options.sources.insert(spec.name, Source::CommandLine);
        }
        Ok((options, invalid))
    }

    /// These options with the device checks `checks`.
    pub fn with_checks(mut self, checks: CheckOptions) -> Options {
        self.checks = checks;
        self
    }

    /// These options with the staging bound `limit` in bytes (as
    /// `KFD_MAX_BUFFER_SIZE`, 0 = the default staging).
    pub fn with_max_buffer_size(mut self, limit: u64) -> Options {
        self.max_buffer_size = limit;
        self
    }

    /// These options with the GPU pins `device_map`.
    pub fn with_device_map(mut self, device_map: DeviceMap) -> Options {
        self.device_map = device_map;
        self
    }

    /// These options with deduplication of the dump's chunks on or off.
    pub fn with_dedup(mut self, dedup: bool) -> Options {
        self.dedup = dedup;
        self
    }

    /// These options with parallel restore allowed or not.
    pub fn with_parallel_restore(mut self, allowed: bool) -> Options {
        self.parallel_restore = allowed;
        self
    }

    /// Device compatibility checks for restore.
    pub fn checks(&self) -> &CheckOptions {
        &self.checks
    }

    /// The staging bound as given (`KFD_MAX_BUFFER_SIZE`, 0 = default).
    pub fn max_buffer_size(&self) -> u64 {
        self.max_buffer_size
    }

    /// Staging memory per GPU, as the bound sets it
    /// ([`Staging::from_limit`]).
    pub fn staging(&self) -> Staging {
        Staging::from_limit(self.max_buffer_size)
    }

    /// Pins of checkpointed GPUs to local GPUs (`KFD_DEVICE_MAP`).
    pub fn device_map(&self) -> &DeviceMap {
        &self.device_map
    }

    /// `KFD_DEDUP`: whether chunks already written for another BO, GPU or
    /// process of the same dump are referenced instead of written again.
    pub fn dedup(&self) -> bool {
        self.dedup
    }

    /// `AMDGPU_PLUGIN_PARALLEL_RESTORE` / `amdgpu.parallel-restore`:
    /// whether CRIU's main process may copy BO contents while the task
    /// restores (it still does only where CRIU's facts allow it).
    pub fn parallel_restore(&self) -> bool {
        self.parallel_restore
    }

    /// Where the value of option `name` ([`OptionSpec::name`]) came from.
    pub fn source(&self, name: &str) -> Source {
        self.sources.get(name).copied().unwrap_or(Source::Default)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_only_hides_every_variable_but_the_checks() {
        let env = |name: &str| match name {
            NUMA_CHECK => Some("NO".to_owned()),
            DEVICE_MAP => Some("not a map".to_owned()),
            MAX_BUFFER_SIZE => Some("1M".to_owned()),
            _ => None,
        };
        assert!(
            Options::default().read(env, &[]).is_err(),
            "the map is strict"
        );
        let (options, invalid) = Options::default().read(checks_only(env), &[]).unwrap();
        assert!(!options.checks().numa);
        assert!(invalid.is_empty());
        assert_eq!(options.max_buffer_size(), 0, "KFD_MAX_BUFFER_SIZE not read");
        assert!(options.device_map().is_empty());
    }

    fn lookup<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    /// The options of an environment that sets no strict option wrongly.
    fn from_env(env: impl Fn(&str) -> Option<String>) -> (Options, Vec<InvalidOption>) {
        Options::default().read(env, &[]).unwrap()
    }

    #[test]
    fn dedup_is_off_by_default_and_parsed_like_the_checks() {
        assert!(!from_env(|_| None).0.dedup());
        let (on, invalid) = from_env(lookup(&[(DEDUP, "yes")]));
        assert!(on.dedup() && invalid.is_empty());
        assert!(on
            .describe()
            .contains(&"param: amdgpu.dedup (KFD_DEDUP) = YES (environment)".to_owned()));
        // A new option: a bad value is refused instead of ignored, naming
        // the variable, and the options read over keep their value.
        let base = Options::default();
        let err = base.read(lookup(&[(DEDUP, "maybe")]), &[]).unwrap_err();
        assert!(!base.dedup());
        assert!(
            matches!(&err, OptionError::BadValue { option, .. } if option == DEDUP),
            "{err:?}"
        );
        assert!(err.to_string().contains("KFD_DEDUP"), "{err}");
        let (cli, _) = Options::default()
            .read(|_| None, &["amdgpu.dedup=1".to_owned()])
            .unwrap();
        assert!(cli.dedup() && cli.source("dedup") == Source::CommandLine);
    }

    #[test]
    fn parallel_restore_is_allowed_by_default_and_turned_off_either_way() {
        assert!(from_env(|_| None).0.parallel_restore());
        for off in ["0", "no", "NO"] {
            let (options, invalid) = from_env(lookup(&[(PARALLEL_RESTORE, off)]));
            assert!(!options.parallel_restore() && invalid.is_empty(), "{off}");
            assert_eq!(options.source("parallel-restore"), Source::Environment);
        }
        // As before it was an option: a value it does not understand is
        // logged and leaves parallel restore allowed.
        let (options, invalid) = from_env(lookup(&[(PARALLEL_RESTORE, "sometimes")]));
        assert!(options.parallel_restore());
        assert_eq!(invalid.len(), 1);
        assert!(invalid[0].to_string().contains(PARALLEL_RESTORE));
        // The command line overrides the environment, both ways.
        let (cli, _) = Options::default()
            .read(
                lookup(&[(PARALLEL_RESTORE, "1")]),
                &["amdgpu.parallel-restore=no".to_owned()],
            )
            .unwrap();
        assert!(!cli.parallel_restore());
        assert!(cli.describe().contains(
            &"param: amdgpu.parallel-restore (AMDGPU_PLUGIN_PARALLEL_RESTORE) = NO (command line)"
                .to_owned()
        ));
        let (cli, _) = Options::default()
            .read(
                lookup(&[(PARALLEL_RESTORE, "0")]),
                &["amdgpu.parallel-restore=yes".to_owned()],
            )
            .unwrap();
        assert!(cli.parallel_restore());
        let err = Options::default()
            .read(|_| None, &["amdgpu.parallel-restore=maybe".to_owned()])
            .unwrap_err();
        assert!(err.to_string().contains("amdgpu.parallel-restore"), "{err}");
        assert!(!Options::default()
            .with_parallel_restore(false)
            .parallel_restore());
    }

    #[test]
    fn defaults_bound_staging_to_four_8mib_buffers() {
        let (options, invalid) = from_env(|_| None);
        assert!(invalid.is_empty());
        assert_eq!(*options.checks(), CheckOptions::all());
        assert_eq!(options.staging().buffers, 4);
        assert_eq!(options.staging().buffer_size, 8 << 20);
        assert_eq!(options.staging().total(), 32 << 20);
        assert_eq!(options, Options::default());
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
            let (options, invalid) = from_env(lookup(&[(MAX_BUFFER_SIZE, value)]));
            assert!(invalid.is_empty(), "{value}: {invalid:?}");
            let staging = options.staging();
            assert_eq!(
                (staging.buffers, staging.buffer_size),
                (buffers, size),
                "{value}"
            );
            assert_eq!(staging.buffer_size % STAGING_PAGE, 0);
            let limit = parse_buffer_size(value).unwrap();
            assert!(staging.total() <= limit.max(STAGING_PAGE), "{value}");
            // A program setting the same bound gets the same staging.
            let set = Options::default().with_max_buffer_size(limit);
            assert_eq!(set.staging(), staging, "{value}");
            assert_eq!(set.max_buffer_size(), options.max_buffer_size());
        }
    }

    #[test]
    fn invalid_values_name_the_variable_and_keep_defaults() {
        let (options, invalid) = from_env(lookup(&[
            (MAX_BUFFER_SIZE, "12KB"),
            ("KFD_NUMA_CHECK", "maybe"),
            ("KFD_VRAM_SIZE_CHECK", "no"),
        ]));
        assert_eq!(options.staging(), Staging::default());
        assert!(options.checks().numa);
        assert!(!options.checks().vram_size);
        let text: Vec<String> = invalid.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:?}");
        assert!(text.iter().any(|t| t.contains(MAX_BUFFER_SIZE)), "{text:?}");
        assert!(
            text.iter().any(|t| t.contains("KFD_NUMA_CHECK")),
            "{text:?}"
        );
    }

    #[test]
    fn an_invalid_value_keeps_what_a_program_set() {
        let base = Options::default()
            .with_max_buffer_size(1 << 20)
            .with_checks(CheckOptions {
                numa: false,
                ..CheckOptions::all()
            });
        let (options, invalid) = base
            .read(
                lookup(&[(MAX_BUFFER_SIZE, "1T"), (NUMA_CHECK, "maybe")]),
                &[],
            )
            .unwrap();
        assert_eq!(options, base);
        let kept: Vec<&str> = invalid.iter().map(|i| i.kept.as_str()).collect();
        assert_eq!(kept, ["NO", "1048576"]);
    }

    #[test]
    fn setters_set_only_their_option() {
        let map: DeviceMap = "0x1=0x2".parse().unwrap();
        let options = Options::default()
            .with_checks(CheckOptions::none())
            .with_max_buffer_size(8192)
            .with_device_map(map.clone())
            .with_dedup(true);
        assert_eq!(*options.checks(), CheckOptions::none());
        assert_eq!(options.max_buffer_size(), 8192);
        assert_eq!(options.staging(), Staging::from_limit(8192));
        assert_eq!(*options.device_map(), map);
        assert!(options.dedup());
        let back = options.with_max_buffer_size(0);
        assert_eq!(back.staging(), Staging::default());
        assert_eq!(*back.checks(), CheckOptions::none());
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

    fn checks(env: impl Fn(&str) -> Option<String>) -> (CheckOptions, Vec<InvalidOption>) {
        let (options, invalid) = Options::default().read(env, &[]).unwrap();
        (*options.checks(), invalid)
    }

    #[test]
    fn unset_means_every_check_on() {
        let (options, invalid) = checks(|_| None);
        assert_eq!(options, CheckOptions::all());
        assert!(invalid.is_empty());
    }

    #[test]
    fn booleans_accept_digits_and_words_in_any_case() {
        let (options, invalid) = checks(lookup(&[
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
            let (options, _) = checks(lookup(&[(variable, "0")]));
            for (j, (other, on)) in check_flags(&options).iter().enumerate() {
                assert_eq!(*on, i != j, "{variable} set to 0, looking at {other}");
            }
        }
    }

    #[test]
    fn invalid_boolean_names_the_variable_and_keeps_the_default() {
        let (options, invalid) = checks(lookup(&[
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
    fn buffer_size_variable() {
        let max_buffer_size = |env| {
            let (options, mut invalid) = Options::default().read(env, &[]).unwrap();
            (options.max_buffer_size(), invalid.pop())
        };
        assert_eq!(max_buffer_size(lookup(&[])), (0, None));
        assert_eq!(
            max_buffer_size(lookup(&[("KFD_MAX_BUFFER_SIZE", "1M")])),
            (1 << 20, None)
        );
        let (size, invalid) = max_buffer_size(lookup(&[("KFD_MAX_BUFFER_SIZE", "12 MB")]));
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

    /// `entries` as CRIU's plugin options over `options`.
    fn with_command_line(options: &Options, entries: &[&str]) -> Result<Options, OptionError> {
        let (options, invalid) = options.read(|_| None, &argv(entries))?;
        assert!(invalid.is_empty(), "no environment, nothing to ignore");
        Ok(options)
    }

    #[test]
    fn the_command_line_overrides_the_environment_and_says_so() {
        let vars = [("KFD_NUMA_CHECK", "NO"), ("KFD_FW_VER_CHECK", "0")];
        let (base, invalid) = Options::default().read(env(&vars), &[]).unwrap();
        assert!(invalid.is_empty());
        assert!(!base.checks().numa);
        let entries = [
            "cuda.device-map=0=1",
            "amdgpu.numa-check=yes",
            "amdgpu.max-buffer-size=1M",
            "amdgpu.max-buffer-size=2M",
        ];
        let options = with_command_line(&base, &entries).unwrap();
        assert!(options.checks().numa, "command line wins");
        assert!(!options.checks().fw_version, "environment kept");
        assert_eq!(options.max_buffer_size(), 2 << 20, "the last entry wins");
        assert_eq!(options.staging(), Staging::from_limit(2 << 20));
        // Both sources in one reading give the same options.
        let (at_once, _) = Options::default()
            .read(env(&vars), &argv(&entries))
            .unwrap();
        assert_eq!(at_once, options);
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
        let options = with_command_line(
            &Options::default(),
            &["cuda.device-map=0=1", "amdgpu", "noprefix=1", "amdgpux.y=1"],
        )
        .unwrap();
        assert_eq!(options, Options::default());
    }

    #[test]
    fn unknown_names_and_bad_values_fail_naming_the_option_and_what_it_accepts() {
        let err = with_command_line(&Options::default(), &["amdgpu.numa-chek=no"])
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
            let err = with_command_line(&Options::default(), &[entry])
                .unwrap_err()
                .to_string();
            let name = entry.split('=').next().unwrap();
            assert!(err.contains(name), "{entry}: {err}");
            assert!(err.contains(accepted), "{entry}: {err}");
        }
    }

    #[test]
    fn the_device_map_is_strict_in_the_environment_too() {
        let err = Options::default()
            .read(env(&[("KFD_DEVICE_MAP", "0x1=")]), &[])
            .unwrap_err();
        assert!(err.to_string().contains("KFD_DEVICE_MAP"), "{err}");
        let (options, _) = Options::default()
            .read(env(&[("KFD_DEVICE_MAP", "0x1=0x2")]), &[])
            .unwrap();
        assert_eq!(options.device_map().to_string(), "0x0001=0x0002");
        assert_eq!(options.source("device-map"), Source::Environment);
        // The C plugin's variables stay lenient.
        let (options, invalid) = Options::default()
            .read(env(&[("KFD_NUMA_CHECK", "maybe")]), &[])
            .unwrap();
        assert!(options.checks().numa);
        assert_eq!(invalid.len(), 1);
        assert_eq!(options.source("numa-check"), Source::Default);
    }
}
