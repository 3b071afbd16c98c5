//! Routing-signal and sampling kernels.
//!
//! This crate holds the CPU reference implementations: plain, obviously
//! correct loops over one row of logits, which sampling and the routing
//! policies call directly. The fused, batched CUDA versions (`cuda/*.cu`,
//! module [`cuda`] behind the `cuda` feature) are checked against the
//! reference of the same name here by `kernel-check` (see [`check`]); the
//! one-pass algorithm of the signals kernel also has a CPU twin,
//! [`routing_signals_one_pass`], tested here without a GPU.
//!
//! [`gemm`] is the CPU's weight matmul for bf16 weights on AVX-512
//! without AMX: weights widened in registers, f32 FMAs.
//!
//! [`layer_ops`] are a decoder layer's elementwise passes on the host
//! (residual add and norm, SwiGLU, the QKV epilogue with RoPE and the K/V
//! writes), one pass each where libtorch takes a chain of ops.
//!
//! [`paged_attention`] is the engine's CPU attention for decode-sized
//! steps: new queries against K/V read in place from the paged pool
//! through each sequence's slot table (its tests compare it with textbook
//! attention in `f64`).
//!
//! Conventions shared by every kernel:
//! - Arithmetic that accumulates (sums, log-sum-exp) is done in `f64` so a
//!   152k-entry vocabulary does not lose precision.
//! - `-inf` logits are legal (masked tokens) and get probability 0.
//! - `NaN` logits propagate into distribution outputs (as in torch) and are
//!   never chosen by [`argmax`] or [`top_k`].

pub mod check;
#[cfg(feature = "cuda")]
#[allow(unsafe_code)] // FFI: the CUDA kernels and the CUDA runtime.
pub mod cuda;
mod distribution;
pub mod elem;
mod fast_exp;
pub mod gemm;
pub mod layer_ops;
pub mod paged_attention;
pub mod parallel;
pub mod quant;
mod row_stats;
pub mod sampling;
mod selection;
pub mod signals;
#[cfg(test)]
mod test_values;

pub use distribution::{entropy, log_softmax, logsumexp, normalized_entropy, softmax};
pub use row_stats::{row_stats, RowStats};
pub use sampling::{sample_row, uniform, SampleError, SampleParams};
pub use selection::{argmax, top_k};
pub use signals::{routing_signals, routing_signals_one_pass, RoutingSignals};
