//! Temperature / top-k / top-p sampling of one row with a per-request seed:
//! the CPU reference of `cuda/sampling.cu`.
//!
//! The rules are chosen so a parallel kernel can reproduce them exactly:
//! - the uniform draw comes from a counter-based generator,
//!   [`uniform`]`(seed, step)`, so no generator state lives on the device and
//!   a request's draws do not depend on what it was batched with;
//! - candidates are ranked by the 64-bit key [`rank_key`] (larger scaled
//!   logit first, then lower id), a total order a kernel can binary-search;
//! - top-k keeps every token tied with the k-th (vLLM's threshold mask);
//! - top-p drops the longest run of lowest-ranked candidates whose mass is
//!   `<= 1 - top_p`, never the best one (vLLM's ascending cumulative sum);
//! - the draw walks the survivors in id order: the first whose cumulative
//!   weight exceeds `u * total` wins (a prefix sum, in parallel).

/// Temperatures below this are greedy (vLLM's `_SAMPLING_EPS`).
pub const GREEDY_EPS: f32 = 1e-5;

/// The knobs of one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleParams {
    /// Logits are divided by it; below [`GREEDY_EPS`] sampling is argmax.
    pub temperature: f32,
    /// Keep the `top_k` best (0: off).
    pub top_k: u32,
    /// Nucleus mass in `(0, 1]` (1: off).
    pub top_p: f32,
}

/// Why a row cannot be sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleError {
    /// A `+inf` logit: softmax is undefined.
    InfiniteLogit(u32),
    /// No finite logit at all (empty, all masked or all `NaN`).
    NoFiniteLogits,
}

