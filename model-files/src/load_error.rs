//! The error of reading a model directory's `config.json` and (with the
//! `tch` feature) its safetensors weights. The engine's and the asset
//! tools' errors wrap it (`Load`), so each of these is defined once.

use std::path::{Path, PathBuf};

/// What can go wrong reading a model's config or weights.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read.
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
    /// libtorch raised while building a tensor.
    #[cfg(feature = "tch")]
    #[error("torch: {0}")]
    Torch(#[from] tch::TchError),
}

impl LoadError {
    /// A short stable label for metrics and logs.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Io { .. } => "io",
            Self::InvalidModel { .. } => "invalid_model",
            Self::MissingTensor { .. } => "missing_tensor",
            Self::ShapeMismatch { .. } => "shape_mismatch",
            #[cfg(feature = "tch")]
            Self::Torch(_) => "torch",
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
