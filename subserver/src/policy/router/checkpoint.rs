//! The converted router format: a directory with `router.json` (what the
//! checkpoint said besides its weights) and `model.safetensors` (the state
//! dict, float32). `tokenrouter convert-router` writes it from a
//! `torch.save` file (the official R2R layout: a dict with `model_type`,
//! `init_args`, `common_args.threshold` and `state_dict`; or a bare state
//! dict, as CITER routers are saved).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::error::EngineError;
use crate::model::weights::Weights;

/// File with the metadata.
pub const META_FILE: &str = "router.json";
/// File with the weights.
pub const WEIGHTS_FILE: &str = "model.safetensors";

/// Router loading errors.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The path is not a converted router directory.
    #[error("{path}: {reason}")]
    NotConverted {
        /// The path given.
        path: PathBuf,
        /// What is missing, and the fix.
        reason: String,
    },
    /// `router.json` is unreadable.
    #[error("{path}: {reason}")]
    BadMeta {
        /// The file.
        path: PathBuf,
        /// The parse error.
        reason: String,
    },
    /// A tensor is missing, of the wrong shape, or the file is unreadable.
    #[error("{0}")]
    Weights(#[from] EngineError),
    /// The weights and `init_args` disagree, or describe something unsupported.
    #[error("{path}: {reason}")]
    Architecture {
        /// The router directory.
        path: PathBuf,
        /// What does not fit.
        reason: String,
    },
}

impl From<tch::TchError> for RouterError {
    fn from(e: tch::TchError) -> Self {
        Self::Weights(EngineError::from(e))
    }
}

/// `router.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouterMeta {
    /// The class that was saved (R2R: `HiddenStatesTokenLMHeadLogitsClassifier`).
    #[serde(default)]
    pub model_type: Option<String>,
    /// Constructor arguments the checkpoint recorded (may be partial).
    #[serde(default)]
    pub init_args: serde_json::Map<String, serde_json::Value>,
    /// The trained threshold (`common_args.threshold`), when recorded.
    #[serde(default)]
    pub threshold: Option<f64>,
}

/// A converted router: metadata and weights on a device, as float32.
pub struct RouterCheckpoint {
    /// The directory.
    pub dir: PathBuf,
    /// `router.json`.
    pub meta: RouterMeta,
    /// The tensors, consumed by the network that is built from them.
    pub weights: Weights,
}

