//! The GGUF container: header, metadata, tensor infos, aligned data section.
//! Parsing works on any byte slice; [`GgufFile`] memory-maps a file.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::cursor::Cursor;
use super::dequant::dequantize;
use super::ggml_type::GgmlType;
use super::value::MetadataValue;
use crate::AssetError;

/// `GGUF` as the first four bytes.
const MAGIC: &[u8; 4] = b"GGUF";
/// Data-section alignment when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// More dimensions than ggml has (GGML_MAX_DIMS = 4) means a corrupt file.
const MAX_DIMS: u32 = 4;

/// One tensor's entry in the tensor-info table.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    /// The llama.cpp name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// ggml dimensions, innermost (contiguous) first: `[cols, rows]` for a matrix.
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl GgufTensorInfo {
    /// Number of weights.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Row-major shape (outermost first), as torch and safetensors write it.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|d| *d as usize).collect()
    }
}

/// Everything before the data section.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, MetadataValue)>,
    /// Tensor infos in file order.
    pub tensors: Vec<GgufTensorInfo>,
    /// `general.alignment` or 32.
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_start: u64,
    index: HashMap<String, usize>,
}

impl GgufHeader {
    /// Parses the header of `bytes` (the whole file) and checks that every
    /// tensor's data lies inside it. `path` is only used in errors.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, AssetError> {
        let mut cur = Cursor::new(path, bytes);
        let magic = cur.take(4, "magic")?;
        if magic != MAGIC {
            let mut found = [0u8; 4];
            found.copy_from_slice(magic);
            return Err(AssetError::BadMagic {
                path: path.to_path_buf(),
                found,
            });
        }
        let version = cur.u32("version")?;
        // v1 used 32-bit counts; a byte-swapped version means a big-endian file.
        if version != 2 && version != 3 {
            return Err(AssetError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
            });
        }
        let n_tensors = cur.u64("tensor count")?;
        let n_kv = cur.u64("metadata count")?;

        let mut metadata = Vec::new();
        for i in 0..n_kv {
            let key = cur.string(&format!("metadata key #{i}"))?;
            let what = format!("metadata `{key}`");
            let ty = cur.u32(&what)?;
            let value = MetadataValue::read(&mut cur, ty, &what, path)?;
            metadata.push((key, value));
        }

        let mut tensors = Vec::new();
        for i in 0..n_tensors {
            let name = cur.string(&format!("tensor info #{i}"))?;
            let what = format!("tensor info `{name}`");
            let n_dims = cur.u32(&what)?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(AssetError::InvalidGguf {
                    path: path.to_path_buf(),
                    reason: format!(
                        "tensor `{name}` has {n_dims} dimensions (1..={MAX_DIMS} allowed)"
                    ),
                });
            }
            let dims = (0..n_dims)
                .map(|_| cur.u64(&what))
                .collect::<Result<Vec<_>, _>>()?;
            // Element counts are multiplied later; a crafted file must not overflow them.
            if dims
                .iter()
                .try_fold(1u64, |acc, d| acc.checked_mul(*d))
                .is_none()
            {
                return Err(AssetError::InvalidGguf {
                    path: path.to_path_buf(),
                    reason: format!("tensor `{name}` dims {dims:?} overflow the element count"),
                });
            }
            let ggml_type = GgmlType::from_id(cur.u32(&what)?);
            let offset = cur.u64(&what)?;
            tensors.push(GgufTensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }

        let index = metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let mut header = Self {
            version,
            metadata,
            tensors,
            alignment: DEFAULT_ALIGNMENT,
            data_start: 0,
            index,
        };
        header.alignment = match header.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => a,
                _ => {
                    return Err(AssetError::InvalidGguf {
                        path: path.to_path_buf(),
                        reason: format!("general.alignment {v:?} is not a positive power of two"),
                    })
                }
            },
        };
        header.data_start = (cur.position() as u64).next_multiple_of(header.alignment);
        header.check_tensor_ranges(path, bytes.len() as u64)?;
        Ok(header)
    }

    /// Every tensor must start aligned and end inside the file.
    fn check_tensor_ranges(&self, path: &Path, file_len: u64) -> Result<(), AssetError> {
        for t in &self.tensors {
            if !t.offset.is_multiple_of(self.alignment) {
                return Err(AssetError::InvalidGguf {
                    path: path.to_path_buf(),
                    reason: format!(
                        "tensor `{}` offset {} is not aligned to {}",
                        t.name, t.offset, self.alignment
                    ),
                });
            }
            // Types of unknown layout are checked when converted (and rejected there).
            let Some((block, _)) = t.ggml_type.block_layout() else {
                continue;
            };
            let len =
                t.ggml_type
                    .byte_len(t.n_elements())
                    .ok_or_else(|| AssetError::InvalidGguf {
                        path: path.to_path_buf(),
                        reason: format!(
                    "tensor `{}`: {} weights do not fill whole {}-weight {} blocks, or overflow",
                    t.name,
                    t.n_elements(),
                    block,
                    t.ggml_type.name()
                ),
                    })?;
            let start = self.data_start.saturating_add(t.offset);
            let end = start.saturating_add(len);
            if end > file_len {
                return Err(AssetError::Truncated {
                    path: path.to_path_buf(),
                    what: format!("data of tensor `{}`", t.name),
                    start,
                    end,
                    len: file_len,
                });
            }
        }
        Ok(())
    }

    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.index.get(key).map(|i| &self.metadata[*i].1)
    }

    /// A tensor info by name.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A required string value.
    pub fn str(&self, key: &str) -> Result<&str, AssetError> {
        self.require(key, "string", MetadataValue::as_str)
    }

    /// A required non-negative integer value.
    pub fn u64(&self, key: &str) -> Result<u64, AssetError> {
        self.require(key, "non-negative integer", MetadataValue::as_u64)
    }

    /// An optional non-negative integer value (present with another type is an error).
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, AssetError> {
        self.optional(key, "non-negative integer", MetadataValue::as_u64)
    }

    /// An optional number.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, AssetError> {
        self.optional(key, "number", MetadataValue::as_f64)
    }

    /// An optional bool.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, AssetError> {
        self.optional(key, "bool", MetadataValue::as_bool)
    }

    /// An optional string.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, AssetError> {
        self.optional(key, "string", MetadataValue::as_str)
    }

    fn require<'a, T>(
        &'a self,
        key: &str,
        expected: &str,
        f: impl Fn(&'a MetadataValue) -> Option<T>,
    ) -> Result<T, AssetError> {
        self.optional(key, expected, f)?
            .ok_or_else(|| AssetError::Metadata {
                key: key.to_string(),
                reason: "missing".to_string(),
            })
    }

    fn optional<'a, T>(
        &'a self,
        key: &str,
        expected: &str,
        f: impl Fn(&'a MetadataValue) -> Option<T>,
    ) -> Result<Option<T>, AssetError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| AssetError::Metadata {
                key: key.to_string(),
                reason: format!("expected {expected}, found {} {v:?}", v.type_name()),
            }),
        }
    }
}

