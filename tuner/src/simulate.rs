//! Monte-Carlo event simulation of the same closed system, with optional non-geometric gaps.
//!
//! Time is kept in whole slots, as in the chain, and the simulation jumps from one
//! step-completion time to the next. Requests are individuals: each ending step routes its
//! requests one by one, then idle models at their threshold start. With geometric gaps (the
//! chain's assumption) a request leaving model m picks its next model from row `P[m]` at
//! every step. With an empirical gap distribution for m, a request arriving at m draws how
//! many consecutive steps it stays there (one recorded gap, uniformly), and when that run ends
//! it moves to `j != m` with probability `P[m][j] / (1 - P[m][m])`: the paper leaves this case
//! open because the chain cannot express it.

use super::error::TunerError;
use super::inputs::TunerInputs;
use super::predict::ModelPrediction;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// How many steps a request stays on one model per visit.
#[derive(Debug, Clone, PartialEq)]
pub enum GapDistribution {
    /// One independent routing draw from `P[m]` after every step (the chain's model).
    Geometric,
    /// Observed run lengths (steps per visit, each >= 1), drawn uniformly.
    Empirical(Vec<u32>),
}

/// Options of a simulation run.
#[derive(Debug, Clone)]
pub struct SimulationOptions {
    /// Completion events measured (after warm-up).
    pub events: u64,
    /// Completion events discarded first, so the start state does not bias the estimate.
    pub warmup_events: u64,
    /// Seed of the ChaCha8 generator (runs are reproducible).
    pub seed: u64,
    /// Gap distribution per model; empty means geometric everywhere.
    pub gaps: Vec<GapDistribution>,
    /// Batches for the batch-means confidence interval.
    pub batches: usize,
}

impl Default for SimulationOptions {
    fn default() -> Self {
        SimulationOptions {
            events: 2_000_000,
            warmup_events: 100_000,
            seed: 0,
            gaps: Vec::new(),
            batches: 20,
        }
    }
}

/// Result of a simulation run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimulationReport {
    /// Active requests N.
    pub concurrency: usize,
    /// Threshold B per model.
    pub thresholds: Vec<usize>,
    /// Output tokens per second over the measured window.
    pub throughput_tok_s: f64,
    /// Half width of the 95% batch-means confidence interval of the throughput.
    pub ci95_tok_s: f64,
    /// Per-model rates, in model order.
    pub models: Vec<ModelPrediction>,
    /// Measured completion events.
    pub events: u64,
    /// Simulated seconds in the measured window.
    pub simulated_s: f64,
}

/// Validates the gap distributions against the inputs.
pub fn check_gaps(inputs: &TunerInputs, gaps: &[GapDistribution]) -> Result<(), TunerError> {
    if gaps.is_empty() {
        return Ok(());
    }
    if gaps.len() != inputs.models() {
        return Err(TunerError::InvalidInput {
            field: "gaps".into(),
            reason: format!(
                "{} gap distributions for {} models",
                gaps.len(),
                inputs.models()
            ),
        });
    }
    for (m, gap) in gaps.iter().enumerate() {
        if let GapDistribution::Empirical(samples) = gap {
            if samples.is_empty() || samples.contains(&0) {
                return Err(TunerError::InvalidInput {
                    field: format!("gaps[{m}]"),
                    reason: "needs at least one gap, every gap >= 1 step".into(),
                });
            }
            if inputs.transition()[m][m] >= 1.0 {
                return Err(TunerError::InvalidInput {
                    field: format!("gaps[{m}]"),
                    reason: format!("transition[{m}] never leaves model {m}, so a gap cannot end"),
                });
            }
        }
    }
    Ok(())
}

/// Per-model simulation state.
struct ModelQueue {
    waiting: Vec<u32>,
    running: Vec<u32>,
    ends_at: Option<u64>,
    started_at: u64,
}

/// Accumulators of the measured window.
#[derive(Default, Clone)]
struct Tally {
    tokens: f64,
    steps: Vec<f64>,
    batch_sum: Vec<f64>,
    busy_slots: Vec<f64>,
    waiting_area: Vec<f64>,
    credit: Vec<f64>,
}

