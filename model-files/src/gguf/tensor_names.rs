//! llama.cpp tensor names → transformers tensor names (llama and qwen2).

use crate::hf_config::Architecture;
use crate::AssetError;

/// Whether a tensor carries llama.cpp's rotary row permutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotaryRows {
    /// Stored as in transformers.
    Plain,
    /// q_proj: permuted with the number of query heads.
    Query,
    /// k_proj: permuted with the number of KV heads.
    Key,
}

/// [`map_tensor_name`] for a llama GGUF.
pub fn map_llama_name(gguf: &str) -> Result<(String, RotaryRows), AssetError> {
    map_tensor_name(Architecture::Llama, gguf)
}

/// The transformers name of a llama.cpp tensor of an `arch` GGUF, and
/// whether its rows must be un-permuted. llama.cpp's converter permutes
/// q/k rows only for llama (its GPT-J rotary kernel); qwen2 GGUFs keep the
/// NeoX order transformers uses, and add q/k/v biases.
pub fn map_tensor_name(arch: Architecture, gguf: &str) -> Result<(String, RotaryRows), AssetError> {
    let qwen2 = arch == Architecture::Qwen2;
    let (query, key) = if qwen2 {
        (RotaryRows::Plain, RotaryRows::Plain)
    } else {
        (RotaryRows::Query, RotaryRows::Key)
    };
    let unmapped = |reason: &str| AssetError::UnmappedTensor {
        tensor: gguf.to_string(),
        reason: reason.to_string(),
    };
    match gguf {
        "token_embd.weight" => return Ok(("model.embed_tokens.weight".into(), RotaryRows::Plain)),
        "output_norm.weight" => return Ok(("model.norm.weight".into(), RotaryRows::Plain)),
        "output.weight" => return Ok(("lm_head.weight".into(), RotaryRows::Plain)),
        "rope_freqs.weight" => {
            return Err(unmapped(
                "RoPE frequency factors (llama3-style rope scaling) are not supported",
            ))
        }
        _ => {}
    }
    let rest = gguf
        .strip_prefix("blk.")
        .ok_or_else(|| unmapped("no transformers counterpart for this tensor"))?;
    let (layer, part) = rest
        .split_once('.')
        .ok_or_else(|| unmapped("expected blk.<layer>.<part>"))?;
    let layer: usize = layer
        .parse()
        .map_err(|_| unmapped("layer index is not a number"))?;
    let (hf, rows) = match part {
        "attn_norm.weight" => ("input_layernorm.weight", RotaryRows::Plain),
        "ffn_norm.weight" => ("post_attention_layernorm.weight", RotaryRows::Plain),
        "attn_q.weight" => ("self_attn.q_proj.weight", query),
        "attn_k.weight" => ("self_attn.k_proj.weight", key),
        "attn_q.bias" if qwen2 => ("self_attn.q_proj.bias", RotaryRows::Plain),
        "attn_k.bias" if qwen2 => ("self_attn.k_proj.bias", RotaryRows::Plain),
        "attn_v.bias" if qwen2 => ("self_attn.v_proj.bias", RotaryRows::Plain),
        "attn_v.weight" => ("self_attn.v_proj.weight", RotaryRows::Plain),
        "attn_output.weight" => ("self_attn.o_proj.weight", RotaryRows::Plain),
        "ffn_gate.weight" => ("mlp.gate_proj.weight", RotaryRows::Plain),
        "ffn_up.weight" => ("mlp.up_proj.weight", RotaryRows::Plain),
        "ffn_down.weight" => ("mlp.down_proj.weight", RotaryRows::Plain),
        _ => return Err(unmapped("no transformers counterpart for this tensor")),
    };
    Ok((format!("model.layers.{layer}.{hf}"), rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_llama_tensor() {
        let cases = [
            (
                "token_embd.weight",
                "model.embed_tokens.weight",
                RotaryRows::Plain,
            ),
            ("output_norm.weight", "model.norm.weight", RotaryRows::Plain),
            ("output.weight", "lm_head.weight", RotaryRows::Plain),
            (
                "blk.12.attn_norm.weight",
                "model.layers.12.input_layernorm.weight",
                RotaryRows::Plain,
            ),
            (
                "blk.0.ffn_norm.weight",
                "model.layers.0.post_attention_layernorm.weight",
                RotaryRows::Plain,
            ),
            (
                "blk.3.attn_q.weight",
                "model.layers.3.self_attn.q_proj.weight",
                RotaryRows::Query,
            ),
            (
                "blk.3.attn_k.weight",
                "model.layers.3.self_attn.k_proj.weight",
                RotaryRows::Key,
            ),
            (
                "blk.3.attn_v.weight",
                "model.layers.3.self_attn.v_proj.weight",
                RotaryRows::Plain,
            ),
            (
                "blk.3.attn_output.weight",
                "model.layers.3.self_attn.o_proj.weight",
                RotaryRows::Plain,
            ),
            (
                "blk.29.ffn_gate.weight",
                "model.layers.29.mlp.gate_proj.weight",
                RotaryRows::Plain,
            ),
            (
                "blk.29.ffn_up.weight",
                "model.layers.29.mlp.up_proj.weight",
                RotaryRows::Plain,
            ),
            (
                "blk.29.ffn_down.weight",
                "model.layers.29.mlp.down_proj.weight",
                RotaryRows::Plain,
            ),
        ];
        for (gguf, hf, rows) in cases {
            assert_eq!(
                map_llama_name(gguf).unwrap(),
                (hf.to_string(), rows),
                "{gguf}"
            );
        }
    }

    #[test]
    fn qwen2_keeps_q_k_rows_and_maps_biases() {
        let q = Architecture::Qwen2;
        assert_eq!(
            map_tensor_name(q, "blk.2.attn_q.weight").unwrap(),
            (
                "model.layers.2.self_attn.q_proj.weight".into(),
                RotaryRows::Plain
            )
        );
        assert_eq!(
            map_tensor_name(q, "blk.2.attn_k.weight").unwrap().1,
            RotaryRows::Plain
        );
        for part in ["q", "k", "v"] {
            assert_eq!(
                map_tensor_name(q, &format!("blk.7.attn_{part}.bias")).unwrap(),
                (
                    format!("model.layers.7.self_attn.{part}_proj.bias"),
                    RotaryRows::Plain
                )
            );
        }
        assert!(map_tensor_name(q, "blk.7.attn_output.bias").is_err());
    }

    #[test]
    fn unknown_names_are_errors_naming_the_tensor() {
        for bad in [
            "blk.x.attn_q.weight",
            "blk.1.attn_q.bias",
            "rope_freqs.weight",
            "foo",
        ] {
            let err = map_llama_name(bad).unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
