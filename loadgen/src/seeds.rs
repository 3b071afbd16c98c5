//! Per-request seeds: every request of a run gets its own seed, derived from
//! the run's seed and the request's index, so a closed-loop client never
//! replays one fixed set of random draws and a rerun replays the same set.

/// SplitMix64's finalizer: consecutive inputs give unrelated outputs.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of request `index` in a run seeded with `run_seed`. Kept below
/// 2^53 (and within an i64) because JSON clients and servers commonly parse
/// numbers as doubles or signed integers.
pub fn request_seed(run_seed: u64, index: u64) -> u64 {
    mix(mix(run_seed) ^ index) & ((1u64 << 53) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn seeds_are_distinct_per_request_and_stable_per_run() {
        let a: Vec<u64> = (0..10_000).map(|i| request_seed(7, i)).collect();
        let distinct: HashSet<_> = a.iter().collect();
        assert_eq!(distinct.len(), a.len());
        let again: Vec<u64> = (0..10_000).map(|i| request_seed(7, i)).collect();
        assert_eq!(a, again);
        assert_ne!(request_seed(7, 0), request_seed(8, 0));
        assert!(a.iter().all(|&s| s < 1 << 53));
    }
}