/// Simulates `thresholds` and reports the measured rates.
///
/// A deadlock met during the run is [`TunerError::Infeasible`], as in the exact solver.
pub fn simulate(
    inputs: &TunerInputs,
    thresholds: &[usize],
    options: &SimulationOptions,
) -> Result<SimulationReport, TunerError> {
    inputs.check_thresholds(thresholds)?;
    check_gaps(inputs, &options.gaps)?;
    if options.events == 0 || options.batches == 0 {
        return Err(TunerError::InvalidInput {
            field: "simulation".into(),
            reason: "needs at least one measured event and one batch".into(),
        });
    }
    let models = inputs.models();
    let n = inputs.concurrency();
    let gap_of = |m: usize| options.gaps.get(m).unwrap_or(&GapDistribution::Geometric);
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let mut gap_left = vec![0u32; n];
    let mut queues: Vec<ModelQueue> = (0..models)
        .map(|_| ModelQueue {
            waiting: Vec::new(),
            running: Vec::new(),
            ends_at: None,
            started_at: 0,
        })
        .collect();
    let entry = inputs.entry_model();
    for request in 0..n as u32 {
        if let GapDistribution::Empirical(samples) = gap_of(entry) {
            gap_left[request as usize] = samples[rng.random_range(0..samples.len())];
        }
        queues[entry].waiting.push(request);
    }
    let start_idle = |queues: &mut [ModelQueue], now: u64| {
        for (m, q) in queues.iter_mut().enumerate() {
            if q.ends_at.is_none() && q.waiting.len() >= thresholds[m] {
                std::mem::swap(&mut q.waiting, &mut q.running);
                q.ends_at = Some(now + u64::from(inputs.slots(m, q.running.len())));
                q.started_at = now;
            }
        }
    };
    start_idle(&mut queues, 0);

    let empty = Tally {
        steps: vec![0.0; models],
        batch_sum: vec![0.0; models],
        busy_slots: vec![0.0; models],
        waiting_area: vec![0.0; models],
        credit: vec![0.0; models],
        ..Tally::default()
    };
    let total_events = options.warmup_events + options.events;
    let per_batch = options.events.div_ceil(options.batches as u64);
    let mut window = empty.clone();
    let mut batch = empty.clone();
    let mut batch_rates: Vec<f64> = Vec::new();
    let (mut now, mut window_start, mut batch_start) = (0u64, 0u64, 0u64);
    let mut arrivals: Vec<(usize, u32)> = Vec::new();
    for event in 0..total_events {
        let Some(next) = queues.iter().filter_map(|q| q.ends_at).min() else {
            let witness: Vec<String> = queues
                .iter()
                .enumerate()
                .map(|(m, q)| format!("{}: waiting {}, idle", inputs.names()[m], q.waiting.len()))
                .collect();
            return Err(TunerError::Infeasible {
                thresholds: thresholds.to_vec(),
                concurrency: n,
                witness: format!("[{}]", witness.join("; ")),
            });
        };
        if event == options.warmup_events {
            window_start = now;
            batch_start = now;
        }
        let measuring = event >= options.warmup_events;
        if measuring {
            let span = (next - now) as f64;
            for (m, q) in queues.iter().enumerate() {
                batch.waiting_area[m] += span * q.waiting.len() as f64;
                if q.ends_at.is_some() {
                    batch.busy_slots[m] += span;
                }
            }
        }
        now = next;
        arrivals.clear();
        for (m, q) in queues.iter_mut().enumerate() {
            if q.ends_at != Some(now) {
                continue;
            }
            q.ends_at = None;
            if measuring {
                batch.steps[m] += 1.0;
                batch.batch_sum[m] += q.running.len() as f64;
            }
            for request in q.running.drain(..) {
                let to = next_model(
                    inputs,
                    gap_of(m),
                    m,
                    &mut gap_left[request as usize],
                    &mut rng,
                );
                if measuring {
                    let c = inputs.credit()[m][to];
                    batch.tokens += c;
                    batch.credit[m] += c;
                }
                arrivals.push((to, request));
            }
        }
        for &(to, request) in &arrivals {
            if let GapDistribution::Empirical(samples) = gap_of(to) {
                if gap_left[request as usize] == 0 {
                    gap_left[request as usize] = samples[rng.random_range(0..samples.len())];
                }
            }
            queues[to].waiting.push(request);
        }
        start_idle(&mut queues, now);
        if measuring
            && ((event - options.warmup_events + 1).is_multiple_of(per_batch)
                || event + 1 == total_events)
        {
            let span = (now - batch_start) as f64;
            if span > 0.0 {
                batch_rates.push(batch.tokens / span);
            }
            merge(&mut window, &batch);
            batch = empty.clone();
            batch_start = now;
        }
    }
    let slots = (now - window_start) as f64;
    let per_second = 1000.0 / inputs.delta_ms();
    let mean_rate = window.tokens / slots;
    let k = batch_rates.len() as f64;
    let ci = if k > 1.0 {
        let var = batch_rates
            .iter()
            .map(|r| (r - mean_rate).powi(2))
            .sum::<f64>()
            / (k - 1.0);
        1.96 * (var / k).sqrt()
    } else {
        f64::INFINITY
    };
    let model_reports = (0..models)
        .map(|m| ModelPrediction {
            name: inputs.names()[m].clone(),
            step_rate_per_s: window.steps[m] / slots * per_second,
            mean_batch: if window.steps[m] > 0.0 {
                window.batch_sum[m] / window.steps[m]
            } else {
                0.0
            },
            busy_fraction: window.busy_slots[m] / slots,
            mean_waiting: window.waiting_area[m] / slots,
            tokens_per_s: window.credit[m] / slots * per_second,
        })
        .collect();
    Ok(SimulationReport {
        concurrency: n,
        thresholds: thresholds.to_vec(),
        throughput_tok_s: mean_rate * per_second,
        ci95_tok_s: ci * per_second,
        models: model_reports,
        events: options.events,
        simulated_s: slots * inputs.delta_ms() / 1000.0,
    })
}

