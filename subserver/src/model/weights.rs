//! Reads safetensors checkpoints (single file or shards) into libtorch tensors
//! on the target device and dtype, with a progress bar.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use safetensors::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

use crate::error::EngineError;

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

impl Weights {
    /// Loads every tensor of `files` (relative to `dir` for messages) as `kind` on `device`.
    pub fn load(
        dir: &Path,
        files: &[PathBuf],
        kind: Kind,
        device: Device,
    ) -> Result<Self, EngineError> {
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
            let handle = std::fs::File::open(file).map_err(|e| EngineError::io(file, e))?;
            // SAFETY: the file is opened read-only and not modified while mapped.
            #[allow(unsafe_code)] // mmap of a checkpoint shard.
            let mmap =
                unsafe { memmap2::Mmap::map(&handle) }.map_err(|e| EngineError::io(file, e))?;
            check_complete(&mmap).map_err(|reason| EngineError::InvalidModel {
                path: file.clone(),
                reason,
            })?;
            let st = SafeTensors::deserialize(&mmap).map_err(|e| EngineError::InvalidModel {
                path: file.clone(),
                reason: format!("safetensors: {e}"),
            })?;
            for (name, view) in st.tensors() {
                let src_kind = kind_of(view.dtype()).ok_or_else(|| EngineError::InvalidModel {
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

    /// Builds from tensors already in memory (random init, tests).
    pub fn from_map(dir: &Path, tensors: HashMap<String, Tensor>) -> Self {
        Self {
            dir: dir.to_path_buf(),
            tensors,
        }
    }

    /// Removes and returns `name`, checking its shape.
    pub fn take(&mut self, name: &str, shape: &[i64]) -> Result<Tensor, EngineError> {
        let t = self
            .tensors
            .remove(name)
            .ok_or_else(|| EngineError::MissingTensor {
                name: name.to_string(),
                path: self.dir.clone(),
            })?;
        if t.size() != shape {
            return Err(EngineError::ShapeMismatch {
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
    ) -> Result<Option<Tensor>, EngineError> {
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

/// Checks that a safetensors file holds everything its header promises,
/// so that a cut-off download or write is named as such ("truncated:
/// expected N bytes, file has M") rather than in the parser's words.
pub fn check_complete(bytes: &[u8]) -> Result<(), String> {
    let have = bytes.len();
    let Some(len) = bytes.get(..8) else {
        return Err(format!(
            "truncated: expected at least 8 bytes (the header length), file has {have}"
        ));
    };
    let header_len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    let header_end = header_len.saturating_add(8);
    if header_end > have as u64 {
        return Err(format!(
            "truncated: expected a {header_end}-byte header, file has {have} bytes"
        ));
    }
    // The data's extent from the header's own offsets (the library only
    // says "not fully covered" when the file is short).
    let data_end = serde_json::from_slice::<serde_json::Value>(&bytes[8..header_end as usize])
        .ok()
        .and_then(|v| {
            v.as_object()?
                .values()
                .filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64())
                .max()
        })
        .unwrap_or(0);
    let need = header_end.saturating_add(data_end);
    if need > have as u64 {
        return Err(format!("truncated: expected {need} bytes, file has {have}"));
    }
    SafeTensors::read_metadata(bytes).map_err(|e| format!("safetensors: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod completeness_tests {
    use super::check_complete;

    fn file() -> Vec<u8> {
        let data = vec![0u8; 16];
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &data).unwrap();
        safetensors::serialize([("w", view)], None).unwrap()
    }

    #[test]
    fn truncation_is_named_with_both_sizes() {
        let full = file();
        assert_eq!(check_complete(&full), Ok(()));
        let cut = &full[..full.len() - 3];
        let e = check_complete(cut).unwrap_err();
        assert_eq!(
            e,
            format!(
                "truncated: expected {} bytes, file has {}",
                full.len(),
                cut.len()
            )
        );
        assert!(check_complete(&full[..20])
            .unwrap_err()
            .starts_with("truncated: expected a "));
        assert!(check_complete(&full[..3])
            .unwrap_err()
            .contains("file has 3"));
    }
}
