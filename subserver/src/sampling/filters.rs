//! The filtering pipeline of random sampling, in vLLM's order and with its
//! semantics: temperature, then top-k, then top-p, then min-p.
//!
//! - **temperature**: logits are divided by it.
//! - **top-k**: keep tokens whose logit is at least the k-th largest (ties
//!   at the cut are kept, as vLLM's threshold mask does).
//! - **top-p**: over the top-k survivors' softmax, drop a token when the
//!   mass of it and every less likely token is `<= 1 - top_p` (vLLM's
//!   ascending cumulative sum); the most likely token always stays.
//! - **min-p**: drop tokens whose probability is below `min_p` times the
//!   largest probability, i.e. keep `exp(l - l_max) >= min_p`.
//!
//! Candidates are `(token id, scaled logit)`; ordering ties break towards
//! the lower id so the result is deterministic.

use std::cmp::Ordering;

use super::SamplingError;

/// A surviving token: its id and its temperature-scaled logit.
pub(crate) type Candidate = (u32, f32);

/// The knobs of the pipeline (the sampling part of `SamplingParams`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FilterParams {
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
}

/// Above this many candidates, top-p first looks for the nucleus among a
/// partial selection instead of sorting the whole vocabulary.
const FULL_SORT_MAX: usize = 2048;
/// The first partial selection size tried by top-p.
const NUCLEUS_GUESS: usize = 1024;

/// Larger logit first, then lower id. Candidates hold no NaN.
fn rank(a: &Candidate, b: &Candidate) -> Ordering {
    b.1.partial_cmp(&a.1)
        .unwrap_or(Ordering::Equal)
        .then(a.0.cmp(&b.0))
}

fn max_logit(cands: &[Candidate]) -> f32 {
    cands.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.1))
}

/// Fills `out` (cleared first) with the candidates that survive the
/// pipeline. Never leaves `out` empty on success.
pub(crate) fn filter_candidates(
    logits: &[f32],
    p: &FilterParams,
    out: &mut Vec<Candidate>,
) -> Result<(), SamplingError> {
    out.clear();
    if logits.is_empty() {
        return Err(SamplingError::EmptyLogits);
    }
    // NaN and -inf have no probability; +inf makes softmax undefined.
    for (i, &x) in logits.iter().enumerate() {
        if x == f32::INFINITY {
            return Err(SamplingError::InfiniteLogit { token: i as u32 });
        }
        if x.is_finite() {
            out.push((i as u32, x / p.temperature));
        }
    }
    if out.is_empty() {
        return Err(SamplingError::NoFiniteLogits {
            vocab: logits.len(),
        });
    }
    if p.top_k > 0 && p.top_k < out.len() {
        apply_top_k(out, p.top_k);
    }
    if p.top_p < 1.0 {
        apply_top_p(out, f64::from(p.top_p));
    }
    if p.min_p > 0.0 {
        apply_min_p(out, f64::from(p.min_p));
    }
    Ok(())
}

/// Keeps the `k` best candidates plus any tied with the k-th.
fn apply_top_k(cands: &mut Vec<Candidate>, k: usize) {
    cands.select_nth_unstable_by(k - 1, rank);
    let threshold = cands[k - 1].1;
    let mut kept = k;
    for j in k..cands.len() {
        if cands[j].1 >= threshold {
            cands.swap(kept, j);
            kept += 1;
        }
    }
    cands.truncate(kept);
}

/// Top-p (nucleus) filtering; leaves the survivors sorted by rank.
fn apply_top_p(cands: &mut Vec<Candidate>, top_p: f64) {
    let m = max_logit(cands);
    let weight = |c: &Candidate| (f64::from(c.1) - f64::from(m)).exp();
    let total: f64 = cands.iter().map(weight).sum();
    let drop_mass = 1.0 - top_p;

    // Find a prefix length `n` (in rank order) such that everything beyond
    // it is dropped: the mass beyond it is already <= 1 - top_p. Small
    // nuclei (the common case) avoid sorting 152k candidates.
    let mut n = cands.len();
    let mut beyond = 0.0f64;
    if cands.len() > FULL_SORT_MAX {
        let mut guess = NUCLEUS_GUESS;
        while guess < cands.len() {
            cands.select_nth_unstable_by(guess - 1, rank);
            let mass: f64 = cands[guess..].iter().map(weight).sum::<f64>() / total;
            if mass <= drop_mass {
                n = guess;
                beyond = mass;
                break;
            }
            guess *= 4;
        }
    }
    cands.truncate(n);
    cands.sort_unstable_by(rank);

    // vLLM: ascending cumulative mass; a token goes when it is <= 1 - p.
    let mut cum = beyond;
    let mut keep = cands.len();
    for i in (1..cands.len()).rev() {
        cum += weight(&cands[i]) / total;
        if cum <= drop_mass {
            keep = i;
        } else {
            break;
        }
    }
    cands.truncate(keep);
}

