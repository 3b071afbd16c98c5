//! From an estimate to a decision: the B table for concurrency 1..=N_max, its predicted
//! throughput beside the applied table's (both under the new estimate), and hysteresis.
//!
//! The gain of a proposal is the largest relative gain over the concurrencies: at each `n`
//! the chain predicts the throughput of the new B*(n) and of the applied B(n), both under the
//! *new* estimate. B*(n) is optimal under that estimate, so the gain is never negative; noise
//! in P moves B* only between near-equal vectors, whose gain stays below `min_gain_percent`,
//! so B does not flap. A change of routing moves B* to a vector that is worth pushing.

use serde::Serialize;
use tuner::metrics::MetricsEstimate;
use tuner::{best_table, predict_with, SearchOptions, TunerError};

/// What the tune loop requires and allows (the resource's `spec.tuning`, resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct TuneSettings {
    /// Push only when the predicted gain exceeds this many percent.
    pub min_gain_percent: f64,
    /// Fewest routing decisions per model in a window.
    pub min_decisions: f64,
    /// Fewest steps at a batch size for a latency point.
    pub min_latency_samples: f64,
    /// Slot width of the chain, ms.
    pub delta_ms: f64,
}

impl Default for TuneSettings {
    fn default() -> Self {
        TuneSettings {
            min_gain_percent: 2.0,
            min_decisions: 500.0,
            min_latency_samples: 20.0,
            delta_ms: 0.1,
        }
    }
}

/// A B table for concurrency 1..=N_max with the chain's predictions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proposal {
    /// `table[m][n - 1]`: B of model m at concurrency n (the subserver's admin format).
    pub table: Vec<Vec<usize>>,
    /// Predicted output tokens/s of the new table at each concurrency.
    pub predicted_tok_s: Vec<f64>,
    /// Predicted output tokens/s of the applied table at each concurrency (under the same
    /// estimate); `None` where it deadlocks or none is applied.
    pub applied_tok_s: Vec<Option<f64>>,
    /// Largest relative gain over the concurrencies, percent (infinite when the applied table
    /// deadlocks somewhere or none is known).
    pub gain_percent: f64,
    /// The concurrency of that gain.
    pub gain_at: usize,
}

/// What to do with a proposal.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Push the table: the gain exceeds the hysteresis, or nothing is applied yet.
    Push(Proposal),
    /// Keep the applied table: the gain is within the hysteresis.
    Keep(Proposal),
}

/// B of model `m` at concurrency `n` under `table`, as the subserver reads it: the entry at
/// `n - 1`, the last one beyond the list, clamped to `1..=n`.
pub fn threshold_at(table: &[Vec<usize>], m: usize, n: usize) -> usize {
    let list = &table[m];
    let b = list
        .get(n.saturating_sub(1))
        .or(list.last())
        .copied()
        .unwrap_or(1);
    b.clamp(1, n.max(1))
}

