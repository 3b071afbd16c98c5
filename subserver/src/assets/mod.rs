//! Offline model assets: GGUF import, derived partners, random checkpoints,
//! and the safetensors reading and writing they share.
//!
//! - [`gguf::import_gguf`]: a llama GGUF → a Hugging Face model directory.
//! - [`derive_early_exit`]: the first K layers of a model as a partner model.
//! - [`random::gen_random`]: random weights for a [`random::Preset`] shape.
//! - [`tensor_specs`]: the tensor plan of any config (names, shapes, init).

pub mod checkpoint_reader;
mod derive;
pub mod dtype;
// The error type is a leaf module of its own: `EngineError` wraps it, and
// assets sits above `model`, whose code returns `EngineError`.
use crate::asset_error as error;
pub mod gguf;
pub mod hf_files;
mod progress;
pub mod random;
pub mod safetensors_writer;
pub mod staged;
pub mod tensor_spec;

pub use checkpoint_reader::{Checkpoint, TensorRef};
pub use derive::{derive_early_exit, DeriveSummary};
pub use dtype::StorageDtype;
pub use error::AssetError;
pub use hf_files::load_tokenizer;
pub use safetensors_writer::{CheckpointWriter, TensorEntry, DEFAULT_MAX_SHARD_BYTES};
pub use tensor_spec::{tensor_rng, tensor_specs, InitKind, TensorSpec};
