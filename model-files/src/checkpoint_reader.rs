//! Read access to the safetensors of a Hugging Face model directory, single
//! file or sharded, memory-mapped.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::dtype::StorageDtype;
use super::safetensors_writer::{INDEX_FILE, SINGLE_FILE};
use super::AssetError;

struct StoredTensor {
    shard: usize,
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    /// Absolute byte range in the shard file.
    start: usize,
    end: usize,
}

/// One tensor's bytes, borrowed from the mapped file.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    /// Storage dtype.
    pub dtype: StorageDtype,
    /// Row-major shape.
    pub shape: &'a [usize],
    /// Little-endian data.
    pub bytes: &'a [u8],
}

/// The tensors of a model directory.
pub struct Checkpoint {
    dir: PathBuf,
    shards: Vec<(PathBuf, Mmap)>,
    tensors: BTreeMap<String, StoredTensor>,
}

impl Checkpoint {
    /// Opens `dir/model.safetensors` or the shards listed in `dir/model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self, AssetError> {
        let files = shard_files(dir)?;
        let mut shards = Vec::new();
        let mut tensors = BTreeMap::new();
        for (s, path) in files.into_iter().enumerate() {
            let file = File::open(&path).map_err(|e| AssetError::io(&path, e))?;
            // SAFETY: read-only private mapping; the checkpoint is not modified while open.
            #[allow(unsafe_code)] // mmap of a checkpoint shard.
            let mmap = unsafe { Mmap::map(&file) }.map_err(|e| AssetError::io(&path, e))?;
            crate::safetensors_check::check_complete(&mmap).map_err(|reason| {
                AssetError::Safetensors {
                    path: path.clone(),
                    reason,
                }
            })?;
            let (header_len, meta) =
                safetensors::SafeTensors::read_metadata(&mmap).map_err(|e| {
                    AssetError::Safetensors {
                        path: path.clone(),
                        reason: e.to_string(),
                    }
                })?;
            let data_start = 8 + header_len;
            for (name, info) in meta.tensors() {
                let stored = StoredTensor {
                    shard: s,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                    start: data_start + info.data_offsets.0,
                    end: data_start + info.data_offsets.1,
                };
                if tensors.insert(name.clone(), stored).is_some() {
                    return Err(AssetError::Safetensors {
                        path: path.clone(),
                        reason: format!("tensor `{name}` appears in more than one shard"),
                    });
                }
            }
            shards.push((path, mmap));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            shards,
            tensors,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// One tensor's dtype, shape and bytes.
    pub fn tensor(&self, name: &str) -> Result<TensorRef<'_>, AssetError> {
        let t = self.tensors.get(name).ok_or_else(|| {
            AssetError::Load(crate::LoadError::MissingTensor {
                name: name.to_string(),
                path: self.dir.clone(),
            })
        })?;
        let (path, mmap) = &self.shards[t.shard];
        let dtype =
            StorageDtype::from_safetensors(t.dtype).ok_or_else(|| AssetError::Safetensors {
                path: path.clone(),
                reason: format!(
                    "tensor `{name}` has dtype {:?} (only F32, BF16, F16 are handled)",
                    t.dtype
                ),
            })?;
        Ok(TensorRef {
            dtype,
            shape: &t.shape,
            bytes: &mmap[t.start..t.end],
        })
    }

    /// One tensor converted to f32.
    pub fn to_f32(&self, name: &str) -> Result<Vec<f32>, AssetError> {
        let t = self.tensor(name)?;
        Ok(match t.dtype {
            StorageDtype::F32 => t
                .bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            StorageDtype::Bf16 => t
                .bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            StorageDtype::F16 => t
                .bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
        })
    }
}

/// The safetensors files of a model directory.
fn shard_files(dir: &Path) -> Result<Vec<PathBuf>, AssetError> {
    let index_path = dir.join(INDEX_FILE);
    if index_path.exists() {
        let text =
            std::fs::read_to_string(&index_path).map_err(|e| AssetError::io(&index_path, e))?;
        let index: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| AssetError::json(&index_path, e))?;
        let map = index["weight_map"].as_object().ok_or_else(|| {
            AssetError::Load(crate::LoadError::InvalidModel {
                path: index_path.clone(),
                reason: "`weight_map` is missing or not an object".into(),
            })
        })?;
        let mut files: Vec<String> = Vec::new();
        for (name, file) in map {
            let file = file.as_str().ok_or_else(|| {
                AssetError::Load(crate::LoadError::InvalidModel {
                    path: index_path.clone(),
                    reason: format!("weight_map entry of `{name}` is not a file name"),
                })
            })?;
            if !files.iter().any(|f| f == file) {
                files.push(file.to_string());
            }
        }
        files.sort();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join(SINGLE_FILE);
    if single.exists() {
        return Ok(vec![single]);
    }
    Err(AssetError::Load(crate::LoadError::InvalidModel {
        path: dir.to_path_buf(),
        reason: format!("neither {SINGLE_FILE} nor {INDEX_FILE} found"),
    }))
}