/// Computes the B table for concurrency `1..=max_concurrency` from `estimate` and decides
/// whether it is worth pushing over `applied` (`None`: nothing known to be applied).
pub fn decide(
    estimate: &MetricsEstimate,
    max_concurrency: usize,
    applied: Option<&[Vec<usize>]>,
    settings: &TuneSettings,
) -> Result<Decision, TunerError> {
    let models = estimate.names.len();
    let inputs = estimate.to_inputs(None, settings.delta_ms, Some(1))?;
    let concurrencies: Vec<usize> = (1..=max_concurrency.max(1)).collect();
    let options = SearchOptions {
        threads: 1,
        ..SearchOptions::default()
    };
    let results = best_table(&inputs, &concurrencies, &options)?;
    let mut table = vec![Vec::with_capacity(concurrencies.len()); models];
    let mut predicted = Vec::with_capacity(concurrencies.len());
    for r in &results {
        for (m, &b) in r.best.thresholds.iter().enumerate() {
            table[m].push(b);
        }
        predicted.push(r.best.throughput_tok_s);
    }
    let applied = applied.filter(|t| t.len() == models && t.iter().all(|l| !l.is_empty()));
    let mut applied_tok_s = Vec::with_capacity(concurrencies.len());
    let (mut gain_percent, mut gain_at) = (0.0_f64, 1);
    for (i, &n) in concurrencies.iter().enumerate() {
        let old = match applied {
            Some(t) => {
                let vector: Vec<usize> = (0..models).map(|m| threshold_at(t, m, n)).collect();
                match predict_with(&inputs.with_concurrency(n)?, &vector, &options.solve) {
                    Ok(p) => Some(p.throughput_tok_s),
                    Err(TunerError::Infeasible { .. }) => None,
                    Err(other) => return Err(other),
                }
            }
            None => None,
        };
        let gain = match old {
            Some(old) if old > 0.0 => 100.0 * (predicted[i] / old - 1.0),
            _ => f64::INFINITY,
        };
        if gain > gain_percent {
            (gain_percent, gain_at) = (gain, n);
        }
        applied_tok_s.push(old);
    }
    let proposal = Proposal {
        table,
        predicted_tok_s: predicted,
        applied_tok_s,
        gain_percent,
        gain_at,
    };
    Ok(if proposal.gain_percent > settings.min_gain_percent {
        Decision::Push(proposal)
    } else {
        Decision::Keep(proposal)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tuner::StepLatency;

    fn estimate(p: f64) -> MetricsEstimate {
        MetricsEstimate {
            names: vec!["quick".into(), "reference".into()],
            transition: vec![vec![1.0 - p, p], vec![1.0, 0.0]],
            decisions: vec![10_000.0, 10_000.0 * p],
            credit: vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            latency: vec![StepLatency::Constant(6.0), StepLatency::Constant(27.9)],
            latency_samples: vec![1000.0, 1000.0],
            concurrency: Some(8),
        }
    }

    #[test]
    fn threshold_at_reads_like_the_subserver() {
        let t = vec![vec![1, 2, 5], vec![3]];
        assert_eq!(threshold_at(&t, 0, 1), 1);
        assert_eq!(threshold_at(&t, 0, 3), 3, "clamped to n");
        assert_eq!(threshold_at(&t, 0, 9), 5, "beyond the list: the last entry");
        assert_eq!(threshold_at(&t, 1, 2), 2);
    }

    #[test]
    fn nothing_applied_pushes_the_optimal_table() {
        let d = decide(&estimate(0.35), 8, None, &TuneSettings::default()).unwrap();
        let Decision::Push(p) = d else {
            panic!("expected a push, got {d:?}")
        };
        assert_eq!(p.table[0].len(), 8);
        assert!(p.gain_percent.is_infinite());
        // N = 1, worked by hand: each small step (6 ms) commits a token,
        // except that with p = 0.35 its token is dropped and the large model
        // (27.9 ms) writes that position: one token per 6 + 0.35 × 27.9 ms.
        let by_hand = 1000.0 / (6.0 + 0.35 * 27.9);
        assert!(
            (p.predicted_tok_s[0] / by_hand - 1.0).abs() < 1e-3,
            "N=1: {} tok/s, by hand {by_hand}",
            p.predicted_tok_s[0]
        );
        // N = 8: the pushed vector is the best of every vector with B <= 8
        // under the chain, found by trying them all rather than by the search.
        let inputs = estimate(0.35)
            .to_inputs(None, 0.1, Some(1))
            .unwrap()
            .with_concurrency(8)
            .unwrap();
        let (brute, brute_tok_s) = (1..=8)
            .flat_map(|a| (1..=8).map(move |b| vec![a, b]))
            .filter_map(|v| {
                tuner::predict(&inputs, &v)
                    .ok()
                    .map(|r| (v, r.throughput_tok_s))
            })
            .fold(
                (vec![], 0.0),
                |best, (v, t)| if t > best.1 { (v, t) } else { best },
            );
        let chosen = vec![p.table[0][7], p.table[1][7]];
        let chosen_tok_s = tuner::predict(&inputs, &chosen).unwrap().throughput_tok_s;
        assert!(
            chosen_tok_s >= brute_tok_s * (1.0 - 1e-9),
            "pushed {chosen:?} ({chosen_tok_s}), the best is {brute:?} ({brute_tok_s})"
        );
        assert!((p.predicted_tok_s[7] / brute_tok_s - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_same_routing_keeps_the_table_and_a_real_change_pushes() {
        let settings = TuneSettings::default();
        let Decision::Push(at_02) = decide(&estimate(0.2), 8, None, &settings).unwrap() else {
            panic!()
        };
        // Re-estimating the same p (or a near one: sampling noise) keeps the table.
        for p in [0.2, 0.21, 0.19] {
            match decide(&estimate(p), 8, Some(&at_02.table), &settings).unwrap() {
                Decision::Keep(k) => assert!(k.gain_percent <= 2.0, "p={p}: {k:?}"),
                other => panic!("p={p}: expected keep, got {other:?}"),
            }
        }
        // p = 0.6 needs another table, and says how much it gains.
        match decide(&estimate(0.6), 8, Some(&at_02.table), &settings).unwrap() {
            Decision::Push(p) => {
                assert!(p.gain_percent > 2.0, "{p:?}");
                assert_ne!(p.table, at_02.table);
                // The stated gain is the largest of the per-concurrency gains
                // (both sides checked: neither larger nor smaller), at `gain_at`.
                let gains: Vec<f64> = p
                    .predicted_tok_s
                    .iter()
                    .zip(&p.applied_tok_s)
                    .map(|(new, old)| old.map_or(f64::INFINITY, |old| 100.0 * (new / old - 1.0)))
                    .collect();
                let largest = gains.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                assert!((p.gain_percent - largest).abs() < 1e-9, "{gains:?}: {p:?}");
                assert!(
                    (gains[p.gain_at - 1] - p.gain_percent).abs() < 1e-9,
                    "{gains:?}: {p:?}"
                );
            }
            other => panic!("expected a push, got {other:?}"),
        }
    }

    #[test]
    fn a_high_hysteresis_keeps_even_a_real_change() {
        let settings = TuneSettings {
            min_gain_percent: 1e9,
            ..TuneSettings::default()
        };
        let applied = vec![vec![1], vec![1]];
        match decide(&estimate(0.6), 4, Some(&applied), &settings).unwrap() {
            Decision::Keep(k) => assert!(k.gain_percent.is_finite() && k.gain_percent >= 0.0),
            other => panic!("expected keep, got {other:?}"),
        }
    }
}
