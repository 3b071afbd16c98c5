//! What a client of a group (the gateway, a benchmark's closed-loop
//! client) gets back for one request: token events, the outcome, the
//! accounting, and why a request failed.

use serde::{Deserialize, Serialize};

use crate::ids::{ModelIdx, Rid};
use crate::sampling::{FinishReason, ParamError, TokenLogprobs};

/// Options of one request beyond its sampling parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitOptions {
    /// Model that writes every token (query-level routing on a member);
    /// `None` lets the group's policy route each token.
    pub pin: Option<ModelIdx>,
}

/// Per-request accounting, sent when a request ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Peer failures the request survived by continuing on its entry model
    /// (`fallback_on_peer_failure`); 0 when every hand-over was served.
    #[serde(default)]
    pub peer_fallbacks: usize,
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

/// Why a request failed. The first group are checks made before the
/// request queues (each carries the numbers that failed it); the rest
/// happen while it runs. [`RequestError::error_type`] is the metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum RequestError {
    /// A sampling parameter is out of range.
    #[error(transparent)]
    Sampling(ParamError),
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A prompt token is not in the model's vocabulary.
    #[error("token id {token} is outside the vocabulary ({vocab_size})")]
    TokenOutOfVocab {
        /// The token.
        token: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// Prompt plus `max_tokens` exceed the model's context.
    #[error(
        "prompt ({prompt} tokens) + max_tokens ({max_tokens}) exceeds the context of {context} tokens"
    )]
    ContextExceeded {
        /// Prompt tokens.
        prompt: usize,
        /// Requested output tokens.
        max_tokens: usize,
        /// The model's context length.
        context: usize,
    },
    /// Prompt plus `max_tokens` exceed the whole KV pool: it could never run.
    #[error("prompt + max_tokens = {needed} tokens can never fit the KV pool of {pool} tokens")]
    KvPoolTooSmall {
        /// Positions the request needs.
        needed: usize,
        /// Positions the pool has.
        pool: usize,
    },
    /// Stop strings were given to a backend without a tokenizer.
    #[error("stop strings need a tokenizer, and this backend has none")]
    StopNeedsTokenizer,
    /// Another active request has this id.
    #[error("request id {rid} is already active")]
    DuplicateId {
        /// The id.
        rid: Rid,
    },
    /// The request is pinned to a model the group does not have.
    #[error("pinned to model {model}, the group has {models}")]
    PinOutOfRange {
        /// The model asked for.
        model: ModelIdx,
        /// Models in the group.
        models: usize,
    },
    /// The request is pinned to a model that is down.
    #[error("model `{model}` is unreachable")]
    PeerDown {
        /// The model's name.
        model: String,
    },
    /// A remote group refused the request (its message; the group checked
    /// it with the checks above).
    #[error("{0}")]
    Rejected(String),
    /// A peer model failed or became unreachable (and fallback is off).
    #[error("peer model {model} failed: {reason}")]
    PeerFailed {
        /// The peer.
        model: ModelIdx,
        /// What happened.
        reason: String,
    },
    /// The KV pool cannot hold the request even with nothing else running.
    #[error("the KV pool cannot hold this request")]
    KvExhausted,
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
    /// Stable label for metrics (and the wire's `error_type`).
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Sampling(_)
            | Self::EmptyPrompt
            | Self::TokenOutOfVocab { .. }
            | Self::ContextExceeded { .. }
            | Self::KvPoolTooSmall { .. }
            | Self::StopNeedsTokenizer
            | Self::DuplicateId { .. }
            | Self::PinOutOfRange { .. }
            | Self::PeerDown { .. }
            | Self::Rejected(_) => "invalid_request",
            Self::PeerFailed { .. } => "peer_failed",
            Self::KvExhausted | Self::Engine(_) => "engine",
            Self::Cancelled => "cancelled",
            Self::Shutdown => "shutdown",
        }
    }

    /// True for the checks made before queueing: the request can never be
    /// served as given.
    pub fn is_invalid(&self) -> bool {
        self.error_type() == "invalid_request"
    }

    /// The message without the variant's prefix (`engine error: `), as a
    /// client should read it.
    pub fn message(&self) -> String {
        match self {
            Self::Engine(m) | Self::Rejected(m) => m.clone(),
            other => other.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_carry_their_numbers_and_round_trip() {
        let e = RequestError::ContextExceeded {
            prompt: 10,
            max_tokens: 20,
            context: 16,
        };
        let msg = e.to_string();
        assert!(
            msg.contains("10") && msg.contains("20") && msg.contains("16"),
            "{msg}"
        );
        assert_eq!(e.error_type(), "invalid_request");
        assert!(e.is_invalid());
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.contains("\"reason\":\"context_exceeded\""), "{json}");
        assert_eq!(serde_json::from_str::<RequestError>(&json).unwrap(), e);
        let s = RequestError::Sampling(ParamError {
            field: "top_p".into(),
            reason: "must be in (0, 1], got 2".into(),
        });
        assert_eq!(
            serde_json::from_str::<RequestError>(&serde_json::to_string(&s).unwrap()).unwrap(),
            s
        );
    }

    #[test]
    fn labels_and_messages() {
        assert_eq!(RequestError::KvExhausted.error_type(), "engine");
        assert!(!RequestError::Cancelled.is_invalid());
        assert_eq!(RequestError::Engine("boom".into()).message(), "boom");
        assert_eq!(
            RequestError::Engine("boom".into()).to_string(),
            "engine error: boom"
        );
        assert_eq!(
            RequestError::PeerFailed {
                model: 1,
                reason: "gone".into()
            }
            .error_type(),
            "peer_failed"
        );
    }

    #[test]
    fn large_share_of_usage() {
        let u = Usage {
            prompt_tokens: 3,
            completion_tokens: 4,
            tokens_by_model: vec![3, 1],
            switches: 2,
            cached_prompt_tokens: 0,
            peer_fallbacks: 0,
        };
        assert_eq!(u.large_share(0), 0.25);
    }
}
