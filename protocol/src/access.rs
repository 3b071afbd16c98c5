//! The bearer token that guards a subserver's control endpoints
//! (`/admin/*`, `/internal/generate`): the subserver checks it, a remote
//! gateway and the operator's tune loop send it. Where the endpoints are
//! served and who may reach them without a token is the subserver's
//! business (`subserver::http::ControlAccess`).

use std::path::Path;
use std::sync::Arc;

/// The environment variable holding the token itself.
pub const TOKEN_ENV: &str = "TOKENROUTER_ADMIN_TOKEN";
/// The environment variable naming a file that holds the token.
pub const TOKEN_FILE_ENV: &str = "TOKENROUTER_ADMIN_TOKEN_FILE";

/// A bearer token; its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(Arc<str>);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// A token from its text (surrounding whitespace, e.g. a file's final
    /// newline, is not part of it); `None` when empty.
    pub fn new(text: &str) -> Option<Self> {
        let t = text.trim();
        (!t.is_empty()).then(|| Self(Arc::from(t)))
    }

    /// Reads a token file; an empty file is an error (a Secret that was
    /// meant to be there and is not must not open the endpoints).
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("admin token file {}: {e}", path.display()))?;
        Self::new(&text).ok_or_else(|| format!("admin token file {} is empty", path.display()))
    }

    /// The token from `TOKENROUTER_ADMIN_TOKEN_FILE` or
    /// `TOKENROUTER_ADMIN_TOKEN` (the file wins); `None` when neither is set.
    pub fn from_env() -> Result<Option<Self>, String> {
        Ok(match std::env::var_os(TOKEN_FILE_ENV) {
            Some(path) if !path.is_empty() => Some(Self::from_file(Path::new(&path))?),
            _ => std::env::var(TOKEN_ENV).ok().and_then(|t| Self::new(&t)),
        })
    }

    /// The `Authorization` header value this token accepts.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether `header` (an `Authorization` value) carries this token; the
    /// comparison takes the same time wherever the first difference is.
    pub fn accepts(&self, header: Option<&str>) -> bool {
        let Some(given) = header.and_then(|h| h.strip_prefix("Bearer ")) else {
            return false;
        };
        let (a, b) = (given.trim().as_bytes(), self.0.as_bytes());
        let mut diff = a.len() ^ b.len();
        for (i, &x) in b.iter().enumerate() {
            diff |= usize::from(x ^ a.get(i).copied().unwrap_or(!x));
        }
        diff == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_matching() {
        let t = AdminToken::new(" s3cret\n").unwrap();
        assert!(t.accepts(Some("Bearer s3cret")));
        for bad in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "s3cret",
            "Basic s3cret",
            "Bearer ",
        ] {
            assert!(!t.accepts(Some(bad)), "{bad}");
        }
        assert!(!t.accepts(None));
        assert!(AdminToken::new("  \n").is_none());
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    #[test]
    fn token_file_errors_are_precise() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let e = AdminToken::from_file(&empty).unwrap_err();
        assert!(e.contains("is empty"), "{e}");
        let e = AdminToken::from_file(&dir.path().join("none")).unwrap_err();
        assert!(e.contains("none"), "{e}");
    }
}