/// SplitMix64 finalizer: a bijective, well-mixed hash of 64 bits.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The draw of request `seed` at decode step `step`, uniform in `[0, 1)`
/// with 53 random bits (the same integer arithmetic runs on the device).
pub fn uniform(seed: u64, step: u64) -> f64 {
    let z = mix64(seed ^ mix64(step.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    (z >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Maps an `f32` to a `u32` whose unsigned order is the float order.
pub fn orderable(x: f32) -> u32 {
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Rank key: larger is better (larger value, then lower id).
pub fn rank_key(value: f32, id: u32) -> u64 {
    (u64::from(orderable(value)) << 32) | u64::from(u32::MAX - id)
}

/// Samples one token from `row` (see the module docs for the rules).
pub fn sample_row(row: &[f32], p: &SampleParams, seed: u64, step: u64) -> Result<u32, SampleError> {
    if let Some(i) = row.iter().position(|&x| x == f32::INFINITY) {
        return Err(SampleError::InfiniteLogit(i as u32));
    }
    let greedy = p.temperature.is_nan() || p.temperature < GREEDY_EPS;
    // (id, scaled logit) of the finite entries.
    let mut cands: Vec<(u32, f32)> = row
        .iter()
        .enumerate()
        .filter(|(_, x)| x.is_finite())
        .map(|(i, &x)| (i as u32, if greedy { x } else { x / p.temperature }))
        .collect();
    if cands.is_empty() {
        return Err(SampleError::NoFiniteLogits);
    }
    cands.sort_unstable_by_key(|&(i, v)| std::cmp::Reverse(rank_key(v, i)));
    if greedy {
        return Ok(cands[0].0);
    }
    let k = p.top_k as usize;
    if k > 0 && k < cands.len() {
        // Compared as orderable keys (as the kernel does): -0.0 < +0.0.
        let threshold = orderable(cands[k - 1].1);
        let kept = cands
            .iter()
            .take_while(|c| orderable(c.1) >= threshold)
            .count();
        cands.truncate(kept);
    }
    let m = f64::from(cands[0].1);
    let weight = |v: f32| (f64::from(v) - m).exp();
    if p.top_p < 1.0 {
        let total: f64 = cands.iter().map(|c| weight(c.1)).sum();
        let drop_mass = (1.0 - f64::from(p.top_p)) * total;
        let mut cum = 0.0;
        let mut keep = cands.len();
        for i in (1..cands.len()).rev() {
            cum += weight(cands[i].1);
            if cum <= drop_mass {
                keep = i;
            } else {
                break;
            }
        }
        cands.truncate(keep);
    }
    cands.sort_unstable_by_key(|c| c.0);
    let total: f64 = cands.iter().map(|c| weight(c.1)).sum();
    let target = uniform(seed, step) * total;
    let mut cum = 0.0;
    for c in &cands {
        cum += weight(c.1);
        if cum > target {
            return Ok(c.0);
        }
    }
    Ok(cands[cands.len() - 1].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: SampleParams = SampleParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
    };

    #[test]
    fn uniform_is_deterministic_in_range_and_spread() {
        assert_eq!(uniform(7, 3), uniform(7, 3));
        assert_ne!(uniform(7, 3), uniform(7, 4));
        assert_ne!(uniform(7, 3), uniform(8, 3));
        let n = 20_000u64;
        let draws: Vec<f64> = (0..n).map(|s| uniform(42, s)).collect();
        assert!(draws.iter().all(|&u| (0.0..1.0).contains(&u)));
        let mean = draws.iter().sum::<f64>() / n as f64;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
        let below = draws.iter().filter(|&&u| u < 0.25).count() as f64 / n as f64;
        assert!((below - 0.25).abs() < 0.015, "{below}");
    }

    #[test]
    fn rank_key_orders_values_then_low_ids() {
        let mut v = [(3u32, -1.5f32), (1, 2.0), (0, 2.0), (2, -0.0), (4, 0.0)];
        v.sort_by_key(|&(i, x)| std::cmp::Reverse(rank_key(x, i)));
        assert_eq!(v.map(|c| c.0), [0, 1, 4, 2, 3]);
        assert!(orderable(-3.0) < orderable(-2.0) && orderable(-0.5) < orderable(0.5));
    }

    #[test]
    fn greedy_and_errors() {
        let g = SampleParams {
            temperature: 0.0,
            ..PLAIN
        };
        assert_eq!(sample_row(&[1.0, 3.0, 3.0, f32::NAN], &g, 0, 0), Ok(1));
        assert_eq!(
            sample_row(&[1.0, f32::INFINITY], &PLAIN, 0, 0),
            Err(SampleError::InfiniteLogit(1))
        );
        assert_eq!(
            sample_row(&[f32::NAN, f32::NEG_INFINITY], &PLAIN, 0, 0),
            Err(SampleError::NoFiniteLogits)
        );
    }

    #[test]
    fn top_k_and_top_p_restrict_the_support() {
        // probs 0.5, 0.25, 0.125, 0.125 (ids 0..4)
        let row: Vec<f32> = [0.5f64, 0.25, 0.125, 0.125]
            .iter()
            .map(|p| p.ln() as f32)
            .collect();
        let k2 = SampleParams { top_k: 2, ..PLAIN };
        let p06 = SampleParams {
            top_p: 0.6,
            ..PLAIN
        };
        let mut seen_k = [0u32; 4];
        let mut seen_p = [0u32; 4];
        for step in 0..4000 {
            seen_k[sample_row(&row, &k2, 5, step).unwrap() as usize] += 1;
            seen_p[sample_row(&row, &p06, 5, step).unwrap() as usize] += 1;
        }
        assert_eq!((seen_k[2], seen_k[3]), (0, 0));
        // Over {0, 1}: 2/3 and 1/3.
        assert!((f64::from(seen_k[0]) / 4000.0 - 2.0 / 3.0).abs() < 0.03);
        // top_p 0.6: the tail {2, 3} has mass 0.25 <= 0.4, id 1 would push it to 0.5.
        assert_eq!((seen_p[2], seen_p[3]), (0, 0));
        assert!(seen_p[1] > 0);
    }

    #[test]
    fn top_k_keeps_ties_at_the_cut() {
        let row = [2.0, 1.0, 1.0, 0.0];
        let k2 = SampleParams { top_k: 2, ..PLAIN };
        let seen: std::collections::BTreeSet<u32> = (0..2000)
            .map(|s| sample_row(&row, &k2, 1, s).unwrap())
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn the_distribution_follows_softmax_over_temperature() {
        let row = [0.0f32, 2f32.ln()]; // probs 1/3, 2/3 at T = 1
        let hot = SampleParams {
            temperature: 2.0,
            ..PLAIN
        }; // probs ∝ 1, sqrt 2
        let n = 20_000;
        let ones = (0..n)
            .filter(|&s| sample_row(&row, &hot, 3, s).unwrap() == 1)
            .count() as f64
            / n as f64;
        let want = 2f64.sqrt() / (1.0 + 2f64.sqrt());
        assert!((ones - want).abs() < 0.015, "{ones} vs {want}");
    }
}
