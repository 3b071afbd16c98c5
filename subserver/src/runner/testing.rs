//! A tiny random-weight model built in memory, for unit tests of the runner,
//! engine and schedulers that must not depend on prepared assets.

use std::collections::HashMap;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use tch::{Device, Kind, Tensor};

use crate::error::EngineError;
use crate::model::decoder::Decoder;
use crate::model::dir::ModelDir;
use crate::model::weights::Weights;
use crate::runner::memory::KvBudget;
use crate::runner::tch_runner::{TchRunner, TchRunnerOptions};
use model_files::hf_config::ModelConfig;

/// A 2-layer Qwen3-style config (q/k norm, GQA 4:2) with a 97-token vocabulary.
pub fn tiny_config() -> ModelConfig {
    serde_json::from_value(serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "vocab_size": 97, "max_position_embeddings": 256, "rope_theta": 10000.0,
        "eos_token_id": 96
    }))
    .expect("static config")
}

/// Seeded random weights for `cfg` (only the names the decoder reads).
/// Drawn from a generator of their own, not libtorch's process-global one:
/// tests run in parallel, and two runners built from the same seed must get
/// the same weights whatever other tests draw meanwhile.
pub fn random_weights(cfg: &ModelConfig, seed: i64) -> HashMap<String, Tensor> {
    let rng = &mut ChaCha8Rng::seed_from_u64(seed as u64);
    let (h, hd, nh, nkv, i, v) = (
        cfg.hidden_size as i64,
        cfg.head_dim() as i64,
        cfg.num_attention_heads as i64,
        cfg.kv_heads() as i64,
        cfg.intermediate_size as i64,
        cfg.vocab_size as i64,
    );
    let lin = |rng: &mut ChaCha8Rng, o: i64, n: i64| normal(rng, &[o, n]) / (n as f64).sqrt();
    let norm = |rng: &mut ChaCha8Rng, n: i64| normal(rng, &[n]) * 0.1 + 1.0;
    let mut w = HashMap::new();
    w.insert("model.embed_tokens.weight".into(), normal(rng, &[v, h]));
    w.insert("lm_head.weight".into(), normal(rng, &[v, h]));
    w.insert("model.norm.weight".into(), norm(rng, h));
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        w.insert(format!("{p}.self_attn.q_proj.weight"), lin(rng, nh * hd, h));
        w.insert(
            format!("{p}.self_attn.k_proj.weight"),
            lin(rng, nkv * hd, h),
        );
        w.insert(
            format!("{p}.self_attn.v_proj.weight"),
            lin(rng, nkv * hd, h),
        );
        w.insert(format!("{p}.self_attn.o_proj.weight"), lin(rng, h, nh * hd));
        w.insert(format!("{p}.self_attn.q_norm.weight"), norm(rng, hd));
        w.insert(format!("{p}.self_attn.k_norm.weight"), norm(rng, hd));
        w.insert(format!("{p}.mlp.gate_proj.weight"), lin(rng, i, h));
        w.insert(format!("{p}.mlp.up_proj.weight"), lin(rng, i, h));
        w.insert(format!("{p}.mlp.down_proj.weight"), lin(rng, h, i));
        w.insert(format!("{p}.input_layernorm.weight"), norm(rng, h));
        w.insert(format!("{p}.post_attention_layernorm.weight"), norm(rng, h));
    }
    w
}

/// A standard-normal `f32` tensor of `shape` from `rng`.
fn normal(rng: &mut ChaCha8Rng, shape: &[i64]) -> Tensor {
    let n = shape.iter().product::<i64>() as usize;
    let v: Vec<f32> = (0..n).map(|_| rng.sample(StandardNormal)).collect();
    Tensor::from_slice(&v).view(shape)
}

/// A runner over the tiny model with room for `kv_tokens` tokens.
pub fn tiny_runner(kv_tokens: usize, block_size: usize) -> Result<TchRunner, EngineError> {
    tiny_runner_in(Kind::Float, kv_tokens, block_size)
}

/// [`tiny_runner`] with weights, activations and KV in `kind`.
pub fn tiny_runner_in(
    kind: Kind,
    kv_tokens: usize,
    block_size: usize,
) -> Result<TchRunner, EngineError> {
    let cfg = tiny_config();
    let path = Path::new("tiny-random");
    let weights = random_weights(&cfg, 7)
        .into_iter()
        .map(|(name, t)| Ok((name, t.f_to_kind(kind)?)))
        .collect::<Result<_, EngineError>>()?;
    let decoder = Decoder::new(&cfg, Weights::from_map(path, weights), kind, Device::Cpu)?;
    let dir = ModelDir {
        path: path.to_path_buf(),
        config: cfg,
    };
    let mut opts = TchRunnerOptions::new(path);
    opts.kv_budget = KvBudget::Tokens(kv_tokens);
    opts.block_size = block_size;
    TchRunner::with_decoder(decoder, &dir, &opts)
}

/// Greedy decode of `prompt` alone on `r` (admitted as request 1) for
/// `steps` steps: the tokens chosen and each step's logits.
pub fn greedy_alone(
    r: &mut TchRunner,
    prompt: &[u32],
    steps: usize,
) -> Result<(Vec<u32>, Vec<Vec<f32>>), EngineError> {
    use crate::runner::{ModelRunner, StepBatch, StepItem};
    r.kv().admit(1, prompt)?;
    let mut item = StepItem {
        rid: 1,
        start: 0,
        tokens: prompt.to_vec(),
    };
    let (mut toks, mut rows) = (vec![], vec![]);
    for _ in 0..steps {
        let batch = StepBatch {
            entropy_items: vec![],
            items: vec![item.clone()],
        };
        let mut out = r.forward(&batch)?.logits_rows()?;
        let row = out.remove(0);
        let t = kernels::argmax(&row).ok_or_else(|| {
            EngineError::Load(model_files::LoadError::InvalidModel {
                path: Default::default(),
                reason: "a step's logits row is empty or all NaN".into(),
            })
        })?;
        item.start += item.tokens.len();
        item.tokens = vec![t];
        toks.push(t);
        rows.push(row);
    }
    Ok((toks, rows))
}
