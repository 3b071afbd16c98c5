//! ggml tensor element types: their ids, names and block layout.

/// A ggml tensor type as numbered in `ggml.h`. Types we cannot dequantize are
/// still named, so an error can say which one a tensor uses.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 0
    F32,
    /// 1
    F16,
    /// 2: 32 weights, f16 scale, 4-bit signed (offset 8).
    Q4_0,
    /// 3: 32 weights, f16 scale and min, 4-bit unsigned.
    Q4_1,
    /// 6: 32 weights, f16 scale, 5-bit signed (offset 16).
    Q5_0,
    /// 7: 32 weights, f16 scale and min, 5-bit unsigned.
    Q5_1,
    /// 8: 32 weights, f16 scale, int8.
    Q8_0,
    /// 9
    Q8_1,
    /// 10
    Q2_K,
    /// 11
    Q3_K,
    /// 12: 256-weight super-blocks, 8 sub-blocks with 6-bit scales and mins, 4-bit.
    Q4_K,
    /// 13: as Q4_K with a fifth bit per weight.
    Q5_K,
    /// 14: 256-weight super-blocks, 16 sub-blocks with int8 scales, 6-bit signed.
    Q6_K,
    /// 15
    Q8_K,
    /// 24
    I8,
    /// 25
    I16,
    /// 26
    I32,
    /// 27
    I64,
    /// 28
    F64,
    /// 30
    BF16,
    /// Any other id (IQ* types, ternary types, ...).
    Other(u32),
}

/// The types [`crate::gguf::dequantize`] handles, for error messages.
pub const SUPPORTED_TYPES: &str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K";

impl GgmlType {
    /// Maps a type id from a tensor info.
    pub fn from_id(id: u32) -> Self {
        match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            15 => Self::Q8_K,
            24 => Self::I8,
            25 => Self::I16,
            26 => Self::I32,
            27 => Self::I64,
            28 => Self::F64,
            30 => Self::BF16,
            other => Self::Other(other),
        }
    }

    /// The type id.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::I8 => 24,
            Self::I16 => 25,
            Self::I32 => 26,
            Self::I64 => 27,
            Self::F64 => 28,
            Self::BF16 => 30,
            Self::Other(id) => id,
        }
    }

    /// The name llama.cpp and gguf-py use.
    pub fn name(self) -> String {
        match self {
            Self::Other(id) => match id {
                16 => "IQ2_XXS".into(),
                17 => "IQ2_XS".into(),
                18 => "IQ3_XXS".into(),
                19 => "IQ1_S".into(),
                20 => "IQ4_NL".into(),
                21 => "IQ3_S".into(),
                22 => "IQ2_S".into(),
                23 => "IQ4_XS".into(),
                29 => "IQ1_M".into(),
                34 => "TQ1_0".into(),
                35 => "TQ2_0".into(),
                39 => "MXFP4".into(),
                _ => format!("type id {id}"),
            },
            known => format!("{known:?}"),
        }
    }

    /// `(weights per block, bytes per block)` for types whose layout we know.
    pub fn block_layout(self) -> Option<(usize, usize)> {
        Some(match self {
            Self::F32 | Self::I32 => (1, 4),
            Self::F16 | Self::BF16 | Self::I16 => (1, 2),
            Self::I8 => (1, 1),
            Self::I64 | Self::F64 => (1, 8),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q8_1 => (32, 36),
            Self::Q2_K => (256, 84),
            Self::Q3_K => (256, 110),
            Self::Q4_K => (256, 144),
            Self::Q5_K => (256, 176),
            Self::Q6_K => (256, 210),
            Self::Q8_K => (256, 292),
            Self::Other(_) => return None,
        })
    }

    /// Bytes taken by `n` weights, when the layout is known and `n` fills whole blocks.
    pub fn byte_len(self, n: u64) -> Option<u64> {
        let (block, bytes) = self.block_layout()?;
        if !n.is_multiple_of(block as u64) {
            return None;
        }
        (n / block as u64).checked_mul(bytes as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_names_match_llama_cpp() {
        for id in 0..40 {
            assert_eq!(GgmlType::from_id(id).id(), id);
        }
        assert_eq!(GgmlType::Q4_K.name(), "Q4_K");
        assert_eq!(GgmlType::from_id(20).name(), "IQ4_NL");
        assert_eq!(GgmlType::Q6_K.byte_len(512), Some(420));
        assert_eq!(GgmlType::Q8_0.byte_len(33), None);
    }
}
