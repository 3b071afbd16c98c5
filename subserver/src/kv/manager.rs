//! The per-engine KV bookkeeping the scheduler calls: requests' block
//! tables over one pool, with optional prefix reuse.

use std::collections::HashMap;

use super::{BlockAllocator, BlockId, BlockTable, KvError, PrefixCache, PrefixCacheStats};

/// One request's KV: its table, whose first `shared` blocks came from the
/// prefix cache (read-only, possibly shared with other requests) and whose
/// remaining blocks are its own.
#[derive(Debug, Clone)]
struct RequestKv {
    table: BlockTable,
    shared: usize,
}

/// Owns the block pool, the prefix cache and every request's block table
/// for one model's engine. Owned by one scheduler thread, hence no locks.
#[derive(Debug, Clone)]
pub struct KvManager {
    allocator: BlockAllocator,
    cache: Option<PrefixCache>,
    requests: HashMap<u64, RequestKv>,
    /// Failed [`Self::free`] calls: each one is a double free or a leak.
    free_errors: u64,
}

impl KvManager {
    /// A pool of `num_blocks` blocks of `block_size` slots, all free.
    pub fn new(
        num_blocks: usize,
        block_size: usize,
        enable_prefix_cache: bool,
    ) -> Result<Self, KvError> {
        Ok(Self {
            allocator: BlockAllocator::new(num_blocks, block_size)?,
            cache: enable_prefix_cache.then(|| PrefixCache::new(block_size)),
            requests: HashMap::new(),
            free_errors: 0,
        })
    }

    /// Token slots per block.
    pub fn block_size(&self) -> usize {
        self.allocator.block_size()
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.allocator.num_blocks()
    }

    /// Whether finished requests' blocks are kept for reuse.
    pub fn prefix_cache_enabled(&self) -> bool {
        self.cache.is_some()
    }

    /// Registers request `rid` and reuses the longest cached prefix of
    /// `prompt`, in whole blocks, short of the last prompt token (the model
    /// must still compute one token to yield logits). Returns the number of
    /// prompt tokens whose KV is already in place; the table covers exactly
    /// those positions until [`Self::reserve`].
    pub fn admit(&mut self, rid: u64, prompt: &[u32]) -> Result<usize, KvError> {
        if self.requests.contains_key(&rid) {
            return Err(KvError::DuplicateRequest { rid });
        }
        if prompt.is_empty() {
            return Err(KvError::EmptyPrompt { rid });
        }
        let block_size = self.block_size();
        let mut table = BlockTable::new(block_size);
        if let Some(cache) = &mut self.cache {
            let hit = cache.match_prefix_capped(prompt, prompt.len() - 1);
            for (i, &block) in hit.iter().enumerate() {
                if let Err(e) = self.allocator.retain(block) {
                    // Only a corrupt cache gets here; undo what we took.
                    for &taken in &hit[..i] {
                        self.allocator.release(taken)?;
                    }
                    return Err(e);
                }
            }
            table.extend(hit);
        }
        let shared = table.num_blocks();
        tracing::debug!(
            rid,
            prompt_tokens = prompt.len(),
            cached_tokens = shared * block_size,
            "kv admit"
        );
        self.requests.insert(rid, RequestKv { table, shared });
        Ok(shared * block_size)
    }

    /// Blocks `rid` still needs to cover positions `0..num_positions`; for
    /// an unknown rid, the blocks a fresh request would need.
    pub fn blocks_needed(&self, rid: u64, num_positions: usize) -> usize {
        let have = self.requests.get(&rid).map_or(0, |r| r.table.num_blocks());
        num_positions
            .div_ceil(self.block_size())
            .saturating_sub(have)
    }

    /// Whether [`Self::reserve`] would succeed now.
    pub fn can_reserve(&self, rid: u64, num_positions: usize) -> bool {
        self.blocks_needed(rid, num_positions) <= self.num_available_blocks()
    }

    /// Grows `rid`'s table to cover positions `0..num_positions`, evicting
    /// cached blocks when the free list is short. All or nothing: on error
    /// nothing changed, the cache included.
    pub fn reserve(&mut self, rid: u64, num_positions: usize) -> Result<(), KvError> {
        if !self.requests.contains_key(&rid) {
            return Err(KvError::UnknownRequest { rid });
        }
        let needed = self.blocks_needed(rid, num_positions);
        if needed == 0 {
            return Ok(());
        }
        let free = self.allocator.num_free();
        if needed > free {
            let available = self.num_available_blocks();
            if needed > available {
                return Err(KvError::OutOfBlocks { needed, available });
            }
            if let Some(cache) = &mut self.cache {
                cache.evict(needed - free, &mut self.allocator)?;
            }
        }
        let blocks = self.allocator.allocate_n(needed)?;
        self.requests
            .get_mut(&rid)
            .ok_or(KvError::UnknownRequest { rid })?
            .table
            .extend(blocks);
        Ok(())
    }

