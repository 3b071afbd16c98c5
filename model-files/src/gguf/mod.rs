//! GGUF files: parsing, dequantization, import as a Hugging Face directory,
//! and [`GgufWeights`], a GGUF read as a model's weights.

mod arch_config;
mod cursor;
mod dequant;
mod file;
mod ggml_type;
mod import;
mod model_weights;
mod permute;
mod tensor_names;
// Synthetic GGUF files for tests (also the engine's fuzz-entry tests,
// through the `test-file` feature).
#[cfg(any(test, feature = "test-file"))]
pub mod test_file;
mod tokenizer_json;
mod value;

pub use arch_config::{gguf_architecture, gguf_config, GGUF_ARCHITECTURES};
pub use dequant::{dequantize, is_dequantizable};
pub use file::{GgufFile, GgufHeader, GgufTensorInfo};
pub use ggml_type::{GgmlType, SUPPORTED_TYPES};
pub use import::{import_gguf, ImportOptions, ImportSummary, LINKED_GGUF};
pub use model_weights::{GgufWeights, RawTensor};
pub use permute::{permute_rows, unpermute_rows};
pub use tensor_names::{map_llama_name, map_tensor_name, RotaryRows};
pub use tokenizer_json::{tokenizer_files, TokenizerFiles};
pub use value::MetadataValue;