/// A memory-mapped GGUF file with its parsed header.
pub struct GgufFile {
    path: PathBuf,
    mmap: Mmap,
    header: GgufHeader,
}

impl GgufFile {
    /// Maps and parses `path`.
    pub fn open(path: &Path) -> Result<Self, AssetError> {
        let file = File::open(path).map_err(|e| AssetError::io(path, e))?;
        // SAFETY: the mapping is read-only and private to this process; like
        // every GGUF reader we assume the file is not modified while open.
        #[allow(unsafe_code)] // mmap of a GGUF file.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| AssetError::io(path, e))?;
        let header = GgufHeader::parse(path, &mmap)?;
        Ok(Self {
            path: path.to_path_buf(),
            mmap,
            header,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The raw bytes of a tensor.
    pub fn tensor_bytes(&self, info: &GgufTensorInfo) -> Result<&[u8], AssetError> {
        tensor_bytes(&self.path, &self.header, &self.mmap, info)
    }

    /// A tensor dequantized to f32, in row-major [`GgufTensorInfo::shape`] order.
    pub fn dequantize(&self, info: &GgufTensorInfo) -> Result<Vec<f32>, AssetError> {
        let n = usize::try_from(info.n_elements()).map_err(|_| AssetError::TensorShape {
            tensor: info.name.clone(),
            reason: format!("{} elements do not fit in memory", info.n_elements()),
        })?;
        dequantize(info.ggml_type, self.tensor_bytes(info)?, n, &info.name)
    }
}

/// The bytes of `info` inside `bytes` (the whole file).
pub(crate) fn tensor_bytes<'a>(
    path: &Path,
    header: &GgufHeader,
    bytes: &'a [u8],
    info: &GgufTensorInfo,
) -> Result<&'a [u8], AssetError> {
    let len = info.ggml_type.byte_len(info.n_elements()).ok_or_else(|| {
        AssetError::UnsupportedTensorType {
            tensor: info.name.clone(),
            ggml_type: info.ggml_type.name(),
            supported: super::ggml_type::SUPPORTED_TYPES,
        }
    })?;
    let start = header.data_start + info.offset;
    let end = start + len;
    if end > bytes.len() as u64 {
        return Err(AssetError::Truncated {
            path: path.to_path_buf(),
            what: format!("data of tensor `{}`", info.name),
            start,
            end,
            len: bytes.len() as u64,
        });
    }
    Ok(&bytes[start as usize..end as usize])
}

#[cfg(test)]
mod tests {
    use super::super::test_file::GgufBuilder;
    use super::*;

