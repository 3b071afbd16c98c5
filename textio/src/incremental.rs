//! Streaming detokenization, one token at a time.
//!
//! A token does not always decode to text on its own: byte-level BPE splits a
//! Chinese character or an emoji over several tokens, and some decoders
//! (SentencePiece's leading space) depend on the neighbours. So, like TGI and
//! vLLM, we decode a short window twice: `ids[prefix_offset..read_offset]`
//! (text already emitted) and `ids[prefix_offset..]`; the difference is the
//! new text. When the window's text ends in U+FFFD the last character is
//! incomplete and we wait for more tokens instead of emitting half of it.

use super::{TextTokenizer, TokenizerError};

/// Tokens of context kept before the first emitted token when the decoder
/// starts from a prompt (vLLM uses the same number).
const PROMPT_CONTEXT_TOKENS: usize = 5;

/// Once this many already-emitted tokens sit in front of the window, they are
/// dropped so a long generation does not keep every id.
const COMPACT_AFTER: usize = 256;

/// Per-request streaming decoder: push token ids, get text deltas.
///
/// The concatenation of every [`push`](Self::push) delta and the final
/// [`flush`](Self::flush) equals `decode(all pushed ids)`.
#[derive(Debug, Clone)]
pub struct IncrementalDecoder {
    tokenizer: TextTokenizer,
    skip_special_tokens: bool,
    /// The tail of the token sequence still needed for decoding.
    ids: Vec<u32>,
    /// Start of the decode window in `ids`.
    prefix_offset: usize,
    /// End of the text already emitted, in `ids`.
    read_offset: usize,
}

impl IncrementalDecoder {
    /// A decoder for a sequence that starts empty.
    pub fn new(tokenizer: TextTokenizer, skip_special_tokens: bool) -> Self {
        Self {
            tokenizer,
            skip_special_tokens,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
        }
    }

    /// A decoder whose first pushed token continues `prompt`: the last few
    /// prompt tokens serve as context (so e.g. a leading space decodes as it
    /// will in the full text) but are never emitted.
    pub fn with_prompt(
        tokenizer: TextTokenizer,
        prompt: &[u32],
        skip_special_tokens: bool,
    ) -> Self {
        let start = prompt.len().saturating_sub(PROMPT_CONTEXT_TOKENS);
        let ids = prompt[start..].to_vec();
        let read_offset = ids.len();
        Self {
            tokenizer,
            skip_special_tokens,
            ids,
            prefix_offset: 0,
            read_offset,
        }
    }

