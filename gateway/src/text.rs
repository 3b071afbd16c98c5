//! Text at the edge: the group's tokenizer and chat template.

use std::path::Path;

use serde_json::{Map, Value};
use textio::{ChatMessage, ChatTemplate, TextTokenizer};

use crate::error::ApiError;

/// Tokenizer and chat template of a group's entry model. A simulated group
/// without a model path has neither: it accepts only token-id prompts.
#[derive(Clone, Default)]
pub struct TextSide {
    tokenizer: Option<TextTokenizer>,
    template: Option<ChatTemplate>,
}

impl TextSide {
    /// Loads from a Hugging Face model directory (the template is optional).
    pub fn from_dir(dir: &Path) -> Result<Self, textio::TokenizerError> {
        let tokenizer = TextTokenizer::from_dir(dir)?;
        let template = match ChatTemplate::from_dir(dir) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "no chat template: chat completions are off");
                None
            }
        };
        Ok(Self {
            tokenizer: Some(tokenizer),
            template,
        })
    }

    /// No tokenizer (token-id prompts only).
    pub fn none() -> Self {
        Self::default()
    }

    /// True when text can be tokenized.
    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    fn tokenizer(&self) -> Result<&TextTokenizer, ApiError> {
        self.tokenizer.as_ref().ok_or_else(|| {
            ApiError::invalid(
                "prompt",
                "this group has no tokenizer: send token ids (a list of integers)",
            )
        })
    }

    /// Token ids of `text` (with the tokenizer's special tokens when asked).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, ApiError> {
        self.tokenizer()?
            .encode(text, add_special)
            .map_err(|e| ApiError::invalid("prompt", format!("cannot tokenize: {e}")))
    }

    /// Text of `ids`.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, ApiError> {
        let tok = self.tokenizer()?;
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= tok.vocab_size()) {
            return Err(ApiError::invalid(
                "tokens",
                format!(
                    "token id {bad} is outside the vocabulary of {}",
                    tok.vocab_size()
                ),
            ));
        }
        tok.decode(ids, skip_special)
            .map_err(|e| ApiError::invalid("tokens", format!("cannot decode: {e}")))
    }

    /// The vocabulary size, when there is a tokenizer.
    pub fn vocab_size(&self) -> Option<usize> {
        self.tokenizer.as_ref().map(TextTokenizer::vocab_size)
    }

    /// Renders a conversation with the chat template.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &Map<String, Value>,
    ) -> Result<String, ApiError> {
        let template = self.template.as_ref().ok_or_else(|| {
            ApiError::invalid("messages", "this group's model has no chat template")
        })?;
        template
            .render(messages, add_generation_prompt, kwargs)
            .map_err(|e| ApiError::invalid("messages", format!("chat template: {e}")))
    }
}
