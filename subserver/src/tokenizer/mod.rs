//! Tokenization and chat templates.
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

#[cfg(test)]
pub(crate) mod test_assets;

pub use chat_template::{ChatMessage, ChatTemplate};
pub use error::TokenizerError;
pub use incremental::IncrementalDecoder;
pub use text::TextTokenizer;
