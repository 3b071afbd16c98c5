//! `config.json` of a Hugging Face model directory, for the decoder-only
//! architectures we run.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::load_error::LoadError;

/// The decoder families we implement. They share one decoder with small
/// switches (QKV bias for Qwen2, per-head q/k RMSNorm for Qwen3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `LlamaForCausalLM` (SmolLM2, Llama 2/3).
    Llama,
    /// `Qwen2ForCausalLM`: bias on q/k/v projections.
    Qwen2,
    /// `Qwen3ForCausalLM`: RMSNorm on each head of q and k before RoPE.
    Qwen3,
}

impl Architecture {
    /// Parses the class name used in `config.json`'s `architectures`.
    pub fn from_hf_name(name: &str) -> Option<Self> {
        match name {
            "LlamaForCausalLM" => Some(Self::Llama),
            "Qwen2ForCausalLM" => Some(Self::Qwen2),
            "Qwen3ForCausalLM" => Some(Self::Qwen3),
            _ => None,
        }
    }

    /// The class name written to `config.json`.
    pub fn hf_name(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    /// The `model_type` written to `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
        }
    }
}

/// `eos_token_id` is an int or a list of ints in Hugging Face configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// A single id.
    One(u32),
    /// Several ids.
    Many(Vec<u32>),
}

impl TokenIds {
    /// All ids as a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            Self::One(id) => vec![*id],
            Self::Many(ids) => ids.clone(),
        }
    }
}

/// `rope_scaling` block; only `llama3`-style scaling changes the frequencies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeScaling {
    /// `rope_type` (newer configs) or `type` (older ones).
    #[serde(alias = "type")]
    pub rope_type: String,
    /// Scaling factor.
    #[serde(default)]
    pub factor: Option<f64>,
    /// llama3: low-frequency factor.
    #[serde(default)]
    pub low_freq_factor: Option<f64>,
    /// llama3: high-frequency factor.
    #[serde(default)]
    pub high_freq_factor: Option<f64>,
    /// llama3: original context length.
    #[serde(default)]
    pub original_max_position_embeddings: Option<usize>,
}

/// The fields of `config.json` the runtime reads. Unknown fields are ignored,
/// as transformers does, since real configs carry many we do not need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Class names, e.g. `["Qwen3ForCausalLM"]`.
    pub architectures: Vec<String>,
    /// `llama`, `qwen2`, `qwen3`.
    #[serde(default)]
    pub model_type: Option<String>,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// KV heads (GQA); defaults to `num_attention_heads`.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; defaults to `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// Vocabulary size of the embedding and the head.
    pub vocab_size: usize,
    /// RMSNorm epsilon.
    #[serde(default = "default_rms_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// Optional RoPE scaling.
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// Longest context the model was trained for.
    #[serde(default = "default_max_positions")]
    pub max_position_embeddings: usize,
    /// Whether `lm_head` shares the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v/o projections (Llama/Qwen3 option; Qwen2 always has q/k/v bias).
    #[serde(default)]
    pub attention_bias: bool,
    /// Activation of the MLP; only `silu` is supported.
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Storage dtype of the checkpoint (`float32`, `bfloat16`, `float16`).
    #[serde(default)]
    pub torch_dtype: Option<String>,
    /// BOS id.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// EOS id(s).
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
    /// Extra rows of `lm_head` after the vocabulary (Co-LLM's deferral
    /// score: `lm_head.weight` is `[vocab_size + deferral_columns, hidden]`).
    /// They are never sampled; the logits a policy reads keep them. Needs an
    /// untied head. Default 0 (and not written when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferral_columns: usize,
}

fn is_zero(v: &usize) -> bool {
    *v == 0
}

fn default_rms_eps() -> f64 {
    1e-6
}
fn default_rope_theta() -> f64 {
    10_000.0
}
fn default_max_positions() -> usize {
    4096
}
fn default_act() -> String {
    "silu".to_string()
}

