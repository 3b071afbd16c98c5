//! A GGUF read as a model's weights: the config its metadata gives, and
//! each tensor under its transformers name, either dequantized to a dtype
//! or as the file's own blocks (for linear layers that compute on them).
//! Import and the engine's loader both go through [`GgufWeights`], so the
//! names, shapes and row orders they see are the same.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use super::arch_config::{gguf_architecture, gguf_config};
use super::dequant::is_dequantizable;
use super::file::{GgufFile, GgufHeader, GgufTensorInfo};
use super::ggml_type::{GgmlType, SUPPORTED_TYPES};
use super::permute::unpermute_rows;
use super::tensor_names::{map_tensor_name, RotaryRows};
use crate::dtype::StorageDtype;
use crate::hf_config::ModelConfig;
use crate::tensor_spec::tensor_specs;
use crate::AssetError;

/// One tensor of the plan: where it lies in the file and how its rows are stored.
#[derive(Debug, Clone)]
struct Source {
    /// Index into the header's tensor infos.
    info: usize,
    rows: RotaryRows,
    /// Row-major shape, as transformers holds the tensor.
    shape: Vec<usize>,
}

/// A tensor as the file stores it, rows in transformers order.
#[derive(Debug, Clone)]
pub struct RawTensor<'a> {
    /// The llama.cpp name in the file.
    pub gguf_name: &'a str,
    /// The block type.
    pub ggml_type: GgmlType,
    /// Row-major logical shape (`[out, in]` for a projection).
    pub shape: Vec<usize>,
    /// The blocks, row after row. Borrowed from the mapping, except for
    /// llama's q/k, whose rows are put back in transformers order.
    pub bytes: Cow<'a, [u8]>,
}

/// The weights of a llama or qwen2 GGUF, memory-mapped.
pub struct GgufWeights {
    file: GgufFile,
    config: ModelConfig,
    /// Transformers names in the order of [`tensor_specs`].
    order: Vec<String>,
    sources: HashMap<String, Source>,
}

impl std::fmt::Debug for GgufWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWeights")
            .field("path", &self.file.path())
            .field("tensors", &self.order.len())
            .finish()
    }
}

/// Errors that say what but not where get the file's path.
fn in_file(path: &Path) -> impl Fn(AssetError) -> AssetError + '_ {
    move |e| match e {
        AssetError::Metadata { .. }
        | AssetError::UnsupportedModel(_)
        | AssetError::UnsupportedTokenizer(_)
        | AssetError::UnmappedTensor { .. }
        | AssetError::TensorShape { .. }
        | AssetError::UnsupportedTensorType { .. } => AssetError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        },
        other => other,
    }
}

impl GgufWeights {
    /// Maps `path` and checks every tensor against the config its metadata
    /// gives (names, types, shapes, none missing or left over). Every error
    /// names the file.
    pub fn open(path: &Path) -> Result<Self, AssetError> {
        let file = GgufFile::open(path)?;
        Self::plan(file).map_err(in_file(path))
    }

