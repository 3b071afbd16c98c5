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

impl Tally {
    fn zeroed(models: usize) -> Self {
        Tally {
            steps: vec![0.0; models],
            batch_sum: vec![0.0; models],
            busy_slots: vec![0.0; models],
            waiting_area: vec![0.0; models],
            credit: vec![0.0; models],
            ..Tally::default()
        }
    }
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
    let mut run = Run::new(inputs, thresholds, options);
    let empty = Tally::zeroed(inputs.models());
    let total_events = options.warmup_events + options.events;
    let per_batch = options.events.div_ceil(options.batches as u64);
    let mut window = empty.clone();
    let mut batch = empty.clone();
    let mut batch_rates: Vec<f64> = Vec::new();
    let (mut window_start, mut batch_start) = (0u64, 0u64);
    for event in 0..total_events {
        let next = run.next_completion()?;
        if event == options.warmup_events {
            window_start = run.now;
            batch_start = run.now;
        }
        let measuring = event >= options.warmup_events;
        if measuring {
            run.accrue_waiting(&mut batch, next);
        }
        run.now = next;
        run.complete_steps(measuring.then_some(&mut batch));
        run.start_idle();
        if measuring
            && ((event - options.warmup_events + 1).is_multiple_of(per_batch)
                || event + 1 == total_events)
        {
            let span = (run.now - batch_start) as f64;
            if span > 0.0 {
                batch_rates.push(batch.tokens / span);
            }
            merge(&mut window, &batch);
            batch = empty.clone();
            batch_start = run.now;
        }
    }
    Ok(report(
        inputs,
        thresholds,
        options,
        &window,
        (run.now - window_start) as f64,
        &batch_rates,
    ))
}

/// The simulated system between events: queues, clock, per-request gaps.
struct Run<'a> {
    inputs: &'a TunerInputs,
    thresholds: &'a [usize],
    options: &'a SimulationOptions,
    rng: ChaCha8Rng,
    gap_left: Vec<u32>,
    queues: Vec<ModelQueue>,
    arrivals: Vec<(usize, u32)>,
    now: u64,
}

impl<'a> Run<'a> {
    /// Every request waits at the entry model; models at their threshold start.
    fn new(
        inputs: &'a TunerInputs,
        thresholds: &'a [usize],
        options: &'a SimulationOptions,
    ) -> Self {
        let mut run = Run {
            inputs,
            thresholds,
            options,
            rng: ChaCha8Rng::seed_from_u64(options.seed),
            gap_left: vec![0u32; inputs.concurrency()],
            queues: (0..inputs.models())
                .map(|_| ModelQueue {
                    waiting: Vec::new(),
                    running: Vec::new(),
                    ends_at: None,
                    started_at: 0,
                })
                .collect(),
            arrivals: Vec::new(),
            now: 0,
        };
        let entry = inputs.entry_model();
        for request in 0..inputs.concurrency() as u32 {
            if let GapDistribution::Empirical(samples) = gap_of(options, entry) {
                run.gap_left[request as usize] = samples[run.rng.random_range(0..samples.len())];
            }
            run.queues[entry].waiting.push(request);
        }
        run.start_idle();
        run
    }

    /// Idle models whose waiting count reached their threshold start a step now.
    fn start_idle(&mut self) {
        for (m, q) in self.queues.iter_mut().enumerate() {
            if q.ends_at.is_none() && q.waiting.len() >= self.thresholds[m] {
                std::mem::swap(&mut q.waiting, &mut q.running);
                q.ends_at = Some(self.now + u64::from(self.inputs.slots(m, q.running.len())));
                q.started_at = self.now;
            }
        }
    }

    /// The next step-completion time; none means nothing runs and nothing can start.
    fn next_completion(&self) -> Result<u64, TunerError> {
        if let Some(next) = self.queues.iter().filter_map(|q| q.ends_at).min() {
            return Ok(next);
        }
        let witness: Vec<String> = self
            .queues
            .iter()
            .enumerate()
            .map(|(m, q)| {
                format!(
                    "{}: waiting {}, idle",
                    self.inputs.names()[m],
                    q.waiting.len()
                )
            })
            .collect();
        Err(TunerError::Infeasible {
            thresholds: self.thresholds.to_vec(),
            concurrency: self.inputs.concurrency(),
            witness: format!("[{}]", witness.join("; ")),
        })
    }

    /// Waiting area and busy slots from now until `next`.
    fn accrue_waiting(&self, batch: &mut Tally, next: u64) {
        let span = (next - self.now) as f64;
        for (m, q) in self.queues.iter().enumerate() {
            batch.waiting_area[m] += span * q.waiting.len() as f64;
            if q.ends_at.is_some() {
                batch.busy_slots[m] += span;
            }
        }
    }

    /// Ends the steps due now and routes their requests one by one (in model
    /// order, then request order: the draws' order fixes the run for a seed).
    fn complete_steps(&mut self, mut batch: Option<&mut Tally>) {
        let (inputs, options) = (self.inputs, self.options);
        self.arrivals.clear();
        for (m, q) in self.queues.iter_mut().enumerate() {
            if q.ends_at != Some(self.now) {
                continue;
            }
            q.ends_at = None;
            if let Some(batch) = batch.as_deref_mut() {
                batch.steps[m] += 1.0;
                batch.batch_sum[m] += q.running.len() as f64;
            }
            for request in q.running.drain(..) {
                let gap_left = &mut self.gap_left[request as usize];
                let to = next_model(inputs, gap_of(options, m), m, gap_left, &mut self.rng);
                if let Some(batch) = batch.as_deref_mut() {
                    let c = inputs.credit()[m][to];
                    batch.tokens += c;
                    batch.credit[m] += c;
                }
                self.arrivals.push((to, request));
            }
        }
        for &(to, request) in &self.arrivals {
            if let GapDistribution::Empirical(samples) = gap_of(options, to) {
                if self.gap_left[request as usize] == 0 {
                    self.gap_left[request as usize] =
                        samples[self.rng.random_range(0..samples.len())];
                }
            }
            self.queues[to].waiting.push(request);
        }
    }
}

/// Model `m`'s gap distribution (geometric where none is given).
fn gap_of(options: &SimulationOptions, m: usize) -> &GapDistribution {
    options.gaps.get(m).unwrap_or(&GapDistribution::Geometric)
}

/// The measured window's rates, and the batch-means 95% interval.
fn report(
    inputs: &TunerInputs,
    thresholds: &[usize],
    options: &SimulationOptions,
    window: &Tally,
    slots: f64,
    batch_rates: &[f64],
) -> SimulationReport {
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
    let models = (0..inputs.models())
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
    SimulationReport {
        concurrency: inputs.concurrency(),
        thresholds: thresholds.to_vec(),
        throughput_tok_s: mean_rate * per_second,
        ci95_tok_s: ci * per_second,
        models,
        events: options.events,
        simulated_s: slots * inputs.delta_ms() / 1000.0,
    }
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
