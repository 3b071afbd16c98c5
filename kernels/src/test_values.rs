//! Deterministic test inputs without a dependency: a small LCG.

/// `n` values uniform in `[-amplitude, amplitude)`, the same for a seed.
pub(crate) fn values(n: usize, seed: u32, amplitude: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * amplitude
        })
        .collect()
}