impl ModelConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
        let cfg: Self = serde_json::from_str(&text).map_err(|e| LoadError::InvalidModel {
            path: path.to_path_buf(),
            reason: format!("config.json: {e}"),
        })?;
        cfg.validate().map_err(|reason| LoadError::InvalidModel {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(cfg)
    }

    /// The architecture, or an error naming the unknown class.
    pub fn architecture(&self) -> Result<Architecture, String> {
        let name = self
            .architectures
            .first()
            .ok_or_else(|| "config.json: `architectures` is empty".to_string())?;
        Architecture::from_hf_name(name).ok_or_else(|| {
            format!(
                "unsupported architecture `{name}` (supported: LlamaForCausalLM, \
                 Qwen2ForCausalLM, Qwen3ForCausalLM)"
            )
        })
    }

    /// KV heads, resolving the default.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width, resolving the default.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// EOS ids from the config (generation_config.json may add more).
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos_token_id
            .as_ref()
            .map(TokenIds::to_vec)
            .unwrap_or_default()
    }

    /// Checks the shape arithmetic the decoder relies on.
    pub fn validate(&self) -> Result<(), String> {
        self.architecture()?;
        let positive = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.kv_heads()),
            ("head_dim", self.head_dim()),
            ("vocab_size", self.vocab_size),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(format!("config.json: `{name}` must be positive"));
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            return Err(format!(
                "config.json: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                self.num_attention_heads,
                self.kv_heads()
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!(
                "config.json: head_dim ({}) must be even for RoPE",
                self.head_dim()
            ));
        }
        if self.hidden_act != "silu" {
            return Err(format!(
                "config.json: hidden_act `{}` is not supported (only silu)",
                self.hidden_act
            ));
        }
        if self.deferral_columns > 0 && self.tie_word_embeddings {
            return Err(format!(
                "config.json: deferral_columns ({}) needs an untied lm_head \
                 (tie_word_embeddings: false)",
                self.deferral_columns
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferral_columns_default_to_zero_and_need_an_untied_head() {
        let cfg: ModelConfig = serde_json::from_value(base()).unwrap();
        assert_eq!(cfg.deferral_columns, 0);
        assert!(!serde_json::to_string(&cfg).unwrap().contains("deferral"));
        let mut v = base();
        v["deferral_columns"] = 1.into();
        let cfg: ModelConfig = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(cfg.deferral_columns, 1);
        cfg.validate().unwrap();
        v["tie_word_embeddings"] = true.into();
        let cfg: ModelConfig = serde_json::from_value(v).unwrap();
        assert!(cfg.validate().unwrap_err().contains("untied"));
    }

    fn base() -> serde_json::Value {
        serde_json::json!({
            "architectures": ["Qwen3ForCausalLM"],
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 100, "eos_token_id": [1, 2], "unknown_field": true
        })
    }

    #[test]
    fn parses_defaults_and_ignores_unknown_fields() {
        let cfg: ModelConfig = serde_json::from_value(base()).unwrap();
        assert_eq!(cfg.architecture().unwrap(), Architecture::Qwen3);
        assert_eq!(cfg.kv_heads(), 2);
        assert_eq!(cfg.eos_ids(), vec![1, 2]);
        assert_eq!(cfg.rope_theta, 10_000.0);
        cfg.validate().unwrap();
    }

    #[test]
    fn rejects_unknown_architecture_by_name() {
        let mut v = base();
        v["architectures"] = serde_json::json!(["MambaForCausalLM"]);
        let cfg: ModelConfig = serde_json::from_value(v).unwrap();
        assert!(cfg.validate().unwrap_err().contains("MambaForCausalLM"));
    }

    #[test]
    fn rejects_bad_gqa_ratio() {
        let mut v = base();
        v["num_key_value_heads"] = serde_json::json!(3);
        let cfg: ModelConfig = serde_json::from_value(v).unwrap();
        assert!(cfg.validate().unwrap_err().contains("num_key_value_heads"));
    }
}