    fn sample() -> GgufBuilder {
        let mut b = GgufBuilder::new(3);
        b.kv(
            "general.architecture",
            MetadataValue::String("llama".into()),
        );
        b.kv("a.u8", MetadataValue::U8(7));
        b.kv("a.i8", MetadataValue::I8(-7));
        b.kv("a.u16", MetadataValue::U16(700));
        b.kv("a.i16", MetadataValue::I16(-700));
        b.kv("a.u32", MetadataValue::U32(70_000));
        b.kv("a.i32", MetadataValue::I32(-70_000));
        b.kv("a.f32", MetadataValue::F32(0.5));
        b.kv("a.bool", MetadataValue::Bool(true));
        b.kv("a.u64", MetadataValue::U64(1 << 40));
        b.kv("a.i64", MetadataValue::I64(-(1 << 40)));
        b.kv("a.f64", MetadataValue::F64(-0.25));
        b.kv(
            "a.strings",
            MetadataValue::Array(vec![
                MetadataValue::String("x".into()),
                MetadataValue::String("yz".into()),
            ]),
        );
        b.kv(
            "a.nested",
            MetadataValue::Array(vec![
                MetadataValue::Array(vec![MetadataValue::I32(1), MetadataValue::I32(2)]),
                MetadataValue::Array(vec![]),
            ]),
        );
        b.kv("general.alignment", MetadataValue::U32(64));
        b.tensor_f32("w", &[3, 2], &[1., 2., 3., 4., 5., 6.]);
        b.tensor_f32("v", &[4], &[9., 8., 7., 6.]);
        b
    }

    #[test]
    fn parses_every_metadata_type_and_tensor_infos() {
        let bytes = sample().build();
        let h = GgufHeader::parse(Path::new("s.gguf"), &bytes).unwrap();
        assert_eq!(h.version, 3);
        assert_eq!(h.metadata.len(), 15);
        for (key, (k2, value)) in sample().metadata().iter().zip(&h.metadata) {
            assert_eq!(&key.0, k2);
            assert_eq!(&key.1, value);
        }
        assert_eq!(h.alignment, 64);
        assert_eq!(h.data_start % 64, 0);
        assert_eq!(h.str("general.architecture").unwrap(), "llama");
        assert_eq!(h.u64("a.u32").unwrap(), 70_000);
        assert_eq!(h.opt_f64("a.f32").unwrap(), Some(0.5));
        let w = h.tensor("w").unwrap();
        assert_eq!(w.dims, [3, 2]);
        assert_eq!(w.shape(), [2, 3]);
        assert_eq!(w.ggml_type, GgmlType::F32);
        let v = h.tensor("v").unwrap();
        assert_eq!(v.offset % 64, 0);
        let data = tensor_bytes(Path::new("s"), &h, &bytes, v).unwrap();
        assert_eq!(
            dequantize(v.ggml_type, data, 4, "v").unwrap(),
            [9., 8., 7., 6.]
        );
    }

