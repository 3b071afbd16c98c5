//! `config.json` for a GGUF, from its `<arch>.*` metadata: `llama` and
//! `qwen2` (the same keys; Qwen2 adds q/k/v biases, which the decoder
//! takes from the architecture, and rotates q/k in NeoX order without
//! llama.cpp's row permutation: see [`super::tensor_names`]).

use super::file::GgufHeader;
use crate::dtype::StorageDtype;
use crate::hf_config::{Architecture, ModelConfig, TokenIds};
use crate::AssetError;

/// The `general.architecture` values we import.
pub const GGUF_ARCHITECTURES: &str = "llama, qwen2";

/// The architecture `general.architecture` names.
pub fn gguf_architecture(h: &GgufHeader) -> Result<Architecture, AssetError> {
    match h.str("general.architecture")? {
        "llama" => Ok(Architecture::Llama),
        "qwen2" => Ok(Architecture::Qwen2),
        other => Err(AssetError::UnsupportedModel(format!(
            "general.architecture is `{other}`; the GGUF architectures imported are {GGUF_ARCHITECTURES}"
        ))),
    }
}

/// Builds the transformers config of the model in `h`. `tied` is true when
/// the file has no `output.weight` (the head reuses the embedding).
pub fn gguf_config(
    h: &GgufHeader,
    tied: bool,
    dtype: StorageDtype,
) -> Result<ModelConfig, AssetError> {
    let arch = gguf_architecture(h)?;
    let prefix = arch.model_type();
    let key = |k: &str| format!("{prefix}.{k}");
    let hidden = h.u64(&key("embedding_length"))? as usize;
    let heads = h.u64(&key("attention.head_count"))? as usize;
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(AssetError::Metadata {
            key: key("attention.head_count"),
            reason: format!("{heads} heads do not divide embedding_length {hidden}"),
        });
    }
    let kv_heads = h
        .opt_u64(&key("attention.head_count_kv"))?
        .map_or(heads, |v| v as usize);
    let head_dim = h
        .opt_u64(&key("attention.key_length"))?
        .map_or(hidden / heads, |v| v as usize);
    if let Some(v) = h.opt_u64(&key("attention.value_length"))? {
        if v as usize != head_dim {
            return Err(AssetError::UnsupportedModel(format!(
                "{} {v} differs from key_length {head_dim}",
                key("attention.value_length")
            )));
        }
    }
    if let Some(rot) = h.opt_u64(&key("rope.dimension_count"))? {
        if rot as usize != head_dim {
            return Err(AssetError::UnsupportedModel(format!(
                "{} {rot} != head_dim {head_dim} (partial rotary is not supported)",
                key("rope.dimension_count")
            )));
        }
    }
    if let Some(kind) = h.opt_str(&key("rope.scaling.type"))? {
        if kind != "none" {
            return Err(AssetError::UnsupportedModel(format!(
                "{} `{kind}` is not supported",
                key("rope.scaling.type")
            )));
        }
    }
    let vocab = match h.opt_u64(&key("vocab_size"))? {
        Some(v) => v as usize,
        None => h
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .map(<[_]>::len)
            .ok_or_else(|| AssetError::Metadata {
                key: key("vocab_size"),
                reason: "missing, and no tokenizer.ggml.tokens to count".into(),
            })?,
    };
    let eps = h
        .opt_f64(&key("attention.layer_norm_rms_epsilon"))?
        .ok_or_else(|| AssetError::Metadata {
            key: key("attention.layer_norm_rms_epsilon"),
            reason: "missing".into(),
        })?;
    let eos = h
        .opt_u64("tokenizer.ggml.eos_token_id")?
        .map(|v| TokenIds::One(v as u32));
    let cfg = ModelConfig {
        architectures: vec![arch.hf_name().to_string()],
        model_type: Some(arch.model_type().to_string()),
        hidden_size: hidden,
        intermediate_size: h.u64(&key("feed_forward_length"))? as usize,
        num_hidden_layers: h.u64(&key("block_count"))? as usize,
        num_attention_heads: heads,
        num_key_value_heads: Some(kv_heads),
        head_dim: Some(head_dim),
        vocab_size: vocab,
        rms_norm_eps: eps,
        rope_theta: h.opt_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0),
        rope_scaling: None,
        max_position_embeddings: h.u64(&key("context_length"))? as usize,
        tie_word_embeddings: tied,
        // Qwen2's q/k/v biases come with the architecture; o_proj has none.
        attention_bias: false,
        hidden_act: "silu".to_string(),
        torch_dtype: Some(dtype.torch_name().to_string()),
        bos_token_id: h.opt_u64("tokenizer.ggml.bos_token_id")?.map(|v| v as u32),
        eos_token_id: eos,
        deferral_columns: 0,
    };
    cfg.validate().map_err(AssetError::UnsupportedModel)?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::test_file::GgufBuilder;
    use super::super::value::MetadataValue as V;
    use super::*;

    fn llama_meta() -> GgufBuilder {
        let mut b = GgufBuilder::new(3);
        b.kv("general.architecture", V::String("llama".into()));
        b.kv("llama.block_count", V::U32(2));
        b.kv("llama.context_length", V::U32(128));
        b.kv("llama.embedding_length", V::U32(8));
        b.kv("llama.feed_forward_length", V::U32(12));
        b.kv("llama.attention.head_count", V::U32(2));
        b.kv("llama.attention.head_count_kv", V::U32(1));
        b.kv("llama.rope.freq_base", V::F32(100000.0));
        b.kv("llama.attention.layer_norm_rms_epsilon", V::F32(1e-5));
        b.kv("llama.vocab_size", V::U32(10));
        b.kv("llama.rope.dimension_count", V::U32(4));
        b.kv("tokenizer.ggml.bos_token_id", V::U32(1));
        b.kv("tokenizer.ggml.eos_token_id", V::U32(2));
        b
    }

    fn parse(b: &GgufBuilder) -> GgufHeader {
        GgufHeader::parse(Path::new("c.gguf"), &b.build()).unwrap()
    }

    #[test]
    fn builds_llama_config_from_metadata() {
        let cfg = gguf_config(&parse(&llama_meta()), true, StorageDtype::Bf16).unwrap();
        assert_eq!(cfg.architectures, ["LlamaForCausalLM"]);
        assert_eq!(
            (
                cfg.hidden_size,
                cfg.intermediate_size,
                cfg.num_hidden_layers
            ),
            (8, 12, 2)
        );
        assert_eq!(
            (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim()),
            (2, 1, 4)
        );
        assert_eq!(cfg.rms_norm_eps, 1e-5);
        assert_eq!(cfg.rope_theta, 100000.0);
        assert_eq!(cfg.max_position_embeddings, 128);
        assert_eq!(cfg.vocab_size, 10);
        assert!(cfg.tie_word_embeddings);
        assert_eq!(cfg.torch_dtype.as_deref(), Some("bfloat16"));
        assert_eq!((cfg.bos_token_id, cfg.eos_ids()), (Some(1), vec![2]));
    }

    #[test]
    fn builds_qwen2_config_from_qwen2_keys() {
        let mut b = GgufBuilder::new(3);
        for (k, v) in llama_meta().metadata() {
            let k = k.replace("llama.", "qwen2.");
            b.kv(&k, v.clone());
        }
        b.set_kv("general.architecture", V::String("qwen2".into()));
        b.set_kv("qwen2.rope.freq_base", V::F32(1_000_000.0));
        b.remove_kv("qwen2.rope.dimension_count");
        let cfg = gguf_config(&parse(&b), false, StorageDtype::F32).unwrap();
        assert_eq!(cfg.architectures, ["Qwen2ForCausalLM"]);
        assert_eq!(cfg.model_type.as_deref(), Some("qwen2"));
        assert_eq!(
            (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim()),
            (2, 1, 4)
        );
        assert_eq!(cfg.rope_theta, 1_000_000.0);
        assert!(!cfg.tie_word_embeddings && !cfg.attention_bias);
        // A llama key in a qwen2 file is not read: the qwen2 one is required.
        b.remove_kv("qwen2.block_count");
        b.kv("llama.block_count", V::U32(2));
        let err = gguf_config(&parse(&b), true, StorageDtype::F32).unwrap_err();
        assert!(err.to_string().contains("qwen2.block_count"), "{err}");
    }

    #[test]
    fn rejects_other_architectures_partial_rotary_and_missing_keys() {
        let mut b = llama_meta();
        b.set_kv("general.architecture", V::String("gemma2".into()));
        let err = gguf_config(&parse(&b), true, StorageDtype::F32).unwrap_err();
        assert!(
            err.to_string().contains("`gemma2`") && err.to_string().contains("llama, qwen2"),
            "{err}"
        );
        let mut b = llama_meta();
        b.set_kv("llama.rope.dimension_count", V::U32(2));
        assert!(gguf_config(&parse(&b), true, StorageDtype::F32)
            .unwrap_err()
            .to_string()
            .contains("partial rotary"));
        let mut b = llama_meta();
        b.remove_kv("llama.block_count");
        let err = gguf_config(&parse(&b), true, StorageDtype::F32).unwrap_err();
        assert!(err.to_string().contains("llama.block_count"), "{err}");
        let mut b = llama_meta();
        b.set_kv("llama.embedding_length", V::String("8".into()));
        let err = gguf_config(&parse(&b), true, StorageDtype::F32).unwrap_err();
        assert!(
            err.to_string().contains("llama.embedding_length")
                && err.to_string().contains("string"),
            "{err}"
        );
    }
}
