//! A tiny random-weight model built in memory, for unit tests of the runner,
//! engine and schedulers that must not depend on prepared assets.

use std::collections::HashMap;
use std::path::Path;

use tch::{Device, Kind, Tensor};

use crate::error::EngineError;
use crate::model::config::ModelConfig;
use crate::model::decoder::Decoder;
use crate::model::dir::ModelDir;
use crate::model::weights::Weights;
use crate::runner::memory::KvBudget;
use crate::runner::tch_runner::{TchRunner, TchRunnerOptions};

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
pub fn random_weights(cfg: &ModelConfig, seed: i64) -> HashMap<String, Tensor> {
    tch::manual_seed(seed);
    let (h, hd, nh, nkv, i, v) = (
        cfg.hidden_size as i64,
        cfg.head_dim() as i64,
        cfg.num_attention_heads as i64,
        cfg.kv_heads() as i64,
        cfg.intermediate_size as i64,
        cfg.vocab_size as i64,
    );
    let opts = (Kind::Float, Device::Cpu);
    let lin = |o: i64, n: i64| Tensor::randn([o, n], opts) / (n as f64).sqrt();
    let norm = |n: i64| Tensor::randn([n], opts) * 0.1 + 1.0;
    let mut w = HashMap::new();
    w.insert(
        "model.embed_tokens.weight".into(),
        Tensor::randn([v, h], opts),
    );
    w.insert("lm_head.weight".into(), Tensor::randn([v, h], opts));
    w.insert("model.norm.weight".into(), norm(h));
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        w.insert(format!("{p}.self_attn.q_proj.weight"), lin(nh * hd, h));
        w.insert(format!("{p}.self_attn.k_proj.weight"), lin(nkv * hd, h));
        w.insert(format!("{p}.self_attn.v_proj.weight"), lin(nkv * hd, h));
        w.insert(format!("{p}.self_attn.o_proj.weight"), lin(h, nh * hd));
        w.insert(format!("{p}.self_attn.q_norm.weight"), norm(hd));
        w.insert(format!("{p}.self_attn.k_norm.weight"), norm(hd));
        w.insert(format!("{p}.mlp.gate_proj.weight"), lin(i, h));
        w.insert(format!("{p}.mlp.up_proj.weight"), lin(i, h));
        w.insert(format!("{p}.mlp.down_proj.weight"), lin(h, i));
        w.insert(format!("{p}.input_layernorm.weight"), norm(h));
        w.insert(format!("{p}.post_attention_layernorm.weight"), norm(h));
    }
    w
}

/// A runner over the tiny model with room for `kv_tokens` tokens.
pub fn tiny_runner(kv_tokens: usize, block_size: usize) -> Result<TchRunner, EngineError> {
    let cfg = tiny_config();
    let path = Path::new("tiny-random");
    let decoder = Decoder::new(
        &cfg,
        Weights::from_map(path, random_weights(&cfg, 7)),
        Kind::Float,
        Device::Cpu,
    )?;
    let dir = ModelDir {
        path: path.to_path_buf(),
        config: cfg,
    };
    let mut opts = TchRunnerOptions::new(path);
    opts.kv_budget = KvBudget::Tokens(kv_tokens);
    opts.block_size = block_size;
    TchRunner::with_decoder(decoder, &dir, &opts)
}
