//! The per-BO content checksum recorded in `content_checksum` (tag 100).
//!
//! A 64-bit, non-cryptographic hash built to run inline while BO contents
//! stream to or from a pages file, faster than the page cache delivers them:
//! eight independent lanes consume 128 bytes per round, each lane taking two
//! little-endian 64-bit words per step as `acc = rotl((acc ^ w1) * K, 31) + w2`.
//! Every step is a bijection of the lane, so changing any single 8-byte word
//! always changes the result; the lanes and the total length are combined at
//! the end with a strong 64-bit finaliser. It guards against corruption,
//! misplaced data and truncation, not against an adversary.
//!
//! Feeding the same bytes in any split gives the same value as one call on
//! all of them ([`ContentHasher`] keeps at most 127 bytes between calls).
//!
//! Algorithm (format version 1), for bytes `b` of length `n`:
//! 1. lanes `a[i] = SEED[i]` (i in 0..8); `b` is cut into 128-byte blocks, the
//!    last one zero-padded if partial; each block is 16 words `w[0..16]` and
//!    updates every lane: `a[i] = rotl((a[i] ^ w[i]) * K, 31) + w[8 + i]`;
//! 2. `h = n * K2`; for each lane in order `h = rotl((h ^ mix(a[i])) * K, 27)`;
//!    the result is `mix(h)`, where `mix` is the splitmix64 finaliser.

const K: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
const SEED: [u64; LANES] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
    0xc0ac_29b7_c97c_50dd,
    0x3f84_d5b5_b547_0917,
];
const LANES: usize = 8;
const BLOCK: usize = 2 * 8 * LANES;

/// Checksum of a whole buffer; equal to streaming it through [`ContentHasher`].
pub fn content_checksum(bytes: &[u8]) -> u64 {
    let mut h = ContentHasher::new();
    h.update(bytes);
    h.finish()
}

/// Streaming form of [`content_checksum`].
#[derive(Clone, Debug)]
pub struct ContentHasher {
    lanes: [u64; LANES],
    pending: [u8; BLOCK],
    pending_len: usize,
    total: u64,
}

impl Default for ContentHasher {
    fn default() -> Self {
        Self::new()
    }
}

#[inline(always)]
fn step(acc: u64, w1: u64, w2: u64) -> u64 {
    (acc ^ w1).wrapping_mul(K).rotate_left(31).wrapping_add(w2)
}

