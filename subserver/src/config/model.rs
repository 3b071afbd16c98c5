//! One model of the group (an entry of `model:`), with its settings resolved.

use std::path::PathBuf;

use super::latency::LatencyModel;
use super::placement::{DType, DeviceSpec};
use super::system::KvBudget;

/// Default `sim.vocab_size`: Qwen3's vocabulary.
pub const DEFAULT_SIM_VOCAB_SIZE: usize = 151_936;

/// Sim-backend settings of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct SimModel {
    /// Step time in milliseconds.
    pub latency_ms: LatencyModel,
    /// Vocabulary the seeded token generator draws from (> 0).
    pub vocab_size: usize,
    /// Emit seeded random logits (the scheduler samples; entropy-reading
    /// policies and logprobs work) instead of tokens.
    pub logits: bool,
}

/// One model, with group defaults already applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// The key under `model:`.
    pub name: String,
    /// Hugging Face model directory, absolute (required for backend `tch`).
    pub path: Option<PathBuf>,
    /// Device (the model's `device`, else the top-level one).
    pub device: DeviceSpec,
    /// Dtype (the model's `dtype`, else the top-level one).
    pub dtype: DType,
    /// KV cache size (from `system`, default by device).
    pub kv_budget: KvBudget,
    /// Sim settings; always present with backend `sim`. With backend `tch`
    /// they are optional and only inform the tuner.
    pub sim: Option<SimModel>,
}
