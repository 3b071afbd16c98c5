//! `TextTokenizer`: a cheap-to-clone handle on a Hugging Face `tokenizer.json`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::incremental::IncrementalDecoder;
use super::TokenizerError;

/// A loaded `tokenizer.json`. Cloning shares the underlying tokenizer, so
/// every request can hold its own handle (and its own [`IncrementalDecoder`]).
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    path: PathBuf,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

impl TextTokenizer {
    /// Loads `<dir>/tokenizer.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        Self::from_file(dir.as_ref().join("tokenizer.json"))
    }

    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| TokenizerError::io(path, e))?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| TokenizerError::Load {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        tracing::debug!(path = %path.display(), vocab = inner.get_vocab_size(true), "tokenizer loaded");
        Ok(Self {
            inner: Arc::new(inner),
            path: path.to_path_buf(),
        })
    }

    /// The file this tokenizer was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Token ids of `text`. `add_special_tokens` applies the tokenizer's
    /// post-processor (e.g. a BOS token); chat prompts rendered from a
    /// template already contain their special tokens and pass `false`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode(text, add_special_tokens)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`; `skip_special_tokens` drops special tokens (EOS,
    /// `<|im_start|>`...) from the output.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
    }

    /// Number of tokens, added (special) tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Whether `other` maps every token to the same id (token-level routing
    /// needs one vocabulary: a token one model writes is read by the other).
    pub fn same_vocabulary(&self, other: &TextTokenizer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            || (self.vocab_size() == other.vocab_size()
                && self.inner.get_vocab(true) == other.inner.get_vocab(true))
    }

    /// What differs between the two tokenizers, if anything that changes
    /// which ids a text becomes or what an id means: the vocabulary, the
    /// added (special) tokens, the merges, or how text is normalized and
    /// split before the merges. `None`: one tokenizer, as token-level
    /// routing needs.
    pub fn difference(&self, other: &TextTokenizer) -> Option<String> {
        if Arc::ptr_eq(&self.inner, &other.inner) {
            return None;
        }
        let (va, vb) = (self.inner.get_vocab(false), other.inner.get_vocab(false));
        if va != vb {
            let sample = va
                .iter()
                .filter(|(tok, id)| vb.get(*tok) != Some(id))
                .min_by_key(|(_, id)| **id)
                .map(|(tok, id)| format!("; `{tok}` is id {id} in the first only"))
                .unwrap_or_default();
            return Some(format!(
                "the vocabularies differ ({} and {} tokens{sample})",
                va.len(),
                vb.len()
            ));
        }
        let added = |t: &Self| -> std::collections::BTreeMap<u32, (String, bool)> {
            t.inner
                .get_added_tokens_decoder()
                .into_iter()
                .map(|(id, tok)| (id, (tok.content, tok.special)))
                .collect()
        };
        let (aa, ab) = (added(self), added(other));
        if aa != ab {
            let id = aa
                .keys()
                .chain(ab.keys())
                .find(|id| aa.get(id) != ab.get(id))
                .copied()
                .unwrap_or_default();
            let show = |m: &std::collections::BTreeMap<u32, (String, bool)>| match m.get(&id) {
                Some((content, true)) => format!("special `{content}`"),
                Some((content, false)) => format!("added `{content}` (not special)"),
                None => "absent".to_string(),
            };
            return Some(format!(
                "the special tokens differ (id {id}: {} in the first, {} in the second)",
                show(&aa),
                show(&ab)
            ));
        }
        let part = |t: &Self, what: &str| -> serde_json::Value {
            let value = match what {
                "merges" => serde_json::to_value(t.inner.get_model())
                    .ok()
                    .and_then(|m| m.get("merges").cloned()),
                "normalizer" => serde_json::to_value(t.inner.get_normalizer()).ok(),
                _ => serde_json::to_value(t.inner.get_pre_tokenizer()).ok(),
            };
            value.unwrap_or(serde_json::Value::Null)
        };
        let (ma, mb) = (part(self, "merges"), part(other, "merges"));
        if ma != mb {
            let len = |m: &serde_json::Value| m.as_array().map_or(0, Vec::len);
            return Some(format!(
                "the merges differ ({} and {} merges)",
                len(&ma),
                len(&mb)
            ));
        }
        for what in ["normalizer", "pre-tokenizer"] {
            if part(self, what) != part(other, what) {
                return Some(format!("the {what}s differ (text is split differently)"));
            }
        }
        None
    }

    /// The id of a token string (vocabulary or added token), if any.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token string of an id, if the id is in the vocabulary.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// A fresh streaming decoder for one request's generated tokens.
    pub fn incremental_decoder(&self, skip_special_tokens: bool) -> IncrementalDecoder {
        IncrementalDecoder::new(self.clone(), skip_special_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_assets::qwen3_tokenizer_dir;

    #[test]
    fn qwen3_round_trips_and_knows_its_special_tokens() {
        let tok = TextTokenizer::from_dir(qwen3_tokenizer_dir()).unwrap();
        // Qwen3: 151643 BPE tokens + 26 added tokens.
        assert_eq!(tok.vocab_size(), 151_669);
        assert_eq!(tok.token_to_id("<|im_end|>"), Some(151_645));
        assert_eq!(tok.token_to_id("<|endoftext|>"), Some(151_643));
        assert_eq!(tok.id_to_token(151_645).as_deref(), Some("<|im_end|>"));
        assert_eq!(tok.id_to_token(10_000_000), None);

        let text = "Hello, world! 你好，世界 🦀";
        let ids = tok.encode(text, false).unwrap();
        assert!(!ids.is_empty());
        assert_eq!(tok.decode(&ids, false).unwrap(), text);

        let with_special = tok.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap();
        assert_eq!(with_special.first(), Some(&151_644));
        assert_eq!(with_special.last(), Some(&151_645));
        assert_eq!(tok.decode(&with_special, true).unwrap(), "user\nhi");
    }

    /// A small byte-level BPE tokenizer.json, edited by `edit`.
    fn tiny(edit: impl FnOnce(&mut serde_json::Value)) -> TextTokenizer {
        let mut vocab = serde_json::Map::new();
        for (i, t) in ["a", "b", "c", "ab", "abc", "<|im_end|>"]
            .iter()
            .enumerate()
        {
            vocab.insert(t.to_string(), serde_json::json!(i));
        }
        let mut v = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [{"id": 5, "content": "<|im_end|>", "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
            "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
            "model": {"type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab, "merges": ["a b", "ab c"]}
        });
        edit(&mut v);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, v.to_string()).unwrap();
        TextTokenizer::from_file(&path).unwrap()
    }

    #[test]
    fn difference_names_what_differs() {
        let base = tiny(|_| {});
        assert_eq!(base.difference(&tiny(|_| {})), None);
        let d = base
            .difference(&tiny(|v| v["model"]["vocab"]["c"] = serde_json::json!(9)))
            .unwrap();
        assert!(
            d.contains("vocabularies differ") && d.contains("`c`"),
            "{d}"
        );
        let d = base
            .difference(&tiny(|v| v["model"]["merges"] = serde_json::json!(["a b"])))
            .unwrap();
        assert!(d.contains("merges differ") && d.contains("2 and 1"), "{d}");
        let d = base
            .difference(&tiny(|v| {
                v["added_tokens"][0]["special"] = serde_json::json!(false)
            }))
            .unwrap();
        assert!(
            d.contains("special tokens differ") && d.contains("id 5"),
            "{d}"
        );
        let d = base
            .difference(&tiny(|v| {
                v["normalizer"] = serde_json::json!({"type": "NFC"})
            }))
            .unwrap();
        assert!(d.contains("normalizers differ"), "{d}");
    }

    #[test]
    fn missing_and_malformed_files_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = TextTokenizer::from_dir(dir.path()).unwrap_err();
        assert_eq!(err.error_type(), "io");
        assert!(err.to_string().contains("tokenizer.json"), "{err}");

        std::fs::write(dir.path().join("tokenizer.json"), "{not json").unwrap();
        let err = TextTokenizer::from_dir(dir.path()).unwrap_err();
        assert_eq!(err.error_type(), "tokenizer_load");
        assert!(err.to_string().contains("tokenizer.json"), "{err}");
    }
}
