//! Tokenization and chat templates, without libtorch: the gateway renders
//! and tokenizes at the edge with this crate, and the subserver re-exports
//! it as `subserver::tokenizer`.
//!
//! - [`TextTokenizer`]: a Hugging Face `tokenizer.json` (encode, decode,
//!   vocabulary look-ups) and, per request, an [`IncrementalDecoder`] that
//!   turns generated ids into streamable text.
//! - [`ChatTemplate`]: a conversation rendered into a prompt exactly as
//!   transformers' `apply_chat_template` renders it.

mod chat_template;
mod error;
mod incremental;
mod py_format;
mod py_json;
mod template_env;
mod text;
mod tokenizer_config;

/// Test helpers that find the shared test assets; the subserver's tests
/// use them through the `test-assets` feature.
#[cfg(any(test, feature = "test-assets"))]
#[doc(hidden)]
pub mod test_assets;

pub use chat_template::{ChatMessage, ChatTemplate};
pub use error::TokenizerError;
pub use incremental::IncrementalDecoder;
pub use text::TextTokenizer;
