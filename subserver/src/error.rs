//! The engine's error type. `error_type()` is the metric label, as in TGI.

use std::path::{Path, PathBuf};

/// Everything that can go wrong below the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A model directory is malformed.
    #[error("invalid model at {path}: {reason}")]
    InvalidModel {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor the architecture needs is absent from the checkpoint.
    #[error("missing tensor `{name}` in {path}")]
    MissingTensor {
        /// The tensor name.
        name: String,
        /// The model directory.
        path: PathBuf,
    },
    /// A tensor has the wrong shape.
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    ShapeMismatch {
        /// The tensor name.
        name: String,
        /// The shape the config implies.
        expected: Vec<i64>,
        /// The shape in the file.
        got: Vec<i64>,
    },
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
    /// A layer op of ours (`kernels::layer_ops`) refused its input.
    #[error(transparent)]
    LayerOp(#[from] kernels::layer_ops::LayerOpError),
    /// A tensor could not be lent to a host kernel.
    #[error(transparent)]
    HostTensor(#[from] crate::host_tensor::HostTensorError),
}

impl From<model_files::LoadError> for EngineError {
    /// Each variant into the engine's variant of the same name (they render alike).
    fn from(e: model_files::LoadError) -> Self {
        use model_files::LoadError as L;
        match e {
            L::Io { path, source } => Self::Io { path, source },
            L::InvalidModel { path, reason } => Self::InvalidModel { path, reason },
            L::MissingTensor { name, path } => Self::MissingTensor { name, path },
            L::ShapeMismatch {
                name,
                expected,
                got,
            } => Self::ShapeMismatch {
                name,
                expected,
                got,
            },
            L::Torch(e) => Self::Torch(e),
        }
    }
}

impl EngineError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A short stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Io { .. } => "io",
            Self::InvalidModel { .. } => "invalid_model",
            Self::MissingTensor { .. } => "missing_tensor",
            Self::ShapeMismatch { .. } => "shape_mismatch",
            Self::InvalidDevice(_) => "invalid_device",
            Self::InvalidRequest(_) => "invalid_request",
            Self::Kv(_) => "kv_cache",
            Self::Tokenizer(_) => "tokenizer",
            Self::Asset(_) => "asset",
            Self::Torch(_) | Self::OneDnn { .. } => "torch",
            Self::Kernel(_) | Self::Gemm(_) | Self::LayerOp(_) | Self::HostTensor(_) => "kernel",
        }
    }
}
