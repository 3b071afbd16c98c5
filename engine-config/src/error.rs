//! Configuration errors. Each one names the key it concerns, as a dotted
//! path with `[i]` for list items (`model.quick.sim.latency_ms.base`,
//! `delayed_batching_threshold[1][0]`), so a user can find it in the file.

use std::fmt;
use std::path::PathBuf;

/// A position in the YAML text (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Everything that can be wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid YAML (or holds more than one document, or a
    /// mapping repeats a key).
    #[error("YAML syntax error{}: {message}", at(location))]
    Syntax {
        /// The parser's message.
        message: String,
        /// Where the parser stopped, when known.
        location: Option<Location>,
    },
    /// The YAML does not have the expected shape: an unknown key, a value of
    /// the wrong type, or a name that is not one of the accepted values.
    #[error("{key}: {message}{}", at(location))]
    Schema {
        /// Path of the offending key.
        key: String,
        /// What is wrong.
        message: String,
        /// Where in the text, when known.
        location: Option<Location>,
    },
    /// A value that has the right type but breaks a rule (range, reference
    /// to a model, mutually exclusive keys, ...).
    #[error("{key}: {message}")]
    Invalid {
        /// Path of the offending key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A valid setting this build cannot honour yet.
    #[error("{key}: {message}")]
    Unsupported {
        /// Path of the offending key.
        key: String,
        /// What is not supported.
        message: String,
    },
    /// An error inside a configuration file, with the file's name.
    #[error("{}: {source}", file.display())]
    InFile {
        /// The configuration file.
        file: PathBuf,
        /// The error inside it.
        #[source]
        source: Box<ConfigError>,
    },
}

/// ` at line L, column C`, or nothing.
fn at(location: &Option<Location>) -> String {
    location.map(|l| format!(" (at {l})")).unwrap_or_default()
}

impl ConfigError {
    /// A rule violation at `key`.
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }

    /// A setting this build does not support yet, at `key`.
    pub fn unsupported(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Unsupported {
            key: key.into(),
            message: message.into(),
        }
    }

    /// A short stable label for metrics and logs.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Io { .. } => "io",
            Self::Syntax { .. } => "syntax",
            Self::Schema { .. } => "schema",
            Self::Invalid { .. } => "invalid",
            Self::Unsupported { .. } => "unsupported",
            Self::InFile { source, .. } => source.error_type(),
        }
    }

    /// The dotted path of the offending key, when the error concerns one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Schema { key, .. }
            | Self::Invalid { key, .. }
            | Self::Unsupported { key, .. } => Some(key),
            Self::InFile { source, .. } => source.key(),
            Self::Io { .. } | Self::Syntax { .. } => None,
        }
    }

    /// The position in the YAML text, when the parser reported one.
    pub fn location(&self) -> Option<Location> {
        match self {
            Self::Syntax { location, .. } | Self::Schema { location, .. } => *location,
            Self::InFile { source, .. } => source.location(),
            Self::Io { .. } | Self::Invalid { .. } | Self::Unsupported { .. } => None,
        }
    }

    /// Attaches the file name (no-op for errors that already carry a path).
    pub(crate) fn in_file(self, file: PathBuf) -> Self {
        match self {
            Self::Io { .. } | Self::InFile { .. } => self,
            other => Self::InFile {
                file,
                source: Box::new(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_key_and_position() {
        let e = ConfigError::Schema {
            key: "model.quick.bogus".into(),
            message: "unknown field `bogus`".into(),
            location: Some(Location { line: 4, column: 5 }),
        };
        assert_eq!(
            e.to_string(),
            "model.quick.bogus: unknown field `bogus` (at line 4, column 5)"
        );
        let e = e.in_file(PathBuf::from("/x/c.yaml"));
        assert_eq!(e.error_type(), "schema");
        assert_eq!(e.key(), Some("model.quick.bogus"));
        assert_eq!(e.location(), Some(Location { line: 4, column: 5 }));
        assert!(
            e.to_string().starts_with("/x/c.yaml: model.quick.bogus: "),
            "{e}"
        );
        let e = ConfigError::unsupported("tp_size", "tensor parallelism is not supported yet");
        assert_eq!(e.error_type(), "unsupported");
        assert_eq!(
            e.to_string(),
            "tp_size: tensor parallelism is not supported yet"
        );
    }
}
