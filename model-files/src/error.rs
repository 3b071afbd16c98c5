//! The error type of offline asset work (GGUF import, derivation, random checkpoints).

use std::path::{Path, PathBuf};

/// Everything that can go wrong while reading, converting or writing model assets.
/// Each variant names the offending file, tensor, key or argument.
#[derive(Debug, thiserror::Error)]
pub enum AssetError {
    /// A file could not be read, or a model directory's config or tensors
    /// are not what they must be.
    #[error(transparent)]
    Load(#[from] crate::LoadError),
    /// The file does not start with the `GGUF` magic.
    #[error("{path}: not a GGUF file (magic bytes {found:02x?}, expected \"GGUF\")")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first four bytes found.
        found: [u8; 4],
    },
    /// A GGUF version we do not read (only v2 and v3, little-endian).
    #[error("{path}: unsupported GGUF version {version} (supported: 2, 3, little-endian)")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version field as read.
        version: u32,
    },
    /// The file ends before a structure it announces.
    #[error("{path}: truncated while reading {what}: needs bytes {start}..{end}, file has {len}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was being read (key name, tensor name, ...).
        what: String,
        /// First byte needed.
        start: u64,
        /// One past the last byte needed.
        end: u64,
        /// File length.
        len: u64,
    },
    /// The GGUF is structurally invalid in some other way.
    #[error("{path}: invalid GGUF: {reason}")]
    InvalidGguf {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A metadata key the conversion needs is absent or has the wrong type.
    #[error("GGUF metadata `{key}`: {reason}")]
    Metadata {
        /// The key.
        key: String,
        /// Absent, or what type was found.
        reason: String,
    },
    /// A tensor is stored in a ggml type we cannot dequantize.
    #[error("tensor `{tensor}` has unsupported ggml type {ggml_type} (supported: {supported})")]
    UnsupportedTensorType {
        /// The GGUF tensor name.
        tensor: String,
        /// The type's name (or number when unknown).
        ggml_type: String,
        /// The types we support.
        supported: &'static str,
    },
    /// A GGUF tensor name with no transformers counterpart.
    #[error("tensor `{tensor}`: {reason}")]
    UnmappedTensor {
        /// The GGUF tensor name.
        tensor: String,
        /// Why it cannot be converted.
        reason: String,
    },
    /// A tensor's shape or byte size does not fit what it should be.
    #[error("tensor `{tensor}`: {reason}")]
    TensorShape {
        /// The tensor name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// The model in the file is of a kind we do not convert.
    #[error("unsupported model: {0}")]
    UnsupportedModel(String),
    /// The tokenizer metadata describes a tokenizer we cannot rebuild.
    #[error("unsupported tokenizer: {0}")]
    UnsupportedTokenizer(String),
    /// An argument out of range or unknown (preset, dtype, layer count).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Refusing to write into a directory that already holds files.
    #[error("output directory {path} is not empty; remove it or pick another")]
    OutputNotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// A JSON file could not be parsed or written.
    #[error("{path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A safetensors file is malformed.
    #[error("{path}: invalid safetensors: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The `tokenizers` crate rejected a tokenizer.json we produced or read.
    #[error("{path}: tokenizer does not load: {reason}")]
    Tokenizer {
        /// The tokenizer.json.
        path: PathBuf,
        /// The crate's message.
        reason: String,
    },
    /// An error about a file's content that does not itself name the file
    /// (a metadata key, a tensor), with the file it concerns.
    #[error("{path}: {source}")]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: Box<AssetError>,
    },
    /// Tensors were handed to the checkpoint writer out of plan.
    #[error("checkpoint writer: {0}")]
    WriterOrder(String),
}

impl AssetError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Load(crate::LoadError::io(path, source))
    }

    /// Wraps a JSON error with the file it concerns.
    pub fn json(path: &Path, source: serde_json::Error) -> Self {
        Self::Json {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A short stable label for metrics and logs.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Load(e) => e.error_type(),
            Self::BadMagic { .. } => "bad_magic",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::Truncated { .. } => "truncated",
            Self::InvalidGguf { .. } => "invalid_gguf",
            Self::Metadata { .. } => "metadata",
            Self::UnsupportedTensorType { .. } => "unsupported_tensor_type",
            Self::UnmappedTensor { .. } => "unmapped_tensor",
            Self::TensorShape { .. } => "tensor_shape",
            Self::UnsupportedModel(_) => "unsupported_model",
            Self::UnsupportedTokenizer(_) => "unsupported_tokenizer",
            Self::InvalidArgument(_) => "invalid_argument",
            Self::OutputNotEmpty { .. } => "output_not_empty",
            Self::Json { .. } => "json",
            Self::Safetensors { .. } => "safetensors",
            Self::Tokenizer { .. } => "tokenizer",
            Self::InFile { source, .. } => source.error_type(),
            Self::WriterOrder(_) => "writer_order",
        }
    }
}
