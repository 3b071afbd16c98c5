//! The per-step routing signals of one row of logits, as one record:
//! maximum, argmax, max probability, log-sum-exp, entropy (plain and
//! normalized) and the top-k logits.
//!
//! [`routing_signals`] is the reference: it calls the simple two-pass
//! functions of this crate. [`routing_signals_one_pass`] is the algorithm the
//! CUDA kernel (`cuda/signals.cu`) runs: every thread folds a strided slice
//! of the row into an [`OnlineState`] (running max, partition sum and
//! entropy numerator, rescaled when the max moves), then the states merge.
//! Keeping a CPU copy of that algebra lets the one-pass method be tested here
//! against the reference, without a GPU.

use crate::distribution::{entropy, logsumexp, normalized_entropy};
use crate::selection::{argmax, top_k};

/// The signals of one row.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutingSignals {
    /// Largest non-`NaN` logit (`-inf` for an empty or all-`NaN` row).
    pub max_logit: f32,
    /// Its index (lowest on ties); `None` when the row has no non-`NaN` entry.
    pub argmax: Option<u32>,
    /// `softmax(row)[argmax]`; `NaN` where softmax is undefined.
    pub max_prob: f32,
    /// `ln(sum(exp(row)))`.
    pub logsumexp: f32,
    /// Entropy of `softmax(row)` in nats.
    pub entropy: f32,
    /// Entropy divided by `ln V`.
    pub normalized_entropy: f32,
    /// The `k` largest `(index, logit)`, descending, ties to the lower index.
    pub top_k: Vec<(u32, f32)>,
}

/// The reference: each signal from its own simple function.
pub fn routing_signals(row: &[f32], k: usize) -> RoutingSignals {
    let lse = logsumexp(row);
    let am = argmax(row);
    let max_logit = am.map_or(f32::NEG_INFINITY, |i| row[i as usize]);
    let has_nan = row.iter().any(|x| x.is_nan());
    let max_prob = if has_nan || !lse.is_finite() {
        f32::NAN
    } else {
        (f64::from(max_logit) - f64::from(lse)).exp() as f32
    };
    RoutingSignals {
        max_logit,
        argmax: am,
        max_prob,
        logsumexp: lse,
        entropy: entropy(row),
        normalized_entropy: normalized_entropy(row),
        top_k: top_k(row, k),
    }
}

/// [`OnlineState::poisoned`] bit: a `NaN` was seen.
pub const NAN_SEEN: u8 = 1;
/// [`OnlineState::poisoned`] bit: a `+inf` was seen.
pub const POS_INF_SEEN: u8 = 2;

/// What one thread of the one-pass kernel carries: with `m` the running
/// maximum, `s = sum exp(x - m)` and `w = sum exp(x - m) * (x - m)` over the
/// finite entries seen, so that `ln Z = m + ln s` and `H = ln s - w / s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OnlineState {
    /// Running maximum of the finite entries (`-inf` before any).
    pub m: f32,
    /// Partition sum relative to `m`.
    pub s: f32,
    /// Entropy numerator relative to `m`.
    pub w: f32,
    /// A `NaN` ([`NAN_SEEN`]) or `+inf` ([`POS_INF_SEEN`]) was seen: the
    /// entropy is `NaN`; log-sum-exp is `NaN` or `+inf` respectively.
    pub poisoned: u8,
}

impl Default for OnlineState {
    fn default() -> Self {
        Self {
            m: f32::NEG_INFINITY,
            s: 0.0,
            w: 0.0,
            poisoned: 0,
        }
    }
}

impl OnlineState {
    /// Folds in one logit (the kernel's per-element update).
    pub fn push(&mut self, x: f32) {
        if x.is_nan() {
            self.poisoned |= NAN_SEEN;
        } else if x == f32::INFINITY {
            self.poisoned |= POS_INF_SEEN;
        } else if x == f32::NEG_INFINITY {
            // Masked: probability 0, contributes nothing.
        } else if self.m == f32::NEG_INFINITY {
            *self = Self {
                m: x,
                s: 1.0,
                w: 0.0,
                poisoned: self.poisoned,
            };
        } else if x > self.m {
            // Rescale to the new maximum d = m - x < 0:
            // sum e^(y-x)(y-x) = e^d (w + d s); the new entry adds e^0 * 0.
            let d = self.m - x;
            let r = d.exp();
            self.w = r * (self.w + d * self.s);
            self.s = r * self.s + 1.0;
            self.m = x;
        } else {
            let d = x - self.m;
            let e = d.exp();
            self.s += e;
            self.w += e * d;
        }
    }

