//! Rebuilds `tokenizer.json`, `tokenizer_config.json` and
//! `generation_config.json` from a GGUF's `tokenizer.ggml.*` metadata.
//! Only byte-level BPE (`tokenizer.ggml.model = gpt2`) is supported.

use serde_json::{json, Map, Value};

use super::file::GgufHeader;
use crate::hf_config::TokenIds;
use crate::hf_files::generation_config;
use crate::AssetError;

/// llama.cpp token types that become added tokens, matched whole in text:
/// UNKNOWN (2), CONTROL (3) and USER_DEFINED (4).
const ADDED_TOKEN_TYPES: [i64; 3] = [2, 3, 4];
/// USER_DEFINED: an added token that is not special (Qwen2's `<tool_call>`
/// is `"special": false` in its own tokenizer_config.json, so decoding with
/// special tokens skipped keeps it).
const USER_DEFINED: i64 = 4;

/// Qwen2's split pattern, as in Qwen2's tokenizer.json (llama.cpp's `qwen2`
/// pre-tokenizer uses the same expression, with the case-insensitive group
/// spelled out).
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The three tokenizer-side files of a model directory.
#[derive(Debug, Clone)]
pub struct TokenizerFiles {
    /// `tokenizer.json`.
    pub tokenizer: Value,
    /// `tokenizer_config.json`.
    pub tokenizer_config: Value,
    /// `generation_config.json`.
    pub generation_config: Value,
}

fn string_array(h: &GgufHeader, key: &str) -> Result<Vec<String>, AssetError> {
    let items = h
        .get(key)
        .ok_or_else(|| AssetError::Metadata {
            key: key.into(),
            reason: "missing".into(),
        })?
        .as_array()
        .ok_or_else(|| AssetError::Metadata {
            key: key.into(),
            reason: "expected an array".into(),
        })?;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| AssetError::Metadata {
                    key: key.into(),
                    reason: format!("element {i} is {} (expected string)", v.type_name()),
                })
        })
        .collect()
}

fn token_types(h: &GgufHeader, n: usize) -> Result<Vec<i64>, AssetError> {
    let key = "tokenizer.ggml.token_type";
    let Some(v) = h.get(key) else {
        return Ok(vec![1; n]);
    };
    let items = v.as_array().ok_or_else(|| AssetError::Metadata {
        key: key.into(),
        reason: "expected an array".into(),
    })?;
    if items.len() != n {
        return Err(AssetError::Metadata {
            key: key.into(),
            reason: format!("{} entries for {n} tokens", items.len()),
        });
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_i64().ok_or_else(|| AssetError::Metadata {
                key: key.into(),
                reason: format!("element {i} is {} (expected integer)", v.type_name()),
            })
        })
        .collect()
}

/// The normalizer `tokenizer.ggml.pre` implies: Qwen2's tokenizer.json
/// composes text to NFC before splitting it.
fn normalizer(pre: &str) -> Value {
    match pre {
        "qwen2" => json!({ "type": "NFC" }),
        _ => Value::Null,
    }
}

/// The pre-tokenizer `tokenizer.ggml.pre` names.
fn pre_tokenizer(pre: &str) -> Result<Value, AssetError> {
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true
    });
    match pre {
        "default" | "gpt2" => Ok(byte_level),
        "smollm" => Ok(json!({
            "type": "Sequence",
            "pretokenizers": [{ "type": "Digits", "individual_digits": true }, byte_level]
        })),
        // Qwen2's tokenizer.json: its own split, then bytes mapped without
        // GPT-2's regex.
        "qwen2" => Ok(json!({
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split", "pattern": { "Regex": QWEN2_SPLIT },
                    "behavior": "Isolated", "invert": false
                },
                { "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false }
            ]
        })),
        other => Err(AssetError::UnsupportedTokenizer(format!(
            "tokenizer.ggml.pre `{other}` (supported: default, gpt2, smollm, qwen2)"
        ))),
    }
}

/// Byte-level offsets, plus BOS/EOS insertion when the metadata asks for it.
fn post_processor(add_bos: Option<(u32, &str)>, add_eos: Option<(u32, &str)>) -> Value {
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true
    });
    if add_bos.is_none() && add_eos.is_none() {
        return byte_level;
    }
    let special = |(_, tok): (u32, &str)| json!({ "SpecialToken": { "id": tok, "type_id": 0 } });
    let wrap = |s: &str, type_id: u32| -> Vec<Value> {
        let mut out: Vec<Value> = add_bos.map(special).into_iter().collect();
        out.push(json!({ "Sequence": { "id": s, "type_id": type_id } }));
        out.extend(add_eos.map(special));
        out
    };
    let single = wrap("A", 0);
    let pair = [wrap("A", 0), wrap("B", 1)].concat();
    let mut specials = Map::new();
    for (id, tok) in add_bos.iter().chain(add_eos.iter()) {
        specials.insert(
            tok.to_string(),
            json!({ "id": tok, "ids": [id], "tokens": [tok] }),
        );
    }
    json!({
        "type": "Sequence",
        "processors": [
            byte_level,
            { "type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials }
        ]
    })
}

