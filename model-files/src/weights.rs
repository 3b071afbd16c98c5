//! Reads safetensors checkpoints (single file or shards), or a GGUF
//! dequantized at load, into libtorch tensors on the target device and
//! dtype, with a progress bar.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use safetensors::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

use crate::load_error::LoadError;
use crate::safetensors_check::check_complete;

/// Named tensors of one checkpoint, consumed by the architecture as it builds.
pub struct Weights {
    dir: PathBuf,
    tensors: HashMap<String, Tensor>,
}

fn kind_of(dtype: Dtype) -> Option<Kind> {
    match dtype {
        Dtype::F32 => Some(Kind::Float),
        Dtype::F16 => Some(Kind::Half),
        Dtype::BF16 => Some(Kind::BFloat16),
        _ => None,
    }
}

/// A GGUF's error as a load error naming the file.
fn gguf_error(path: &Path, e: crate::AssetError) -> LoadError {
    match e {
        crate::AssetError::Load(e) => e,
        crate::AssetError::InFile { path, source } => LoadError::InvalidModel {
            path,
            reason: source.to_string(),
        },
        other => LoadError::InvalidModel {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    }
}

impl Weights {
    /// Loads every tensor of `files` (relative to `dir` for messages) as `kind` on `device`.
    pub fn load(
        dir: &Path,
        files: &[PathBuf],
        kind: Kind,
        device: Device,
    ) -> Result<Self, LoadError> {
        let total: u64 = files
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("loading {msg} [{bar:30}] {bytes}/{total_bytes} ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(dir.display().to_string());
        let mut tensors = HashMap::new();
        for file in files {
            let handle = std::fs::File::open(file).map_err(|e| LoadError::io(file, e))?;
            // SAFETY: the file is opened read-only and not modified while mapped.
            #[allow(unsafe_code)] // mmap of a checkpoint shard.
            let mmap =
                unsafe { memmap2::Mmap::map(&handle) }.map_err(|e| LoadError::io(file, e))?;
            check_complete(&mmap).map_err(|reason| LoadError::InvalidModel {
                path: file.clone(),
                reason,
            })?;
            let st = SafeTensors::deserialize(&mmap).map_err(|e| LoadError::InvalidModel {
                path: file.clone(),
                reason: format!("safetensors: {e}"),
            })?;
            for (name, view) in st.tensors() {
                let src_kind = kind_of(view.dtype()).ok_or_else(|| LoadError::InvalidModel {
                    path: file.clone(),
                    reason: format!("tensor `{name}` has unsupported dtype {:?}", view.dtype()),
                })?;
                let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
                let t = Tensor::f_from_data_size(view.data(), &shape, src_kind)?
                    .f_to_kind(kind)?
                    .f_to_device(device)?;
                bar.inc(view.data().len() as u64);
                tensors.insert(name, t);
            }
        }
        bar.finish_and_clear();
        Ok(Self {
            dir: dir.to_path_buf(),
            tensors,
        })
    }

    /// Loads every tensor of the GGUF at `gguf` (a linked model directory's
    /// `model.gguf`), dequantized one at a time to `kind` on `device`, under
    /// the transformers names import gives them; no copy goes to disk.
    pub fn load_gguf(
        dir: &Path,
        gguf: &Path,
        kind: Kind,
        device: Device,
    ) -> Result<Self, LoadError> {
        let weights = crate::gguf::GgufWeights::open(gguf).map_err(|e| gguf_error(gguf, e))?;
        let bar = ProgressBar::new(weights.parameter_count());
        bar.set_style(
            ProgressStyle::with_template("loading {msg} [{bar:30}] {pos}/{len} weights ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(dir.display().to_string());
        let mut tensors = HashMap::new();
        let names: Vec<String> = weights.names().map(str::to_string).collect();
        for name in names {
            let shape: Vec<i64> = weights
                .shape(&name)
                .map_err(|e| gguf_error(gguf, e))?
                .iter()
                .map(|&d| d as i64)
                .collect();
            let values = weights.to_f32(&name).map_err(|e| gguf_error(gguf, e))?;
            let t = Tensor::f_from_slice(&values)?
                .f_reshape(&shape)?
                .f_to_kind(kind)?
                .f_to_device(device)?;
            bar.inc(values.len() as u64);
            tensors.insert(name, t);
        }
        bar.finish_and_clear();
        Ok(Self {
            dir: dir.to_path_buf(),
            tensors,
        })
    }

    /// Builds from tensors already in memory (random init, tests).
    pub fn from_map(dir: &Path, tensors: HashMap<String, Tensor>) -> Self {
        Self {
            dir: dir.to_path_buf(),
            tensors,
        }
    }

    /// Removes and returns `name`, checking its shape.
    pub fn take(&mut self, name: &str, shape: &[i64]) -> Result<Tensor, LoadError> {
        let t = self
            .tensors
            .remove(name)
            .ok_or_else(|| LoadError::MissingTensor {
                name: name.to_string(),
                path: self.dir.clone(),
            })?;
        if t.size() != shape {
            return Err(LoadError::ShapeMismatch {
                name: name.to_string(),
                expected: shape.to_vec(),
                got: t.size(),
            });
        }
        Ok(t)
    }

    /// Like `take`, but `None` when absent.
    pub fn take_optional(
        &mut self,
        name: &str,
        shape: &[i64],
    ) -> Result<Option<Tensor>, LoadError> {
        if self.tensors.contains_key(name) {
            self.take(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The shape of `name`, when present (checkpoints whose widths are
    /// read off the tensors, such as routers).
    pub fn shape(&self, name: &str) -> Option<Vec<i64>> {
        self.tensors.get(name).map(Tensor::size)
    }

    /// Names not consumed by the architecture (reported as a warning).
    pub fn leftover(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tensors.keys().cloned().collect();
        names.sort();
        names
    }
}
