//! A measured step-time profile of the tch engine: decode step time against
//! batch size and one prefill step, fitted to the sim backend's linear
//! latency model (`base + per_seq * B + per_token * T`). `make bench-engine`
//! measures it (bare forward) and saves it as JSON beside its page; `make
//! bench-ablation` reads that file (or a GPU machine's) and scales it to
//! the paper's step times.

use std::path::Path;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use subserver::config::{DType, KvBudget};
use subserver::error::EngineError;
use subserver::model::paged_cpu::CpuAttention;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::{ModelRunner, StepBatch, StepItem};

/// Step times of one model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepProfile {
    /// Mean decode step (ms) per batch size.
    pub decode_ms: Vec<(usize, f64)>,
    /// Prompt tokens of the prefill measurement.
    pub prefill_tokens: usize,
    /// One prefill step of one sequence (ms).
    pub prefill_ms: f64,
    /// One sequence at longer contexts: its prefill and its decode steps
    /// there (empty in profiles written before they were measured).
    #[serde(default)]
    pub context: Vec<ContextPoint>,
    /// The weights' and KV's dtype (`None` in profiles written before it was recorded).
    #[serde(default)]
    pub dtype: Option<String>,
}

/// One sequence prefilled to `tokens` positions, then decoded.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ContextPoint {
    /// Prompt tokens (prefilled in one step).
    pub tokens: usize,
    /// The prefill step (ms).
    pub prefill_ms: f64,
    /// Mean decode step after it (ms).
    pub decode_ms: f64,
}

/// The profile as fractions of a one-sequence, one-token step: the step of
/// B sequences bringing T new tokens takes `L * (base + per_seq*B + per_token*T)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RelativeCosts {
    /// Fixed part.
    pub base: f64,
    /// Per sequence in the batch.
    pub per_seq: f64,
    /// Per new token in the batch.
    pub per_token: f64,
    /// Per position of context the batch's sequences span (0 without
    /// context points in the profile).
    pub per_context: f64,
}

impl RelativeCosts {
    /// `(base, per_seq, per_token)` in ms for a model whose one-token step takes `l_ms`.
    pub fn scaled(&self, l_ms: f64) -> (f64, f64, f64) {
        (self.base * l_ms, self.per_seq * l_ms, self.per_token * l_ms)
    }

    /// `per_context` in ms for a model whose one-token step takes `l_ms`.
    pub fn scaled_context(&self, l_ms: f64) -> f64 {
        self.per_context * l_ms
    }
}

/// Least-squares line through `(x, y)` points: (intercept, slope); slope 0
/// when the x values do not spread.
fn line(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len().max(1) as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for &(x, y) in points {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx).powi(2);
    }
    let k = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (my - k * mx, k)
}

impl StepProfile {
    /// Fits the linear model: decode steps give `a + (s + t) B` by least
    /// squares; the prefill step of T tokens separates `t` from `s`. With
    /// context points, one sequence's decode step against its context gives
    /// the cost per context position `c` (the batch runs' short context is
    /// then taken out of `a` and `s`), and the longest prefill gives `t`
    /// net of the context it spans.
    pub fn relative(&self) -> RelativeCosts {
        let batch: Vec<(f64, f64)> = self
            .decode_ms
            .iter()
            .map(|&(b, ms)| (b as f64, ms))
            .collect();
        let (a, k) = line(&batch);
        let (a, k) = (a.max(0.0), k.max(0.0));
        // Decode at one sequence against the context it reads: the batch
        // runs' point (context ≈ the prompt) and the context points.
        let mut single: Vec<(f64, f64)> = self
            .context
            .iter()
            .map(|p| (p.tokens as f64, p.decode_ms))
            .collect();
        let c = if single.is_empty() {
            0.0
        } else {
            single.push((self.prefill_tokens as f64, a + k));
            line(&single).1.max(0.0)
        };
        // The batch runs read about `prefill_tokens` positions per sequence.
        let ctx0 = self.prefill_tokens as f64;
        let k = (k - c * ctx0).max(0.0);
        let one = (a + k).max(1e-9);
        let (tokens, prefill_ms) = self
            .context
            .iter()
            .map(|p| (p.tokens, p.prefill_ms))
            .chain([(self.prefill_tokens, self.prefill_ms)])
            .max_by_key(|p| p.0)
            .unwrap_or((self.prefill_tokens, self.prefill_ms));
        // Clamped to a decode token's cost: the prefill is the first forward
        // of a fresh runner, whose one-off start-up cost it would otherwise carry.
        let t = if tokens > 1 {
            ((prefill_ms - a - k - c * tokens as f64) / (tokens - 1) as f64).clamp(0.0, k)
        } else {
            0.0
        };
        RelativeCosts {
            base: a / one,
            per_seq: (k - t).max(0.0) / one,
            per_token: t / one,
            per_context: c / one,
        }
    }
}

fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32
}

/// What [`decode_run`] measured.
#[derive(Debug, Clone, Copy)]
pub struct DecodeRun {
    /// The prefill step of every prompt at once (ms).
    pub prefill_ms: f64,
    /// Mean decode step (ms).
    pub step_ms: f64,
    /// libtorch calls of the last decode step's forward.
    pub ops_per_step: u64,
}

/// The CPU paths a bare decode run takes (the defaults: the engine's).
#[derive(Debug, Clone, Copy)]
pub struct DecodePaths {
    /// How attention reads K/V.
    pub reads: CpuAttention,
    /// Whether the layers' elementwise work runs as host passes
    /// (`model::elementwise`) rather than ATen ops.
    pub host_elementwise: bool,
}

impl Default for DecodePaths {
    fn default() -> Self {
        Self {
            reads: CpuAttention::Paged,
            host_elementwise: true,
        }
    }
}

