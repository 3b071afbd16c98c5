//! The client side of a subserver: what the gateway (or a benchmark's
//! closed-loop client) submits, and the events it gets back.

use serde::Serialize;
use tokio::sync::mpsc::UnboundedSender;

use crate::peer::message::{ModelIdx, Rid};
use crate::sampling::logprobs::TokenLogprobs;
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
    /// Request-level options (pinning to one model).
    pub options: SubmitOptions,
    /// Where tokens and the outcome go. Dropping the receiver does not cancel:
    /// send `cancel(rid)` (the gateway does when its client disconnects).
    pub sink: UnboundedSender<StreamEvent>,
}

/// Options of one request beyond its sampling parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubmitOptions {
    /// Model that writes every token (query-level routing on a member);
    /// `None` lets the group's policy route each token.
    pub pin: Option<ModelIdx>,
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

impl Usage {
    /// Share of the output written by models other than `entry` (the
    /// "large-model share" of a two-model group); 0 for an empty output.
    pub fn large_share(&self, entry: ModelIdx) -> f64 {
        if self.completion_tokens == 0 {
            return 0.0;
        }
        let small = self
            .tokens_by_model
            .get(entry as usize)
            .copied()
            .unwrap_or(0);
        (self.completion_tokens - small) as f64 / self.completion_tokens as f64
    }
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
        /// Its log-probabilities under the writer's distribution, when the
        /// request asked for them and the backend has logits.
        logprobs: Option<TokenLogprobs>,
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
