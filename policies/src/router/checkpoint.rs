//! A router checkpoint, from either of two forms:
//! - the published `torch.save` file itself (the official R2R layout: a
//!   dict with `model_type`, `init_args`, `common_args.threshold`,
//!   `model_specific_args` and `state_dict`, or a bare state dict as CITER
//!   routers are saved), read directly ([`torch_file`](super::torch_file));
//! - a converted directory with `router.json` (what the checkpoint said
//!   besides its weights) and `model.safetensors` (float32), as
//!   `tokenrouter convert-router` writes it for other formats.
//!
//! Integer buffers (BatchNorm's `num_batches_tracked`) and R2R's copy of the
//! small model's `token_embeddings.weight` (the published files drop it; the
//! runtime uses the small model's own embedding matrix) are not loaded.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use super::pickle::Value;
use super::torch_file::TorchFile;
use model_files::weights::Weights;
use model_files::LoadError;

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
    Weights(#[from] LoadError),
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
        Self::Weights(LoadError::Torch(e))
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

/// The small model's embedding copy some R2R files carry (the `_all` files).
const DROPPED_EMBEDDINGS: &str = "token_embeddings.weight";

/// `model_type`, `init_args` and `common_args.threshold` of the official layout.
fn meta_of(root: &Value) -> Result<RouterMeta, String> {
    let model_type = match root.get("model_type") {
        None | Some(Value::None) => None,
        Some(Value::Str(s)) => Some(s.clone()),
        Some(other) => return Err(format!("model_type is not a string: {other:?}")),
    };
    let init_args = match root.get("init_args").map(Value::to_json).transpose()? {
        None | Some(serde_json::Value::Null) => serde_json::Map::new(),
        Some(serde_json::Value::Object(map)) => map,
        Some(other) => return Err(format!("init_args is not a dict: {other}")),
    };
    let threshold = match root.get("common_args").and_then(|c| c.get("threshold")) {
        None | Some(Value::None) => None,
        Some(Value::Float(t)) => Some(*t),
        Some(Value::Int(t)) => Some(*t as f64),
        Some(other) => return Err(format!("common_args.threshold is not a number: {other:?}")),
    };
    Ok(RouterMeta {
        model_type,
        init_args,
        threshold,
    })
}

/// A loaded router: metadata and weights on a device, as float32.
pub struct RouterCheckpoint {
    /// The file or directory it was read from.
    pub dir: PathBuf,
    /// `router.json`.
    pub meta: RouterMeta,
    /// The tensors, consumed by the network that is built from them.
    pub weights: Weights,
}

impl RouterCheckpoint {
    /// Opens a `torch.save` file or a converted directory and loads its
    /// weights on `device`.
    pub fn open(dir: &Path, device: Device) -> Result<Self, RouterError> {
        if dir.is_file() {
            return Self::open_torch(dir, device);
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

    /// Reads a `torch.save` file directly (no Python).
    pub fn open_torch(path: &Path, device: Device) -> Result<Self, RouterError> {
        let bad = |reason: String| RouterError::BadMeta {
            path: path.to_path_buf(),
            reason,
        };
        let mut file = TorchFile::open(path).map_err(bad)?;
        let root = file.root.clone();
        let (meta, state) = match root.get("state_dict") {
            Some(state) => (meta_of(&root).map_err(bad)?, state),
            None => (RouterMeta::default(), &root),
        };
        let (mut tensors, _dropped) = file.state_dict(state, device).map_err(bad)?;
        tensors.remove(DROPPED_EMBEDDINGS);
        if tensors.is_empty() {
            return Err(bad("no floating-point tensors in the state dict".into()));
        }
        Ok(Self {
            dir: path.to_path_buf(),
            meta,
            weights: Weights::from_map(path, tensors),
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
            RouterError::Weights(LoadError::MissingTensor {
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
