//! What a `sim-bench` run is asked to do: the mode, the simulated step
//! costs (or the real models) and the load, and their validation.

use serde::Serialize;
use subserver::error::EngineError;

use crate::stagger::Stagger;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchMode {
    /// TokenRouter with delayed batching.
    AsyncDelayed,
    /// TokenRouter, eager steps.
    Async,
    /// TokenRouter with a global step barrier.
    Lockstep,
    /// TokenRouter, one model at a time.
    Serial,
    /// Single-model servers plus an external one-token forwarder.
    StdServing,
    /// The large model alone (the quality reference's cost).
    LargeOnly,
    /// The small model alone (its step time feeds the tuner).
    SmallOnly,
}

impl std::str::FromStr for BenchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "async_delayed" => Ok(Self::AsyncDelayed),
            "async" => Ok(Self::Async),
            "lockstep" => Ok(Self::Lockstep),
            "serial" => Ok(Self::Serial),
            "std_serving" => Ok(Self::StdServing),
            "large_only" => Ok(Self::LargeOnly),
            "small_only" => Ok(Self::SmallOnly),
            _ => Err(format!(
                "unknown mode `{s}` (async_delayed, async, lockstep, serial, std_serving, large_only, small_only)"
            )),
        }
    }
}

/// Settings of one run.
#[derive(Debug, Clone, Serialize)]
pub struct SimBenchOptions {
    /// Runtime mode.
    pub mode: BenchMode,
    /// Active requests kept by closed-loop clients.
    pub concurrency: usize,
    /// Step latency per model (ms), small first.
    pub latencies_ms: Vec<f64>,
    /// Extra step time per request in the batch (ms), per model.
    pub per_seq_ms: Vec<f64>,
    /// Extra step time per new token in the batch (ms), per model: the cost
    /// of (re)computing KV, which Std. Serving pays again on every call.
    pub per_token_ms: Vec<f64>,
    /// Extra step time per position of context the batch spans (ms), per
    /// model: reading the KV, so long answers slow every step.
    #[serde(default)]
    pub per_context_ms: Vec<f64>,
    /// Output cap of the simulated models' requests, with a staggered start
    /// (see [`Stagger`]); without one, requests write 8,000 tokens from an
    /// empty history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_cap: Option<usize>,
    /// Probability a small-model token is rewritten by the large model.
    pub route_probability: f64,
    /// Delayed-batching B per model (used at every concurrency).
    pub thresholds: Vec<usize>,
    /// Measured time.
    pub duration_s: f64,
    /// Time before measuring.
    pub warmup_s: f64,
    /// Seed for tokens and routing draws.
    pub seed: u64,
    /// Prompt tokens per request.
    pub prompt_tokens: usize,
    /// Bound on a delayed-batching wait.
    pub max_batch_wait_ms: f64,
    /// Real models (random weights on a device) instead of simulated ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tch: Option<TchModels>,
}

/// Random-weight models built on a device for the bench (`model-bench`).
#[derive(Debug, Clone, Serialize)]
pub struct TchModels {
    /// Preset names, small first (`gen-random` presets).
    pub presets: Vec<String>,
    /// `cpu`, `cuda`, `cuda:N`.
    pub device: String,
    /// `f32`, `bf16`, `f16`.
    pub dtype: String,
    /// Decode steps as CUDA graphs.
    pub cuda_graphs: bool,
    /// A CUDA stream per model.
    pub cuda_streams: bool,
    /// Tokens each request writes before the client sends the next one.
    pub answer_tokens: usize,
}

/// Tokens each request may write: long enough that few requests end while measuring.
pub(crate) const LONG_ANSWER: usize = 8000;

pub(crate) fn validate(o: &SimBenchOptions) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::InvalidRequest(m));
    if o.latencies_ms.len() != 2 {
        return bad(format!(
            "--latencies-ms needs 2 values (small, large), got {}",
            o.latencies_ms.len()
        ));
    }
    if o.latencies_ms.iter().any(|&l| !(l >= 0.0 && l.is_finite())) {
        return bad("--latencies-ms must be non-negative".into());
    }
    if !(0.0..=1.0).contains(&o.route_probability) {
        return bad(format!(
            "--route-probability must be in [0, 1], got {}",
            o.route_probability
        ));
    }
    if o.concurrency == 0 {
        return bad("--concurrency must be at least 1".into());
    }
    if o.thresholds.len() != 2 || o.thresholds.contains(&0) {
        return bad("--thresholds needs 2 positive values (small, large)".into());
    }
    if o.duration_s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || o.warmup_s < 0.0 {
        return bad("--duration-s must be positive and the warm-up non-negative".into());
    }
    if o.output_cap == Some(0) {
        return bad("--output-cap must be at least 1".into());
    }
    Ok(())
}

/// Tokens each request may write without a cap.
pub(crate) fn answer_tokens(o: &SimBenchOptions) -> usize {
    o.tch
        .as_ref()
        .map_or(o.output_cap.unwrap_or(LONG_ANSWER), |t| t.answer_tokens)
}

/// The staggered start of a run: only simulated models take a cap.
pub(crate) fn stagger(o: &SimBenchOptions) -> Stagger {
    Stagger::new(o.output_cap.filter(|_| o.tch.is_none()), o.concurrency)
}