#[inline(always)]
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl ContentHasher {
    /// A hasher that has seen no bytes.
    pub fn new() -> Self {
        Self {
            lanes: SEED,
            pending: [0; BLOCK],
            pending_len: 0,
            total: 0,
        }
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether no bytes were fed yet.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Feeds bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.pending_len > 0 {
            let take = (BLOCK - self.pending_len).min(bytes.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&bytes[..take]);
            self.pending_len += take;
            bytes = &bytes[take..];
            if self.pending_len < BLOCK {
                return;
            }
            let block = self.pending;
            self.blocks(&block);
            self.pending_len = 0;
        }
        let full = bytes.len() - bytes.len() % BLOCK;
        self.blocks(&bytes[..full]);
        let rest = &bytes[full..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    /// Feeds `len` zero bytes without reading memory: the same result as
    /// [`update`](Self::update) with `len` zeros (holes of pages files).
    pub fn update_zeros(&mut self, len: u64) {
        static ZEROS: [u8; BLOCK] = [0; BLOCK];
        let mut left = len;
        if self.pending_len > 0 {
            let take = ((BLOCK - self.pending_len) as u64).min(left) as usize;
            self.update(&ZEROS[..take]);
            left -= take as u64;
        }
        let blocks = left / BLOCK as u64;
        let mut lanes = self.lanes;
        for _ in 0..blocks {
            for lane in lanes.iter_mut() {
                *lane = step(*lane, 0, 0);
            }
        }
        self.lanes = lanes;
        self.total += blocks * BLOCK as u64;
        self.update(&ZEROS[..(left % BLOCK as u64) as usize]);
    }

    #[inline]
    fn blocks(&mut self, bytes: &[u8]) {
        let mut lanes = self.lanes;
        for block in bytes.chunks_exact(BLOCK) {
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = step(*lane, word(block, 8 * i), word(block, 8 * (LANES + i)));
            }
        }
        self.lanes = lanes;
    }

    /// The checksum of everything fed so far (the hasher stays usable).
    pub fn finish(&self) -> u64 {
        let mut lanes = self.lanes;
        if self.pending_len > 0 {
            let mut last = [0u8; BLOCK];
            last[..self.pending_len].copy_from_slice(&self.pending[..self.pending_len]);
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane = step(*lane, word(&last, 8 * i), word(&last, 8 * (LANES + i)));
            }
        }
        let mut h = self.total.wrapping_mul(K2);
        for lane in lanes {
            h = (h ^ mix(lane)).wrapping_mul(K).rotate_left(27);
        }
        mix(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<u8> {
        // A simple LCG so the test data has no structure the hash could like.
        let mut x = 0x1234_5678_u32;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn streaming_in_any_split_equals_one_shot() {
        let data = sample(1000);
        for n in [0, 1, 7, 8, 127, 128, 129, 255, 256, 999, 1000] {
            let one = content_checksum(&data[..n]);
            for split in [1, 3, 8, 13, 64, 128, 200] {
                let mut h = ContentHasher::new();
                for piece in data[..n].chunks(split) {
                    h.update(piece);
                }
                assert_eq!(h.finish(), one, "n={n} split={split}");
                assert_eq!(h.len(), n as u64);
            }
        }
    }

    #[test]
    fn zeros_fed_without_memory_equal_zeros_fed_as_bytes() {
        let zeros = vec![0u8; 1000];
        let data = sample(300);
        for prefix in [0, 1, 127, 128, 130, 300] {
            for n in [0, 1, 100, 127, 128, 129, 256, 700, 1000] {
                let mut bytes = ContentHasher::new();
                bytes.update(&data[..prefix]);
                bytes.update(&zeros[..n]);
                bytes.update(&data[..prefix]);
                let mut fast = ContentHasher::new();
                fast.update(&data[..prefix]);
                fast.update_zeros(n as u64);
                fast.update(&data[..prefix]);
                assert_eq!(fast.finish(), bytes.finish(), "prefix={prefix} n={n}");
                assert_eq!(fast.len(), bytes.len());
            }
        }
    }

    #[test]
    fn every_single_bit_flip_changes_the_checksum() {
        let data = sample(200);
        let base = content_checksum(&data);
        for byte in 0..data.len() {
            for bit in 0..8 {
                let mut d = data.clone();
                d[byte] ^= 1 << bit;
                assert_ne!(content_checksum(&d), base, "byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn length_matters_also_for_zero_bytes() {
        let zeros = [0u8; 100];
        let sums: Vec<u64> = (0..=100).map(|n| content_checksum(&zeros[..n])).collect();
        let mut unique = sums.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), sums.len());
    }

    #[test]
    fn swapped_words_are_detected() {
        // Words of one step, of one lane in different blocks, and whole pages.
        let data = sample(3 * 4096);
        for (x, y, len) in [
            (0, 64, 8),
            (0, 128, 8),
            (8, 1024, 8),
            (0, 4096, 4096),
            (4096, 8192, 4096),
        ] {
            let mut swapped = data.clone();
            swapped[x..x + len].copy_from_slice(&data[y..y + len]);
            swapped[y..y + len].copy_from_slice(&data[x..x + len]);
            assert_ne!(
                content_checksum(&data),
                content_checksum(&swapped),
                "{x} <-> {y}"
            );
        }
    }

    /// The algorithm as the module docs state it, written plainly.
    fn reference(b: &[u8]) -> u64 {
        let mut a = SEED;
        let mut padded = b.to_vec();
        padded.resize(b.len().div_ceil(128) * 128, 0);
        for block in padded.chunks(128) {
            let w: Vec<u64> = block
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            for i in 0..8 {
                a[i] = (a[i] ^ w[i])
                    .wrapping_mul(K)
                    .rotate_left(31)
                    .wrapping_add(w[8 + i]);
            }
        }
        let mut h = (b.len() as u64).wrapping_mul(K2);
        for lane in a {
            h = (h ^ mix(lane)).wrapping_mul(K).rotate_left(27);
        }
        mix(h)
    }

    #[test]
    fn matches_the_documented_algorithm() {
        let data = sample(700);
        for n in 0..data.len() {
            assert_eq!(content_checksum(&data[..n]), reference(&data[..n]), "n={n}");
        }
    }

    #[test]
    fn values_are_stable_across_releases() {
        // Images carry these values; changing the algorithm needs a new FORMAT_VERSION.
        assert_eq!(content_checksum(b""), 0x97f2810416e94684);
        assert_eq!(content_checksum(b"amdgpu"), 0x76b4cefba5557587);
        assert_eq!(content_checksum(&[0u8; 4096]), 0xe03472e54478f2dd);
        let ramp: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        assert_eq!(content_checksum(&ramp), 0xc0ee8acd57e8891b);
    }
}
