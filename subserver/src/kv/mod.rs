//! Paged KV cache: block allocator, per-request block tables, radix prefix cache.

/// KV cache errors.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// Not enough free blocks.
    #[error("out of KV blocks: need {needed}, {free} free")]
    OutOfBlocks {
        /// Blocks asked for.
        needed: usize,
        /// Blocks free.
        free: usize,
    },
}
