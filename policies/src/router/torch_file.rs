//! Reads a `torch.save` file (the zip format PyTorch has written since 1.6:
//! `<name>/data.pkl`, `<name>/data/<key>` per storage, `<name>/byteorder`)
//! into its decoded object and float32 tensors. The pickle goes through
//! [`pickle::read`](super::pickle::read), which executes nothing.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use tch::{Device, Kind, Tensor};

use super::pickle::{self, StorageDtype, TensorRef, Value};

/// A decoded `torch.save` file.
pub struct TorchFile {
    /// The saved object (tensors appear as `Value::Tensor`).
    pub root: Value,
    archive: zip::ZipArchive<std::fs::File>,
    prefix: String,
}

fn kind_of(dtype: StorageDtype) -> Kind {
    match dtype {
        StorageDtype::F32 => Kind::Float,
        StorageDtype::F64 => Kind::Double,
        StorageDtype::F16 => Kind::Half,
        StorageDtype::Bf16 => Kind::BFloat16,
        StorageDtype::I64 => Kind::Int64,
        StorageDtype::I32 => Kind::Int,
        StorageDtype::I16 => Kind::Int16,
        StorageDtype::I8 => Kind::Int8,
        StorageDtype::U8 => Kind::Uint8,
        StorageDtype::Bool => Kind::Bool,
    }
}

impl TorchFile {
    /// Opens `path` and decodes its pickle.
    pub fn open(path: &Path) -> Result<Self, String> {
        let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
        let mut archive = zip::ZipArchive::new(file).map_err(|e| {
            format!(
                "not a torch.save zip archive ({e}); files saved with \
                 _use_new_zipfile_serialization=False or by other tools can be converted \
                 with `tokenrouter convert-router`"
            )
        })?;
        let pkl = archive
            .file_names()
            .find(|n| n.ends_with("data.pkl") && n.matches('/').count() <= 1)
            .map(str::to_string)
            .ok_or("the archive has no data.pkl")?;
        let prefix = pkl.trim_end_matches("data.pkl").to_string();
        if let Ok(mut f) = archive.by_name(&format!("{prefix}byteorder")) {
            let mut order = String::new();
            f.read_to_string(&mut order).map_err(|e| e.to_string())?;
            if order.trim() != "little" {
                return Err(format!(
                    "byteorder is `{}`; only little-endian files are read",
                    order.trim()
                ));
            }
        }
        let mut bytes = Vec::new();
        archive
            .by_name(&pkl)
            .map_err(|e| e.to_string())?
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        let root = pickle::read(&bytes).map_err(|e| format!("{pkl}: {e}"))?;
        Ok(Self {
            root,
            archive,
            prefix,
        })
    }

    /// The tensor `t` as float32 on `device` (a copy, contiguous).
    pub fn tensor(&mut self, t: &TensorRef, device: Device) -> Result<Tensor, String> {
        let name = format!("{}data/{}", self.prefix, t.key);
        let mut bytes = Vec::new();
        self.archive
            .by_name(&name)
            .map_err(|e| format!("{name}: {e}"))?
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{name}: {e}"))?;
        let need = t.storage_numel * t.dtype.size();
        if bytes.len() < need {
            return Err(format!(
                "{name}: {} bytes, the storage needs {need}",
                bytes.len()
            ));
        }
        // The last element the view touches must lie inside the storage.
        let last = t
            .size
            .iter()
            .zip(&t.stride)
            .try_fold(t.offset, |acc, (&n, &s)| {
                if n == 0 {
                    None
                } else {
                    Some(acc + (n - 1) * s)
                }
            });
        if let Some(last) = last {
            if last >= t.storage_numel {
                return Err(format!(
                    "{name}: the view (offset {}, size {:?}, stride {:?}) reaches past the storage of {} elements",
                    t.offset, t.size, t.stride, t.storage_numel
                ));
            }
        }
        let to_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        let flat =
            Tensor::f_from_data_size(&bytes[..need], &[t.storage_numel as i64], kind_of(t.dtype))
                .map_err(|e| e.to_string())?;
        flat.f_as_strided(to_i64(&t.size), to_i64(&t.stride), Some(t.offset as i64))
            .and_then(|v| v.f_to_kind(Kind::Float))
            .and_then(|v| v.f_contiguous())
            .and_then(|v| v.f_to_device(device))
            .map_err(|e| e.to_string())
    }

    /// Every floating tensor of the dict `state` (a state dict) as float32
    /// on `device`; names of the non-float entries dropped are returned too.
    pub fn state_dict(
        &mut self,
        state: &Value,
        device: Device,
    ) -> Result<(HashMap<String, Tensor>, Vec<String>), String> {
        let Value::Dict(items) = state else {
            return Err("the state dict is not a dict".into());
        };
        let mut tensors = HashMap::new();
        let mut dropped = Vec::new();
        for (k, v) in items {
            let (Value::Str(name), Value::Tensor(t)) = (k, v) else {
                return Err(format!("state dict entry {k:?} is not a named tensor"));
            };
            if !t.dtype.is_float() {
                dropped.push(name.clone());
                continue;
            }
            let tensor = self.tensor(t, device)?;
            tensors.insert(name.clone(), tensor);
        }
        Ok((tensors, dropped))
    }
}
