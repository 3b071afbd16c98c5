//! The client side of a subserver: what the gateway (or a benchmark's
//! closed-loop client) submits, and the events it gets back.

use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::peer::message::{ModelIdx, Rid};
use crate::sampling::{FinishReason, SamplingParams};

/// A new request for the entry subserver.
#[derive(Debug)]
pub struct GenerateReq {
    /// Unique within the group.
    pub rid: Rid,
    /// Prompt token ids (already templated and tokenized).
    pub prompt: Vec<u32>,
    /// Sampling and stop parameters.
    pub params: SamplingParams,
    /// Where tokens and the outcome go. Dropping the receiver does not cancel:
    /// send `cancel(rid)` (the gateway does when its client disconnects).
    pub sink: UnboundedSender<StreamEvent>,
}

/// Per-request accounting, sent when a request ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Committed output tokens.
    pub completion_tokens: usize,
    /// Committed output tokens per model (index = model index); sums to `completion_tokens`.
    pub tokens_by_model: Vec<usize>,
    /// Changes of writer between consecutive output tokens.
    pub switches: usize,
    /// Prompt tokens served from the entry model's prefix cache.
    pub cached_prompt_tokens: usize,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The request can never be served as given.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A peer model failed or became unreachable (and fallback is off).
    #[error("peer model {model} failed: {reason}")]
    PeerFailed {
        /// The peer.
        model: ModelIdx,
        /// What happened.
        reason: String,
    },
    /// The engine failed while serving it.
    #[error("engine error: {0}")]
    Engine(String),
    /// Cancelled by the client.
    #[error("cancelled")]
    Cancelled,
    /// The subserver is shutting down.
    #[error("shutting down")]
    Shutdown,
}

impl RequestError {
    /// Stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "invalid_request",
            Self::PeerFailed { .. } => "peer_failed",
            Self::Engine(_) => "engine",
            Self::Cancelled => "cancelled",
            Self::Shutdown => "shutdown",
        }
    }
}

/// What a client receives for one request, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// One committed output token.
    Token {
        /// The token id.
        token: u32,
        /// The model that wrote it.
        writer: ModelIdx,
        /// Text now safe to show (held back while it could still become a stop string).
        text: String,
    },
    /// The request ended normally.
    Finished {
        /// Why.
        reason: FinishReason,
        /// Remaining text (after the last token, with any stop string removed).
        text: String,
        /// Accounting.
        usage: Usage,
    },
    /// The request ended with an error.
    Failed(RequestError),
}
