//! The hot-path routing signals of one row of logits, in one vectorizable
//! sweep after a max pass: log-sum-exp, entropy (plain and normalized),
//! max probability and argmax. The engine computes these once per sampled
//! row on the host (the logits are copied there once per step for
//! sampling anyway), instead of a chain of tensor ops per policy.
//!
//! Why not [`crate::routing_signals`]: that reference accumulates in `f64`
//! through `f64::exp`, one element at a time; here 16 independent `f32`
//! lanes and a polynomial `exp` let the compiler vectorize the sweep. The
//! results agree with the reference to about 1e-5 relative (tested below).

/// Signals of one row (see [`row_stats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowStats {
    /// Largest non-`NaN` logit (`-inf` for an empty or all-`NaN` row).
    pub max_logit: f32,
    /// Its index, lowest on ties; `None` when no entry is non-`NaN`.
    pub argmax: Option<u32>,
    /// `ln(sum(exp(row)))`; `NaN` after a `NaN`, `+inf` after a `+inf`.
    pub logsumexp: f32,
    /// Entropy of `softmax(row)` in nats; `NaN` where softmax is undefined.
    pub entropy: f32,
    /// Entropy divided by `ln V` (0 for rows of at most one entry).
    pub normalized_entropy: f32,
    /// `softmax(row)[argmax]`; `NaN` where softmax is undefined.
    pub max_prob: f32,
}

use crate::fast_exp::exp_nonpositive;

const LANES: usize = 16;

/// Max (skipping `NaN`), its first index, and whether a `NaN` / `+inf` was seen.
/// In `LANES` independent lanes, like the sweep, so it vectorizes.
fn max_pass(row: &[f32]) -> (f32, Option<u32>, bool, bool) {
    let mut lm = [f32::NEG_INFINITY; LANES];
    let mut lnan = [false; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            lnan[l] |= c[l].is_nan();
            lm[l] = lm[l].max(c[l]); // f32::max ignores NaN
        }
    }
    let mut m = f32::NEG_INFINITY;
    let mut nan = lnan.iter().any(|&b| b);
    for &x in chunks.remainder() {
        nan |= x.is_nan();
        m = m.max(x);
    }
    let m = lm.iter().fold(m, |a, &b| a.max(b));
    // NaN never equals `m`: an all-NaN row has no argmax.
    let argmax = row.iter().position(|&x| x == m).map(|i| i as u32);
    (m, argmax, nan, m == f32::INFINITY)
}

/// `(s, w)` per lane: `s = sum e^(x-m)`, `w = sum e^(x-m) (x-m)`, so that
/// ln Z = m + ln s and H = ln s - w/s.
#[inline(always)]
fn sweep_lanes(row: &[f32], m: f32) -> ([f32; LANES], [f32; LANES]) {
    let mut s = [0.0f32; LANES];
    let mut w = [0.0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for l in 0..LANES {
            let d = c[l] - m;
            let e = exp_nonpositive(d);
            s[l] += e;
            // -inf entries give e = 0 and d = -inf: keep 0 * -inf out.
            w[l] += if e > 0.0 { e * d } else { 0.0 };
        }
    }
    for (l, &x) in chunks.remainder().iter().enumerate() {
        let d = x - m;
        let e = exp_nonpositive(d);
        s[l] += e;
        w[l] += if e > 0.0 { e * d } else { 0.0 };
    }
    (s, w)
}

/// Whether this CPU runs the AVX2 + FMA build of the sweep (8-wide;
/// the x86-64 baseline the binary is built for is 4-wide SSE2).
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// # Safety
/// The CPU must have AVX2 and FMA ([`has_avx2`]).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)] // target_feature: callable only where the CPU has them.
#[target_feature(enable = "avx2,fma")]
unsafe fn sweep_avx2(row: &[f32], m: f32) -> ([f32; LANES], [f32; LANES]) {
    sweep_lanes(row, m)
}

/// The exp sweep, on the widest vectors this CPU has that the build knows.
fn sweep(row: &[f32], m: f32) -> ([f32; LANES], [f32; LANES]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        #[allow(unsafe_code)]
        // SAFETY: the CPU has the features the function is compiled for
        // (checked just above); its body is plain safe code.
        return unsafe { sweep_avx2(row, m) };
    }
    sweep_lanes(row, m)
}

