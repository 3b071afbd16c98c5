//! The KV cache's error type. `error_type()` is the metric label.

use super::BlockId;

/// Everything the KV bookkeeping can refuse. Every variant names the block,
/// request or quantity at fault; none of them leaves the state half-changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// The pool geometry cannot be used.
    #[error("invalid KV cache config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// Not enough free (or evictable) blocks for the request.
    #[error("out of KV blocks: need {needed}, {available} available")]
    OutOfBlocks {
        /// Blocks asked for.
        needed: usize,
        /// Blocks free or evictable at the time.
        available: usize,
    },
    /// A block id outside the pool.
    #[error("unknown KV block {block} (pool has {num_blocks} blocks)")]
    UnknownBlock {
        /// The block id.
        block: BlockId,
        /// Pool size.
        num_blocks: usize,
    },
    /// Retain or release of a block nobody holds (a double release).
    #[error("KV block {block} is free (double release?)")]
    BlockNotAllocated {
        /// The block id.
        block: BlockId,
    },
    /// A plain release would drop the reference the prefix cache holds.
    #[error("KV block {block} is held only by the prefix cache; release it through the cache")]
    CacheReferenceOnly {
        /// The block id.
        block: BlockId,
    },
    /// A block is already in the prefix cache, under other tokens.
    #[error("KV block {block} is already in the prefix cache")]
    BlockAlreadyCached {
        /// The block id.
        block: BlockId,
    },
    /// A prefix cache operation on a block the cache does not hold.
    #[error("KV block {block} is not in the prefix cache")]
    BlockNotCached {
        /// The block id.
        block: BlockId,
    },
    /// Fewer blocks than the full blocks of the token sequence.
    #[error("{tokens} tokens fill {needed} blocks but only {blocks} blocks were given")]
    TooFewBlocks {
        /// Token count.
        tokens: usize,
        /// Full blocks those tokens fill.
        needed: usize,
        /// Blocks given.
        blocks: usize,
    },
    /// `admit` of a request id that is already registered.
    #[error("request {rid} is already admitted to the KV cache")]
    DuplicateRequest {
        /// The request id.
        rid: u64,
    },
    /// An operation on a request id that is not registered.
    #[error("request {rid} is not in the KV cache")]
    UnknownRequest {
        /// The request id.
        rid: u64,
    },
    /// A request with no prompt token cannot produce logits.
    #[error("request {rid} has an empty prompt")]
    EmptyPrompt {
        /// The request id.
        rid: u64,
    },
    /// A position range with `start > end`.
    #[error("request {rid}: invalid position range {start}..{end}")]
    InvalidRange {
        /// The request id.
        rid: u64,
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
    },
    /// Positions beyond what the request has reserved.
    #[error("request {rid}: positions up to {end} asked, only {reserved} reserved")]
    NotReserved {
        /// The request id.
        rid: u64,
        /// End of the positions asked for.
        end: usize,
        /// Positions the block table covers.
        reserved: usize,
    },
    /// Internal bookkeeping disagrees with itself (found by `check_consistency`).
    #[error("KV cache bookkeeping is inconsistent: {reason}")]
    Inconsistent {
        /// What disagrees.
        reason: String,
    },
}

impl KvError {
    /// A short stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::InvalidConfig { .. } => "invalid_config",
            Self::OutOfBlocks { .. } => "out_of_blocks",
            Self::UnknownBlock { .. } => "unknown_block",
            Self::BlockNotAllocated { .. } => "block_not_allocated",
            Self::CacheReferenceOnly { .. } => "cache_reference_only",
            Self::BlockAlreadyCached { .. } => "block_already_cached",
            Self::BlockNotCached { .. } => "block_not_cached",
            Self::TooFewBlocks { .. } => "too_few_blocks",
            Self::DuplicateRequest { .. } => "duplicate_request",
            Self::UnknownRequest { .. } => "unknown_request",
            Self::EmptyPrompt { .. } => "empty_prompt",
            Self::InvalidRange { .. } => "invalid_range",
            Self::NotReserved { .. } => "not_reserved",
            Self::Inconsistent { .. } => "inconsistent",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_messages_name_the_culprit() {
        let errors = [
            KvError::InvalidConfig { reason: "x".into() },
            KvError::OutOfBlocks {
                needed: 3,
                available: 1,
            },
            KvError::UnknownBlock {
                block: 9,
                num_blocks: 4,
            },
            KvError::BlockNotAllocated { block: 2 },
            KvError::CacheReferenceOnly { block: 2 },
            KvError::BlockAlreadyCached { block: 2 },
            KvError::BlockNotCached { block: 2 },
            KvError::TooFewBlocks {
                tokens: 8,
                needed: 2,
                blocks: 1,
            },
            KvError::DuplicateRequest { rid: 7 },
            KvError::UnknownRequest { rid: 7 },
            KvError::EmptyPrompt { rid: 7 },
            KvError::InvalidRange {
                rid: 7,
                start: 3,
                end: 1,
            },
            KvError::NotReserved {
                rid: 7,
                end: 9,
                reserved: 4,
            },
            KvError::Inconsistent { reason: "x".into() },
        ];
        let labels: std::collections::HashSet<_> = errors.iter().map(KvError::error_type).collect();
        assert_eq!(labels.len(), errors.len());
        assert_eq!(
            errors[1].to_string(),
            "out of KV blocks: need 3, 1 available"
        );
        assert!(errors[2].to_string().contains("block 9"));
        assert!(errors[8].to_string().contains("request 7"));
    }
}