    /// Combines two partial states (the kernel's block reduction).
    pub fn merge(self, other: Self) -> Self {
        let poisoned = self.poisoned | other.poisoned;
        if other.m == f32::NEG_INFINITY {
            return Self { poisoned, ..self };
        }
        if self.m == f32::NEG_INFINITY {
            return Self { poisoned, ..other };
        }
        let m = self.m.max(other.m);
        let part = |st: Self| {
            let d = st.m - m;
            let r = d.exp();
            (r * st.s, r * (st.w + d * st.s))
        };
        let (s1, w1) = part(self);
        let (s2, w2) = part(other);
        Self {
            m,
            s: s1 + s2,
            w: w1 + w2,
            poisoned,
        }
    }

    /// `ln Z`; `NaN` after a `NaN`, `+inf` after a `+inf`, `-inf` when
    /// nothing finite was seen.
    pub fn logsumexp(&self) -> f32 {
        if self.poisoned & NAN_SEEN != 0 {
            f32::NAN
        } else if self.poisoned & POS_INF_SEEN != 0 {
            f32::INFINITY
        } else if self.m == f32::NEG_INFINITY {
            f32::NEG_INFINITY
        } else {
            self.m + self.s.ln()
        }
    }

    /// Entropy in nats, clamped at 0 (rounding on one-hot rows).
    pub fn entropy(&self) -> f32 {
        if self.poisoned != 0 || self.m == f32::NEG_INFINITY {
            f32::NAN
        } else {
            (self.s.ln() - self.w / self.s).max(0.0)
        }
    }
}

