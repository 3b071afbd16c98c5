//! Model files: what a model is on disk, read and written without the
//! engine. It owns the Hugging Face `config.json` ([`hf_config`]), the GGUF
//! reader, dequantization and import, the safetensors reader, writer and
//! completeness check, Hugging Face model folders, random presets and
//! derived partners, and (feature `tch`) the loader of safetensors weights
//! into libtorch tensors ([`weights`]).
//!
//! It must not depend on the engine (`subserver`: scheduler, KV cache,
//! runner, sampling, service) nor on the policies; without the `tch`
//! feature it does not link libtorch (`tools/check_torch_free.sh`).
//!
//! - [`gguf::import_gguf`]: a llama or qwen2 GGUF → a Hugging Face model directory.
//! - [`gguf::GgufWeights`]: a GGUF read as weights (dequantized or raw blocks).
//! - [`derive_early_exit`]: the first K layers of a model as a partner model.
//! - [`random::gen_random`]: random weights for a [`random::Preset`] shape.
//! - [`tensor_specs`]: the tensor plan of any config (names, shapes, init).

pub mod checkpoint_reader;
mod derive;
pub mod dtype;
pub mod error;
pub mod gguf;
pub mod hf_config;
pub mod hf_files;
pub mod load_error;
mod progress;
pub mod random;
pub mod safetensors_check;
pub mod safetensors_writer;
pub mod staged;
pub mod tensor_spec;
#[cfg(feature = "tch")]
pub mod weights;

pub use checkpoint_reader::{Checkpoint, TensorRef};
pub use derive::{derive_early_exit, DeriveSummary};
pub use dtype::StorageDtype;
pub use error::AssetError;
pub use hf_files::load_tokenizer;
pub use load_error::LoadError;
pub use safetensors_writer::{CheckpointWriter, TensorEntry, DEFAULT_MAX_SHARD_BYTES};
pub use tensor_spec::{tensor_rng, tensor_specs, InitKind, TensorSpec};
