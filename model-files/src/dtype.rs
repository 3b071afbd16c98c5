//! Storage dtypes of the checkpoints we write. The conversions
//! (`size`, `safetensors_name`, `encode_into`, ...) are methods of the
//! engine's [`DType`](engine_config::DType), defined with it in `engine-config`.

/// The element type of a stored tensor: the engine's dtype.
pub use engine_config::DType as StorageDtype;