/// Builds the tokenizer files. `context_length` becomes `model_max_length`.
pub fn tokenizer_files(
    h: &GgufHeader,
    context_length: usize,
) -> Result<TokenizerFiles, AssetError> {
    let model = h.str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(AssetError::UnsupportedTokenizer(format!(
            "tokenizer.ggml.model `{model}` (only byte-level BPE `gpt2` is supported)"
        )));
    }
    let tokens = string_array(h, "tokenizer.ggml.tokens")?;
    let merges = string_array(h, "tokenizer.ggml.merges")?;
    let types = token_types(h, tokens.len())?;
    let pre_name = h.opt_str("tokenizer.ggml.pre")?.unwrap_or("default");
    let pre = pre_tokenizer(pre_name)?;
    if merges.is_empty() {
        return Err(AssetError::Metadata {
            key: "tokenizer.ggml.merges".into(),
            reason: "empty: a byte-level BPE tokenizer needs its merges".into(),
        });
    }

    let id_of = |key: &str| -> Result<Option<(u32, &str)>, AssetError> {
        match h.opt_u64(key)? {
            None => Ok(None),
            Some(id) => tokens
                .get(id as usize)
                .map(|t| Some((id as u32, t.as_str())))
                .ok_or_else(|| AssetError::Metadata {
                    key: key.into(),
                    reason: format!("id {id} is outside the {} tokens", tokens.len()),
                }),
        }
    };
    let bos = id_of("tokenizer.ggml.bos_token_id")?;
    let eos = id_of("tokenizer.ggml.eos_token_id")?;
    let unk = id_of("tokenizer.ggml.unknown_token_id")?;
    let pad = id_of("tokenizer.ggml.padding_token_id")?;
    let add_bos = h.opt_bool("tokenizer.ggml.add_bos_token")?.unwrap_or(false);
    let add_eos = h.opt_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    if add_bos && bos.is_none() || add_eos && eos.is_none() {
        return Err(AssetError::UnsupportedTokenizer(
            "add_bos_token/add_eos_token is set but the matching token id is missing".into(),
        ));
    }

    let mut vocab = Map::new();
    for (id, tok) in tokens.iter().enumerate() {
        if vocab.contains_key(tok) {
            // A later duplicate would be unreachable by encoding; keep the first id as BPE does.
            tracing::warn!(token = %tok, id, "duplicate token in tokenizer.ggml.tokens; keeping the first id");
            continue;
        }
        vocab.insert(tok.clone(), json!(id));
    }
    let mut added = Vec::new();
    let mut added_decoder = Map::new();
    for (id, (tok, ty)) in tokens.iter().zip(&types).enumerate() {
        if ADDED_TOKEN_TYPES.contains(ty) {
            let special = *ty != USER_DEFINED;
            // tokenizer.json lists added tokens with their id; the config keys them by id.
            added.push(json!({
                "id": id, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": special
            }));
            added_decoder.insert(
                id.to_string(),
                json!({
                    "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": special
                }),
            );
        }
    }

    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer(pre_name),
        "pre_tokenizer": pre,
        "post_processor": post_processor(bos.filter(|_| add_bos), eos.filter(|_| add_eos)),
        "decoder": { "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true },
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab, "merges": merges
        }
    });
    let name = |t: Option<(u32, &str)>| t.map_or(Value::Null, |(_, s)| json!(s));
    let mut tokenizer_config = json!({
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "added_tokens_decoder": added_decoder,
        "bos_token": name(bos),
        "eos_token": name(eos),
        "pad_token": name(pad),
        "unk_token": name(unk),
        "clean_up_tokenization_spaces": false,
        "model_max_length": context_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    if let Some(template) = h.opt_str("tokenizer.chat_template")? {
        tokenizer_config["chat_template"] = json!(template);
    }
    let generation_config = match eos {
        Some((id, _)) => generation_config(bos.map(|b| b.0), &TokenIds::One(id)),
        None => json!({}),
    };
    Ok(TokenizerFiles {
        tokenizer,
        tokenizer_config,
        generation_config,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::test_file::{tokenizer_metadata, GgufBuilder, FIXTURE_VOCAB};
    use super::super::value::MetadataValue;
    use super::*;

    fn files(pre: &str, edit: impl FnOnce(&mut GgufBuilder)) -> Result<TokenizerFiles, AssetError> {
        let mut b = GgufBuilder::new(3);
        tokenizer_metadata(&mut b, pre);
        edit(&mut b);
        let h = GgufHeader::parse(Path::new("t.gguf"), &b.build()).unwrap();
        tokenizer_files(&h, 512)
    }

    fn load(files: &TokenizerFiles) -> tokenizers::Tokenizer {
        let text = serde_json::to_string(&files.tokenizer).unwrap();
        text.parse::<tokenizers::Tokenizer>().unwrap()
    }

    #[test]
    fn smollm_tokenizer_loads_splits_digits_and_keeps_specials_whole() {
        let f = files("smollm", |_| {}).unwrap();
        let tok = load(&f);
        assert_eq!(tok.get_vocab_size(true), FIXTURE_VOCAB);
        let enc = tok.encode("hello world 42<|im_start|>", false).unwrap();
        let pieces = enc.get_tokens();
        assert_eq!(pieces[0], "hello");
        assert_eq!(pieces[1], "Ġw");
        assert!(
            pieces.contains(&"4".to_string()) && pieces.contains(&"2".to_string()),
            "{pieces:?}"
        );
        assert_eq!(*enc.get_ids().last().unwrap(), 1);
        let text = tok.decode(enc.get_ids(), false).unwrap();
        assert_eq!(text, "hello world 42<|im_start|>");
        assert_eq!(f.tokenizer_config["bos_token"], "<|im_start|>");
        assert_eq!(
            f.tokenizer_config["added_tokens_decoder"]["2"]["special"],
            true
        );
        assert_eq!(f.tokenizer_config["model_max_length"], 512);
        assert_eq!(f.tokenizer["added_tokens"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn gpt2_pre_tokenizer_keeps_digit_runs_and_add_bos_prepends() {
        let f = files("gpt2", |b| {
            b.set_kv("tokenizer.ggml.add_bos_token", MetadataValue::Bool(true))
        })
        .unwrap();
        let tok = load(&f);
        let enc = tok.encode("42", true).unwrap();
        // BOS (<|im_start|> = 1), then one pre-token "42" made of two byte tokens.
        assert_eq!(enc.get_ids()[0], 1);
        assert_eq!(enc.get_ids().len(), 3);
        assert_eq!(f.tokenizer_config["add_bos_token"], true);
    }

    #[test]
    fn qwen2_splits_like_qwen2_and_composes_nfc() {
        let f = files("qwen2", |_| {}).unwrap();
        assert_eq!(f.tokenizer["normalizer"]["type"], "NFC");
        let tok = load(&f);
        // Qwen2 splits digits one by one, keeps a leading space on words and
        // puts newline runs in a piece of their own.
        let enc = tok
            .encode("hello world 42\n\n\tx<|im_end|>", false)
            .unwrap();
        let pieces = enc.get_tokens();
        assert_eq!(&pieces[..2], ["hello", "Ġw"], "{pieces:?}");
        let four = pieces.iter().position(|p| p == "4").unwrap();
        assert_eq!(pieces[four + 1], "2", "{pieces:?}");
        assert_eq!(pieces[four + 2], "Ċ", "{pieces:?}");
        assert_eq!(*enc.get_ids().last().unwrap(), 2);
        // "e" + combining acute composes to one code point (2 bytes, not 3).
        let composed = tok.encode("e\u{301}", false).unwrap();
        assert_eq!(composed.get_ids().len(), 2, "{:?}", composed.get_tokens());
        assert_eq!(
            tok.decode(enc.get_ids(), false).unwrap(),
            "hello world 42\n\n\tx<|im_end|>"
        );
    }

    #[test]
    fn user_defined_tokens_are_added_but_not_special() {
        let f = files("qwen2", |b| {
            let types = (0..FIXTURE_VOCAB)
                .map(|i| {
                    MetadataValue::I32(if i == 1 {
                        4
                    } else if i < 3 {
                        3
                    } else {
                        1
                    })
                })
                .collect();
            b.set_kv("tokenizer.ggml.token_type", MetadataValue::Array(types));
        })
        .unwrap();
        let added = f.tokenizer["added_tokens"].as_array().unwrap();
        assert_eq!(added.len(), 3);
        assert_eq!(added[1]["special"], false);
        assert_eq!(added[2]["special"], true);
        let tok = load(&f);
        assert_eq!(tok.encode("a<|im_start|>b", false).unwrap().get_ids()[1], 1);
    }

    #[test]
    fn empty_merges_are_refused() {
        let err = files("qwen2", |b| {
            b.set_kv("tokenizer.ggml.merges", MetadataValue::Array(vec![]))
        })
        .unwrap_err();
        assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");
    }

    #[test]
    fn unsupported_and_inconsistent_metadata_is_named() {
        let err = files("llama-bpe", |_| {}).unwrap_err();
        assert!(err.to_string().contains("llama-bpe"), "{err}");
        let err = files("gpt2", |b| {
            b.set_kv(
                "tokenizer.ggml.model",
                MetadataValue::String("llama".into()),
            )
        })
        .unwrap_err();
        assert!(err.to_string().contains("`llama`"), "{err}");
        let err = files("gpt2", |b| {
            b.set_kv("tokenizer.ggml.eos_token_id", MetadataValue::U32(99_999))
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("tokenizer.ggml.eos_token_id"),
            "{err}"
        );
        let err = files("gpt2", |b| {
            b.set_kv(
                "tokenizer.ggml.token_type",
                MetadataValue::Array(vec![MetadataValue::I32(1)]),
            )
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("tokenizer.ggml.token_type"),
            "{err}"
        );
    }
}
