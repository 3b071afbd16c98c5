//! Reproducible per-token draws: a uniform number from (request seed,
//! position, stream), independent of batching and timing, so a seeded run
//! routes the same way alone or under load.

/// A uniform draw in `[0, 1)`.
pub fn uniform(seed: u64, position: usize, stream: u64) -> f64 {
    let mut x = seed
        ^ (position as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ stream.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    // splitmix64 finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_deterministic_and_roughly_uniform() {
        assert_eq!(uniform(1, 2, 3), uniform(1, 2, 3));
        let n = 100_000;
        let below = (0..n).filter(|&i| uniform(42, i, 0) < 0.35).count();
        let share = below as f64 / n as f64;
        assert!((share - 0.35).abs() < 0.01, "share {share}");
    }
}