impl RouterCheckpoint {
    /// Opens `dir` and loads its weights on `device`.
    pub fn open(dir: &Path, device: Device) -> Result<Self, RouterError> {
        if dir.is_file() {
            return Err(RouterError::NotConverted {
                path: dir.to_path_buf(),
                reason: "is a file; routers load from the directory `tokenrouter convert-router \
                         <checkpoint.pt> <dir>` writes"
                    .into(),
            });
        }
        let meta_path = dir.join(META_FILE);
        let weights_path = dir.join(WEIGHTS_FILE);
        for p in [&meta_path, &weights_path] {
            if !p.is_file() {
                return Err(RouterError::NotConverted {
                    path: p.clone(),
                    reason: "not found (convert the checkpoint with `tokenrouter convert-router`)"
                        .into(),
                });
            }
        }
        let text = std::fs::read_to_string(&meta_path).map_err(|e| RouterError::BadMeta {
            path: meta_path.clone(),
            reason: e.to_string(),
        })?;
        let meta: RouterMeta = serde_json::from_str(&text).map_err(|e| RouterError::BadMeta {
            path: meta_path.clone(),
            reason: e.to_string(),
        })?;
        let weights = Weights::load(dir, &[weights_path], Kind::Float, device)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            meta,
            weights,
        })
    }

    /// An architecture error about this checkpoint.
    pub fn arch_error(&self, reason: impl Into<String>) -> RouterError {
        RouterError::Architecture {
            path: self.dir.clone(),
            reason: reason.into(),
        }
    }

    /// The shape of `name`, or an error naming the missing tensor.
    pub fn shape(&self, name: &str) -> Result<Vec<i64>, RouterError> {
        self.weights.shape(name).ok_or_else(|| {
            RouterError::Weights(EngineError::MissingTensor {
                name: name.to_string(),
                path: self.dir.clone(),
            })
        })
    }

    /// A `[out, in]` linear layer (with its bias) named `prefix`.
    pub fn linear(&mut self, prefix: &str) -> Result<Linear, RouterError> {
        let shape = self.shape(&format!("{prefix}.weight"))?;
        if shape.len() != 2 {
            return Err(self.arch_error(format!("{prefix}.weight is not 2-D: {shape:?}")));
        }
        let weight = self.weights.take(&format!("{prefix}.weight"), &shape)?;
        let bias = self
            .weights
            .take_optional(&format!("{prefix}.bias"), &[shape[0]])?;
        Ok(Linear { weight, bias })
    }

    /// A LayerNorm of width `n` named `prefix` (weight and bias).
    pub fn layer_norm(&mut self, prefix: &str, n: i64) -> Result<LayerNorm, RouterError> {
        Ok(LayerNorm {
            weight: self.weights.take(&format!("{prefix}.weight"), &[n])?,
            bias: self.weights.take(&format!("{prefix}.bias"), &[n])?,
            width: n,
        })
    }

    /// A BatchNorm1d of width `n` named `prefix`, in eval mode (running statistics).
    pub fn batch_norm(&mut self, prefix: &str, n: i64, eps: f64) -> Result<BatchNorm, RouterError> {
        Ok(BatchNorm {
            weight: self.weights.take(&format!("{prefix}.weight"), &[n])?,
            bias: self.weights.take(&format!("{prefix}.bias"), &[n])?,
            mean: self.weights.take(&format!("{prefix}.running_mean"), &[n])?,
            var: self.weights.take(&format!("{prefix}.running_var"), &[n])?,
            eps,
        })
    }

    /// Reads an integer `init_args` entry, when present.
    pub fn init_usize(&self, key: &str) -> Result<Option<usize>, RouterError> {
        match self.meta.init_args.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
                self.arch_error(format!("init_args.{key}: expected an integer, got {v}"))
            }),
        }
    }

    /// Reads a boolean `init_args` entry, when present.
    pub fn init_bool(&self, key: &str) -> Result<Option<bool>, RouterError> {
        match self.meta.init_args.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                self.arch_error(format!("init_args.{key}: expected a boolean, got {v}"))
            }),
        }
    }

    /// Reads a number `init_args` entry, when present.
    pub fn init_f64(&self, key: &str) -> Result<Option<f64>, RouterError> {
        match self.meta.init_args.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                self.arch_error(format!("init_args.{key}: expected a number, got {v}"))
            }),
        }
    }

    /// Checks that an `init_args` entry, when recorded, matches what the
    /// weights say.
    pub fn check_init(&self, key: &str, from_weights: usize) -> Result<(), RouterError> {
        match self.init_usize(key)? {
            Some(v) if v != from_weights => Err(self.arch_error(format!(
                "init_args.{key} is {v} but the weights have {from_weights}"
            ))),
            _ => Ok(()),
        }
    }

    /// True when a tensor named `name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.weights.shape(name).is_some()
    }
}

/// `y = x W^T + b`.
pub struct Linear {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// Input width.
    pub fn in_features(&self) -> i64 {
        self.weight.size()[1]
    }

    /// Output width.
    pub fn out_features(&self) -> i64 {
        self.weight.size()[0]
    }

    /// Applies the layer to `[B, in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        x.f_linear(&self.weight, self.bias.as_ref())
    }
}

/// LayerNorm over the last dimension (PyTorch's default eps, 1e-5).
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    width: i64,
}

impl LayerNorm {
    /// Applies the norm to `[B, width]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        x.f_layer_norm(
            [self.width],
            Some(&self.weight),
            Some(&self.bias),
            1e-5,
            false,
        )
    }
}

/// BatchNorm1d in eval mode: `(x - running_mean) / sqrt(running_var + eps) * w + b`.
pub struct BatchNorm {
    weight: Tensor,
    bias: Tensor,
    mean: Tensor,
    var: Tensor,
    eps: f64,
}

impl BatchNorm {
    /// Applies the norm to `[B, n]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        let scale = self
            .var
            .f_add_scalar(self.eps)?
            .f_rsqrt()?
            .f_mul(&self.weight)?;
        x.f_sub(&self.mean)?.f_mul(&scale)?.f_add(&self.bias)
    }
}
