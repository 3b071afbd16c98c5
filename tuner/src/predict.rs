//! Exact throughput of one threshold vector: build the embedded chain, solve it, read off rates.
//!
//! Throughput is the long-run reward rate of the semi-Markov process: with `pi` the stationary
//! distribution of the embedded chain, `X = sum_s pi_s R_s / sum_s pi_s dt_s`, where `R_s` is
//! the expected credit of the steps that end at the event after `s` and `dt_s` its sojourn.

use super::chain::{build_embedded_chain, EmbeddedChain, COUNT_FIELDS, PHASE_FIELDS};
use super::error::TunerError;
use super::inputs::TunerInputs;
use super::stationary::{recurrent_classes, Csr, RecurrentClass, SolverLimits};
use serde::Serialize;

/// Default cap on reachable states per threshold vector (a few hundred MB at most).
pub const DEFAULT_MAX_STATES: usize = 4_000_000;

/// Long-run behaviour of one model under a threshold vector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelPrediction {
    /// Model name.
    pub name: String,
    /// Steps per second.
    pub step_rate_per_s: f64,
    /// Mean batch size of a step.
    pub mean_batch: f64,
    /// Fraction of time the model runs a step.
    pub busy_fraction: f64,
    /// Time-average number of requests waiting for the model.
    pub mean_waiting: f64,
    /// Output tokens per second credited to the model's steps.
    pub tokens_per_s: f64,
}

/// Prediction of the exact chain for one threshold vector at one concurrency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Active requests N.
    pub concurrency: usize,
    /// Threshold B per model.
    pub thresholds: Vec<usize>,
    /// Output tokens per second of the whole system.
    pub throughput_tok_s: f64,
    /// Per-model rates, in model order.
    pub models: Vec<ModelPrediction>,
    /// Reachable states of the embedded chain.
    pub states: usize,
    /// Nonzero transitions of the embedded chain.
    pub transitions: usize,
}

/// Options of the exact solver.
#[derive(Debug, Clone, Copy)]
pub struct SolveOptions {
    /// Fail with [`TunerError::StateSpaceTooLarge`] beyond this many reachable states.
    pub max_states: usize,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            max_states: DEFAULT_MAX_STATES,
        }
    }
}

/// Exact prediction for `thresholds` (one per model, each in `1..=N`).
///
/// A deadlocking vector is [`TunerError::Infeasible`], never a number.
pub fn predict(inputs: &TunerInputs, thresholds: &[usize]) -> Result<Prediction, TunerError> {
    predict_with(inputs, thresholds, &SolveOptions::default())
}

/// [`predict`] with explicit solver options.
pub fn predict_with(
    inputs: &TunerInputs,
    thresholds: &[usize],
    options: &SolveOptions,
) -> Result<Prediction, TunerError> {
    let chain = build_embedded_chain(inputs, thresholds, options.max_states)?;
    let csr = Csr {
        row_start: &chain.row_start,
        target: &chain.target,
        prob: &chain.prob,
    };
    // Slow modes of these chains (measured): how requests split over models, with two models,
    // and how the models' step phases line up, with any number. With three or more models the
    // count aggregation no longer shortens the iteration but costs a pass over every edge.
    let by_phases = chain.groups(PHASE_FIELDS);
    let by_counts = (inputs.models() <= 2).then(|| chain.groups(COUNT_FIELDS));
    let mut groups: Vec<&[u32]> = vec![&by_phases];
    groups.extend(by_counts.as_deref());
    let classes = recurrent_classes(csr, &groups, SolverLimits::default())?;
    Ok(summarize(inputs, thresholds, &chain, &classes))
}

/// Time-normalized sums over one class.
struct ClassRates {
    tokens: f64,
    steps: Vec<f64>,
    batch_sum: Vec<f64>,
    busy: Vec<f64>,
    waiting: Vec<f64>,
}

fn class_rates(inputs: &TunerInputs, chain: &EmbeddedChain, class: &RecurrentClass) -> ClassRates {
    let models = inputs.models();
    let credit: Vec<f64> = (0..models).map(|m| inputs.mean_credit(m)).collect();
    let mut time = 0.0;
    let mut rates = ClassRates {
        tokens: 0.0,
        steps: vec![0.0; models],
        batch_sum: vec![0.0; models],
        busy: vec![0.0; models],
        waiting: vec![0.0; models],
    };
    for (&id, &p) in class.members.iter().zip(&class.pi) {
        let s = chain.states[id as usize];
        let dt = f64::from(chain.dt[id as usize]);
        time += p * dt;
        for (m, &credit_m) in credit.iter().enumerate() {
            let r = s.remaining(m);
            rates.waiting[m] += p * dt * s.waiting(m) as f64;
            if r > 0 {
                rates.busy[m] += p * dt;
            }
            if r == chain.dt[id as usize] {
                let batch = s.batch(m) as f64;
                rates.steps[m] += p;
                rates.batch_sum[m] += p * batch;
                rates.tokens += p * batch * credit_m;
            }
        }
    }
    // Everything per slot from here on.
    rates.tokens /= time;
    for v in [
        &mut rates.steps,
        &mut rates.batch_sum,
        &mut rates.busy,
        &mut rates.waiting,
    ] {
        v.iter_mut().for_each(|x| *x /= time);
    }
    rates
}