    /// Appends one token id and returns the text it completes (possibly
    /// empty while a multi-token character is still incomplete).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.ids.push(id);
        self.advance(false)
    }

    /// Returns whatever text is still held back (an incomplete character at
    /// the very end decodes to U+FFFD, as in a full decode). Call once when
    /// the sequence is finished.
    pub fn flush(&mut self) -> Result<String, TokenizerError> {
        self.advance(true)
    }

    /// Emits the new text of the window, if it is complete (or `force`).
    fn advance(&mut self, force: bool) -> Result<String, TokenizerError> {
        let prefix_text = self.tokenizer.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special_tokens,
        )?;
        let full_text = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..], self.skip_special_tokens)?;
        let complete = force || !full_text.ends_with('\u{FFFD}');
        if full_text.len() <= prefix_text.len() || !complete {
            if force {
                self.read_offset = self.ids.len();
                self.prefix_offset = self.read_offset;
            }
            return Ok(String::new());
        }
        // `get` rather than slicing: a decoder that rewrites earlier text
        // could put a character boundary elsewhere; then we wait (no panic).
        let Some(delta) = full_text.get(prefix_text.len()..) else {
            tracing::debug!(prefix = %prefix_text, full = %full_text, "decode window does not extend its prefix");
            return Ok(String::new());
        };
        let delta = delta.to_string();
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        self.compact();
        Ok(delta)
    }

    /// Drops ids that no future window will include.
    fn compact(&mut self) {
        if self.prefix_offset >= COMPACT_AFTER {
            self.ids.drain(..self.prefix_offset);
            self.read_offset -= self.prefix_offset;
            self.prefix_offset = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_assets::qwen3_tokenizer_dir;

    fn qwen3() -> TextTokenizer {
        TextTokenizer::from_dir(qwen3_tokenizer_dir()).unwrap()
    }

    /// Streams `ids` and checks the stream against a full decode.
    fn stream(tok: &TextTokenizer, ids: &[u32], skip: bool) -> Vec<String> {
        let mut dec = tok.incremental_decoder(skip);
        let mut deltas: Vec<String> = ids.iter().map(|&id| dec.push(id).unwrap()).collect();
        deltas.push(dec.flush().unwrap());
        assert_eq!(deltas.concat(), tok.decode(ids, skip).unwrap());
        deltas
    }

    #[test]
    fn chinese_and_emoji_stream_equals_full_decode_without_broken_characters() {
        let tok = qwen3();
        let text = "混合语言测试：你好，世界！🦀🚀👨‍👩‍👧‍👦 Ünïcödé façade — naïve 日本語のテキスト、한국어 텍스트. ∑∫√ done";
        let ids = tok.encode(text, false).unwrap();
        // The test is only meaningful if some character spans several tokens.
        let split_chars = ids
            .iter()
            .filter(|&&id| tok.decode(&[id], false).unwrap().contains('\u{FFFD}'))
            .count();
        assert!(split_chars > 0, "no multi-token character in the test text");

        let deltas = stream(&tok, &ids, false);
        assert_eq!(deltas.concat(), text);
        for d in &deltas {
            assert!(
                !d.contains('\u{FFFD}'),
                "delta {d:?} holds half a character"
            );
        }
        // Nothing is held back at the end of a complete text.
        assert_eq!(deltas.last().map(String::as_str), Some(""));
    }

    #[test]
    fn special_tokens_are_skipped_or_kept_as_asked() {
        let tok = qwen3();
        let ids = tok
            .encode(
                "<|im_start|>assistant\n<think>\n推理</think>\n\n答案🙂<|im_end|>",
                false,
            )
            .unwrap();
        let kept = stream(&tok, &ids, false).concat();
        assert!(
            kept.starts_with("<|im_start|>") && kept.ends_with("<|im_end|>"),
            "{kept}"
        );
        let skipped = stream(&tok, &ids, true).concat();
        assert!(!skipped.contains("<|im_"), "{skipped}");
        assert!(skipped.contains("答案🙂"), "{skipped}");
    }

    #[test]
    fn truncated_character_is_flushed_as_replacement() {
        let tok = qwen3();
        let ids = tok.encode("ok 🦀", false).unwrap();
        // Drop the last token: the crab's bytes are incomplete.
        let cut = &ids[..ids.len() - 1];
        let full = tok.decode(cut, false).unwrap();
        assert!(full.ends_with('\u{FFFD}'), "{full:?}");
        let deltas = stream(&tok, cut, false);
        assert!(deltas.last().unwrap().contains('\u{FFFD}'));
        assert!(deltas[..deltas.len() - 1]
            .iter()
            .all(|d| !d.contains('\u{FFFD}')));
    }

    #[test]
    fn long_generation_compacts_and_still_matches() {
        let tok = qwen3();
        let text =
            "数一数：".to_string() + &(0..400).map(|i| format!("{i}号🍎 ")).collect::<String>();
        let ids = tok.encode(&text, false).unwrap();
        assert!(ids.len() > 2 * COMPACT_AFTER);
        let mut dec = tok.incremental_decoder(false);
        let mut out = String::new();
        for &id in &ids {
            out += &dec.push(id).unwrap();
            assert!(
                dec.ids.len() < COMPACT_AFTER + 64,
                "window grew to {}",
                dec.ids.len()
            );
        }
        out += &dec.flush().unwrap();
        assert_eq!(out, text);
    }

    #[test]
    fn continuation_of_a_prompt_emits_only_new_text() {
        let tok = qwen3();
        let prompt = tok.encode("<|im_start|>assistant\n你", false).unwrap();
        let answer = tok.encode("好，世界 🦀", false).unwrap();
        let mut dec = IncrementalDecoder::with_prompt(tok.clone(), &prompt, false);
        let mut out = String::new();
        for &id in &answer {
            out += &dec.push(id).unwrap();
        }
        out += &dec.flush().unwrap();
        assert_eq!(out, "好，世界 🦀");
    }
}
