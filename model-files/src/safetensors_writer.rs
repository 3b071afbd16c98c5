//! A streaming safetensors writer for whole checkpoints: plans the shards up
//! front (so headers can be written first), then takes each tensor's data in
//! order, in as many chunks as the caller likes. Large models never need to
//! be held in memory.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::dtype::StorageDtype;
use super::AssetError;

/// Shard size limit used by the CLI (as transformers' `save_pretrained` does
/// with `max_shard_size="2GB"`).
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 2_000_000_000;

/// The single-file checkpoint name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// One tensor to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    /// Tensor name.
    pub name: String,
    /// Row-major shape.
    pub shape: Vec<usize>,
    /// Storage dtype.
    pub dtype: StorageDtype,
}

impl TensorEntry {
    /// Bytes of data.
    pub fn byte_len(&self) -> u64 {
        self.shape.iter().product::<usize>() as u64 * self.dtype.size() as u64
    }
}

struct Shard {
    file_name: String,
    /// Indices into the plan.
    tensors: Vec<usize>,
}

struct Open {
    shard: usize,
    path: PathBuf,
    out: BufWriter<File>,
}

/// Writes a planned list of tensors into `model.safetensors` or, beyond
/// `max_shard_bytes`, into `model-0000i-of-0000n.safetensors` plus the index.
pub struct CheckpointWriter {
    dir: PathBuf,
    plan: Vec<TensorEntry>,
    shards: Vec<Shard>,
    shard_of: Vec<usize>,
    /// Index of the tensor being written (or next to begin).
    next: usize,
    /// Bytes still owed to the current tensor; `None` before the first `begin`.
    remaining: Option<u64>,
    open: Option<Open>,
    scratch: Vec<u8>,
}

impl CheckpointWriter {
    /// Plans the shards; files are created as their first tensor begins.
    /// A writer for every tensor of `specs`, stored as `dtype`.
    pub fn for_specs(
        dir: &Path,
        specs: &[crate::TensorSpec],
        dtype: StorageDtype,
        max_shard_bytes: u64,
    ) -> Result<Self, AssetError> {
        let plan = specs
            .iter()
            .map(|s| TensorEntry {
                name: s.name.clone(),
                shape: s.shape.clone(),
                dtype,
            })
            .collect();
        Self::create(dir, plan, max_shard_bytes)
    }

    /// A writer of `plan`'s tensors into `dir`, in shards of at most
    /// `max_shard_bytes`.
    pub fn create(
        dir: &Path,
        plan: Vec<TensorEntry>,
        max_shard_bytes: u64,
    ) -> Result<Self, AssetError> {
        if plan.is_empty() {
            return Err(AssetError::WriterOrder("no tensors to write".into()));
        }
        let mut seen = HashSet::new();
        for t in &plan {
            if !seen.insert(t.name.as_str()) {
                return Err(AssetError::WriterOrder(format!(
                    "tensor `{}` planned twice",
                    t.name
                )));
            }
        }
        // Greedy split in plan order; a tensor larger than the limit gets a shard of its own.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut current: Vec<usize> = Vec::new();
        let mut size = 0u64;
        for (i, t) in plan.iter().enumerate() {
            if !current.is_empty() && size + t.byte_len() > max_shard_bytes {
                groups.push(std::mem::take(&mut current));
                size = 0;
            }
            current.push(i);
            size += t.byte_len();
        }
        groups.push(current);
        let n = groups.len();
        let mut shard_of = vec![0; plan.len()];
        let shards = groups
            .into_iter()
            .enumerate()
            .map(|(s, tensors)| {
                for &t in &tensors {
                    shard_of[t] = s;
                }
                let file_name = if n == 1 {
                    SINGLE_FILE.to_string()
                } else {
                    format!("model-{:05}-of-{n:05}.safetensors", s + 1)
                };
                Shard { file_name, tensors }
            })
            .collect();
        Ok(Self {
            dir: dir.to_path_buf(),
            plan,
            shards,
            shard_of,
            next: 0,
            remaining: None,
            open: None,
            scratch: Vec::new(),
        })
    }

    /// Total bytes of tensor data in the plan.
    pub fn total_bytes(&self) -> u64 {
        self.plan.iter().map(TensorEntry::byte_len).sum()
    }

    /// The shard file names.
    pub fn shard_files(&self) -> Vec<String> {
        self.shards.iter().map(|s| s.file_name.clone()).collect()
    }

    /// Starts the next tensor of the plan, which must be `name`.
    pub fn begin(&mut self, name: &str) -> Result<(), AssetError> {
        let index = match self.remaining {
            None => 0,
            Some(0) => self.next + 1,
            Some(left) => {
                return Err(AssetError::WriterOrder(format!(
                    "tensor `{}` still needs {left} bytes before `{name}` can begin",
                    self.plan[self.next].name
                )))
            }
        };
        let entry = self.plan.get(index).ok_or_else(|| {
            AssetError::WriterOrder(format!("tensor `{name}` begun after the plan is complete"))
        })?;
        if entry.name != name {
            return Err(AssetError::WriterOrder(format!(
                "expected tensor `{}` next, got `{name}`",
                entry.name
            )));
        }
        self.next = index;
        self.remaining = Some(entry.byte_len());
        let shard = self.shard_of[index];
        if self.open.as_ref().map(|o| o.shard) != Some(shard) {
            self.close_open()?;
            self.open_shard(shard)?;
        }
        Ok(())
    }

