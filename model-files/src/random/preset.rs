//! The Qwen3 shapes `gen-random` can write, with their real dimensions.

use std::fmt;
use std::str::FromStr;

use crate::dtype::StorageDtype;
use crate::hf_config::{Architecture, ModelConfig, TokenIds};
use crate::AssetError;

/// Qwen3's vocabulary (embedding rows; the tokenizer has slightly fewer ids).
pub const QWEN3_VOCAB: usize = 151_936;
/// `<|endoftext|>`: Qwen3's BOS and second stop id.
pub const QWEN3_ENDOFTEXT: u32 = 151_643;
/// `<|im_end|>`: Qwen3's main stop id.
pub const QWEN3_IM_END: u32 = 151_645;

/// A model shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Qwen3-0.6B.
    Qwen3_0_6B,
    /// Qwen3-1.7B.
    Qwen3_1_7B,
    /// Qwen3-4B.
    Qwen3_4B,
    /// Qwen3-8B.
    Qwen3_8B,
    /// Qwen3-32B.
    Qwen3_32B,
    /// A 2-layer, 64-wide Qwen3 with the full vocabulary, for tests.
    Tiny,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 6] = [
        Self::Qwen3_0_6B,
        Self::Qwen3_1_7B,
        Self::Qwen3_4B,
        Self::Qwen3_8B,
        Self::Qwen3_32B,
        Self::Tiny,
    ];

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Qwen3_0_6B => "qwen3-0.6b",
            Self::Qwen3_1_7B => "qwen3-1.7b",
            Self::Qwen3_4B => "qwen3-4b",
            Self::Qwen3_8B => "qwen3-8b",
            Self::Qwen3_32B => "qwen3-32b",
            Self::Tiny => "tiny",
        }
    }

    /// The dtype used when none is asked for: bf16 as released, f32 for `tiny`.
    pub fn default_dtype(self) -> StorageDtype {
        match self {
            Self::Tiny => StorageDtype::F32,
            _ => StorageDtype::Bf16,
        }
    }

    /// Stop ids for `generation_config.json` (as in the released models).
    pub fn generation_eos(self) -> TokenIds {
        TokenIds::Many(vec![QWEN3_IM_END, QWEN3_ENDOFTEXT])
    }

    /// The config, stored as `dtype`.
    pub fn config(self, dtype: StorageDtype) -> ModelConfig {
        // (hidden, intermediate, layers, heads, kv heads, head_dim, tied)
        let (hidden, inter, layers, heads, kv, head_dim, tied) = match self {
            Self::Qwen3_0_6B => (1024, 3072, 28, 16, 8, 128, true),
            Self::Qwen3_1_7B => (2048, 6144, 28, 16, 8, 128, true),
            Self::Qwen3_4B => (2560, 9728, 36, 32, 8, 128, true),
            Self::Qwen3_8B => (4096, 12288, 36, 32, 8, 128, false),
            Self::Qwen3_32B => (5120, 25600, 64, 64, 8, 128, false),
            Self::Tiny => (64, 128, 2, 4, 2, 16, false),
        };
        let arch = Architecture::Qwen3;
        ModelConfig {
            architectures: vec![arch.hf_name().to_string()],
            model_type: Some(arch.model_type().to_string()),
            hidden_size: hidden,
            intermediate_size: inter,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: Some(kv),
            head_dim: Some(head_dim),
            vocab_size: QWEN3_VOCAB,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            rope_scaling: None,
            max_position_embeddings: 40_960,
            tie_word_embeddings: tied,
            attention_bias: false,
            hidden_act: "silu".to_string(),
            torch_dtype: Some(dtype.torch_name().to_string()),
            bos_token_id: Some(QWEN3_ENDOFTEXT),
            eos_token_id: Some(TokenIds::One(QWEN3_IM_END)),
            deferral_columns: 0,
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = AssetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
                AssetError::InvalidArgument(format!(
                    "preset `{s}` (expected one of {})",
                    names.join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor_spec::tensor_specs;

    #[test]
    fn presets_validate_and_have_the_released_sizes() {
        for p in Preset::ALL {
            p.config(p.default_dtype()).validate().unwrap();
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
        // Parameter counts of the released checkpoints (embedding counted once when tied).
        let params = |p: Preset| {
            tensor_specs(&p.config(StorageDtype::Bf16))
                .iter()
                .map(|s| s.numel())
                .sum::<usize>()
        };
        assert_eq!(params(Preset::Qwen3_0_6B), 596_049_920);
        assert_eq!(params(Preset::Qwen3_8B), 8_190_735_360);
        assert!("qwen3-7b"
            .parse::<Preset>()
            .unwrap_err()
            .to_string()
            .contains("qwen3-0.6b"));
    }
}
