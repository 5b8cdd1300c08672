//! `KFD_MAX_BUFFER_SIZE`: the text it accepts ([`parse_buffer_size`]) and
//! the host staging memory a bound sets ([`Staging`]). Pure functions: no
//! environment, no allocation beyond error text.

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn buffers_shrink_to_the_largest_bo() {
        let staging = Staging::default().for_largest_bo(10_000);
        assert_eq!(staging.buffer_size, 12288);
        assert_eq!(Staging::default().for_largest_bo(0).buffer_size, 4096);
        assert_eq!(
            Staging::default().for_largest_bo(1 << 40).buffer_size,
            8 << 20
        );
    }
}
