//! `gen-random --no-save`: a random model built in device memory and a short
//! timed batched generation on it (benchmarks of shapes too big to write).

use std::time::Instant;

use model_files::hf_config::ModelConfig;
use subserver::config::{DType, DeviceSpec};
use subserver::error::EngineError;
use subserver::model::decoder::Decoder;
use subserver::model::dir::ModelDir;
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::{ModelRunner, StepBatch, StepItem};

use crate::random_init::random_weights;

const BATCH: usize = 8;
const PROMPT: usize = 128;
const DECODE: usize = 32;

/// What the timed run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RandomModelReport {
    /// Decoder layers.
    pub layers: usize,
    /// Parameters.
    pub parameters: usize,
    /// Seconds to create the weights on the device.
    pub build_s: f64,
    /// Prefill tokens per second (batch of 8 x 128 tokens).
    pub prefill_tok_s: f64,
    /// Decode tokens per second (batch of 8).
    pub decode_tok_s: f64,
}

/// Builds the model on `device` and times a prefill and 32 decode steps.
pub fn build_and_time(
    cfg: &ModelConfig,
    seed: u64,
    dtype: DType,
    device: DeviceSpec,
) -> Result<RandomModelReport, EngineError> {
    let device: tch::Device = device.into();
    subserver::device::ensure_device(device)?;
    let kind: tch::Kind = dtype.into();
    let t0 = Instant::now();
    let weights = random_weights(cfg, seed as i64, kind, device)?;
    let decoder = Decoder::new(cfg, weights, kind, device)?;
    let built = t0.elapsed().as_secs_f64();
    let dir = ModelDir {
        path: "random".into(),
        config: cfg.clone(),
    };
    let mut opts = TchRunnerOptions::new(&dir.path);
    opts.device = device;
    opts.dtype = dtype;
    opts.kv_budget = KvBudget::Tokens(BATCH * (PROMPT + DECODE + 16));
    let mut runner = TchRunner::with_decoder(decoder, &dir, &opts)?;
    let vocab = cfg.vocab_size as u32;
    let mut batch = StepBatch::default();
    for rid in 0..BATCH as u64 {
        let prompt: Vec<u32> = (0..PROMPT as u32)
            .map(|i| (i * 7919 + rid as u32 * 104_729) % vocab)
            .collect();
        runner.kv().admit(rid, &prompt)?;
        batch.items.push(StepItem {
            rid,
            start: 0,
            tokens: prompt,
        });
    }
    let t1 = Instant::now();
    let rows = runner.forward(&batch)?.logits_rows()?;
    let prefill = t1.elapsed().as_secs_f64();
    let mut next: Vec<u32> = rows.iter().map(|r| argmax(r)).collect();
    let t2 = Instant::now();
    for _ in 0..DECODE {
        for (item, &tok) in batch.items.iter_mut().zip(&next) {
            item.start += item.tokens.len();
            item.tokens = vec![tok];
        }
        let rows = runner.forward(&batch)?.logits_rows()?;
        next = rows.iter().map(|r| argmax(r)).collect();
    }
    let decode = t2.elapsed().as_secs_f64();
    let parameters = model_files::tensor_specs(cfg)
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum();
    Ok(RandomModelReport {
        layers: cfg.num_hidden_layers,
        parameters,
        build_s: built,
        prefill_tok_s: (BATCH * PROMPT) as f64 / prefill,
        decode_tok_s: (BATCH * DECODE) as f64 / decode,
    })
}

fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b }) as u32
}
