//! Optional API keys (`Authorization: Bearer KEY`), from a file (one per
//! line, `#` comments) and/or an environment variable (comma or newline
//! separated). Keys are compared in constant time and never logged.

use std::path::Path;

use subtle::ConstantTimeEq;

/// The accepted keys; empty means auth is off.
#[derive(Clone, Default)]
pub struct ApiKeys {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the keys themselves.
        write!(f, "ApiKeys({} keys)", self.keys.len())
    }
}

/// Keys could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read API keys from {path}: {source}")]
pub struct AuthError {
    path: String,
    #[source]
    source: std::io::Error,
}

impl ApiKeys {
    /// Keys from `file` and from the variable `env_var` (either optional).
    pub fn load(file: Option<&Path>, env_var: Option<&str>) -> Result<Self, AuthError> {
        let mut text = String::new();
        if let Some(path) = file {
            text = std::fs::read_to_string(path).map_err(|source| AuthError {
                path: path.display().to_string(),
                source,
            })?;
        }
        if let Some(var) = env_var {
            if let Ok(v) = std::env::var(var) {
                text.push('\n');
                text.push_str(&v.replace(',', "\n"));
            }
        }
        Ok(Self::from_text(&text))
    }

    /// Keys from lines of text (blank lines and `#` comments skipped).
    pub fn from_text(text: &str) -> Self {
        let keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| l.as_bytes().to_vec())
            .collect();
        Self { keys }
    }

    /// True when requests need a key.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Checks an `Authorization` header value. Every key is compared (no
    /// early exit), each in constant time.
    pub fn check(&self, authorization: Option<&str>) -> bool {
        if !self.enabled() {
            return true;
        }
        let Some(given) = authorization.and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        }) else {
            return false;
        };
        let given = given.trim().as_bytes();
        let mut ok = subtle::Choice::from(0u8);
        for k in &self.keys {
            ok |= k.as_slice().ct_eq(given);
        }
        ok.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_keys_from_file_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("keys");
        std::fs::write(&f, "# comment\nsk-one\n\n  sk-two  \n").unwrap();
        std::env::set_var("TR_TEST_KEYS_AUTH", "sk-three,sk-four");
        let k = ApiKeys::load(Some(&f), Some("TR_TEST_KEYS_AUTH")).unwrap();
        assert!(k.enabled());
        for good in [
            "Bearer sk-one",
            "Bearer sk-two",
            "Bearer sk-four",
            "bearer sk-three",
        ] {
            assert!(k.check(Some(good)), "{good}");
        }
        for bad in [
            None,
            Some("sk-one"),
            Some("Bearer sk-on"),
            Some("Bearer "),
            Some("Basic sk-one"),
        ] {
            assert!(!k.check(bad), "{bad:?}");
        }
        assert!(!format!("{k:?}").contains("sk-"));
        assert!(ApiKeys::default().check(None));
        assert!(ApiKeys::load(Some(&dir.path().join("missing")), None).is_err());
    }
}
