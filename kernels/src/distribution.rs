//! Kernels that turn one row of logits into a distribution or a statistic of
//! it: log-sum-exp, softmax, log-softmax, entropy.

/// The maximum of `logits`, `NaN` if any entry is `NaN`, `-inf` if empty.
fn max_nan_propagating(logits: &[f32]) -> f64 {
    let mut m = f64::NEG_INFINITY;
    for &x in logits {
        let x = f64::from(x);
        if x.is_nan() {
            return f64::NAN;
        }
        if x > m {
            m = x;
        }
    }
    m
}

/// `ln(sum(exp(logits)))`, computed stably (shifted by the maximum).
///
/// An empty slice or a slice of `-inf` gives `-inf`; any `NaN` gives `NaN`.
pub fn logsumexp(logits: &[f32]) -> f32 {
    let m = max_nan_propagating(logits);
    if m.is_nan() {
        return f32::NAN;
    }
    if m.is_infinite() {
        // All masked (or empty): -inf. A +inf logit dominates: +inf.
        return m as f32;
    }
    let s: f64 = logits.iter().map(|&x| (f64::from(x) - m).exp()).sum();
    (m + s.ln()) as f32
}

/// Numerically stable softmax of one row.
///
/// Subtracting the maximum before exponentiating keeps `exp` from
/// overflowing. Like torch, a row whose maximum is not finite (all `-inf`, a
/// `+inf`, or a `NaN`) yields `NaN` where the arithmetic does.
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let m = max_nan_propagating(logits);
    let exps: Vec<f64> = logits.iter().map(|&x| (f64::from(x) - m).exp()).collect();
    let s: f64 = exps.iter().sum();
    exps.iter().map(|&e| (e / s) as f32).collect()
}

/// Numerically stable log-softmax of one row: `x - logsumexp(x)`.
///
/// Masked (`-inf`) entries stay `-inf`.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let lse = f64::from(logsumexp(logits));
    logits
        .iter()
        .map(|&x| (f64::from(x) - lse) as f32)
        .collect()
}

/// Shannon entropy, in nats, of `softmax(logits)`.
///
/// Computed as `ln Z - sum(p_i * (x_i - m))` with `m` the maximum and `Z` the
/// shifted partition function, which avoids `log(0)` on masked entries
/// (they contribute 0). An empty row has entropy 0; a `NaN` or `+inf` logit
/// gives `NaN`.
pub fn entropy(logits: &[f32]) -> f32 {
    if logits.is_empty() {
        return 0.0;
    }
    let m = max_nan_propagating(logits);
    if !m.is_finite() {
        return f32::NAN;
    }
    let mut z = 0.0f64;
    let mut weighted = 0.0f64;
    for &x in logits {
        let d = f64::from(x) - m;
        let e = d.exp();
        if e > 0.0 {
            z += e;
            weighted += e * d;
        }
    }
    let h = z.ln() - weighted / z;
    // Rounding can leave a tiny negative value for one-hot rows.
    h.max(0.0) as f32
}

/// [`entropy`] divided by `ln V`, `V = logits.len()`, so that 0 means one-hot
/// and 1 means uniform over the whole row (masked entries included in `V`).
///
/// Rows with `V <= 1` have normalized entropy 0.
pub fn normalized_entropy(logits: &[f32]) -> f32 {
    if logits.len() <= 1 {
        return 0.0;
    }
    let h = f64::from(entropy(logits));
    (h / (logits.len() as f64).ln()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn softmax_matches_hand_computed_values() {
        // exp(0), exp(1), exp(2) = 1, 2.718281828, 7.389056099; sum 11.107337927
        let p = softmax(&[0.0, 1.0, 2.0]);
        let want = [0.090_030_57, 0.244_728_47, 0.665_240_96];
        for (got, want) in p.iter().zip(want) {
            assert!(close(*got, want, 1e-7), "{got} vs {want}");
        }
    }

    #[test]
    fn softmax_is_shift_invariant_and_does_not_overflow() {
        let p = softmax(&[1000.0, 1001.0, 1002.0]);
        let q = softmax(&[0.0, 1.0, 2.0]);
        for (a, b) in p.iter().zip(&q) {
            assert!(close(*a, *b, 1e-7), "{a} vs {b}");
        }
        let p = softmax(&[-1000.0, 0.0]);
        assert_eq!(p, vec![0.0, 1.0]);
    }

    #[test]
    fn softmax_gives_masked_entries_zero() {
        let p = softmax(&[f32::NEG_INFINITY, 0.0, 0.0]);
        assert_eq!(p, vec![0.0, 0.5, 0.5]);
    }

    #[test]
    fn softmax_of_empty_and_all_masked_rows() {
        assert!(softmax(&[]).is_empty());
        assert!(softmax(&[f32::NEG_INFINITY; 3]).iter().all(|p| p.is_nan()));
    }

    #[test]
    fn log_softmax_matches_hand_computed_values() {
        // logsumexp(0, ln 3) = ln 4
        let l = log_softmax(&[0.0, 3f32.ln(), f32::NEG_INFINITY]);
        assert!(close(l[0], -(4f32.ln()), 1e-6), "{}", l[0]);
        assert!(close(l[1], (0.75f32).ln(), 1e-6), "{}", l[1]);
        assert_eq!(l[2], f32::NEG_INFINITY);
    }

    #[test]
    fn logsumexp_edge_cases() {
        assert!(close(logsumexp(&[0.0, 0.0]), 2f32.ln(), 1e-7));
        assert!(close(logsumexp(&[500.0, 500.0]), 500.0 + 2f32.ln(), 1e-4));
        assert_eq!(logsumexp(&[]), f32::NEG_INFINITY);
        assert_eq!(logsumexp(&[f32::NEG_INFINITY]), f32::NEG_INFINITY);
        assert!(logsumexp(&[0.0, f32::NAN]).is_nan());
    }

    #[test]
    fn entropy_matches_hand_computed_values() {
        // Uniform over 4: ln 4.
        assert!(close(entropy(&[3.0; 4]), 4f32.ln(), 1e-6));
        // p = (0.75, 0.25): -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.562335145
        assert!(close(entropy(&[3f32.ln(), 0.0]), 0.562_335_1, 1e-6));
        // Masked entries contribute nothing.
        assert!(close(
            entropy(&[3f32.ln(), 0.0, f32::NEG_INFINITY]),
            0.562_335_1,
            1e-6
        ));
        // One-hot (in f32 terms) has zero entropy.
        assert!(close(entropy(&[0.0, -200.0, -200.0]), 0.0, 1e-6));
        assert_eq!(entropy(&[]), 0.0);
        assert!(entropy(&[0.0, f32::NAN]).is_nan());
    }

    #[test]
    fn normalized_entropy_is_in_unit_range() {
        assert!(close(normalized_entropy(&[1.0; 7]), 1.0, 1e-6));
        // 0.562335145 / ln 3 = 0.511857...
        assert!(close(
            normalized_entropy(&[3f32.ln(), 0.0, f32::NEG_INFINITY]),
            0.562_335_1 / 3f32.ln(),
            1e-6
        ));
        assert_eq!(normalized_entropy(&[5.0]), 0.0);
        assert_eq!(normalized_entropy(&[]), 0.0);
    }
}
