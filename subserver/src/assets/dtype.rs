//! Storage dtypes of the checkpoints we write, and f32 → storage conversion.

use std::fmt;
use std::str::FromStr;

use super::AssetError;

/// The element type of a tensor stored in safetensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageDtype {
    /// IEEE single precision.
    F32,
    /// bfloat16.
    BF16,
    /// IEEE half precision.
    F16,
}

impl StorageDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::BF16 | Self::F16 => 2,
        }
    }

    /// The dtype string in a safetensors header (`F32`, `BF16`, `F16`).
    pub fn safetensors_name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::BF16 => "BF16",
            Self::F16 => "F16",
        }
    }

    /// The `torch_dtype` string of `config.json`.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::BF16 => "bfloat16",
            Self::F16 => "float16",
        }
    }

    /// Parses a safetensors header dtype; `None` for dtypes we do not handle.
    pub fn from_safetensors(dtype: safetensors::Dtype) -> Option<Self> {
        match dtype {
            safetensors::Dtype::F32 => Some(Self::F32),
            safetensors::Dtype::BF16 => Some(Self::BF16),
            safetensors::Dtype::F16 => Some(Self::F16),
            _ => None,
        }
    }

    /// Appends `values` converted to this dtype (little-endian, round to nearest even).
    pub fn encode_into(self, values: &[f32], out: &mut Vec<u8>) {
        out.reserve(values.len() * self.size());
        match self {
            Self::F32 => {
                for v in values {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            Self::BF16 => {
                for v in values {
                    out.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
                }
            }
            Self::F16 => {
                for v in values {
                    out.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes());
                }
            }
        }
    }
}

impl fmt::Display for StorageDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::BF16 => "bf16",
            Self::F16 => "f16",
        })
    }
}

impl FromStr for StorageDtype {
    type Err = AssetError;

    /// Accepts `f32|bf16|f16` and the torch names `float32|bfloat16|float16`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::BF16),
            "f16" | "float16" | "half" => Ok(Self::F16),
            other => Err(AssetError::InvalidArgument(format!(
                "dtype `{other}` (expected f32, bf16 or f16)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_each_dtype_little_endian() {
        let mut out = Vec::new();
        StorageDtype::F32.encode_into(&[1.0, -2.5], &mut out);
        assert_eq!(out, [0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0]);
        out.clear();
        StorageDtype::BF16.encode_into(&[1.0, -2.5], &mut out);
        assert_eq!(out, [0x80, 0x3f, 0x20, 0xc0]);
        out.clear();
        StorageDtype::F16.encode_into(&[1.0, -2.5], &mut out);
        assert_eq!(out, [0x00, 0x3c, 0x00, 0xc1]);
    }

    #[test]
    fn parses_names_and_rejects_others() {
        assert_eq!("bf16".parse::<StorageDtype>().unwrap(), StorageDtype::BF16);
        assert_eq!(
            "float16".parse::<StorageDtype>().unwrap(),
            StorageDtype::F16
        );
        let err = "int8".parse::<StorageDtype>().unwrap_err();
        assert!(err.to_string().contains("int8"));
    }
}
