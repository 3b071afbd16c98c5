//! The sampling error type.

/// Invalid parameters, or logits no token can be drawn from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// A sampling parameter is out of range.
    #[error("invalid sampling parameter `{field}`: {reason}")]
    InvalidParam {
        /// The parameter (`top_p`, `stop[2]`, ...).
        field: String,
        /// What is wrong, with the value.
        reason: String,
    },
    /// The logits row is empty.
    #[error("empty logits row")]
    EmptyLogits,
    /// Every logit is `-inf` or `NaN`: no token has positive probability.
    #[error("no finite logit among {vocab} (all -inf or NaN)")]
    NoFiniteLogits {
        /// Row length.
        vocab: usize,
    },
    /// A logit is `+inf`, which makes the distribution undefined.
    #[error("logit of token {token} is +inf")]
    InfiniteLogit {
        /// The token id.
        token: u32,
    },
    /// A token id outside the logits row.
    #[error("token {token} is outside the vocabulary of {vocab}")]
    TokenOutOfRange {
        /// The token id.
        token: u32,
        /// Row length.
        vocab: usize,
    },
}

impl SamplingError {
    /// A short stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::InvalidParam { .. } => "invalid_sampling_param",
            Self::EmptyLogits => "empty_logits",
            Self::NoFiniteLogits { .. } => "no_finite_logits",
            Self::InfiniteLogit { .. } => "infinite_logit",
            Self::TokenOutOfRange { .. } => "token_out_of_range",
        }
    }
}

impl From<protocol::sampling::ParamError> for SamplingError {
    fn from(e: protocol::sampling::ParamError) -> Self {
        Self::InvalidParam {
            field: e.field,
            reason: e.reason,
        }
    }
}
