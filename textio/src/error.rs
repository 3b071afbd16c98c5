//! The tokenizer and chat-template error type.

use std::path::PathBuf;

/// Everything that can go wrong loading a tokenizer, encoding, decoding, or
/// rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer.json` could not be parsed by the `tokenizers` crate.
    #[error("cannot load tokenizer {path}: {message}")]
    Load {
        /// The `tokenizer.json` file.
        path: PathBuf,
        /// The `tokenizers` error text.
        message: String,
    },
    /// Encoding text failed.
    #[error("cannot encode text: {0}")]
    Encode(String),
    /// Decoding token ids failed.
    #[error("cannot decode token ids: {0}")]
    Decode(String),
    /// `tokenizer_config.json` (or `special_tokens_map.json`) is malformed.
    #[error("{path}: field `{field}`: {reason}")]
    Config {
        /// The JSON file.
        path: PathBuf,
        /// The offending field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The directory has no usable chat template.
    #[error("no chat template in {path}: {reason}")]
    NoChatTemplate {
        /// The tokenizer directory.
        path: PathBuf,
        /// Why none could be chosen.
        reason: String,
    },
    /// The template source does not compile.
    #[error("chat template does not compile: {0}")]
    TemplateSyntax(String),
    /// The template called `raise_exception(message)`: the conversation is
    /// not one this template accepts.
    #[error("chat template rejected the conversation: {0}")]
    TemplateRaised(String),
    /// Rendering failed for another reason (undefined method, bad types...).
    #[error("chat template failed to render: {0}")]
    TemplateRender(String),
}

impl TokenizerError {
    /// A short stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Io { .. } => "io",
            Self::Load { .. } => "tokenizer_load",
            Self::Encode(_) => "encode",
            Self::Decode(_) => "decode",
            Self::Config { .. } => "tokenizer_config",
            Self::NoChatTemplate { .. } => "no_chat_template",
            Self::TemplateSyntax(_) => "template_syntax",
            Self::TemplateRaised(_) => "template_raised",
            Self::TemplateRender(_) => "template_render",
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
