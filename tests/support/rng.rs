//! Seeded, reproducible randomness: [`Rng`] (xorshift64*) and [`seed`] for the crash runs
//! (`WARDFS_RELIABILITY_SEED` replays one), and [`noise`] for file contents that no misplaced
//! chunk can pass for.

/// xorshift64*: a seeded, reproducible random source.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    /// `len` printable bytes.
    pub fn text(&mut self, len: usize) -> String {
        (0..len)
            .map(|i| {
                if i % 64 == 63 {
                    '\n'
                } else {
                    (b'a' + (self.next() % 26) as u8) as char
                }
            })
            .collect()
    }
}

/// Returns a seed from `$WARDFS_RELIABILITY_SEED`, else from the clock.
pub fn seed() -> u64 {
    std::env::var("WARDFS_RELIABILITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// Returns `len` pseudo-random bytes (xorshift, seeded), so large files are not compressible
/// patterns and a misplaced chunk cannot go unnoticed.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