/// Greedy decode of `batch` random prompts in `dtype`.
pub fn decode_run(
    model: &Path,
    dtype: DType,
    batch: usize,
    prompt_tokens: usize,
    steps: usize,
) -> Result<DecodeRun, EngineError> {
    decode_run_with(
        model,
        dtype,
        batch,
        prompt_tokens,
        steps,
        DecodePaths::default(),
    )
}

/// [`decode_run`] on the given CPU paths.
pub fn decode_run_with(
    model: &Path,
    dtype: DType,
    batch: usize,
    prompt_tokens: usize,
    steps: usize,
    paths: DecodePaths,
) -> Result<DecodeRun, EngineError> {
    let mut opts = TchRunnerOptions::new(model);
    opts.dtype = dtype;
    opts.kv_budget = KvBudget::Tokens(batch * (prompt_tokens + steps + 16));
    opts.enable_prefix_cache = false;
    let mut runner = TchRunner::load(&opts)?;
    runner.decoder().set_cpu_attention(paths.reads);
    runner
        .decoder()
        .set_host_elementwise(paths.host_elementwise);
    let vocab = runner.info().vocab_size as u32;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(batch as u64);
    let mut step = StepBatch::default();
    for rid in 0..batch as u64 {
        let prompt: Vec<u32> = (0..prompt_tokens)
            .map(|_| rng.random_range(100..vocab - 1))
            .collect();
        runner.kv().admit(rid, &prompt)?;
        step.items.push(StepItem {
            rid,
            start: 0,
            tokens: prompt,
        });
    }
    let mut forward = |step: &mut StepBatch| -> Result<(), EngineError> {
        let rows = runner.forward(step)?.logits_rows()?;
        for (item, row) in step.items.iter_mut().zip(rows) {
            item.start += item.tokens.len();
            item.tokens = vec![argmax(&row)];
        }
        Ok(())
    };
    let t0 = Instant::now();
    forward(&mut step)?;
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t0 = Instant::now();
    for _ in 0..steps.max(1) {
        forward(&mut step)?;
    }
    let step_ms = t0.elapsed().as_secs_f64() * 1e3 / steps.max(1) as f64;
    Ok(DecodeRun {
        prefill_ms,
        step_ms,
        ops_per_step: runner.decoder().ops_last_forward(),
    })
}

/// One sequence prefilled to each of `contexts` random tokens, then
/// decoded `steps` steps: the profile's context points.
pub fn context_points(
    model: &Path,
    dtype: DType,
    contexts: &[usize],
    steps: usize,
) -> Result<Vec<ContextPoint>, EngineError> {
    contexts
        .iter()
        .map(|&tokens| {
            let run = decode_run(model, dtype, 1, tokens, steps)?;
            Ok(ContextPoint {
                tokens,
                prefill_ms: run.prefill_ms,
                decode_ms: run.step_ms,
            })
        })
        .collect()
}

impl StepProfile {
    /// Reads a profile saved as JSON.
    pub fn load(path: &Path) -> Result<Self, EngineError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| EngineError::InvalidRequest(format!("{}: {e}", path.display())))?;
        let p: Self = serde_json::from_str(&text)
            .map_err(|e| EngineError::InvalidRequest(format!("{}: {e}", path.display())))?;
        if p.decode_ms.is_empty() {
            return Err(EngineError::InvalidRequest(format!(
                "{}: no decode steps in the profile",
                path.display()
            )));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_linear_profile() {
        // a = 50, s = 3, t = 2: decode 50 + 5B; prefill of 33 tokens = 50 + 3 + 66.
        let p = StepProfile {
            decode_ms: vec![(1, 55.0), (4, 70.0), (16, 130.0)],
            prefill_tokens: 33,
            prefill_ms: 119.0,
            context: vec![],
            dtype: None,
        };
        let r = p.relative();
        assert_eq!(r.per_context, 0.0);
        assert!((r.base - 50.0 / 55.0).abs() < 1e-9);
        assert!((r.per_seq - 3.0 / 55.0).abs() < 1e-9);
        assert!((r.per_token - 2.0 / 55.0).abs() < 1e-9);
        let (b, s, t) = r.scaled(27.9);
        assert!((b + s + t - 27.9).abs() < 1e-9);
    }

    #[test]
    fn fit_recovers_a_context_cost() {
        // a = 50, s = 3, t = 2, c = 0.01 ms per position; the batch runs
        // read 100 positions per sequence: decode 50 + (5 + 1) B.
        let step = |b: f64, tokens: f64, ctx: f64| 50.0 + 3.0 * b + 2.0 * tokens + 0.01 * ctx;
        let p = StepProfile {
            decode_ms: vec![(1, 56.0), (4, 74.0), (16, 146.0)],
            prefill_tokens: 100,
            prefill_ms: step(1.0, 100.0, 100.0),
            context: [1000.0, 4000.0]
                .iter()
                .map(|&n| ContextPoint {
                    tokens: n as usize,
                    prefill_ms: step(1.0, n, n),
                    decode_ms: step(1.0, 1.0, n),
                })
                .collect(),
            dtype: None,
        };
        let r = p.relative();
        assert!((r.per_context - 0.01 / 55.0).abs() < 1e-9, "{r:?}");
        assert!((r.base - 50.0 / 55.0).abs() < 1e-9, "{r:?}");
        assert!((r.per_seq - 3.0 / 55.0).abs() < 1e-9, "{r:?}");
        assert!((r.per_token - 2.0 / 55.0).abs() < 1e-9, "{r:?}");
        assert!((r.scaled_context(55.0) - 0.01).abs() < 1e-12);
    }
}
