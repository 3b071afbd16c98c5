//! Reference-counted pool of KV blocks.
//!
//! A block's count is the number of holders: each request block table that
//! lists it, plus one if the prefix cache holds it. The cache takes and drops
//! its reference through [`BlockAllocator::retain_cached`] and
//! [`BlockAllocator::release_cached`], so the allocator knows which blocks
//! only the cache holds (the evictable ones) without asking the cache.

use super::{BlockId, KvError};

/// A pool of `num_blocks` blocks of `block_size` token slots each.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    block_size: usize,
    ref_counts: Vec<u32>,
    /// Whether the prefix cache holds one of the block's references.
    cached: Vec<bool>,
    /// Free blocks, popped from the end; starts as `num_blocks-1, ..., 0` so
    /// that a fresh pool hands out low ids first.
    free: Vec<BlockId>,
    num_cached: usize,
    /// Cached blocks with a reference count of exactly 1.
    num_cache_only: usize,
}

impl BlockAllocator {
    /// A pool with every block free.
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self, KvError> {
        if num_blocks == 0 {
            return Err(KvError::InvalidConfig {
                reason: "num_blocks must be at least 1".into(),
            });
        }
        if block_size == 0 {
            return Err(KvError::InvalidConfig {
                reason: "block_size must be at least 1".into(),
            });
        }
        // Block ids are u32 and slot indices i64: both must hold the whole pool.
        let fits = BlockId::try_from(num_blocks).is_ok()
            && num_blocks
                .checked_mul(block_size)
                .is_some_and(|slots| i64::try_from(slots).is_ok());
        if !fits {
            return Err(KvError::InvalidConfig {
                reason: format!(
                    "{num_blocks} blocks of {block_size} slots do not fit the slot index range"
                ),
            });
        }
        Ok(Self {
            block_size,
            ref_counts: vec![0; num_blocks],
            cached: vec![false; num_blocks],
            free: (0..num_blocks as BlockId).rev().collect(),
            num_cached: 0,
            num_cache_only: 0,
        })
    }

    /// Token slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks nobody holds.
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Blocks the prefix cache holds (alone or shared).
    pub fn num_cached(&self) -> usize {
        self.num_cached
    }

    /// Cached blocks that only the cache holds: eviction would free them.
    pub fn num_cache_only(&self) -> usize {
        self.num_cache_only
    }

    /// The holders of `block`.
    pub fn ref_count(&self, block: BlockId) -> Result<u32, KvError> {
        Ok(self.ref_counts[self.index(block)?])
    }

    /// Whether the prefix cache holds `block`.
    pub fn is_cached(&self, block: BlockId) -> Result<bool, KvError> {
        Ok(self.cached[self.index(block)?])
    }

    /// Takes a free block; its count becomes 1.
    pub fn allocate(&mut self) -> Result<BlockId, KvError> {
        let block = self.free.pop().ok_or(KvError::OutOfBlocks {
            needed: 1,
            available: 0,
        })?;
        self.ref_counts[block as usize] = 1;
        Ok(block)
    }

    /// Takes `n` free blocks, or none if fewer than `n` are free.
    pub fn allocate_n(&mut self, n: usize) -> Result<Vec<BlockId>, KvError> {
        if n > self.free.len() {
            return Err(KvError::OutOfBlocks {
                needed: n,
                available: self.free.len(),
            });
        }
        let blocks = self.free.split_off(self.free.len() - n);
        for &block in &blocks {
            self.ref_counts[block as usize] = 1;
        }
        Ok(blocks)
    }

    /// Adds a holder to an allocated block.
    pub fn retain(&mut self, block: BlockId) -> Result<(), KvError> {
        let i = self.allocated_index(block)?;
        if self.cached[i] && self.ref_counts[i] == 1 {
            self.num_cache_only -= 1;
        }
        self.ref_counts[i] += 1;
        Ok(())
    }