    #[test]
    fn wrong_typed_metadata_is_named() {
        let bytes = sample().build();
        let h = GgufHeader::parse(Path::new("s.gguf"), &bytes).unwrap();
        let err = h.u64("a.bool").unwrap_err().to_string();
        assert!(err.contains("a.bool") && err.contains("bool"), "{err}");
        assert!(h
            .str("absent.key")
            .unwrap_err()
            .to_string()
            .contains("absent.key"));
        assert_eq!(h.opt_u64("absent.key").unwrap(), None);
    }

    #[test]
    fn version_2_parses() {
        let mut b = sample();
        b.version = 2;
        assert_eq!(
            GgufHeader::parse(Path::new("s"), &b.build())
                .unwrap()
                .version,
            2
        );
    }

    #[test]
    fn bad_magic_is_reported() {
        let mut bytes = sample().build();
        bytes[..4].copy_from_slice(b"GGML");
        let err = GgufHeader::parse(Path::new("m.gguf"), &bytes).unwrap_err();
        assert!(matches!(err, AssetError::BadMagic { .. }), "{err}");
        assert!(err.to_string().contains("m.gguf"));
    }

    #[test]
    fn unsupported_version_is_reported() {
        let mut bytes = sample().build();
        bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
        let err = GgufHeader::parse(Path::new("v.gguf"), &bytes).unwrap_err();
        assert!(
            matches!(err, AssetError::UnsupportedVersion { version: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn truncation_anywhere_is_an_error_never_a_panic() {
        let bytes = sample().build();
        for cut in 0..bytes.len() {
            let err = GgufHeader::parse(Path::new("t.gguf"), &bytes[..cut]).unwrap_err();
            assert!(
                matches!(err, AssetError::Truncated { .. }),
                "cut at {cut}: expected truncation, got {err}"
            );
        }
    }

    #[test]
    fn truncated_tensor_data_names_the_tensor() {
        let bytes = sample().build();
        let err = GgufHeader::parse(Path::new("t.gguf"), &bytes[..bytes.len() - 1]).unwrap_err();
        assert!(err.to_string().contains("tensor `v`"), "{err}");
    }

    #[test]
    fn rejects_overflowing_dims_and_partial_blocks() {
        let mut b = GgufBuilder::new(3);
        b.tensor_raw("huge", &[u64::MAX / 2, 3], GgmlType::F32, 0, vec![]);
        let err = GgufHeader::parse(Path::new("o"), &b.build()).unwrap_err();
        assert!(
            err.to_string().contains("`huge`") && err.to_string().contains("overflow"),
            "{err}"
        );
        let mut b = GgufBuilder::new(3);
        b.tensor_raw("big", &[u64::MAX / 2], GgmlType::F32, 0, vec![]);
        let err = GgufHeader::parse(Path::new("o"), &b.build()).unwrap_err();
        assert!(err.to_string().contains("`big`"), "{err}");
        let mut b = GgufBuilder::new(3);
        b.tensor_raw("part", &[40], GgmlType::Q8_0, 0, vec![0; 68]);
        let err = GgufHeader::parse(Path::new("o"), &b.build()).unwrap_err();
        assert!(
            err.to_string().contains("`part`") && err.to_string().contains("Q8_0"),
            "{err}"
        );
    }

    #[test]
    fn rejects_misaligned_tensor_and_bad_alignment() {
        let mut b = GgufBuilder::new(3);
        b.tensor_raw("t", &[4], GgmlType::F32, 4, vec![0; 36]);
        let err = GgufHeader::parse(Path::new("a"), &b.build()).unwrap_err();
        assert!(err.to_string().contains("not aligned"), "{err}");
        let mut b = sample();
        b.set_kv("general.alignment", MetadataValue::U32(3));
        let err = GgufHeader::parse(Path::new("a"), &b.build()).unwrap_err();
        assert!(err.to_string().contains("general.alignment"), "{err}");
    }
}
