//! The plugin's options from the environment: the seven `KFD_*_CHECK`
//! switches (parsed by `amdgpu-topology`, which owns the checks) and the
//! staging bound `KFD_MAX_BUFFER_SIZE`.
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

use amdgpu_topology::options::{
    max_buffer_size_from_lookup, CheckOptions, InvalidOption, MAX_BUFFER_SIZE,
};

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
}

impl Options {
    /// Reads the options through `lookup` (name to value, `None` when unset);
    /// returns them with every value that was rejected (the default was kept).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Options, Vec<InvalidOption>) {
        let (checks, mut invalid) = CheckOptions::from_lookup(&lookup);
        let (limit, bad_limit) = max_buffer_size_from_lookup(&lookup);
        invalid.extend(bad_limit);
        let options = Options {
            checks,
            staging: Staging::from_limit(limit),
        };
        (options, invalid)
    }

    /// Reads the options from the process environment.
    pub fn from_env() -> (Options, Vec<InvalidOption>) {
        Options::from_lookup(|name| std::env::var(name).ok())
    }

    /// One `param: NAME:value` line per option, as the C plugin logs them.
    pub fn describe(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .checks
            .flags()
            .iter()
            .map(|(name, on)| format!("param: {name}:{}", if *on { 'Y' } else { 'N' }))
            .collect();
        lines.push(format!(
            "param: {MAX_BUFFER_SIZE}: {} staging buffer(s) of {:#x} bytes per GPU",
            self.staging.buffers, self.staging.buffer_size
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
            let limit = amdgpu_topology::options::parse_buffer_size(value).unwrap();
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
        assert_eq!(lines.len(), 8);
        assert!(lines.contains(&"param: KFD_NUMA_CHECK:Y".to_owned()));
    }
}
