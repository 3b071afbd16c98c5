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
    /// Hugging Face model directory, absolute (required for backend `tch`):
    /// `path` or the official `model_path`, resolved.
    pub path: Option<PathBuf>,
    /// The Hugging Face id `path` was found under in the local cache, when
    /// the config named the model by id.
    pub hub_id: Option<String>,
    /// Device (the model's `device`, else the top-level one).
    pub device: DeviceSpec,
    /// Dtype (the model's `dtype`, else the top-level one).
    pub dtype: DType,
    /// The official `tp_size` (>= 1). Tensor parallelism is not implemented:
    /// the model runs on one device, and start-up warns when this is > 1.
    pub tp_size: usize,
    /// The official per-model `port`: the gateway's port when this is the
    /// entry model and `gateway.port` is not set, and the admin port of
    /// `tokenrouter subserver --model <name>` when `--admin` is not given.
    pub port: Option<u16>,
    /// KV cache size (from `system`, default by device).
    pub kv_budget: KvBudget,
    /// Sim settings; always present with backend `sim`. With backend `tch`
    /// they are optional and only inform the tuner.
    pub sim: Option<SimModel>,
}