/// The signals of one row, in a max pass and one exp sweep.
pub fn row_stats(row: &[f32]) -> RowStats {
    let (m, argmax, nan, pos_inf) = max_pass(row);
    let v = row.len();
    let norm = |h: f32| {
        if v <= 1 {
            0.0
        } else {
            h / (v as f32).ln()
        }
    };
    if v == 0 {
        return RowStats {
            max_logit: f32::NEG_INFINITY,
            argmax: None,
            logsumexp: f32::NEG_INFINITY,
            entropy: 0.0,
            normalized_entropy: 0.0,
            max_prob: f32::NAN,
        };
    }
    if nan || pos_inf || m == f32::NEG_INFINITY {
        let lse = if nan {
            f32::NAN
        } else if pos_inf {
            f32::INFINITY
        } else {
            f32::NEG_INFINITY
        };
        return RowStats {
            max_logit: m,
            argmax,
            logsumexp: lse,
            entropy: f32::NAN,
            normalized_entropy: f32::NAN,
            max_prob: f32::NAN,
        };
    }
    let (s, w) = sweep(row, m);
    let s: f64 = s.iter().map(|&x| f64::from(x)).sum();
    let w: f64 = w.iter().map(|&x| f64::from(x)).sum();
    let h = (s.ln() - w / s).max(0.0) as f32;
    RowStats {
        max_logit: m,
        argmax,
        logsumexp: (f64::from(m) + s.ln()) as f32,
        entropy: h,
        normalized_entropy: norm(h),
        max_prob: (1.0 / s) as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing_signals;
    use crate::signals::tests::{assert_close, row};

    #[test]
    fn the_vector_sweep_matches_the_baseline_one() {
        let r = row(49_153, 11, 6.0);
        let m = r.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let (s0, w0) = sweep_lanes(&r, m);
        let (s1, w1) = sweep(&r, m);
        for l in 0..LANES {
            assert!(
                (s0[l] - s1[l]).abs() <= 1e-5 * s0[l].abs().max(1.0),
                "lane {l}"
            );
            assert!(
                (w0[l] - w1[l]).abs() <= 1e-5 * w0[l].abs().max(1.0),
                "lane {l}"
            );
        }
    }

    #[test]
    fn exp_matches_std_on_the_shifted_range() {
        let mut worst = 0f32;
        for i in 0..=87_000 {
            let x = -(i as f32) / 1000.0;
            let (got, want) = (exp_nonpositive(x), x.exp());
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-200.0), 0.0);
    }

    #[test]
    fn agrees_with_the_reference_on_wide_rows() {
        for (n, seed, scale) in [
            (49_152, 1u32, 1.0f32),
            (151_936, 2, 8.0),
            (151_936, 3, 30.0),
            (1000, 4, 0.01),
            (17, 5, 3.0),
        ] {
            let r = row(n, seed, scale);
            let want = routing_signals(&r, 1);
            let got = row_stats(&r);
            assert_eq!(got.argmax, want.argmax);
            assert_eq!(got.max_logit, want.max_logit);
            let got = [
                got.logsumexp,
                got.entropy,
                got.normalized_entropy,
                got.max_prob,
            ];
            assert_close(got, &want, 1e-5, &format!("n {n}, seed {seed}"));
        }
    }

    #[test]
    fn masks_nan_infinities_and_ties_like_the_reference() {
        let masked = [f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY, 2.0];
        let got = row_stats(&masked);
        let want = routing_signals(&masked, 1);
        assert!((got.entropy - want.entropy).abs() < 1e-6);
        assert!((got.max_prob - 0.5).abs() < 1e-6);
        assert_eq!(got.argmax, Some(1), "ties go to the lowest index");
        for bad in [
            vec![0.0, f32::NAN, 1.0],
            vec![0.0, f32::INFINITY],
            vec![f32::NEG_INFINITY; 3],
        ] {
            let got = row_stats(&bad);
            let want = routing_signals(&bad, 1);
            assert!(got.entropy.is_nan() && want.entropy.is_nan(), "{bad:?}");
            assert!(got.max_prob.is_nan() && want.max_prob.is_nan(), "{bad:?}");
            assert_eq!(got.argmax, want.argmax, "{bad:?}");
            assert!(
                got.logsumexp == want.logsumexp
                    || (got.logsumexp.is_nan() && want.logsumexp.is_nan()),
                "{bad:?}"
            );
        }
        assert_eq!(row_stats(&[f32::NAN, f32::NAN]).argmax, None);
        let empty = row_stats(&[]);
        assert_eq!((empty.argmax, empty.entropy), (None, 0.0));
        let uniform = row_stats(&[0.5; 64]);
        assert!((uniform.normalized_entropy - 1.0).abs() < 1e-6);
    }
}