    /// Appends to `out` the slot indices of `rid`'s positions `start..end`.
    pub fn slots(
        &self,
        rid: u64,
        start: usize,
        end: usize,
        out: &mut Vec<i64>,
    ) -> Result<(), KvError> {
        let table = self.block_table(rid)?;
        if start > end {
            return Err(KvError::InvalidRange { rid, start, end });
        }
        let reserved = table.num_positions();
        if end > reserved {
            return Err(KvError::NotReserved { rid, end, reserved });
        }
        out.reserve(end - start);
        for pos in start..end {
            out.push(
                table
                    .slot(pos)
                    .ok_or(KvError::NotReserved { rid, end, reserved })?,
            );
        }
        Ok(())
    }

    /// `rid`'s block table.
    pub fn block_table(&self, rid: u64) -> Result<&BlockTable, KvError> {
        self.requests
            .get(&rid)
            .map(|r| &r.table)
            .ok_or(KvError::UnknownRequest { rid })
    }

    /// `rid` finished normally: the full blocks whose KV is written
    /// (`computed_tokens` are the token ids at positions `0..len`) go to the
    /// prefix cache, then the request's references are dropped. On a refusal
    /// (unknown rid, more tokens than reserved, tokens that contradict the
    /// cached prefix the request was admitted with) nothing changed; the
    /// caller may still [`Self::free`] it ([`Self::finish`] does). Every
    /// failure is a bug: logged at error level and counted once in
    /// [`Self::free_errors`].
    pub fn release(&mut self, rid: u64, computed_tokens: &[u32]) -> Result<(), KvError> {
        if let Err(e) = self.cache_written(rid, computed_tokens) {
            self.free_errors += 1;
            tracing::error!(rid, error = %e, "KV release refused: nothing cached or freed");
            return Err(e);
        }
        self.free(rid)
    }

    /// The caching half of [`Self::release`]: validates, then inserts.
    fn cache_written(&mut self, rid: u64, computed_tokens: &[u32]) -> Result<(), KvError> {
        let request = self
            .requests
            .get(&rid)
            .ok_or(KvError::UnknownRequest { rid })?;
        let reserved = request.table.num_positions();
        if computed_tokens.len() > reserved {
            return Err(KvError::NotReserved {
                rid,
                end: computed_tokens.len(),
                reserved,
            });
        }
        if let Some(cache) = &mut self.cache {
            let cached =
                cache.insert(computed_tokens, request.table.blocks(), &mut self.allocator)?;
            tracing::debug!(
                rid,
                computed = computed_tokens.len(),
                newly_cached = cached,
                "kv release"
            );
        }
        Ok(())
    }

    /// A request that ended normally leaves: [`Self::release`], and when the
    /// release was refused (the request still holds its blocks), a free
    /// without caching. Each failure is logged and counted once, where it
    /// happened, so a caller has nothing to do on failure and a failed free
    /// is never counted twice.
    pub fn finish(&mut self, rid: u64, computed_tokens: &[u32]) {
        if self.release(rid, computed_tokens).is_err() && self.contains(rid) {
            self.discard(rid);
        }
    }

    /// Drops `rid`'s blocks without caching them (cancel, preemption).
    /// A failure means a double free or a leaked block: it is logged at
    /// error level and counted in [`Self::free_errors`], whoever the caller.
    pub fn free(&mut self, rid: u64) -> Result<(), KvError> {
        let out = self.free_blocks(rid);
        if let Err(e) = &out {
            self.free_errors += 1;
            tracing::error!(rid, error = %e, "KV free failed: a double free or a leaked block");
        }
        out
    }

    /// [`Self::free`] for a caller with nothing to do on failure (cancel,
    /// preemption, a request leaving): the failure is already logged and
    /// counted, so tests and `/metrics` see it.
    pub fn discard(&mut self, rid: u64) {
        if self.free(rid).is_err() {
            // Logged and counted in `free`.
        }
    }

