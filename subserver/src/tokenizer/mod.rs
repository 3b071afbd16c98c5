//! Tokenization and chat templates.

/// Tokenizer and template errors.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// Placeholder until the tokenizer module lands.
    #[error("{0}")]
    Other(String),
}
