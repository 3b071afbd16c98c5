//! GGUF files: parsing, dequantization, and import as a Hugging Face directory.

mod cursor;
mod dequant;
mod file;
mod ggml_type;
mod import;
mod llama_config;
mod permute;
mod tensor_names;
// Synthetic GGUF files for tests (also the engine's fuzz-entry tests,
// through the `test-file` feature).
#[cfg(any(test, feature = "test-file"))]
pub mod test_file;
mod tokenizer_json;
mod value;

pub use dequant::{dequantize, is_dequantizable};
pub use file::{GgufFile, GgufHeader, GgufTensorInfo};
pub use ggml_type::{GgmlType, SUPPORTED_TYPES};
pub use import::{import_gguf, ImportOptions, ImportSummary};
pub use llama_config::llama_config;
pub use permute::{permute_rows, unpermute_rows};
pub use tensor_names::{map_llama_name, RotaryRows};
pub use tokenizer_json::{tokenizer_files, TokenizerFiles};
pub use value::MetadataValue;
