//! Model configuration, weights and decoder architectures.

pub mod config;
pub mod decoder;
pub mod dir;
pub mod elementwise;
pub mod head;
pub mod layout;
pub mod linear;
pub mod onednn;
pub mod paged_cpu;
pub mod rope;
pub mod weights;
