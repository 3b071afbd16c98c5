//! The engine for one model: model loading (Hugging Face directories, GGUF
//! import), the decoder architectures, the paged KV cache with its radix
//! prefix cache, the `ModelRunner` seam, sampling and the batch engine.

pub mod assets;
pub mod device;
//TEMP pub mod engine;
pub mod error;
pub mod http;
pub mod kv;
pub mod metrics;
pub mod model;
//TEMP pub mod peer;
pub mod runner;
pub mod sampling;
pub mod tokenizer;

pub use error::EngineError;
