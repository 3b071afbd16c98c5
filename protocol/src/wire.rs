//! The NDJSON protocol of a group's client ingress (`POST
//! /internal/generate`), spoken by the entry subserver and a remote
//! gateway: the request body, and one [`WireEvent`] per line back.

use serde::{Deserialize, Serialize};

use crate::client::{RequestError, StreamEvent, Usage};
use crate::ids::ModelIdx;
use crate::sampling::{FinishReason, SamplingParams, TokenLogprobs};

/// Path of the ingress.
pub const GENERATE_PATH: &str = "/internal/generate";

/// The request body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateBody {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Sampling parameters.
    pub params: SamplingParams,
    /// Model that writes every token (query-level), if any.
    #[serde(default)]
    pub pin: Option<ModelIdx>,
}

/// A token's log-probabilities on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireLogprobs {
    /// The chosen token's log-probability (`null` for -inf).
    pub logprob: Option<f32>,
    /// vLLM's rank.
    pub rank: usize,
    /// `[[id, logprob], ...]`, most likely first.
    pub top: Vec<(u32, Option<f32>)>,
}

/// Accounting on the wire (mirrors [`Usage`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireUsage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Output tokens.
    pub completion_tokens: usize,
    /// Output tokens by writer.
    pub tokens_by_model: Vec<usize>,
    /// Writer changes.
    pub switches: usize,
    /// Prompt tokens from the prefix cache.
    pub cached_prompt_tokens: usize,
    /// Peer failures survived on the entry model (absent from older peers: 0).
    #[serde(default)]
    pub peer_fallbacks: usize,
}

/// One NDJSON line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireEvent {
    /// A committed token.
    Token {
        /// Id.
        token: u32,
        /// Writer.
        writer: ModelIdx,
        /// Text now safe to show.
        text: String,
        /// Log-probabilities, when asked for.
        #[serde(default)]
        logprobs: Option<WireLogprobs>,
    },
    /// The end.
    Finished {
        /// `stop` or `length`.
        reason: String,
        /// Remaining text.
        text: String,
        /// Accounting.
        usage: WireUsage,
    },
    /// A failure.
    Failed {
        /// [`RequestError::error_type`].
        error_type: String,
        /// The message.
        message: String,
        /// The typed reason, with its numbers (absent from older peers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RequestError>,
    },
}

fn finite(x: f32) -> Option<f32> {
    x.is_finite().then_some(x)
}

impl From<&StreamEvent> for WireEvent {
    fn from(ev: &StreamEvent) -> Self {
        match ev {
            StreamEvent::Token {
                token,
                writer,
                text,
                logprobs,
            } => Self::Token {
                token: *token,
                writer: *writer,
                text: text.clone(),
                logprobs: logprobs.as_ref().map(|lp| WireLogprobs {
                    logprob: finite(lp.logprob),
                    rank: lp.rank,
                    top: lp.top.iter().map(|&(i, l)| (i, finite(l))).collect(),
                }),
            },
            StreamEvent::Finished {
                reason,
                text,
                usage,
            } => Self::Finished {
                reason: reason.as_str().to_string(),
                text: text.clone(),
                usage: WireUsage {
                    prompt_tokens: usage.prompt_tokens,
                    completion_tokens: usage.completion_tokens,
                    tokens_by_model: usage.tokens_by_model.clone(),
                    switches: usage.switches,
                    cached_prompt_tokens: usage.cached_prompt_tokens,
                    peer_fallbacks: usage.peer_fallbacks,
                },
            },
            StreamEvent::Failed(e) => Self::Failed {
                error_type: e.error_type().to_string(),
                message: e.message(),
                error: Some(e.clone()),
            },
        }
    }
}

impl WireEvent {
    /// Back to the in-process event.
    pub fn into_event(self) -> StreamEvent {
        match self {
            Self::Token {
                token,
                writer,
                text,
                logprobs,
            } => StreamEvent::Token {
                token,
                writer,
                text,
                logprobs: logprobs.map(|lp| TokenLogprobs {
                    token,
                    logprob: lp.logprob.unwrap_or(f32::NEG_INFINITY),
                    rank: lp.rank,
                    top: lp
                        .top
                        .into_iter()
                        .map(|(i, l)| (i, l.unwrap_or(f32::NEG_INFINITY)))
                        .collect(),
                }),
            },
            Self::Finished {
                reason,
                text,
                usage,
            } => StreamEvent::Finished {
                reason: if reason == "length" {
                    FinishReason::Length
                } else {
                    FinishReason::Stop
                },
                text,
                usage: Usage {
                    prompt_tokens: usage.prompt_tokens,
                    completion_tokens: usage.completion_tokens,
                    tokens_by_model: usage.tokens_by_model,
                    switches: usage.switches,
                    cached_prompt_tokens: usage.cached_prompt_tokens,
                    peer_fallbacks: usage.peer_fallbacks,
                },
            },
            Self::Failed { error: Some(e), .. } => StreamEvent::Failed(e),
            Self::Failed {
                error_type,
                message,
                error: None,
            } => StreamEvent::Failed(match error_type.as_str() {
                "invalid_request" => RequestError::Rejected(message),
                "cancelled" => RequestError::Cancelled,
                "shutdown" => RequestError::Shutdown,
                _ => RequestError::Engine(message),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_survive_the_wire() {
        let events = vec![
            StreamEvent::Token {
                token: 5,
                writer: 1,
                text: "hi".into(),
                logprobs: Some(TokenLogprobs {
                    token: 5,
                    logprob: -0.5,
                    rank: 1,
                    top: vec![(5, -0.5), (7, f32::NEG_INFINITY)],
                }),
            },
            StreamEvent::Finished {
                reason: FinishReason::Length,
                text: "!".into(),
                usage: Usage {
                    prompt_tokens: 3,
                    completion_tokens: 1,
                    tokens_by_model: vec![0, 1],
                    switches: 0,
                    cached_prompt_tokens: 0,
                    peer_fallbacks: 0,
                },
            },
            StreamEvent::Failed(RequestError::ContextExceeded {
                prompt: 10,
                max_tokens: 20,
                context: 16,
            }),
            StreamEvent::Failed(RequestError::Shutdown),
        ];
        for ev in events {
            let line = serde_json::to_string(&WireEvent::from(&ev)).unwrap();
            let back: WireEvent = serde_json::from_str(&line).unwrap();
            assert_eq!(back.into_event(), ev, "{line}");
        }
    }

    #[test]
    fn a_failure_without_its_typed_reason_keeps_its_class() {
        let line = r#"{"failed":{"error_type":"invalid_request","message":"too long"}}"#;
        let back: WireEvent = serde_json::from_str(line).unwrap();
        assert_eq!(
            back.into_event(),
            StreamEvent::Failed(RequestError::Rejected("too long".into()))
        );
    }
}
