//! The tensor plan of a decoder checkpoint: every tensor's transformers name,
//! shape and random initialisation, derived from `config.json` alone.
//!
//! The same plan serves three jobs: writing random checkpoints, checking that
//! an imported GGUF produced exactly the tensors the config implies, and
//! (later) creating random weights directly in device memory.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

use crate::hf_config::{Architecture, ModelConfig};

/// How a tensor's values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InitKind {
    /// N(0, std²): linear weights (std = 1/sqrt(fan_in)), embeddings and head (std = 1).
    Normal {
        /// Standard deviation.
        std: f32,
    },
    /// 1 + N(0, std²): RMSNorm weights, jittered so every norm matters.
    OnePlusNormal {
        /// Standard deviation of the jitter.
        std: f32,
    },
    /// All zeros (projection biases).
    Zeros,
}

impl InitKind {
    /// Fills `out` with the next values of `rng`. Filling a tensor in chunks
    /// gives the same values as filling it at once.
    pub fn fill(self, rng: &mut ChaCha8Rng, out: &mut [f32]) {
        match self {
            Self::Normal { std } => {
                for v in out {
                    *v = rng.sample::<f32, _>(StandardNormal) * std;
                }
            }
            Self::OnePlusNormal { std } => {
                for v in out {
                    *v = 1.0 + rng.sample::<f32, _>(StandardNormal) * std;
                }
            }
            Self::Zeros => out.fill(0.0),
        }
    }
}

/// One tensor of the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    /// transformers name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub name: String,
    /// Row-major shape (`[out, in]` for linear weights).
    pub shape: Vec<usize>,
    /// Random initialisation.
    pub init: InitKind,
}

impl TensorSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn linear(name: String, out: usize, inp: usize) -> Self {
        Self {
            name,
            shape: vec![out, inp],
            init: InitKind::Normal {
                std: 1.0 / (inp as f32).sqrt(),
            },
        }
    }

    fn norm(name: String, width: usize) -> Self {
        Self {
            name,
            shape: vec![width],
            init: InitKind::OnePlusNormal { std: 0.1 },
        }
    }

    fn bias(name: String, width: usize) -> Self {
        Self {
            name,
            shape: vec![width],
            init: InitKind::Zeros,
        }
    }
}

/// The random stream of one tensor: ChaCha8 keyed by `seed`, on a stream
/// chosen by the tensor's name (FNV-1a). Each tensor can thus be generated on
/// its own, in any order, and its values do not depend on the layer count.
pub fn tensor_rng(seed: u64, name: &str) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    rng.set_stream(hash);
    rng
}