fn summarize(
    inputs: &TunerInputs,
    thresholds: &[usize],
    chain: &EmbeddedChain,
    classes: &[RecurrentClass],
) -> Prediction {
    let models = inputs.models();
    let per_second = 1000.0 / inputs.delta_ms();
    let mut total = ClassRates {
        tokens: 0.0,
        steps: vec![0.0; models],
        batch_sum: vec![0.0; models],
        busy: vec![0.0; models],
        waiting: vec![0.0; models],
    };
    // Each closed class is a possible long-run regime; average the regimes by their weights.
    for class in classes {
        let rates = class_rates(inputs, chain, class);
        total.tokens += class.weight * rates.tokens;
        for m in 0..models {
            total.steps[m] += class.weight * rates.steps[m];
            total.batch_sum[m] += class.weight * rates.batch_sum[m];
            total.busy[m] += class.weight * rates.busy[m];
            total.waiting[m] += class.weight * rates.waiting[m];
        }
    }
    let model_predictions = (0..models)
        .map(|m| ModelPrediction {
            name: inputs.names()[m].clone(),
            step_rate_per_s: total.steps[m] * per_second,
            mean_batch: if total.steps[m] > 0.0 {
                total.batch_sum[m] / total.steps[m]
            } else {
                0.0
            },
            busy_fraction: total.busy[m],
            mean_waiting: total.waiting[m],
            tokens_per_s: total.batch_sum[m] * inputs.mean_credit(m) * per_second,
        })
        .collect();
    Prediction {
        concurrency: inputs.concurrency(),
        thresholds: thresholds.to_vec(),
        throughput_tok_s: total.tokens * per_second,
        models: model_predictions,
        states: chain.states.len(),
        transitions: chain.target.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::tests::r2r;
    use crate::inputs::StepLatency;

    /// N = 1: the request alternates between models as the Markov chain P, so the throughput is
    /// expected tokens per step over expected time per step under P's stationary law nu.
    fn closed_form_single_request(latency_ms: &[f64], p: &[Vec<f64>], c: &[Vec<f64>]) -> f64 {
        // nu = nu P by plain power iteration (small dense matrix, aperiodic enough with laziness).
        let m = latency_ms.len();
        let mut nu = vec![1.0 / m as f64; m];
        for _ in 0..100_000 {
            let mut next = vec![0.0; m];
            for i in 0..m {
                for j in 0..m {
                    next[j] += nu[i] * (0.5 * p[i][j] + if i == j { 0.5 } else { 0.0 });
                }
            }
            nu = next;
        }
        let tokens: f64 = (0..m)
            .map(|i| nu[i] * (0..m).map(|j| p[i][j] * c[i][j]).sum::<f64>())
            .sum();
        let time_ms: f64 = (0..m).map(|i| nu[i] * latency_ms[i]).sum();
        1000.0 * tokens / time_ms
    }

    #[test]
    fn single_request_matches_closed_form() {
        let p = predict(&r2r(1), &[1, 1]).unwrap();
        // Two models in closed form: nu_0 = P10 / (P01 + P10).
        let nu0 = 1.0 / 1.35;
        let expected = 1000.0 * (nu0 * 0.65 + (1.0 - nu0)) / (nu0 * 6.0 + (1.0 - nu0) * 27.9);
        assert!(
            (p.throughput_tok_s - expected).abs() < 1e-9 * expected,
            "{} vs {expected}",
            p.throughput_tok_s
        );

        let latency = [6.0, 12.0, 27.9];
        let transition = vec![
            vec![0.5, 0.3, 0.2],
            vec![0.1, 0.6, 0.3],
            vec![0.7, 0.2, 0.1],
        ];
        let credit = vec![
            vec![1.0, 0.0, 0.5],
            vec![1.0, 1.0, 0.0],
            vec![1.0, 1.0, 1.0],
        ];
        let inputs = TunerInputs::new(
            latency.iter().map(|&l| StepLatency::Constant(l)).collect(),
            transition.clone(),
            credit.clone(),
            0.1,
            1,
        )
        .unwrap();
        let p = predict(&inputs, &[1, 1, 1]).unwrap();
        let expected = closed_form_single_request(&latency, &transition, &credit);
        assert!(
            (p.throughput_tok_s - expected).abs() < 1e-9 * expected,
            "{} vs {expected}",
            p.throughput_tok_s
        );
    }

    #[test]
    fn deadlocking_vectors_are_infeasible() {
        // N = 4, B = [3, 3]: a split of 2 and 2 requests can start neither model.
        match predict(&r2r(4), &[3, 3]) {
            Err(TunerError::Infeasible {
                thresholds,
                witness,
                ..
            }) => {
                assert_eq!(thresholds, vec![3, 3]);
                assert!(witness.contains("waiting 2, idle"), "{witness}");
            }
            other => panic!("expected a deadlock, got {other:?}"),
        }
        // Vectors whose threshold sum minus one reaches N may deadlock; all-ones never does.
        for n in 1..=6 {
            let inputs = r2r(n);
            assert!(predict(&inputs, &[1, 1]).is_ok());
            for b0 in 1..=n {
                for b1 in 1..=n {
                    let result = predict(&inputs, &[b0, b1]);
                    if b0 + b1 - 2 < n {
                        // Every split of N has a model at or above its threshold.
                        assert!(result.is_ok(), "N={n} B=[{b0},{b1}]: {result:?}");
                    }
                    if let Ok(p) = result {
                        assert!(p.throughput_tok_s.is_finite() && p.throughput_tok_s > 0.0);
                    }
                }
            }
        }
        // A deadlock needs a reachable split: with P = [[1,0],[1,0]] nothing reaches model 1.
        let never_routes = TunerInputs::new(
            vec![StepLatency::Constant(6.0), StepLatency::Constant(27.9)],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            0.1,
            4,
        )
        .unwrap();
        assert!(predict(&never_routes, &[1, 4]).is_ok());
        assert!(predict(&never_routes, &[4, 4]).is_ok());
    }

    #[test]
    fn results_do_not_depend_on_delta_when_it_divides_latencies() {
        for n in [2, 4, 6] {
            let base = r2r(n);
            let at = |delta: f64| {
                TunerInputs::new(
                    base.latency().to_vec(),
                    base.transition().to_vec(),
                    base.credit().to_vec(),
                    delta,
                    n,
                )
                .unwrap()
            };
            let (coarse, fine, finer) = (at(0.3), at(0.1), at(0.05));
            for b0 in 1..=n {
                for b1 in 1..=n {
                    let results: Vec<_> = [&coarse, &fine, &finer]
                        .iter()
                        .map(|i| predict(i, &[b0, b1]))
                        .collect();
                    match (&results[0], &results[1], &results[2]) {
                        (Ok(a), Ok(b), Ok(c)) => {
                            for other in [b, c] {
                                let rel = (a.throughput_tok_s - other.throughput_tok_s).abs()
                                    / a.throughput_tok_s;
                                assert!(
                                    rel < 1e-9,
                                    "N={n} B=[{b0},{b1}]: {} vs {}",
                                    a.throughput_tok_s,
                                    other.throughput_tok_s
                                );
                                assert_eq!(a.states, other.states);
                            }
                        }
                        (Err(_), Err(_), Err(_)) => {}
                        other => {
                            panic!("N={n} B=[{b0},{b1}]: feasibility depends on delta: {other:?}")
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn per_model_rates_are_consistent() {
        let p = predict(&r2r(4), &[1, 3]).unwrap();
        let tokens: f64 = p.models.iter().map(|m| m.tokens_per_s).sum();
        assert!((tokens - p.throughput_tok_s).abs() < 1e-9 * p.throughput_tok_s);
        // The large model never starts below its threshold.
        assert!(p.models[1].mean_batch >= 3.0 - 1e-12);
        for m in &p.models {
            assert!(m.busy_fraction > 0.0 && m.busy_fraction <= 1.0);
            // Busy time is steps times step length.
            let step_ms = if m.name == "model0" { 6.0 } else { 27.9 };
            assert!((m.step_rate_per_s * step_ms / 1000.0 - m.busy_fraction).abs() < 1e-9);
        }
        // Little's law on requests: every request is waiting or in a step at every moment.
        let in_steps: f64 = p
            .models
            .iter()
            .map(|m| {
                m.step_rate_per_s * m.mean_batch * if m.name == "model0" { 0.006 } else { 0.0279 }
            })
            .sum();
        let waiting: f64 = p.models.iter().map(|m| m.mean_waiting).sum();
        assert!(
            (in_steps + waiting - 4.0).abs() < 1e-9,
            "{in_steps} + {waiting}"
        );
    }
}