    /// Failed frees since the pool was made; any above zero is a bug.
    pub fn free_errors(&self) -> u64 {
        self.free_errors
    }

    fn free_blocks(&mut self, rid: u64) -> Result<(), KvError> {
        let request = self
            .requests
            .remove(&rid)
            .ok_or(KvError::UnknownRequest { rid })?;
        // Release every block even if one fails, then report the first
        // failure: stopping halfway would leak the rest.
        let mut first_error = None;
        for &block in request.table.blocks() {
            if let Err(e) = self.allocator.release(block) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Evicts up to `n` cached blocks that no request holds; returns how
    /// many were freed.
    pub fn evict(&mut self, n: usize) -> Result<usize, KvError> {
        match &mut self.cache {
            Some(cache) => cache.evict(n, &mut self.allocator),
            None => Ok(0),
        }
    }

    /// Evicts every cached block that no request holds.
    pub fn evict_all(&mut self) -> Result<usize, KvError> {
        self.evict(usize::MAX)
    }

    /// Blocks on the free list.
    pub fn num_free_blocks(&self) -> usize {
        self.allocator.num_free()
    }

    /// Cached blocks no request holds: eviction can free them.
    pub fn num_evictable_blocks(&self) -> usize {
        self.allocator.num_cache_only()
    }

    /// Free plus evictable blocks: what a reservation can get.
    pub fn num_available_blocks(&self) -> usize {
        self.num_free_blocks() + self.num_evictable_blocks()
    }

    /// Blocks the prefix cache holds (evictable or pinned by requests).
    pub fn num_cached_blocks(&self) -> usize {
        self.allocator.num_cached()
    }

    /// Fraction of the pool held by requests (vLLM's `kv_cache_usage`):
    /// evictable cached blocks count as free.
    pub fn usage(&self) -> f64 {
        let total = self.num_blocks();
        (total - self.num_available_blocks()) as f64 / total as f64
    }

    /// Registered requests.
    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }

    /// Whether `rid` is registered.
    pub fn contains(&self, rid: u64) -> bool {
        self.requests.contains_key(&rid)
    }

    /// Prefix cache lookup counters (zero when caching is off).
    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.cache
            .as_ref()
            .map(PrefixCache::stats)
            .unwrap_or_default()
    }

    /// Checks every invariant: each block's count equals the tables that
    /// list it plus the cache's reference; a request's own blocks are in no
    /// other table and not cached; its shared prefix is cached; the tree
    /// and the free list agree with the counts. O(pool + tables); for tests
    /// and debug checks.
    pub fn check_consistency(&self) -> Result<(), KvError> {
        let fail = |reason: String| Err(KvError::Inconsistent { reason });
        self.allocator.check_consistency()?;
        match &self.cache {
            Some(cache) => cache.check_consistency(&self.allocator)?,
            None if self.allocator.num_cached() > 0 => {
                return fail("blocks cached with caching off".into())
            }
            None => {}
        }
        let num_blocks = self.num_blocks();
        let mut holders = vec![0u32; num_blocks];
        let mut owner: Vec<Option<u64>> = vec![None; num_blocks];
        for (&rid, request) in &self.requests {
            for (i, &block) in request.table.blocks().iter().enumerate() {
                let b = self.block_index(block)?;
                holders[b] += 1;
                let cached = self.allocator.is_cached(block)?;
                if i < request.shared {
                    if !cached {
                        return fail(format!("request {rid} shared block {block} is not cached"));
                    }
                } else {
                    if cached {
                        return fail(format!("request {rid} own block {block} is cached"));
                    }
                    if let Some(other) = owner[b].replace(rid) {
                        return fail(format!(
                            "block {block} is owned by requests {other} and {rid}"
                        ));
                    }
                }
            }
        }
        for (b, &count) in holders.iter().enumerate() {
            let block = b as BlockId;
            let expected = count + u32::from(self.allocator.is_cached(block)?);
            let actual = self.allocator.ref_count(block)?;
            if expected != actual {
                return fail(format!(
                    "block {block} has count {actual}, holders say {expected}"
                ));
            }
        }
        Ok(())
    }

    fn block_index(&self, block: BlockId) -> Result<usize, KvError> {
        self.allocator.ref_count(block).map(|_| block as usize)
    }
}

