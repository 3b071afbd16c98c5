//! Storage dtypes of the checkpoints we write. The conversions
//! (`size`, `safetensors_name`, `encode_into`, ...) are methods of the
//! engine's [`DType`](crate::config::DType), defined with it in `engine-config`.

/// The element type of a stored tensor: the engine's dtype.
pub use crate::config::DType as StorageDtype;
