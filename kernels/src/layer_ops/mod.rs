//! A decoder layer's elementwise work on the host, one pass each where
//! libtorch takes a chain of ops: on a CPU every op is a dispatch, an
//! output allocation and an OpenMP fork/join, which at decode sizes cost
//! more than the arithmetic.
//!
//! - [`add_rms_norm`]: the residual add and the next norm, cast to the
//!   matmul's dtype (ATen: `add_`, `rms_norm`, `to`);
//! - [`swiglu`]: `silu(gate) * up` from the fused gate/up projection, into
//!   a contiguous buffer (ATen: two views, `silu_`, `mul_`, and the copy
//!   the next matmul makes of a strided input);
//! - [`qkv_epilogue`]: from the fused QKV projection, Qwen3's per-head
//!   norms, RoPE on q and k, q out in `f32` for the paged attention, k and
//!   v written to their KV slots (ATen: about a dozen ops and views).
//!
//! Each rounds where libtorch's chain rounds (every op's output in the
//! model dtype), so the model's numerics do not move: the tests compare
//! them with the op-by-op arithmetic.

mod norm;
mod qkv;
mod rows;
mod swiglu;
#[cfg(test)]
mod tests;

pub use norm::add_rms_norm;
pub use qkv::{qkv_epilogue, QkvShape, RopeTable};
pub use swiglu::swiglu;

/// Arguments of a layer op that do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("layer op: {0}")]
pub struct LayerOpError(pub String);