    fn plan(file: GgufFile) -> Result<Self, AssetError> {
        let header = file.header();
        let arch = gguf_architecture(header)?;
        let tied = header.tensor("output.weight").is_none();
        // The dequantized values are exact in f32; a writer may say otherwise.
        let config = gguf_config(header, tied, StorageDtype::F32)?;
        let mut planned: HashMap<String, (usize, RotaryRows)> = HashMap::new();
        for (i, info) in header.tensors.iter().enumerate() {
            let (hf, rows) = map_tensor_name(arch, &info.name)?;
            if !is_dequantizable(info.ggml_type) {
                return Err(AssetError::UnsupportedTensorType {
                    tensor: info.name.clone(),
                    ggml_type: info.ggml_type.name(),
                    supported: SUPPORTED_TYPES,
                });
            }
            if planned.insert(hf.clone(), (i, rows)).is_some() {
                return Err(AssetError::InvalidGguf {
                    path: file.path().to_path_buf(),
                    reason: format!("two tensors map to `{hf}` (last: `{}`)", info.name),
                });
            }
        }
        let specs = tensor_specs(&config);
        let mut sources = HashMap::new();
        let mut order = Vec::with_capacity(specs.len());
        for spec in &specs {
            let (info, rows) =
                planned
                    .remove(&spec.name)
                    .ok_or_else(|| crate::LoadError::MissingTensor {
                        name: spec.name.clone(),
                        path: file.path().to_path_buf(),
                    })?;
            let found = header.tensors[info].shape();
            if found != spec.shape {
                return Err(AssetError::TensorShape {
                    tensor: header.tensors[info].name.clone(),
                    reason: format!("shape {found:?}, but the metadata implies {:?}", spec.shape),
                });
            }
            order.push(spec.name.clone());
            sources.insert(
                spec.name.clone(),
                Source {
                    info,
                    rows,
                    shape: spec.shape.clone(),
                },
            );
        }
        if let Some((extra, (info, _))) = planned.into_iter().next() {
            return Err(AssetError::UnmappedTensor {
                tensor: header.tensors[info].name.clone(),
                reason: format!("maps to `{extra}`, which the config does not use"),
            });
        }
        Ok(Self {
            file,
            config,
            order,
            sources,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The parsed header (metadata for the tokenizer files).
    pub fn header(&self) -> &GgufHeader {
        self.file.header()
    }

    /// The transformers config the metadata gives (`torch_dtype` float32).
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Transformers names of every tensor, in the order of [`tensor_specs`].
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    /// Number of weights of all tensors.
    pub fn parameter_count(&self) -> u64 {
        self.sources
            .values()
            .map(|s| self.info(s).n_elements())
            .sum()
    }

    fn source(&self, name: &str) -> Result<&Source, AssetError> {
        self.sources.get(name).ok_or_else(|| {
            AssetError::Load(crate::LoadError::MissingTensor {
                name: name.to_string(),
                path: self.path().to_path_buf(),
            })
        })
    }

    fn info(&self, s: &Source) -> &GgufTensorInfo {
        &self.file.header().tensors[s.info]
    }

    /// The row-major shape of `name`.
    pub fn shape(&self, name: &str) -> Result<&[usize], AssetError> {
        Ok(&self.source(name)?.shape)
    }

    /// The heads whose rows llama.cpp interleaved, when it did.
    fn permuted_heads(&self, s: &Source) -> Option<usize> {
        match s.rows {
            RotaryRows::Plain => None,
            RotaryRows::Query => Some(self.config.num_attention_heads),
            RotaryRows::Key => Some(self.config.kv_heads()),
        }
    }

    /// `name` dequantized to f32, row-major, rows in transformers order.
    pub fn to_f32(&self, name: &str) -> Result<Vec<f32>, AssetError> {
        let s = self.source(name)?;
        let info = self.info(s);
        let values = self.file.dequantize(info).map_err(in_file(self.path()))?;
        match self.permuted_heads(s) {
            None => Ok(values),
            Some(heads) => {
                unpermute_rows(&values, s.shape[0], s.shape[1], heads).map_err(|reason| {
                    in_file(self.path())(AssetError::TensorShape {
                        tensor: info.name.clone(),
                        reason,
                    })
                })
            }
        }
    }

    /// `name` dequantized and stored as `dtype` (little-endian bytes, as a
    /// safetensors file holds them).
    pub fn to_dtype(&self, name: &str, dtype: StorageDtype) -> Result<Vec<u8>, AssetError> {
        let values = self.to_f32(name)?;
        let mut out = Vec::with_capacity(values.len() * dtype.size());
        dtype.encode_into(&values, &mut out);
        Ok(out)
    }

    /// `name` as the file's blocks, rows in transformers order. Each row is
    /// whole blocks whenever the row width is a multiple of the type's block
    /// size, which the header check guarantees for every matrix it accepts
    /// of a block type; a permuted tensor whose rows are not is an error.
    pub fn raw(&self, name: &str) -> Result<RawTensor<'_>, AssetError> {
        let s = self.source(name)?;
        let info = self.info(s);
        let bytes = self.file.tensor_bytes(info)?;
        let raw = |bytes| RawTensor {
            gguf_name: &info.name,
            ggml_type: info.ggml_type,
            shape: s.shape.clone(),
            bytes,
        };
        let Some(heads) = self.permuted_heads(s) else {
            return Ok(raw(Cow::Borrowed(bytes)));
        };
        let rows = s.shape[0];
        let row_bytes = bytes.len() / rows.max(1);
        if row_bytes * rows != bytes.len() {
            return Err(in_file(self.path())(AssetError::TensorShape {
                tensor: info.name.clone(),
                reason: format!(
                    "{} bytes of {} do not split into {rows} rows of whole blocks",
                    bytes.len(),
                    info.ggml_type.name()
                ),
            }));
        }
        // Permute row indices, then move each row's bytes.
        let index: Vec<f32> = (0..rows).map(|r| r as f32).collect();
        let order = unpermute_rows(&index, rows, 1, heads).map_err(|reason| {
            in_file(self.path())(AssetError::TensorShape {
                tensor: info.name.clone(),
                reason,
            })
        })?;
        let mut out = Vec::with_capacity(bytes.len());
        for src in order {
            let src = src as usize;
            out.extend_from_slice(&bytes[src * row_bytes..(src + 1) * row_bytes]);
        }
        Ok(raw(Cow::Owned(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::super::dequant::dequantize;
    use super::super::test_file::{tiny_llama, tiny_qwen2};
    use super::super::value::MetadataValue;
    use super::*;

    fn open(b: &super::super::test_file::GgufBuilder) -> (tempfile::TempDir, GgufWeights) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.gguf");
        std::fs::write(&path, b.build()).unwrap();
        let w = GgufWeights::open(&path).unwrap();
        (dir, w)
    }

    #[test]
    fn every_tensor_dequantizes_to_the_transformers_values() {
        for (b, expected) in [tiny_llama(false), tiny_qwen2(true), tiny_qwen2(false)] {
            let (_dir, w) = open(&b);
            assert_eq!(w.names().count(), expected.len());
            for (name, shape, values) in &expected {
                assert_eq!(w.shape(name).unwrap(), shape.as_slice(), "{name}");
                assert_eq!(&w.to_f32(name).unwrap(), values, "{name}");
                let bf16 = w.to_dtype(name, StorageDtype::Bf16).unwrap();
                assert_eq!(bf16.len(), values.len() * 2);
            }
            let n: usize = expected.iter().map(|(_, _, v)| v.len()).sum();
            assert_eq!(w.parameter_count(), n as u64);
        }
    }

    #[test]
    fn raw_blocks_dequantize_to_the_same_rows() {
        for (b, _) in [tiny_llama(true), tiny_qwen2(true)] {
            let (_dir, w) = open(&b);
            let names: Vec<String> = w.names().map(str::to_string).collect();
            for name in names {
                let raw = w.raw(&name).unwrap();
                let n = raw.shape.iter().product();
                let values = dequantize(raw.ggml_type, &raw.bytes, n, raw.gguf_name).unwrap();
                assert_eq!(values, w.to_f32(&name).unwrap(), "{name}");
            }
            let q = w.raw("model.layers.0.self_attn.q_proj.weight").unwrap();
            // llama's q rows are moved (owned); qwen2's are the file's own.
            assert_eq!(
                matches!(q.bytes, Cow::Owned(_)),
                w.config().model_type.as_deref() == Some("llama")
            );
        }
    }

    #[test]
    fn errors_name_the_file() {
        let (mut b, _) = tiny_qwen2(true);
        b.remove_kv("qwen2.block_count");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nolayers.gguf");
        std::fs::write(&path, b.build()).unwrap();
        let err = GgufWeights::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("nolayers.gguf") && err.contains("qwen2.block_count"),
            "{err}"
        );
        let (mut b, _) = tiny_qwen2(true);
        b.remove_tensor("blk.1.attn_k.bias");
        std::fs::write(&path, b.build()).unwrap();
        let err = GgufWeights::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("nolayers.gguf") && err.contains("layers.1.self_attn.k_proj.bias"),
            "{err}"
        );
        let (mut b, _) = tiny_qwen2(true);
        b.set_kv("general.architecture", MetadataValue::String("phi3".into()));
        std::fs::write(&path, b.build()).unwrap();
        let err = GgufWeights::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("nolayers.gguf") && err.contains("`phi3`"),
            "{err}"
        );
    }
}