#[cfg(test)]
#[path = "finish_tests.rs"]
mod finish_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn manager_is_send() {
        assert_send::<KvManager>();
    }

    #[test]
    fn rejects_bad_geometry() {
        assert_eq!(
            KvManager::new(0, 16, true).unwrap_err().error_type(),
            "invalid_config"
        );
        assert_eq!(
            KvManager::new(8, 0, false).unwrap_err().error_type(),
            "invalid_config"
        );
    }

    #[test]
    fn admit_reserve_slots_free_without_cache() {
        let mut kv = KvManager::new(4, 4, false).unwrap();
        assert_eq!(kv.admit(1, &[1, 2, 3, 4, 5]).unwrap(), 0);
        assert_eq!(
            kv.admit(1, &[1]).unwrap_err(),
            KvError::DuplicateRequest { rid: 1 }
        );
        assert_eq!(
            kv.admit(2, &[]).unwrap_err(),
            KvError::EmptyPrompt { rid: 2 }
        );
        assert_eq!(kv.blocks_needed(1, 5), 2);
        assert_eq!(kv.blocks_needed(99, 5), 2);
        kv.reserve(1, 5).unwrap();
        assert_eq!(kv.block_table(1).unwrap().num_positions(), 8);
        assert_eq!(kv.blocks_needed(1, 8), 0);
        assert_eq!(kv.usage(), 0.5);
        let mut slots = vec![-1];
        kv.slots(1, 3, 6, &mut slots).unwrap();
        let t = kv.block_table(1).unwrap().blocks().to_vec();
        let bs = 4;
        assert_eq!(
            slots,
            [
                -1,
                t[0] as i64 * bs + 3,
                t[1] as i64 * bs,
                t[1] as i64 * bs + 1
            ]
        );
        assert_eq!(
            kv.slots(1, 6, 9, &mut slots).unwrap_err(),
            KvError::NotReserved {
                rid: 1,
                end: 9,
                reserved: 8
            }
        );
        assert_eq!(
            kv.slots(1, 4, 3, &mut slots).unwrap_err().error_type(),
            "invalid_range"
        );
        assert_eq!(
            kv.slots(5, 0, 1, &mut slots).unwrap_err(),
            KvError::UnknownRequest { rid: 5 }
        );
        kv.release(1, &[1, 2, 3, 4, 5]).unwrap();
        assert_eq!(kv.num_free_blocks(), 4);
        assert_eq!(kv.num_cached_blocks(), 0);
        assert!(!kv.contains(1));
        assert_eq!(kv.free_errors(), 0);
        assert_eq!(kv.free(1).unwrap_err(), KvError::UnknownRequest { rid: 1 });
        // A double free is counted, so a scheduler's checks see it.
        assert_eq!(kv.free_errors(), 1);
        kv.discard(1);
        assert_eq!(kv.free_errors(), 2);
        assert_eq!(kv.prefix_cache_stats(), PrefixCacheStats::default());
        kv.check_consistency().unwrap();
    }

    #[test]
    fn reserve_is_all_or_nothing() {
        let mut kv = KvManager::new(4, 2, true).unwrap();
        kv.admit(1, &[1, 2, 3]).unwrap();
        kv.reserve(1, 4).unwrap();
        kv.admit(2, &[7]).unwrap();
        assert!(!kv.can_reserve(2, 6));
        assert_eq!(
            kv.reserve(2, 6).unwrap_err(),
            KvError::OutOfBlocks {
                needed: 3,
                available: 2
            }
        );
        assert_eq!(kv.block_table(2).unwrap().num_blocks(), 0);
        assert_eq!(kv.num_free_blocks(), 2);
        assert!(kv.can_reserve(2, 4));
        kv.reserve(2, 4).unwrap();
        assert_eq!(kv.num_free_blocks(), 0);
        assert_eq!(kv.usage(), 1.0);
        assert_eq!(
            kv.reserve(7, 1).unwrap_err(),
            KvError::UnknownRequest { rid: 7 }
        );
        kv.check_consistency().unwrap();
    }

    #[test]
    fn prefix_reuse_across_requests() {
        let mut kv = KvManager::new(8, 2, true).unwrap();
        let first = [10, 11, 12, 13, 14];
        kv.admit(1, &first).unwrap();
        kv.reserve(1, 6).unwrap();
        let first_blocks = kv.block_table(1).unwrap().blocks().to_vec();
        // Prompt plus one generated token written: 6 tokens, 3 full blocks.
        kv.release(1, &[10, 11, 12, 13, 14, 15]).unwrap();
        assert_eq!(kv.num_cached_blocks(), 3);
        assert_eq!(kv.num_evictable_blocks(), 3);
        assert_eq!(kv.num_free_blocks(), 5);
        assert_eq!(kv.usage(), 0.0);

        // Same first 4 tokens, then different: two blocks reused.
        assert_eq!(kv.admit(2, &[10, 11, 12, 13, 99]).unwrap(), 4);
        assert_eq!(kv.block_table(2).unwrap().blocks(), &first_blocks[..2]);
        assert_eq!(kv.num_evictable_blocks(), 1);
        assert_eq!(kv.usage(), 2.0 / 8.0);
        // The whole prompt cached: the last block is left to compute.
        assert_eq!(kv.admit(3, &[10, 11, 12, 13]).unwrap(), 2);
        assert_eq!(kv.admit(4, &[10, 11, 12, 13, 14, 15, 16]).unwrap(), 6);
        assert_eq!(kv.admit(5, &[10]).unwrap(), 0);
        let stats = kv.prefix_cache_stats();
        assert_eq!(
            (stats.queries, stats.query_tokens, stats.hit_tokens),
            (5, 5 + 5 + 4 + 7 + 1, 4 + 2 + 6)
        );
        kv.check_consistency().unwrap();

        // Freeing readers leaves the cache intact; evicting empties it.
        for rid in 2..=5 {
            kv.free(rid).unwrap();
        }
        assert_eq!(kv.num_evictable_blocks(), 3);
        assert_eq!(kv.evict_all().unwrap(), 3);
        assert_eq!(kv.num_free_blocks(), 8);
        kv.check_consistency().unwrap();
    }

    #[test]
    fn reserve_evicts_cache_but_never_a_paused_requests_blocks() {
        let mut kv = KvManager::new(4, 2, true).unwrap();
        kv.admit(1, &[1, 2, 3, 4, 5]).unwrap();
        kv.reserve(1, 5).unwrap();
        kv.release(1, &[1, 2, 3, 4]).unwrap();
        assert_eq!(kv.num_evictable_blocks(), 2);
        // Request 2 reuses the first cached block and is then paused.
        assert_eq!(kv.admit(2, &[1, 2, 9]).unwrap(), 2);
        kv.reserve(2, 3).unwrap();
        let paused = kv.block_table(2).unwrap().clone();
        // Request 3 needs every available block: the free ones and the one
        // evictable leaf, but not request 2's.
        kv.admit(3, &[5, 5, 5, 5]).unwrap();
        assert_eq!(kv.num_available_blocks(), 2);
        assert_eq!(
            kv.reserve(3, 6).unwrap_err(),
            KvError::OutOfBlocks {
                needed: 3,
                available: 2
            }
        );
        assert_eq!(kv.num_cached_blocks(), 2);
        kv.reserve(3, 4).unwrap();
        assert_eq!(kv.num_cached_blocks(), 1);
        assert_eq!(kv.block_table(2).unwrap(), &paused);
        kv.check_consistency().unwrap();
        kv.free(3).unwrap();
        kv.release(2, &[1, 2, 9]).unwrap();
        kv.evict_all().unwrap();
        assert_eq!(kv.num_free_blocks(), 4);
        kv.check_consistency().unwrap();
    }

    #[test]
    fn release_validates_before_changing_anything() {
        let mut kv = KvManager::new(4, 2, true).unwrap();
        kv.admit(1, &[1, 2, 3]).unwrap();
        kv.reserve(1, 4).unwrap();
        kv.release(1, &[1, 2, 3, 4]).unwrap();
        assert_eq!(kv.admit(2, &[1, 2, 3]).unwrap(), 2);
        kv.reserve(2, 3).unwrap();
        let err = kv.release(2, &[1, 2, 3, 4, 5]).unwrap_err();
        assert_eq!(
            err,
            KvError::NotReserved {
                rid: 2,
                end: 5,
                reserved: 4
            }
        );
        // Tokens that contradict the reused prefix cannot be cached.
        let shared = kv.block_table(2).unwrap().blocks()[0];
        assert_eq!(
            kv.release(2, &[7, 7, 3]).unwrap_err(),
            KvError::BlockAlreadyCached { block: shared }
        );
        assert!(kv.contains(2));
        kv.check_consistency().unwrap();
        kv.free(2).unwrap();
        kv.evict_all().unwrap();
        assert_eq!(kv.num_free_blocks(), 4);
    }
}
