//! The engine's error type. `error_type()` is the metric label, as in TGI.

use std::path::Path;

/// Everything that can go wrong below the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A model's config or weights could not be read (file, malformed
    /// directory, missing tensor, wrong shape).
    #[error(transparent)]
    Load(#[from] model_files::LoadError),
    /// A device or dtype string we cannot use.
    #[error("{0}")]
    InvalidDevice(String),
    /// A request that cannot be served as given.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The KV cache cannot hold what was asked.
    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
    /// Tokenizer or chat template failure.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// Model asset conversion failure.
    #[error(transparent)]
    Asset(#[from] model_files::AssetError),
    /// libtorch raised.
    #[error("torch: {0}")]
    Torch(#[from] tch::TchError),
    /// oneDNN's packed linear (`model::onednn`) raised.
    #[error("oneDNN {what}: {message}")]
    OneDnn {
        /// The call: weight packing or linear.
        what: &'static str,
        /// libtorch's message.
        message: String,
    },
    /// A kernel of ours (crate `kernels`) refused its input.
    #[error(transparent)]
    Kernel(#[from] kernels::paged_attention::PlanError),
    /// The GEMM of ours (`kernels::gemm`) refused its input.
    #[error(transparent)]
    Gemm(#[from] kernels::gemm::GemmError),
    /// The quantized matmul (`kernels::quant`) refused its input.
    #[error(transparent)]
    Quant(#[from] kernels::quant::QuantError),
    /// A layer op of ours (`kernels::layer_ops`) refused its input.
    #[error(transparent)]
    LayerOp(#[from] kernels::layer_ops::LayerOpError),
    /// A tensor could not be lent to a host kernel.
    #[error(transparent)]
    HostTensor(#[from] crate::host_tensor::HostTensorError),
}

impl EngineError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Load(model_files::LoadError::io(path, source))
    }

    /// A short stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Load(e) => e.error_type(),
            Self::InvalidDevice(_) => "invalid_device",
            Self::InvalidRequest(_) => "invalid_request",
            Self::Kv(_) => "kv_cache",
            Self::Tokenizer(_) => "tokenizer",
            Self::Asset(_) => "asset",
            Self::Torch(_) | Self::OneDnn { .. } => "torch",
            Self::Kernel(_)
            | Self::Gemm(_)
            | Self::Quant(_)
            | Self::LayerOp(_)
            | Self::HostTensor(_) => "kernel",
        }
    }
}