/// The one-pass algorithm, `threads` strided slices merged at the end, as
/// the CUDA kernel does it (f32 accumulators). Top-k comes from the same
/// total order as the reference, so it is exact.
pub fn routing_signals_one_pass(row: &[f32], k: usize, threads: usize) -> RoutingSignals {
    let threads = threads.max(1);
    let mut states = vec![OnlineState::default(); threads];
    for (i, &x) in row.iter().enumerate() {
        states[i % threads].push(x);
    }
    // Pairwise tree, like a shared-memory reduction.
    let mut width = threads;
    while width > 1 {
        let half = width.div_ceil(2);
        for t in 0..width / 2 {
            states[t] = states[t].merge(states[t + half]);
        }
        width = half;
    }
    let st = states[0];
    let mut top = top_k(row, k.max(1));
    let (max_logit, am) = match top.first() {
        Some(&(i, v)) => (v, Some(i)),
        None => (f32::NEG_INFINITY, None),
    };
    let (lse, h) = if row.is_empty() {
        (f32::NEG_INFINITY, 0.0)
    } else {
        (st.logsumexp(), st.entropy())
    };
    let max_prob = if st.poisoned != 0 || st.m == f32::NEG_INFINITY {
        f32::NAN
    } else {
        1.0 / st.s
    };
    let normalized = if row.len() <= 1 {
        0.0
    } else {
        h / (row.len() as f32).ln()
    };
    RoutingSignals {
        max_logit,
        argmax: am,
        max_prob,
        logsumexp: lse,
        entropy: h,
        normalized_entropy: normalized,
        top_k: {
            top.truncate(k);
            top
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Relative difference, floored at 0.01 in the denominator.
    pub(crate) fn rel(a: f32, b: f32) -> f32 {
        (a - b).abs() / b.abs().max(1e-2)
    }

    /// Asserts that log-sum-exp, entropy, normalized entropy and max
    /// probability (in that order) are within `tol` relative of `want`'s.
    pub(crate) fn assert_close(got: [f32; 4], want: &RoutingSignals, tol: f32, case: &str) {
        let want = [
            want.logsumexp,
            want.entropy,
            want.normalized_entropy,
            want.max_prob,
        ];
        for ((a, b), what) in got
            .iter()
            .zip(want)
            .zip(["lse", "entropy", "normalized", "max prob"])
        {
            assert!(rel(*a, b) < tol, "{what}: {a} vs {b} ({case})");
        }
    }

    /// A hashed test row of `n` logits in `[-scale, scale)`.
    pub(crate) fn row(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| {
                let h = (i ^ seed).wrapping_mul(2_654_435_761).rotate_left(13);
                ((h % 20_000) as f32 / 10_000.0 - 1.0) * scale
            })
            .collect()
    }

    #[test]
    fn reference_matches_hand_computed_values() {
        // p = (0.75, 0.25): H = 0.562335145, lse = ln 4, max prob 0.75.
        let s = routing_signals(&[3f32.ln(), 0.0, f32::NEG_INFINITY], 2);
        assert_eq!(s.argmax, Some(0));
        assert!((s.max_prob - 0.75).abs() < 1e-6);
        assert!((s.logsumexp - 4f32.ln()).abs() < 1e-6);
        assert!((s.entropy - 0.562_335_1).abs() < 1e-6);
        assert_eq!(s.top_k, vec![(0, 3f32.ln()), (1, 0.0)]);
    }

    #[test]
    fn one_pass_agrees_with_the_reference_on_wide_rows() {
        for (seed, scale) in [(1u32, 1.0f32), (2, 8.0), (3, 30.0), (4, 0.01)] {
            let r = row(151_936, seed, scale);
            let want = routing_signals(&r, 8);
            for threads in [1, 7, 256, 1024] {
                let got = routing_signals_one_pass(&r, 8, threads);
                assert_eq!(got.top_k, want.top_k);
                assert_eq!(got.argmax, want.argmax);
                let got = [
                    got.logsumexp,
                    got.entropy,
                    got.normalized_entropy,
                    got.max_prob,
                ];
                assert_close(got, &want, 1e-4, &format!("seed {seed}, threads {threads}"));
            }
        }
    }

    #[test]
    fn one_pass_handles_masks_nan_and_infinities_like_the_reference() {
        let masked = [f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY, 2.0];
        let got = routing_signals_one_pass(&masked, 2, 3);
        let want = routing_signals(&masked, 2);
        assert!((got.entropy - want.entropy).abs() < 1e-6);
        assert!((got.max_prob - 0.5).abs() < 1e-6);
        assert_eq!(got.top_k, vec![(1, 2.0), (3, 2.0)]);

        for bad in [
            vec![0.0, f32::NAN, 1.0],
            vec![0.0, f32::INFINITY],
            vec![f32::NEG_INFINITY; 3],
        ] {
            let got = routing_signals_one_pass(&bad, 2, 2);
            let want = routing_signals(&bad, 2);
            assert!(got.entropy.is_nan() && want.entropy.is_nan(), "{bad:?}");
            assert!(got.max_prob.is_nan() && want.max_prob.is_nan(), "{bad:?}");
            assert_eq!(got.top_k, want.top_k);
        }
        let (got, want) = (routing_signals_one_pass(&[], 3, 4), routing_signals(&[], 3));
        assert_eq!(
            (got.argmax, got.entropy, got.logsumexp),
            (None, 0.0, f32::NEG_INFINITY)
        );
        assert_eq!(
            (want.argmax, want.entropy, want.logsumexp),
            (None, 0.0, f32::NEG_INFINITY)
        );
        assert!(got.max_prob.is_nan() && want.max_prob.is_nan());
    }

    #[test]
    fn merge_is_order_independent() {
        let r = row(1000, 9, 5.0);
        let mut a = OnlineState::default();
        let mut b = OnlineState::default();
        for &x in &r[..400] {
            a.push(x);
        }
        for &x in &r[400..] {
            b.push(x);
        }
        let ab = a.merge(b);
        let ba = b.merge(a);
        assert!((ab.logsumexp() - ba.logsumexp()).abs() < 1e-5);
        assert!((ab.entropy() - ba.entropy()).abs() < 1e-5);
        assert!((ab.entropy() - entropy(&r)).abs() < 1e-4);
    }
}
