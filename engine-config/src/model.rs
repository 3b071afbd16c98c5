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
    /// Whether `dtype` was `auto`: a GGUF-backed model then keeps its
    /// quantized blocks on the CPU (its projections computed on them).
    pub dtype_auto: bool,
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

impl ModelSpec {
    /// What the model's weights are computed in, as the configuration and
    /// the model directory say before loading: `gguf blocks, rest <dtype>`
    /// for a GGUF-backed directory (`model.gguf`, no safetensors) served
    /// with `dtype: auto` on the CPU, else the dtype (`bf16`, `f32`,
    /// `f16`). The engine's log at load lists the block types kept.
    pub fn precision(&self) -> String {
        let dtype = self.dtype.to_string();
        let Some(dir) = self.path.as_deref() else {
            return dtype;
        };
        let gguf_backed = dir.join("model.gguf").exists()
            && !dir.join("model.safetensors").exists()
            && !dir.join("model.safetensors.index.json").exists();
        if gguf_backed && self.dtype_auto && self.device == DeviceSpec::Cpu {
            format!("gguf blocks, rest {dtype}")
        } else {
            dtype
        }
    }
}

#[cfg(test)]
mod precision_tests {
    use super::*;

    fn spec(path: &std::path::Path, dtype_auto: bool, device: DeviceSpec) -> ModelSpec {
        ModelSpec {
            name: "m".into(),
            path: Some(path.to_path_buf()),
            hub_id: None,
            device,
            dtype: DType::Bf16,
            dtype_auto,
            tp_size: 1,
            port: None,
            kv_budget: KvBudget::Tokens(16),
            sim: None,
        }
    }

    #[test]
    fn a_gguf_backed_dir_keeps_its_blocks_only_on_the_cpu_with_auto() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("model.gguf"), b"").unwrap();
        let gguf = "gguf blocks, rest bf16";
        assert_eq!(spec(tmp.path(), true, DeviceSpec::Cpu).precision(), gguf);
        assert_eq!(spec(tmp.path(), false, DeviceSpec::Cpu).precision(), "bf16");
        assert_eq!(
            spec(tmp.path(), true, DeviceSpec::Cuda(0)).precision(),
            "bf16"
        );
        // safetensors beside it are what the engine loads.
        std::fs::write(tmp.path().join("model.safetensors"), b"").unwrap();
        assert_eq!(spec(tmp.path(), true, DeviceSpec::Cpu).precision(), "bf16");
    }
}