fn merge(into: &mut Tally, from: &Tally) {
    into.tokens += from.tokens;
    for (a, b) in [
        (&mut into.steps, &from.steps),
        (&mut into.batch_sum, &from.batch_sum),
        (&mut into.busy_slots, &from.busy_slots),
        (&mut into.waiting_area, &from.waiting_area),
        (&mut into.credit, &from.credit),
    ] {
        a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
    }
}

/// Where a request goes after a step of `model`.
fn next_model(
    inputs: &TunerInputs,
    gap: &GapDistribution,
    model: usize,
    gap_left: &mut u32,
    rng: &mut ChaCha8Rng,
) -> usize {
    let row = &inputs.transition()[model];
    match gap {
        GapDistribution::Geometric => pick(row, None, rng.random::<f64>()),
        GapDistribution::Empirical(_) => {
            *gap_left = gap_left.saturating_sub(1);
            if *gap_left > 0 {
                return model;
            }
            let leave = 1.0 - row[model];
            pick(row, Some(model), rng.random::<f64>() * leave)
        }
    }
}

/// Inverse-CDF draw over `row`, skipping `excluded`; `u` is uniform on the remaining mass.
fn pick(row: &[f64], excluded: Option<usize>, u: f64) -> usize {
    let mut acc = 0.0;
    let mut last = 0;
    for (j, &p) in row.iter().enumerate() {
        if Some(j) == excluded || p <= 0.0 {
            continue;
        }
        acc += p;
        last = j;
        if u < acc {
            return j;
        }
    }
    // Rounding can leave u just above the summed mass: the last eligible model takes it.
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::tests::r2r;
    use crate::inputs::StepLatency;
    use crate::predict::predict;

    fn assert_within(sim: &SimulationReport, exact: f64, tolerance: f64) {
        let rel = (sim.throughput_tok_s - exact).abs() / exact;
        assert!(
            rel < tolerance,
            "N={} B={:?}: simulated {} ± {} vs exact {exact} ({:.3}%)",
            sim.concurrency,
            sim.thresholds,
            sim.throughput_tok_s,
            sim.ci95_tok_s,
            rel * 100.0
        );
    }

    #[test]
    fn simulation_agrees_with_exact_solver_within_one_percent() {
        let options = SimulationOptions {
            events: 1_000_000,
            ..SimulationOptions::default()
        };
        let mut cases: Vec<(TunerInputs, Vec<usize>)> = vec![
            (r2r(1), vec![1, 1]),
            (r2r(4), vec![1, 3]),
            (r2r(4), vec![1, 1]),
            (r2r(8), vec![1, 5]),
            (r2r(8), vec![2, 4]),
            (r2r(16), vec![2, 10]),
        ];
        let me = TunerInputs::new(
            vec![
                StepLatency::Constant(6.0),
                StepLatency::Constant(12.0),
                StepLatency::Constant(27.9),
            ],
            vec![vec![0.5, 0.3, 0.2]; 3],
            vec![vec![1.0; 3]; 3],
            0.1,
            4,
        )
        .unwrap();
        cases.push((me.clone(), vec![1, 2, 2]));
        cases.push((me.with_concurrency(6).unwrap(), vec![1, 3, 3]));
        let table = TunerInputs::new(
            vec![
                StepLatency::Table(vec![(1, 6.0), (8, 7.5)]),
                StepLatency::Table(vec![(1, 27.9), (4, 29.1), (8, 33.0)]),
            ],
            vec![vec![0.65, 0.35], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            0.1,
            8,
        )
        .unwrap();
        cases.push((table, vec![1, 4]));
        for (inputs, thresholds) in cases {
            let exact = predict(&inputs, &thresholds).unwrap();
            let sim = simulate(&inputs, &thresholds, &options).unwrap();
            assert_within(&sim, exact.throughput_tok_s, 0.01);
            // The confidence interval is honest: the exact value lies within a few half widths.
            assert!(
                (sim.throughput_tok_s - exact.throughput_tok_s).abs() < 4.0 * sim.ci95_tok_s + 1e-9
            );
            for (s, e) in sim.models.iter().zip(&exact.models) {
                assert!(
                    (s.mean_batch - e.mean_batch).abs() < 0.02 * e.mean_batch.max(1.0),
                    "{s:?} vs {e:?}"
                );
                assert!(
                    (s.busy_fraction - e.busy_fraction).abs() < 0.01,
                    "{s:?} vs {e:?}"
                );
            }
        }
    }

    #[test]
    fn simulation_reports_deadlock() {
        let err = simulate(&r2r(4), &[3, 3], &SimulationOptions::default()).unwrap_err();
        assert!(matches!(err, TunerError::Infeasible { .. }), "{err}");
    }

    #[test]
    fn geometric_samples_reproduce_the_chain() {
        // Gaps drawn from the geometric law of P[0][0] = 0.65, written out as samples.
        let mut samples = Vec::new();
        for k in 1..=60u32 {
            let count = (100_000.0 * 0.65f64.powi(k as i32 - 1) * 0.35).round() as usize;
            samples.extend(std::iter::repeat_n(k, count));
        }
        let options = SimulationOptions {
            events: 1_000_000,
            gaps: vec![
                GapDistribution::Empirical(samples),
                GapDistribution::Geometric,
            ],
            ..SimulationOptions::default()
        };
        for (n, b) in [(1, vec![1, 1]), (4, vec![1, 3])] {
            let inputs = r2r(n);
            let exact = predict(&inputs, &b).unwrap();
            assert_within(
                &simulate(&inputs, &b, &options).unwrap(),
                exact.throughput_tok_s,
                0.01,
            );
        }
    }

    #[test]
    fn deterministic_gaps_match_renewal_closed_form() {
        // N = 1, every visit to the small model lasts exactly 3 steps, then one large step:
        // 3 tokens (2 kept + 1 rewritten by the large model) per 3 * 6.0 + 27.9 ms.
        let options = SimulationOptions {
            events: 200_000,
            gaps: vec![
                GapDistribution::Empirical(vec![3]),
                GapDistribution::Geometric,
            ],
            ..SimulationOptions::default()
        };
        let sim = simulate(&r2r(1), &[1, 1], &options).unwrap();
        let expected = 1000.0 * 3.0 / (3.0 * 6.0 + 27.9);
        assert_within(&sim, expected, 1e-6);
        // Same mean gap as the geometric chain would give 2.857 steps; the law matters.
        let geometric = predict(&r2r(1), &[1, 1]).unwrap().throughput_tok_s;
        assert!((sim.throughput_tok_s - geometric).abs() > 0.01 * geometric);
    }

    #[test]
    fn bad_gaps_are_rejected() {
        let inputs = r2r(2);
        let err = check_gaps(&inputs, &[GapDistribution::Empirical(vec![0])]).unwrap_err();
        assert!(err.to_string().contains("gaps"), "{err}");
        let err = check_gaps(
            &inputs,
            &[
                GapDistribution::Empirical(vec![2, 0]),
                GapDistribution::Geometric,
            ],
        )
        .unwrap_err();
        assert!(err.to_string().contains("gaps[0]"), "{err}");
    }
}
