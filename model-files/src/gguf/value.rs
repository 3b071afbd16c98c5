//! GGUF metadata values: the thirteen scalar types, strings and (nested) arrays.

use std::path::Path;

use super::cursor::Cursor;
use crate::AssetError;

/// One metadata value as stored in a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 6.
    F32(f32),
    /// Type 7.
    Bool(bool),
    /// Type 8.
    String(String),
    /// Type 9: element type, count, elements (all of the element type).
    Array(Vec<MetadataValue>),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 12.
    F64(f64),
}

/// Nested arrays deeper than this are rejected: no real file needs them and a
/// crafted file could otherwise recurse without bound.
const MAX_ARRAY_DEPTH: usize = 4;

impl MetadataValue {
    /// The GGUF type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "uint8",
            Self::I8(_) => "int8",
            Self::U16(_) => "uint16",
            Self::I16(_) => "int16",
            Self::U32(_) => "uint32",
            Self::I32(_) => "int32",
            Self::F32(_) => "float32",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array(_) => "array",
            Self::U64(_) => "uint64",
            Self::I64(_) => "int64",
            Self::F64(_) => "float64",
        }
    }

    /// Any integer that fits a non-negative u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer as i64 (u64 values above i64::MAX give `None`).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::I8(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// A float (or integer) as f64. f32 values go through their shortest
    /// decimal form so `1e-5f32` becomes `1e-5`, not `9.99999974e-6`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => format!("{v}").parse().ok(),
            Self::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// A bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array's elements.
    pub fn as_array(&self) -> Option<&[MetadataValue]> {
        match self {
            Self::Array(v) => Some(v),
            _ => None,
        }
    }

    /// Reads a value of GGUF type code `ty`.
    pub(crate) fn read(
        cur: &mut Cursor<'_>,
        ty: u32,
        what: &str,
        path: &Path,
    ) -> Result<Self, AssetError> {
        Self::read_nested(cur, ty, what, path, 0)
    }

    fn read_nested(
        cur: &mut Cursor<'_>,
        ty: u32,
        what: &str,
        path: &Path,
        depth: usize,
    ) -> Result<Self, AssetError> {
        Ok(match ty {
            0 => Self::U8(cur.u8(what)?),
            1 => Self::I8(cur.u8(what)? as i8),
            2 => Self::U16(cur.u16(what)?),
            3 => Self::I16(cur.u16(what)? as i16),
            4 => Self::U32(cur.u32(what)?),
            5 => Self::I32(cur.u32(what)? as i32),
            6 => Self::F32(cur.f32(what)?),
            7 => match cur.u8(what)? {
                0 => Self::Bool(false),
                1 => Self::Bool(true),
                b => {
                    return Err(AssetError::InvalidGguf {
                        path: path.to_path_buf(),
                        reason: format!("{what}: bool byte {b} is neither 0 nor 1"),
                    })
                }
            },
            8 => Self::String(cur.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(AssetError::InvalidGguf {
                        path: path.to_path_buf(),
                        reason: format!("{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                    });
                }
                let elem = cur.u32(what)?;
                let count = cur.u64(what)?;
                // Every element takes at least one byte: a count beyond the
                // remaining bytes is a truncated (or corrupt) file, caught
                // before allocating for it.
                if count > cur.remaining() as u64 {
                    return Err(cur.truncated(what, cur.position() as u64, count));
                }
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(Self::read_nested(cur, elem, what, path, depth + 1)?);
                }
                Self::Array(items)
            }
            10 => Self::U64(cur.u64(what)?),
            11 => Self::I64(cur.u64(what)? as i64),
            12 => Self::F64(cur.f64(what)?),
            other => {
                return Err(AssetError::InvalidGguf {
                    path: path.to_path_buf(),
                    reason: format!("{what}: unknown metadata value type {other}"),
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_converts_through_shortest_decimal() {
        assert_eq!(MetadataValue::F32(1e-5).as_f64(), Some(1e-5));
        assert_eq!(MetadataValue::I32(-3).as_u64(), None);
        assert_eq!(MetadataValue::I32(7).as_u64(), Some(7));
        assert_eq!(MetadataValue::U64(u64::MAX).as_i64(), None);
    }

    #[test]
    fn rejects_unknown_type_code_and_bad_bool() {
        let path = Path::new("t.gguf");
        let bytes = [2u8];
        let err =
            MetadataValue::read(&mut Cursor::new(path, &bytes), 13, "key `k`", path).unwrap_err();
        assert!(
            err.to_string().contains("unknown metadata value type 13"),
            "{err}"
        );
        let err =
            MetadataValue::read(&mut Cursor::new(path, &bytes), 7, "key `b`", path).unwrap_err();
        assert!(err.to_string().contains("key `b`"), "{err}");
    }
}
