//! Model configuration, weights and decoder architectures.

pub mod config;
