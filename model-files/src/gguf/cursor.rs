//! A bounds-checked little-endian reader over the bytes of a GGUF file.
//! Every read names what it was reading, so a truncated file says where.

use std::path::Path;

use crate::AssetError;

/// Reads primitives from a byte slice, failing with [`AssetError::Truncated`].
pub(crate) struct Cursor<'a> {
    path: &'a Path,
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Starts at the beginning of `data`; `path` is only used in errors.
    pub(crate) fn new(path: &'a Path, data: &'a [u8]) -> Self {
        Self { path, data, pos: 0 }
    }

    /// Current byte offset.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left after the current position.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// The error for a read of `n` bytes from `start` that does not fit.
    pub(crate) fn truncated(&self, what: &str, start: u64, n: u64) -> AssetError {
        AssetError::Truncated {
            path: self.path.to_path_buf(),
            what: what.to_string(),
            start,
            end: start.saturating_add(n),
            len: self.data.len() as u64,
        }
    }

    /// Takes the next `n` bytes.
    pub(crate) fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], AssetError> {
        if n > self.remaining() as u64 {
            return Err(self.truncated(what, self.pos as u64, n));
        }
        let n = n as usize;
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], AssetError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64, what)?);
        Ok(out)
    }

    /// One byte.
    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, AssetError> {
        Ok(self.array::<1>(what)?[0])
    }
    /// Little-endian u16.
    pub(crate) fn u16(&mut self, what: &str) -> Result<u16, AssetError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    /// Little-endian u32.
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, AssetError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// Little-endian u64.
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, AssetError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// Little-endian f32.
    pub(crate) fn f32(&mut self, what: &str) -> Result<f32, AssetError> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }
    /// Little-endian f64.
    pub(crate) fn f64(&mut self, what: &str) -> Result<f64, AssetError> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: u64 length, then UTF-8 bytes.
    pub(crate) fn string(&mut self, what: &str) -> Result<String, AssetError> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| AssetError::InvalidGguf {
            path: self.path.to_path_buf(),
            reason: format!("{what}: string is not UTF-8 ({e})"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_truncation_with_context() {
        let path = Path::new("x.gguf");
        let bytes = [1u8, 0, 0, 0, 2, 0];
        let mut c = Cursor::new(path, &bytes);
        assert_eq!(c.u32("a").unwrap(), 1);
        let err = c.u32("key `foo`").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("key `foo`") && msg.contains("4..8") && msg.contains("has 6"),
            "{msg}"
        );
        assert_eq!(c.u16("b").unwrap(), 2);
    }

    #[test]
    fn rejects_string_longer_than_file() {
        let mut bytes = 1000u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let mut c = Cursor::new(Path::new("x"), &bytes);
        assert!(matches!(
            c.string("name").unwrap_err(),
            AssetError::Truncated { .. }
        ));
    }
}
