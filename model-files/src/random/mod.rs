//! Random-weight checkpoints of real model shapes, for load and throughput
//! tests without downloading weights.

mod generate;
mod preset;

pub use generate::{gen_random, GenRandomOptions};
pub use preset::{Preset, QWEN3_ENDOFTEXT, QWEN3_IM_END, QWEN3_VOCAB};