/// Keeps candidates with probability >= `min_p` x the largest probability.
fn apply_min_p(cands: &mut Vec<Candidate>, min_p: f64) {
    let m = f64::from(max_logit(cands));
    cands.retain(|c| (f64::from(c.1) - m).exp() >= min_p);
}

/// The token whose cumulative probability first exceeds `u` in `[0, 1)`,
/// walking `cands` in order. `cands` must not be empty.
pub(crate) fn draw(cands: &[Candidate], u: f64) -> u32 {
    let m = f64::from(max_logit(cands));
    let total: f64 = cands.iter().map(|c| (f64::from(c.1) - m).exp()).sum();
    let target = u * total;
    let mut cum = 0.0;
    for c in cands {
        cum += (f64::from(c.1) - m).exp();
        if cum > target {
            return c.0;
        }
    }
    // Rounding left the target at the very top: the last token.
    cands.last().map_or(0, |c| c.0)
}

/// Normalized probabilities of the candidates, by token id.
#[cfg(test)]
fn probabilities(cands: &[Candidate]) -> Vec<(u32, f64)> {
    let m = f64::from(max_logit(cands));
    let total: f64 = cands.iter().map(|c| (f64::from(c.1) - m).exp()).sum();
    let mut out: Vec<(u32, f64)> = cands
        .iter()
        .map(|c| (c.0, (f64::from(c.1) - m).exp() / total))
        .collect();
    out.sort_by_key(|&(id, _)| id);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: FilterParams = FilterParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
    };

    /// Logits whose softmax is exactly `probs` (up to float rounding).
    fn logits_of(probs: &[f64]) -> Vec<f32> {
        probs.iter().map(|p| p.ln() as f32).collect()
    }

    fn dist(logits: &[f32], p: FilterParams) -> Vec<(u32, f64)> {
        let mut out = Vec::new();
        filter_candidates(logits, &p, &mut out).unwrap();
        probabilities(&out)
    }

    fn assert_dist(got: &[(u32, f64)], want: &[(u32, f64)]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.0, w.0, "{got:?} vs {want:?}");
            assert!((g.1 - w.1).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn no_filter_is_plain_softmax() {
        let l = logits_of(&[0.1, 0.2, 0.3, 0.4]);
        assert_dist(&dist(&l, OFF), &[(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)]);
    }

    #[test]
    fn temperature_scales_logits() {
        // logits (0, ln 2): T=1 -> (1/3, 2/3); T=0.5 -> (0, ln 4) -> (1/5, 4/5).
        let l = [0.0, 2f32.ln()];
        assert_dist(
            &dist(
                &l,
                FilterParams {
                    temperature: 0.5,
                    ..OFF
                },
            ),
            &[(0, 0.2), (1, 0.8)],
        );
        // T=2 -> (0, ln sqrt 2) -> 1/(1+1.41421356), 1.41421356/(2.41421356)
        assert_dist(
            &dist(
                &l,
                FilterParams {
                    temperature: 2.0,
                    ..OFF
                },
            ),
            &[(0, 0.414_213_56), (1, 0.585_786_44)],
        );
    }

    #[test]
    fn top_k_keeps_k_best_and_ties_at_the_cut() {
        let l = logits_of(&[0.1, 0.4, 0.2, 0.3]);
        // k=2: {0.4, 0.3} renormalized: 4/7, 3/7.
        assert_dist(
            &dist(&l, FilterParams { top_k: 2, ..OFF }),
            &[(1, 4.0 / 7.0), (3, 3.0 / 7.0)],
        );
        // Tie at the cut: both 0.25 tokens stay with k=2.
        let l = logits_of(&[0.25, 0.5, 0.25]);
        assert_dist(
            &dist(&l, FilterParams { top_k: 2, ..OFF }),
            &[(0, 0.25), (1, 0.5), (2, 0.25)],
        );
        // k >= vocab is a no-op.
        assert_eq!(dist(&l, FilterParams { top_k: 3, ..OFF }).len(), 3);
    }

    #[test]
    fn top_p_follows_vllm_cumulative_rule() {
        // Sorted: 0.5, 0.3, 0.15, 0.05. Ascending cumsum: 0.05, 0.2, 0.5, 1.0.
        let l = logits_of(&[0.15, 0.5, 0.05, 0.3]);
        // p=0.75: drop cumsum <= 0.25 -> {0.05, 0.15} go; keep 0.5, 0.3 -> 5/8, 3/8.
        assert_dist(
            &dist(&l, FilterParams { top_p: 0.75, ..OFF }),
            &[(1, 0.625), (3, 0.375)],
        );
        // p=0.85: drop cumsum <= 0.15 -> only 0.05 goes.
        assert_dist(
            &dist(&l, FilterParams { top_p: 0.85, ..OFF }),
            &[(0, 0.15 / 0.95), (1, 0.5 / 0.95), (3, 0.3 / 0.95)],
        );
        // Tiny p keeps the most likely token only.
        assert_dist(&dist(&l, FilterParams { top_p: 1e-6, ..OFF }), &[(1, 1.0)]);
    }

    #[test]
    fn top_p_applies_to_the_top_k_renormalized_distribution() {
        // top_k=3 -> {0.5, 0.3, 0.15} / 0.95; ascending cumsum 0.158, 0.474, 1.
        // top_p=0.6: drop cumsum <= 0.4 -> 0.15 goes; keep 0.5, 0.3.
        let l = logits_of(&[0.15, 0.5, 0.05, 0.3]);
        assert_dist(
            &dist(
                &l,
                FilterParams {
                    top_k: 3,
                    top_p: 0.6,
                    ..OFF
                },
            ),
            &[(1, 0.625), (3, 0.375)],
        );
    }

    #[test]
    fn min_p_is_relative_to_the_most_likely_token() {
        let l = logits_of(&[0.15, 0.5, 0.05, 0.3]);
        // min_p=0.25: threshold 0.125 -> keep 0.5, 0.3, 0.15.
        assert_dist(
            &dist(&l, FilterParams { min_p: 0.25, ..OFF }),
            &[(0, 0.15 / 0.95), (1, 0.5 / 0.95), (3, 0.3 / 0.95)],
        );
        // min_p=0.5: threshold 0.25 -> keep 0.5, 0.3.
        assert_dist(
            &dist(&l, FilterParams { min_p: 0.5, ..OFF }),
            &[(1, 0.625), (3, 0.375)],
        );
        // min_p=1: only the maximum.
        assert_dist(&dist(&l, FilterParams { min_p: 1.0, ..OFF }), &[(1, 1.0)]);
    }

    #[test]
    fn masked_and_nan_logits_never_survive() {
        let l = [f32::NEG_INFINITY, 0.0, f32::NAN, 0.0];
        assert_dist(&dist(&l, OFF), &[(1, 0.5), (3, 0.5)]);
        let mut out = Vec::new();
        let err = filter_candidates(&[f32::NAN, f32::NEG_INFINITY], &OFF, &mut out).unwrap_err();
        assert_eq!(err, SamplingError::NoFiniteLogits { vocab: 2 });
        let err = filter_candidates(&[0.0, f32::INFINITY], &OFF, &mut out).unwrap_err();
        assert_eq!(err, SamplingError::InfiniteLogit { token: 1 });
        assert_eq!(
            filter_candidates(&[], &OFF, &mut out).unwrap_err(),
            SamplingError::EmptyLogits
        );
    }

    /// Straightforward top-p over a full sort, for comparison.
    fn top_p_by_full_sort(logits: &[f32], top_p: f64) -> Vec<u32> {
        let mut c: Vec<Candidate> = logits
            .iter()
            .enumerate()
            .map(|(i, &x)| (i as u32, x))
            .collect();
        c.sort_by(rank);
        let m = f64::from(c[0].1);
        let total: f64 = c.iter().map(|x| (f64::from(x.1) - m).exp()).sum();
        let mut cum = 0.0;
        let mut keep = c.len();
        for i in (1..c.len()).rev() {
            cum += (f64::from(c[i].1) - m).exp() / total;
            if cum <= 1.0 - top_p {
                keep = i;
            } else {
                break;
            }
        }
        let mut ids: Vec<u32> = c[..keep].iter().map(|x| x.0).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn top_p_over_a_large_vocabulary_matches_a_full_sort() {
        // 152k-token rows whose nucleus lies within the first partial
        // selection (peaked), needs a larger one (medium), or is most of the
        // vocabulary (flat, full sort).
        let vocab = 152_064u32;
        let spread = |scale: f32| -> Vec<f32> {
            (0..vocab)
                .map(|i| -((i.wrapping_mul(2_654_435_761) % 100_000) as f32) / scale)
                .collect()
        };
        let (peaked, medium) = (spread(200.0), spread(2_000.0));
        let flat: Vec<f32> = (0..vocab)
            .map(|i| ((i.wrapping_mul(40_503) % 1_000) as f32) / 1_000.0)
            .collect();
        for (row, top_p) in [
            (&peaked, 0.9),
            (&peaked, 0.5),
            (&medium, 0.9),
            (&flat, 0.9),
            (&flat, 0.3),
        ] {
            let mut out = Vec::new();
            filter_candidates(row, &FilterParams { top_p, ..OFF }, &mut out).unwrap();
            let mut got: Vec<u32> = out.iter().map(|c| c.0).collect();
            got.sort_unstable();
            assert_eq!(
                got,
                top_p_by_full_sort(row, f64::from(top_p)),
                "top_p {top_p}"
            );
        }
    }

    #[test]
    fn draw_walks_the_cumulative_distribution() {
        let c = [(7, 0.0f32), (3, 3f32.ln())]; // probabilities 0.25, 0.75
        assert_eq!(draw(&c, 0.0), 7);
        assert_eq!(draw(&c, 0.2499), 7);
        assert_eq!(draw(&c, 0.2501), 3);
        assert_eq!(draw(&c, 0.999_999), 3);
    }
}