/// Every tensor a checkpoint of `cfg` holds, in a stable order: embedding,
/// then each layer, then the final norm and (untied) head. `cfg` should be
/// validated; an architecture it does not name gets the Llama layout.
pub fn tensor_specs(cfg: &ModelConfig) -> Vec<TensorSpec> {
    let arch = cfg.architecture().unwrap_or(Architecture::Llama);
    let (hidden, inter) = (cfg.hidden_size, cfg.intermediate_size);
    let hd = cfg.head_dim();
    let (q_out, kv_out) = (cfg.num_attention_heads * hd, cfg.kv_heads() * hd);
    let qkv_bias = arch == Architecture::Qwen2 || cfg.attention_bias;

    let mut specs = vec![TensorSpec {
        name: "model.embed_tokens.weight".into(),
        shape: vec![cfg.vocab_size, hidden],
        init: InitKind::Normal { std: 1.0 },
    }];
    for i in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{i}");
        specs.push(TensorSpec::norm(
            format!("{p}.input_layernorm.weight"),
            hidden,
        ));
        specs.push(TensorSpec::linear(
            format!("{p}.self_attn.q_proj.weight"),
            q_out,
            hidden,
        ));
        specs.push(TensorSpec::linear(
            format!("{p}.self_attn.k_proj.weight"),
            kv_out,
            hidden,
        ));
        specs.push(TensorSpec::linear(
            format!("{p}.self_attn.v_proj.weight"),
            kv_out,
            hidden,
        ));
        if qkv_bias {
            specs.push(TensorSpec::bias(
                format!("{p}.self_attn.q_proj.bias"),
                q_out,
            ));
            specs.push(TensorSpec::bias(
                format!("{p}.self_attn.k_proj.bias"),
                kv_out,
            ));
            specs.push(TensorSpec::bias(
                format!("{p}.self_attn.v_proj.bias"),
                kv_out,
            ));
        }
        specs.push(TensorSpec::linear(
            format!("{p}.self_attn.o_proj.weight"),
            hidden,
            q_out,
        ));
        if cfg.attention_bias {
            specs.push(TensorSpec::bias(
                format!("{p}.self_attn.o_proj.bias"),
                hidden,
            ));
        }
        if arch == Architecture::Qwen3 {
            specs.push(TensorSpec::norm(format!("{p}.self_attn.q_norm.weight"), hd));
            specs.push(TensorSpec::norm(format!("{p}.self_attn.k_norm.weight"), hd));
        }
        specs.push(TensorSpec::norm(
            format!("{p}.post_attention_layernorm.weight"),
            hidden,
        ));
        specs.push(TensorSpec::linear(
            format!("{p}.mlp.gate_proj.weight"),
            inter,
            hidden,
        ));
        specs.push(TensorSpec::linear(
            format!("{p}.mlp.up_proj.weight"),
            inter,
            hidden,
        ));
        specs.push(TensorSpec::linear(
            format!("{p}.mlp.down_proj.weight"),
            hidden,
            inter,
        ));
    }
    specs.push(TensorSpec::norm("model.norm.weight".into(), hidden));
    if !cfg.tie_word_embeddings {
        specs.push(TensorSpec {
            name: "lm_head.weight".into(),
            shape: vec![cfg.vocab_size + cfg.deferral_columns, hidden],
            init: InitKind::Normal { std: 1.0 },
        });
    }
    specs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(arch: &str, tied: bool) -> ModelConfig {
        serde_json::from_value(serde_json::json!({
            "architectures": [arch], "hidden_size": 8, "intermediate_size": 12,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 4, "vocab_size": 10, "tie_word_embeddings": tied
        }))
        .unwrap()
    }

    #[test]
    fn qwen3_plan_has_head_norms_and_untied_head() {
        let specs = tensor_specs(&cfg("Qwen3ForCausalLM", false));
        assert_eq!(specs.len(), 1 + 2 * 11 + 2);
        let get = |n: &str| specs.iter().find(|s| s.name == n).unwrap();
        assert_eq!(get("model.layers.1.self_attn.q_proj.weight").shape, [16, 8]);
        assert_eq!(get("model.layers.1.self_attn.k_proj.weight").shape, [8, 8]);
        assert_eq!(get("model.layers.1.self_attn.o_proj.weight").shape, [8, 16]);
        assert_eq!(get("model.layers.0.self_attn.k_norm.weight").shape, [4]);
        assert_eq!(
            get("model.layers.0.mlp.down_proj.weight").init,
            InitKind::Normal {
                std: 1.0 / 12f32.sqrt()
            }
        );
        assert_eq!(get("lm_head.weight").shape, [10, 8]);
    }

    #[test]
    fn llama_tied_plan_has_no_head_and_qwen2_has_biases() {
        let specs = tensor_specs(&cfg("LlamaForCausalLM", true));
        assert_eq!(specs.len(), 1 + 2 * 9 + 1);
        assert!(!specs
            .iter()
            .any(|s| s.name == "lm_head.weight" || s.name.contains("q_norm")));
        let specs = tensor_specs(&cfg("Qwen2ForCausalLM", true));
        assert!(
            specs
                .iter()
                .any(|s| s.name == "model.layers.1.self_attn.v_proj.bias"
                    && s.init == InitKind::Zeros)
        );
    }

    #[test]
    fn streams_depend_on_seed_and_name_and_chunking_does_not_matter() {
        let init = InitKind::Normal { std: 2.0 };
        let mut whole = vec![0f32; 100];
        init.fill(&mut tensor_rng(7, "a"), &mut whole);
        let mut chunked = vec![0f32; 100];
        let mut rng = tensor_rng(7, "a");
        for c in chunked.chunks_mut(33) {
            init.fill(&mut rng, c);
        }
        assert_eq!(whole, chunked);
        let mut other = vec![0f32; 100];
        init.fill(&mut tensor_rng(7, "b"), &mut other);
        assert_ne!(whole, other);
        init.fill(&mut tensor_rng(8, "a"), &mut other);
        assert_ne!(whole, other);
        let mean = whole.iter().sum::<f32>() / 100.0;
        let var = whole.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 100.0;
        assert!((var.sqrt() - 2.0).abs() < 0.4, "std {}", var.sqrt());
    }
}
