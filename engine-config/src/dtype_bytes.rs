//! What a [`DType`] means in a checkpoint file: element size, its names in
//! safetensors headers and `config.json`, and f32 → dtype encoding. These
//! live beside the type (not in the subserver's `assets`) because an
//! inherent impl must sit in the crate that defines the type.

use crate::placement::DType;

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::Bf16 | Self::F16 => 2,
        }
    }

    /// The dtype string in a safetensors header (`F32`, `BF16`, `F16`).
    pub fn safetensors_name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::Bf16 => "BF16",
            Self::F16 => "F16",
        }
    }

    /// The `torch_dtype` string of `config.json`.
    pub fn torch_name(self) -> &'static str {
        match self {
            Self::F32 => "float32",
            Self::Bf16 => "bfloat16",
            Self::F16 => "float16",
        }
    }

    /// Parses a safetensors header dtype; `None` for dtypes we do not handle.
    pub fn from_safetensors(dtype: safetensors::Dtype) -> Option<Self> {
        match dtype {
            safetensors::Dtype::F32 => Some(Self::F32),
            safetensors::Dtype::BF16 => Some(Self::Bf16),
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
            Self::Bf16 => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_each_dtype_little_endian() {
        let mut out = Vec::new();
        DType::F32.encode_into(&[1.0, -2.5], &mut out);
        assert_eq!(out, [0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0]);
        out.clear();
        DType::Bf16.encode_into(&[1.0, -2.5], &mut out);
        assert_eq!(out, [0x80, 0x3f, 0x20, 0xc0]);
        out.clear();
        DType::F16.encode_into(&[1.0, -2.5], &mut out);
        assert_eq!(out, [0x00, 0x3c, 0x00, 0xc1]);
    }
}