    /// Appends f32 values to the current tensor, converted to its dtype.
    pub fn write_f32(&mut self, values: &[f32]) -> Result<(), AssetError> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        self.plan[self.next].dtype.encode_into(values, &mut buf);
        let result = self.write_raw(&buf);
        self.scratch = buf;
        result
    }

    /// Appends bytes already in the current tensor's dtype.
    pub fn write_raw(&mut self, bytes: &[u8]) -> Result<(), AssetError> {
        let name = &self.plan[self.next].name;
        let left = self
            .remaining
            .ok_or_else(|| AssetError::WriterOrder("write before the first begin".into()))?;
        if bytes.len() as u64 > left {
            return Err(AssetError::WriterOrder(format!(
                "tensor `{name}`: {} bytes written, only {left} left",
                bytes.len()
            )));
        }
        let open = self
            .open
            .as_mut()
            .ok_or_else(|| AssetError::WriterOrder("no open shard".into()))?;
        open.out
            .write_all(bytes)
            .map_err(|e| AssetError::io(&open.path, e))?;
        self.remaining = Some(left - bytes.len() as u64);
        Ok(())
    }

    /// Begins `name` and writes all of its values.
    pub fn write_tensor_f32(&mut self, name: &str, values: &[f32]) -> Result<(), AssetError> {
        self.begin(name)?;
        self.write_f32(values)?;
        self.check_complete()
    }

    /// Begins `name` and writes all of its bytes.
    pub fn write_tensor_raw(&mut self, name: &str, bytes: &[u8]) -> Result<(), AssetError> {
        self.begin(name)?;
        self.write_raw(bytes)?;
        self.check_complete()
    }

    fn check_complete(&self) -> Result<(), AssetError> {
        match self.remaining {
            Some(0) => Ok(()),
            Some(left) => Err(AssetError::WriterOrder(format!(
                "tensor `{}` is {left} bytes short",
                self.plan[self.next].name
            ))),
            None => Err(AssetError::WriterOrder("nothing written".into())),
        }
    }

    /// Checks every tensor was written, flushes, and writes the index when
    /// sharded. Returns the paths of the files written.
    pub fn finish(mut self) -> Result<Vec<PathBuf>, AssetError> {
        self.check_complete()?;
        if self.next + 1 != self.plan.len() {
            return Err(AssetError::WriterOrder(format!(
                "finished after {} of {} tensors (next: `{}`)",
                self.next + 1,
                self.plan.len(),
                self.plan[self.next + 1].name
            )));
        }
        self.close_open()?;
        let mut files: Vec<PathBuf> = self
            .shards
            .iter()
            .map(|s| self.dir.join(&s.file_name))
            .collect();
        if self.shards.len() > 1 {
            let weight_map: BTreeMap<&str, &str> = self
                .plan
                .iter()
                .zip(&self.shard_of)
                .map(|(t, s)| (t.name.as_str(), self.shards[*s].file_name.as_str()))
                .collect();
            let index = serde_json::json!({
                "metadata": { "total_size": self.total_bytes() },
                "weight_map": weight_map,
            });
            let path = self.dir.join(INDEX_FILE);
            super::hf_files::write_json(&path, &index)?;
            files.push(path);
        }
        Ok(files)
    }

    fn open_shard(&mut self, shard: usize) -> Result<(), AssetError> {
        let path = self.dir.join(&self.shards[shard].file_name);
        let header = self.header(shard);
        let file = File::create(&path).map_err(|e| AssetError::io(&path, e))?;
        let mut out = BufWriter::with_capacity(8 << 20, file);
        out.write_all(&(header.len() as u64).to_le_bytes())
            .and_then(|_| out.write_all(&header))
            .map_err(|e| AssetError::io(&path, e))?;
        self.open = Some(Open { shard, path, out });
        Ok(())
    }

    fn close_open(&mut self) -> Result<(), AssetError> {
        if let Some(mut open) = self.open.take() {
            open.out
                .flush()
                .map_err(|e| AssetError::io(&open.path, e))?;
            open.out
                .get_ref()
                .sync_all()
                .map_err(|e| AssetError::io(&open.path, e))?;
        }
        Ok(())
    }

    /// The JSON header of a shard, space-padded to 8 bytes so data is aligned.
    fn header(&self, shard: usize) -> Vec<u8> {
        let mut map = serde_json::Map::new();
        map.insert("__metadata__".into(), serde_json::json!({ "format": "pt" }));
        let mut offset = 0u64;
        for &i in &self.shards[shard].tensors {
            let t = &self.plan[i];
            let end = offset + t.byte_len();
            map.insert(
                t.name.clone(),
                serde_json::json!({
                    "dtype": t.dtype.safetensors_name(),
                    "shape": t.shape,
                    "data_offsets": [offset, end],
                }),
            );
            offset = end;
        }
        let mut bytes = serde_json::Value::Object(map).to_string().into_bytes();
        bytes.resize(bytes.len().next_multiple_of(8), b' ');
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint_reader::Checkpoint;

    fn entry(name: &str, shape: &[usize], dtype: StorageDtype) -> TensorEntry {
        TensorEntry {
            name: name.into(),
            shape: shape.to_vec(),
            dtype,
        }
    }

    #[test]
    fn single_file_round_trips_through_the_safetensors_crate() {
        let dir = tempfile::tempdir().unwrap();
        let plan = vec![
            entry("a", &[2, 3], StorageDtype::F32),
            entry("b", &[3], StorageDtype::Bf16),
            entry("c", &[1], StorageDtype::F16),
        ];
        let mut w = CheckpointWriter::create(dir.path(), plan, DEFAULT_MAX_SHARD_BYTES).unwrap();
        w.begin("a").unwrap();
        w.write_f32(&[1., 2.]).unwrap();
        w.write_f32(&[3., 4., 5., 6.]).unwrap();
        w.write_tensor_f32("b", &[0.5, -1.0, 3.0]).unwrap();
        w.write_tensor_f32("c", &[-2.0]).unwrap();
        let files = w.finish().unwrap();
        assert_eq!(files, [dir.path().join(SINGLE_FILE)]);
        let bytes = std::fs::read(&files[0]).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert_eq!(header_len % 8, 0);
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("a").unwrap().shape(), [2, 3]);
        assert_eq!(st.tensor("b").unwrap().dtype(), safetensors::Dtype::BF16);
        let ck = Checkpoint::open(dir.path()).unwrap();
        assert_eq!(ck.to_f32("a").unwrap(), [1., 2., 3., 4., 5., 6.]);
        assert_eq!(ck.to_f32("b").unwrap(), [0.5, -1.0, 3.0]);
        assert_eq!(ck.to_f32("c").unwrap(), [-2.0]);
    }

    #[test]
    fn shards_beyond_the_limit_and_writes_an_index() {
        let dir = tempfile::tempdir().unwrap();
        // 24 + 24, then 80 (alone, larger than the limit), then 8, with a 64-byte limit.
        let plan = vec![
            entry("t0", &[6], StorageDtype::F32),
            entry("t1", &[6], StorageDtype::F32),
            entry("big", &[20], StorageDtype::F32),
            entry("t3", &[2], StorageDtype::F32),
        ];
        let mut w = CheckpointWriter::create(dir.path(), plan, 64).unwrap();
        assert_eq!(w.shard_files().len(), 3);
        for (name, n) in [("t0", 6), ("t1", 6), ("big", 20), ("t3", 2)] {
            let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
            w.write_tensor_f32(name, &v).unwrap();
        }
        let files = w.finish().unwrap();
        assert!(files.last().unwrap().ends_with(INDEX_FILE));
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(INDEX_FILE)).unwrap()).unwrap();
        assert_eq!(index["metadata"]["total_size"], 4 * (6 + 6 + 20 + 2));
        assert_eq!(
            index["weight_map"]["t0"],
            "model-00001-of-00003.safetensors"
        );
        assert_eq!(
            index["weight_map"]["t1"],
            "model-00001-of-00003.safetensors"
        );
        assert_eq!(
            index["weight_map"]["big"],
            "model-00002-of-00003.safetensors"
        );
        assert_eq!(
            index["weight_map"]["t3"],
            "model-00003-of-00003.safetensors"
        );
        let ck = Checkpoint::open(dir.path()).unwrap();
        assert_eq!(ck.to_f32("t3").unwrap(), [0., 1.]);
        assert_eq!(ck.names().count(), 4);
    }

    #[test]
    fn misuse_is_reported_not_silently_written() {
        let dir = tempfile::tempdir().unwrap();
        let plan = vec![
            entry("a", &[2], StorageDtype::F32),
            entry("b", &[1], StorageDtype::F32),
        ];
        let mut w = CheckpointWriter::create(dir.path(), plan.clone(), 1 << 20).unwrap();
        assert!(w
            .begin("b")
            .unwrap_err()
            .to_string()
            .contains("expected tensor `a`"));
        w.begin("a").unwrap();
        w.write_f32(&[1.0]).unwrap();
        assert!(w
            .begin("b")
            .unwrap_err()
            .to_string()
            .contains("still needs 4 bytes"));
        assert!(w
            .write_f32(&[1.0, 2.0])
            .unwrap_err()
            .to_string()
            .contains("only 4 left"));
        w.write_f32(&[2.0]).unwrap();
        let err = w.finish().unwrap_err().to_string();
        assert!(err.contains("1 of 2") && err.contains("`b`"), "{err}");
        let dup = vec![plan[0].clone(), plan[0].clone()];
        assert!(CheckpointWriter::create(dir.path(), dup, 1).is_err());
    }
}
