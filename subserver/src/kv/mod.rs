//! Paged KV cache bookkeeping: block allocator, per-request block tables,
//! radix prefix cache, and the [`KvManager`] the engine's scheduler calls.
//! Pure bookkeeping, no tensors: the storage indexes its per-layer key and
//! value tensors with the slot indices handed out here.
//!
//! Each engine's KV lives in a pool of `num_blocks` blocks of `block_size`
//! token slots. Position `p` of a request lives in slot
//! `block_table[p / block_size] * block_size + p % block_size`.
//!
//! # Life of a block
//!
//! A block's reference count is the number of request tables listing it,
//! plus one while the prefix cache holds it.
//!
//! ```text
//!                 reserve                    free(rid) / release(rid, ..) of an
//!   ┌──────┐    (allocate)    ┌───────┐      uncomputed, partial or duplicate block
//!   │ FREE │ ───────────────▶ │ OWNED │ ─────────────────────────────────────────▶ FREE
//!   └──────┘                  └───────┘
//!      ▲                          │ release(rid, computed): full computed block
//!      │                          ▼ enters the radix tree, the request lets go
//!      │   evict (LRU leaf)  ┌──────────────────┐  admit of a prompt   ┌────────────────┐
//!      └──────────────────── │ CACHED/evictable │ ───────────────────▶ │ SHARED/pinned  │
//!                            │    (count 1)     │ ◀─────────────────── │  (count >= 2)  │
//!                            └──────────────────┘  last reader ends    └────────────────┘
//! ```
//!
//! - **free**: count 0, on the free list.
//! - **owned**: one request's table holds it; only that request writes it.
//! - **cached (evictable)**: only the prefix cache holds it; its KV is that
//!   of one full block of some token prefix. Counts as available memory.
//! - **shared (pinned)**: cached and read by at least one live request.
//!   Never evicted, however long that request stays paused at a peer.
//!
//! A block is written only while owned, and only at positions the owner has
//! not computed yet; a cached block is full, so it is never written again.
//! When a finished request's block duplicates one already in the cache, the
//! cached one is kept and the duplicate goes straight back to free.
//!
//! The manager is owned by one scheduler thread: no locks, but `Send`.

mod block_allocator;
mod block_table;
mod error;
mod manager;
mod prefix_cache;
pub mod storage;

#[cfg(test)]
mod invariant_tests;

pub use block_allocator::BlockAllocator;
pub use block_table::BlockTable;
pub use error::KvError;
pub use manager::KvManager;
pub use prefix_cache::{PrefixCache, PrefixCacheStats};

/// Index of a block in the pool.
pub type BlockId = u32;
