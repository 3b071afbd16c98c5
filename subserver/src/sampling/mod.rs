//! Sampling: parameters, samplers, stop conditions.
//!
//! - [`SamplingParams`]: what a request asks for, with
//!   [`SamplingParams::validate`].
//! - [`Sampler`]: picks each next token (greedy, or temperature, top-k,
//!   top-p, min-p and a seeded ChaCha20 draw, in vLLM's order).
//! - [`logprobs`]: the chosen token's and the top-n log-probabilities.
//! - [`StopChecker`]: EOS, stop tokens, stop strings (held back from
//!   streaming while they may still match) and `max_tokens`.
//! - [`HostLogits`]: a step's logits copied to the host once, read by
//!   sampling, log-probabilities and the routing signals.
//! - [`signals`]: routing signals from a step's logits (normalized entropy),
//!   one host pass per row (`kernels::row_stats`), read by the runner and
//!   the policies.

mod error;
mod filters;
pub mod logprobs;
mod params;
mod sampler;
/// Routing signals (crate `policies`, which reads them).
pub use policies::signals;
mod stop;

pub use error::SamplingError;
pub use logprobs::{logprobs, TokenLogprobs};
pub use params::{ParamError, SamplingParams, MAX_TEMPERATURE, MAX_TOP_LOGPROBS};
pub use policies::HostLogits;
pub use sampler::{Sampler, GREEDY_TEMPERATURE_EPS};
pub use stop::{Finish, FinishReason, StopChecker};