    /// Drops a holder; returns whether the block went back to the free list.
    /// The cache's own reference cannot be dropped here.
    pub fn release(&mut self, block: BlockId) -> Result<bool, KvError> {
        let i = self.allocated_index(block)?;
        if self.cached[i] {
            if self.ref_counts[i] == 1 {
                return Err(KvError::CacheReferenceOnly { block });
            }
            if self.ref_counts[i] == 2 {
                self.num_cache_only += 1;
            }
        }
        Ok(self.decrement(i, block))
    }

    /// The prefix cache takes a reference to a block someone already holds.
    pub fn retain_cached(&mut self, block: BlockId) -> Result<(), KvError> {
        let i = self.allocated_index(block)?;
        if self.cached[i] {
            return Err(KvError::BlockAlreadyCached { block });
        }
        // The block is held by its writer, so the count is at least 2 now.
        self.cached[i] = true;
        self.ref_counts[i] += 1;
        self.num_cached += 1;
        Ok(())
    }

    /// The prefix cache drops its reference; returns whether the block went
    /// back to the free list.
    pub fn release_cached(&mut self, block: BlockId) -> Result<bool, KvError> {
        let i = self.allocated_index(block)?;
        if !self.cached[i] {
            return Err(KvError::BlockNotCached { block });
        }
        self.cached[i] = false;
        self.num_cached -= 1;
        if self.ref_counts[i] == 1 {
            self.num_cache_only -= 1;
        }
        Ok(self.decrement(i, block))
    }

    /// Checks the free list against the counts. O(num_blocks); for tests and
    /// debug checks.
    pub fn check_consistency(&self) -> Result<(), KvError> {
        let fail = |reason: String| Err(KvError::Inconsistent { reason });
        let mut on_free_list = vec![false; self.num_blocks()];
        for &block in &self.free {
            let i = block as usize;
            if i >= self.num_blocks() || on_free_list[i] {
                return fail(format!(
                    "block {block} is on the free list twice or out of range"
                ));
            }
            on_free_list[i] = true;
        }
        let (mut cached, mut cache_only) = (0, 0);
        for (i, &count) in self.ref_counts.iter().enumerate() {
            if on_free_list[i] != (count == 0) {
                return fail(format!(
                    "block {i} has count {count} but free-list membership {}",
                    on_free_list[i]
                ));
            }
            if self.cached[i] {
                if count == 0 {
                    return fail(format!("block {i} is cached but free"));
                }
                cached += 1;
                cache_only += usize::from(count == 1);
            }
        }
        if cached != self.num_cached || cache_only != self.num_cache_only {
            return fail(format!(
                "cached/cache-only counters {}/{} but blocks say {cached}/{cache_only}",
                self.num_cached, self.num_cache_only
            ));
        }
        Ok(())
    }

    fn decrement(&mut self, i: usize, block: BlockId) -> bool {
        self.ref_counts[i] -= 1;
        if self.ref_counts[i] == 0 {
            self.free.push(block);
            true
        } else {
            false
        }
    }

    fn index(&self, block: BlockId) -> Result<usize, KvError> {
        let i = block as usize;
        if i < self.ref_counts.len() {
            Ok(i)
        } else {
            Err(KvError::UnknownBlock {
                block,
                num_blocks: self.ref_counts.len(),
            })
        }
    }

