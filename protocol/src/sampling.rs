//! Per-request sampling parameters and their one validation (the gateway
//! and the engine both call [`SamplingParams::validate`]), the
//! log-probabilities a token carries back, and why a request finished.

use serde::{Deserialize, Serialize};

/// How one request picks its tokens and when it stops. Field meanings
/// follow vLLM's `SamplingParams`, except that `top_k == 0` turns top-k off
/// (vLLM uses -1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingParams {
    /// Logits are divided by this; 0 means greedy.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (ties at the cut kept); 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose mass reaches `top_p`.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one.
    pub min_p: f32,
    /// Seed of this request's random stream; `None` uses the engine's.
    pub seed: Option<u64>,
    /// Maximum number of generated tokens.
    pub max_tokens: usize,
    /// Strings that end generation; they are not part of the output.
    pub stop: Vec<String>,
    /// Token ids that end generation (besides EOS); not part of the output.
    pub stop_token_ids: Vec<u32>,
    /// Keep generating past the model's EOS tokens.
    pub ignore_eos: bool,
    /// Return each token's log-probability and this many alternatives
    /// (at most [`MAX_TOP_LOGPROBS`]), computed by the model that wrote it.
    pub logprobs: Option<usize>,
}

/// Most alternatives a request may ask for per token (vLLM's default cap).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// Largest accepted temperature (larger values are indistinguishable from
/// uniform sampling and usually a client bug).
pub const MAX_TEMPERATURE: f32 = 100.0;

/// A sampling parameter out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid sampling parameter `{field}`: {reason}")]
pub struct ParamError {
    /// The parameter (`top_p`, `stop[2]`, ...), as the OpenAI field is named.
    pub field: String,
    /// What is wrong, with the value.
    pub reason: String,
}

impl Default for SamplingParams {
    /// vLLM's defaults: plain sampling at temperature 1, 16 tokens.
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: None,
            max_tokens: 16,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            logprobs: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Self {
            temperature: 0.0,
            max_tokens,
            ..Self::default()
        }
    }

    /// Checks every field; the error names the first offending one. This
    /// is the only range check of sampling parameters.
    pub fn validate(&self) -> Result<(), ParamError> {
        let bad = |field: &str, reason: String| {
            Err(ParamError {
                field: field.to_string(),
                reason,
            })
        };
        if !(0.0..=MAX_TEMPERATURE).contains(&self.temperature) {
            return bad(
                "temperature",
                format!(
                    "must be in [0, {MAX_TEMPERATURE}], got {}",
                    self.temperature
                ),
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", format!("must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", format!("must be in [0, 1], got {}", self.min_p));
        }
        if self.max_tokens == 0 {
            return bad("max_tokens", "must be at least 1, got 0".into());
        }
        if let Some(n) = self.logprobs.filter(|&n| n > MAX_TOP_LOGPROBS) {
            return bad(
                "logprobs",
                format!("at most {MAX_TOP_LOGPROBS} alternatives per token, got {n}"),
            );
        }
        if let Some(i) = self.stop.iter().position(String::is_empty) {
            return bad(
                &format!("stop[{i}]"),
                "stop strings must not be empty".into(),
            );
        }
        Ok(())
    }
}

/// The chosen token's log-probability and the `top_n` most likely tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprobs {
    /// The chosen token.
    pub token: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// 1 + the number of tokens strictly more likely (vLLM's rank).
    pub rank: usize,
    /// The `top_n` most likely tokens with their log-probabilities, most
    /// likely first (ties: lower id first).
    pub top: Vec<(u32, f32)>,
}

/// Why a request finished (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// EOS, a stop token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    /// The OpenAI spelling: `"stop"` or `"length"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(p: &SamplingParams) -> String {
        match p.validate() {
            Err(ParamError { field, .. }) => field,
            other => panic!("expected a ParamError, got {other:?}"),
        }
    }

    #[test]
    fn defaults_and_greedy_are_valid() {
        let d = SamplingParams::default();
        assert_eq!(
            (d.temperature, d.top_k, d.top_p, d.min_p, d.max_tokens),
            (1.0, 0, 1.0, 0.0, 16)
        );
        d.validate().unwrap();
        let g = SamplingParams::greedy(5);
        assert_eq!((g.temperature, g.max_tokens), (0.0, 5));
        g.validate().unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        let d = SamplingParams::default;
        assert_eq!(
            field_of(&SamplingParams {
                temperature: -0.1,
                ..d()
            }),
            "temperature"
        );
        assert_eq!(
            field_of(&SamplingParams {
                temperature: f32::NAN,
                ..d()
            }),
            "temperature"
        );
        assert_eq!(
            field_of(&SamplingParams {
                temperature: f32::INFINITY,
                ..d()
            }),
            "temperature"
        );
        assert_eq!(
            field_of(&SamplingParams {
                temperature: 100.5,
                ..d()
            }),
            "temperature"
        );
        assert_eq!(field_of(&SamplingParams { top_p: 0.0, ..d() }), "top_p");
        assert_eq!(field_of(&SamplingParams { top_p: 1.5, ..d() }), "top_p");
        assert_eq!(
            field_of(&SamplingParams {
                top_p: f32::NAN,
                ..d()
            }),
            "top_p"
        );
        assert_eq!(field_of(&SamplingParams { min_p: -0.5, ..d() }), "min_p");
        assert_eq!(
            field_of(&SamplingParams {
                min_p: f32::NAN,
                ..d()
            }),
            "min_p"
        );
        assert_eq!(
            field_of(&SamplingParams {
                max_tokens: 0,
                ..d()
            }),
            "max_tokens"
        );
        assert_eq!(
            field_of(&SamplingParams {
                stop: vec!["a".into(), String::new()],
                ..d()
            }),
            "stop[1]"
        );
        let msg = SamplingParams { top_p: 2.0, ..d() }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("top_p") && msg.contains("(0, 1]") && msg.contains('2'),
            "{msg}"
        );
    }

    #[test]
    fn boundary_values_are_accepted() {
        let d = SamplingParams::default;
        SamplingParams {
            top_p: 1.0,
            min_p: 1.0,
            temperature: 0.0,
            max_tokens: 1,
            ..d()
        }
        .validate()
        .unwrap();
        SamplingParams {
            min_p: 0.0,
            top_k: 1,
            temperature: MAX_TEMPERATURE,
            ..d()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn deserializes_with_defaults_and_rejects_unknown_fields() {
        let p: SamplingParams =
            serde_json::from_str(r#"{"temperature": 0.7, "stop": ["\n"]}"#).unwrap();
        assert_eq!(p.temperature, 0.7);
        assert_eq!(p.top_p, 1.0);
        assert_eq!(p.stop, vec!["\n".to_string()]);
        let err = serde_json::from_str::<SamplingParams>(r#"{"temprature": 0.7}"#).unwrap_err();
        assert!(err.to_string().contains("temprature"), "{err}");
    }
}
