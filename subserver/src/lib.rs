//! The engine for one model: model loading (Hugging Face directories, GGUF
//! import), the decoder architectures, the paged KV cache with its radix
//! prefix cache, the `ModelRunner` seam, sampling and the batch engine.

/// The engine config (crate `engine-config`, torch-free; re-exported so
/// `subserver::config::...` paths stay).
pub use engine_config as config;
/// Model files: GGUF, safetensors, HF folders, random presets (crate
/// `model-files`, torch-free without its `tch` feature; re-exported so
/// `subserver::assets::...` paths stay).
pub use model_files as assets;
/// The asset error (crate `model-files`; re-exported so
/// `subserver::asset_error::...` paths stay).
pub use model_files::error as asset_error;
pub mod cuda;
pub mod device;
pub mod engine;
pub mod error;
pub mod fuzz_entry;
pub mod host_tensor;
pub mod http;
pub mod kv;
pub mod metrics;
pub mod model;
pub mod op_count;
pub mod openmp;
pub mod peer;
/// Routing policies, their factory and router checkpoints (crate
/// `policies`; re-exported so `subserver::policy::...` paths stay).
pub use policies as policy;
/// The routing seam (crate `policies`; re-exported so
/// `subserver::routing::...` paths stay).
pub use policies::routing;
pub mod runner;
pub mod sampling;
pub mod scheduler;
pub mod service;
pub mod std_serving;
/// Tokenizers and chat templates (crate `textio`, torch-free; re-exported
/// so `subserver::tokenizer::...` paths stay).
pub use textio as tokenizer;

pub use error::EngineError;
