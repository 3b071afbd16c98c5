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
    // Slow modes of these chains: how requests split over models (two models, large N) and
    // how the models' step phases line up (three models). One aggregation targets each.
    let by_counts = chain.groups(COUNT_FIELDS);
    let by_phases = chain.groups(PHASE_FIELDS);
    let classes = recurrent_classes(csr, &[&by_counts, &by_phases], SolverLimits::default())?;
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
        for m in 0..models {
            let r = s.remaining(m);
            rates.waiting[m] += p * dt * s.waiting(m) as f64;
            if r > 0 {
                rates.busy[m] += p * dt;
            }
            if r == chain.dt[id as usize] {
                let batch = s.batch(m) as f64;
                rates.steps[m] += p;
                rates.batch_sum[m] += p * batch;
                rates.tokens += p * batch * credit[m];
            }
        }
    }
    // Everything per slot from here on.
    rates.tokens /= time;
    for v in [&mut rates.steps, &mut rates.batch_sum, &mut rates.busy, &mut rates.waiting] {
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
