//! Text at the edge: the group's tokenizer and chat template.
//!
//! A gateway that reads them from the entry model's directory has them
//! from the start; one configured with `gateway.text_side: backend` starts
//! with a pending [`TextSide`] that [`crate::text_source`] fills once a
//! group has served the files. Until then every use answers a 503 that says
//! why (`ApiError::Unavailable`).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Map, Value};
use textio::{ChatMessage, ChatTemplate, TextTokenizer};

use crate::error::ApiError;

/// How often [`TextSide::wait_loaded`] looks again (the loader does not signal).
const LOADED_POLL: Duration = Duration::from_millis(100);

/// Tokenizer and chat template once known. A simulated group without a
/// model path has neither: it accepts only token-id prompts.
#[derive(Clone, Default)]
struct Loaded {
    tokenizer: Option<TextTokenizer>,
    template: Option<ChatTemplate>,
}

/// Tokenizer and chat template of a group's entry model. Clones share one
/// state, so a pending side filled later is seen by every holder.
#[derive(Clone)]
pub struct TextSide {
    loaded: Arc<OnceLock<Loaded>>,
    /// Why a pending side is not loaded yet (the loader's last failure).
    waiting: Arc<Mutex<String>>,
    /// Loader rounds that ended without a text side ([`Self::set_waiting`]).
    rounds_waiting: Arc<AtomicU64>,
}

impl Default for TextSide {
    fn default() -> Self {
        Self::none()
    }
}

impl TextSide {
    fn with(loaded: Option<Loaded>) -> Self {
        let cell = OnceLock::new();
        if let Some(l) = loaded {
            let _ = cell.set(l);
        }
        Self {
            loaded: Arc::new(cell),
            waiting: Arc::new(Mutex::new("no group has been asked yet".into())),
            rounds_waiting: Arc::new(AtomicU64::new(0)),
        }
    }

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
        Ok(Self::with(Some(Loaded {
            tokenizer: Some(tokenizer),
            template,
        })))
    }

    /// No tokenizer (token-id prompts only).
    pub fn none() -> Self {
        Self::with(Some(Loaded::default()))
    }

    /// Not known yet: filled later by [`Self::fill_from`].
    pub fn pending() -> Self {
        Self::with(None)
    }

    /// Takes `other`'s tokenizer and template (once: false when this side
    /// was already loaded).
    pub fn fill_from(&self, other: &TextSide) -> bool {
        let loaded = other.loaded.get().cloned().unwrap_or_default();
        self.loaded.set(loaded).is_ok()
    }

    /// True once the tokenizer side is known (at once unless pending).
    pub fn is_loaded(&self) -> bool {
        self.loaded.get().is_some()
    }

    /// Records why a pending side is still not loaded (shown in its 503s).
    pub fn set_waiting(&self, reason: impl Into<String>) {
        let mut w = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        *w = reason.into();
        self.rounds_waiting.fetch_add(1, Ordering::Relaxed);
    }

    /// How many loader rounds have ended without a text side (an event a
    /// test can wait on: "the loader retried and it is still not ready").
    pub fn rounds_waiting(&self) -> u64 {
        self.rounds_waiting.load(Ordering::Relaxed)
    }

    /// `None` once loaded; else the 503 that requests needing text get.
    pub fn not_loaded(&self) -> Option<ApiError> {
        if self.is_loaded() {
            return None;
        }
        let why = self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Some(ApiError::Unavailable(format!(
            "the gateway has not loaded the tokenizer and chat template from a group yet \
             (gateway.text_side: backend): {why}"
        )))
    }

    /// Waits up to `within` for the side to be loaded; true when it is.
    pub async fn wait_loaded(&self, within: Duration) -> bool {
        let end = tokio::time::Instant::now() + within;
        while !self.is_loaded() && tokio::time::Instant::now() < end {
            tokio::time::sleep(LOADED_POLL).await;
        }
        self.is_loaded()
    }

    fn get(&self) -> Result<&Loaded, ApiError> {
        match self.loaded.get() {
            Some(l) => Ok(l),
            None => Err(self
                .not_loaded()
                .unwrap_or(ApiError::Unavailable("the tokenizer is not loaded".into()))),
        }
    }

    /// True when text can be tokenized.
    pub fn has_tokenizer(&self) -> bool {
        self.loaded.get().is_some_and(|l| l.tokenizer.is_some())
    }

    /// True when chat conversations can be rendered.
    pub fn has_template(&self) -> bool {
        self.loaded.get().is_some_and(|l| l.template.is_some())
    }

    fn tokenizer(&self) -> Result<&TextTokenizer, ApiError> {
        self.get()?.tokenizer.as_ref().ok_or_else(|| {
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
        self.loaded
            .get()
            .and_then(|l| l.tokenizer.as_ref())
            .map(TextTokenizer::vocab_size)
    }

    /// Renders a conversation with the chat template.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &Map<String, Value>,
    ) -> Result<String, ApiError> {
        let template = self.get()?.template.as_ref().ok_or_else(|| {
            ApiError::invalid("messages", "this group's model has no chat template")
        })?;
        template
            .render(messages, add_generation_prompt, kwargs)
            .map_err(|e| ApiError::invalid("messages", format!("chat template: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pending_side_answers_503_until_filled_and_clones_see_the_fill() {
        let pending = TextSide::pending();
        let held = pending.clone();
        assert!(!held.is_loaded() && !held.has_tokenizer());
        pending.set_waiting("no group is healthy yet");
        let err = held.encode("hi", false).unwrap_err();
        assert_eq!(err.status(), warp::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(err.to_string().contains("no group is healthy yet"), "{err}");
        assert!(held.render_chat(&[], true, &Map::new()).is_err());
        assert!(!held.wait_loaded(Duration::from_millis(10)).await);

        let dir = textio::test_assets::qwen3_tokenizer_dir();
        let local = TextSide::from_dir(&dir).unwrap();
        assert!(pending.fill_from(&local));
        assert!(!pending.fill_from(&TextSide::none()), "filled once");
        assert!(held.wait_loaded(Duration::ZERO).await);
        assert!(held.not_loaded().is_none());
        assert_eq!(
            held.encode("hello", false).unwrap(),
            local.encode("hello", false).unwrap()
        );
        assert!(held.has_template() && held.vocab_size() == local.vocab_size());
    }

    #[test]
    fn none_is_loaded_without_a_tokenizer() {
        let none = TextSide::none();
        assert!(none.is_loaded() && none.not_loaded().is_none());
        let err = none.encode("hi", false).unwrap_err();
        assert_eq!(err.status(), warp::http::StatusCode::BAD_REQUEST);
    }
}
