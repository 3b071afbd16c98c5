//! Model configuration, weights and decoder architectures.

/// `config.json` (crate `model-files`).
pub use model_files::hf_config as config;
pub mod decoder;
pub mod dir;
pub mod elementwise;
pub mod head;
pub mod layout;
pub mod linear;
pub mod onednn;
pub mod paged_cpu;
pub mod quantized;
pub mod rope;
/// Safetensors weights into tensors (crate `model-files`, feature `tch`).
pub use model_files::weights;