    fn allocated_index(&self, block: BlockId) -> Result<usize, KvError> {
        let i = self.index(block)?;
        if self.ref_counts[i] == 0 {
            return Err(KvError::BlockNotAllocated { block });
        }
        Ok(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unusable_geometry() {
        assert_eq!(
            BlockAllocator::new(0, 16).unwrap_err().error_type(),
            "invalid_config"
        );
        assert_eq!(
            BlockAllocator::new(4, 0).unwrap_err().error_type(),
            "invalid_config"
        );
        assert_eq!(
            BlockAllocator::new(1 << 33, 16).unwrap_err().error_type(),
            "invalid_config"
        );
    }

    #[test]
    fn allocate_retain_release_cycle() {
        let mut a = BlockAllocator::new(3, 16).unwrap();
        assert_eq!(a.num_free(), 3);
        let b0 = a.allocate().unwrap();
        assert_eq!(b0, 0);
        assert_eq!(a.ref_count(b0).unwrap(), 1);
        a.retain(b0).unwrap();
        assert_eq!(a.ref_count(b0).unwrap(), 2);
        assert!(!a.release(b0).unwrap());
        assert_eq!(a.num_free(), 2);
        assert!(a.release(b0).unwrap());
        assert_eq!(a.num_free(), 3);
        assert_eq!(a.ref_count(b0).unwrap(), 0);
        a.check_consistency().unwrap();
    }

    #[test]
    fn allocate_n_is_all_or_nothing() {
        let mut a = BlockAllocator::new(4, 2).unwrap();
        let got = a.allocate_n(3).unwrap();
        assert_eq!(got.len(), 3);
        let distinct: std::collections::HashSet<_> = got.iter().collect();
        assert_eq!(distinct.len(), 3);
        assert_eq!(
            a.allocate_n(2).unwrap_err(),
            KvError::OutOfBlocks {
                needed: 2,
                available: 1
            }
        );
        assert_eq!(a.num_free(), 1);
        assert!(a.allocate_n(0).unwrap().is_empty());
        a.allocate().unwrap();
        assert_eq!(
            a.allocate().unwrap_err(),
            KvError::OutOfBlocks {
                needed: 1,
                available: 0
            }
        );
        a.check_consistency().unwrap();
    }

    #[test]
    fn double_release_and_unknown_blocks_are_errors() {
        let mut a = BlockAllocator::new(2, 4).unwrap();
        let b = a.allocate().unwrap();
        a.release(b).unwrap();
        assert_eq!(
            a.release(b).unwrap_err(),
            KvError::BlockNotAllocated { block: b }
        );
        assert_eq!(
            a.retain(b).unwrap_err(),
            KvError::BlockNotAllocated { block: b }
        );
        assert_eq!(
            a.release(7).unwrap_err(),
            KvError::UnknownBlock {
                block: 7,
                num_blocks: 2
            }
        );
        assert_eq!(
            a.retain(7).unwrap_err(),
            KvError::UnknownBlock {
                block: 7,
                num_blocks: 2
            }
        );
        assert_eq!(a.ref_count(7).unwrap_err().error_type(), "unknown_block");
        // Nothing was corrupted: the free list still holds each block once.
        assert_eq!(a.num_free(), 2);
        a.check_consistency().unwrap();
    }

    #[test]
    fn cache_reference_is_tracked_apart() {
        let mut a = BlockAllocator::new(2, 4).unwrap();
        let b = a.allocate().unwrap();
        a.retain_cached(b).unwrap();
        assert_eq!(
            a.retain_cached(b).unwrap_err(),
            KvError::BlockAlreadyCached { block: b }
        );
        assert_eq!((a.num_cached(), a.num_cache_only()), (1, 0));
        // The writer lets go: only the cache holds it, so it is evictable.
        assert!(!a.release(b).unwrap());
        assert_eq!((a.num_cached(), a.num_cache_only()), (1, 1));
        // A plain release must not drop the cache's reference.
        assert_eq!(
            a.release(b).unwrap_err(),
            KvError::CacheReferenceOnly { block: b }
        );
        // A new reader pins it.
        a.retain(b).unwrap();
        assert_eq!(a.num_cache_only(), 0);
        a.release(b).unwrap();
        assert_eq!(a.num_cache_only(), 1);
        assert!(a.release_cached(b).unwrap());
        assert_eq!(
            (a.num_cached(), a.num_cache_only(), a.num_free()),
            (0, 0, 2)
        );
        assert_eq!(
            a.release_cached(b).unwrap_err(),
            KvError::BlockNotAllocated { block: b }
        );
        let c = a.allocate().unwrap();
        assert_eq!(
            a.release_cached(c).unwrap_err(),
            KvError::BlockNotCached { block: c }
        );
        a.check_consistency().unwrap();
    }

    #[test]
    fn free_blocks_cannot_be_cached() {
        let mut a = BlockAllocator::new(2, 4).unwrap();
        assert_eq!(
            a.retain_cached(1).unwrap_err(),
            KvError::BlockNotAllocated { block: 1 }
        );
        a.check_consistency().unwrap();
    }
}
