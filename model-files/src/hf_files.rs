//! The small JSON and tokenizer files around the weights of a Hugging Face
//! model directory, and the output-directory policy of every asset command.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::AssetError;
use crate::hf_config::TokenIds;

/// Files besides the weights and config.json that travel with a model.
pub const TOKENIZER_FILES: &[&str] = &[
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
];

/// Writes pretty JSON with a trailing newline.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), AssetError> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| AssetError::json(path, e))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| AssetError::io(path, e))
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> Result<Value, AssetError> {
    let text = std::fs::read_to_string(path).map_err(|e| AssetError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| AssetError::json(path, e))
}

/// Creates `dir` (and parents). An existing directory must be empty: stale
/// shards from an earlier run would otherwise mix with the new ones.
pub fn prepare_output_dir(dir: &Path) -> Result<(), AssetError> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(|e| AssetError::io(dir, e))?;
        if entries.next().is_some() {
            return Err(AssetError::OutputNotEmpty {
                path: dir.to_path_buf(),
            });
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| AssetError::io(dir, e))
}

/// Copies each of `names` that exists in `src` to `dst`; returns the copies.
pub fn copy_present(src: &Path, dst: &Path, names: &[&str]) -> Result<Vec<PathBuf>, AssetError> {
    let mut copied = Vec::new();
    for name in names {
        let from = src.join(name);
        if from.is_file() {
            let to = dst.join(name);
            std::fs::copy(&from, &to).map_err(|e| AssetError::io(&from, e))?;
            copied.push(to);
        }
    }
    Ok(copied)
}

/// Loads a `tokenizer.json` with the `tokenizers` crate the runtime uses.
pub fn load_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, AssetError> {
    tokenizers::Tokenizer::from_file(path).map_err(|e| AssetError::Tokenizer {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// `generation_config.json` content with the stop and start ids.
pub fn generation_config(bos: Option<u32>, eos: &TokenIds) -> Value {
    let mut v = json!({ "eos_token_id": eos });
    if let Some(bos) = bos {
        v["bos_token_id"] = json!(bos);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_empty_output_dirs() {
        let dir = tempfile::tempdir().unwrap();
        prepare_output_dir(dir.path()).unwrap(); // empty: fine
        let nested = dir.path().join("a/b");
        prepare_output_dir(&nested).unwrap();
        assert!(nested.is_dir());
        let err = prepare_output_dir(dir.path()).unwrap_err();
        assert_eq!(err.error_type(), "output_not_empty");
    }

    #[test]
    fn generation_config_lists_ids() {
        let v = generation_config(Some(1), &TokenIds::Many(vec![2, 3]));
        assert_eq!(v, json!({ "bos_token_id": 1, "eos_token_id": [2, 3] }));
        assert_eq!(
            generation_config(None, &TokenIds::One(2)),
            json!({ "eos_token_id": 2 })
        );
    }
}
