//! Routing-signal and sampling kernels.
//!
//! This crate holds the CPU reference implementations: plain, obviously
//! correct loops over one row of logits. Sampling and the routing policies
//! call them directly today. CUDA versions (fused, batched) will come behind
//! a `cuda` feature; every CUDA kernel must be checked against the CPU
//! reference of the same name here, which is why these stay simple and are
//! tested against hand-computed values.
//!
//! Conventions shared by every kernel:
//! - Arithmetic that accumulates (sums, log-sum-exp) is done in `f64` so a
//!   152k-entry vocabulary does not lose precision.
//! - `-inf` logits are legal (masked tokens) and get probability 0.
//! - `NaN` logits propagate into distribution outputs (as in torch) and are
//!   never chosen by [`argmax`] or [`top_k`].

mod distribution;
mod selection;

pub use distribution::{entropy, log_softmax, logsumexp, normalized_entropy, softmax};
pub use selection::{argmax, top_k};
