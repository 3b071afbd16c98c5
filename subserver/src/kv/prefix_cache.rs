//! Radix tree of computed KV blocks, keyed by the token ids they hold.
//!
//! Like SGLang's radix cache with page size = block size: each node is one
//! FULL block, its edge the block's `block_size` token ids; a path from the
//! root spells a token prefix whose KV sits in the path's blocks. Partial
//! blocks are never cached, so a cached block is never written again.
//!
//! The cache holds one allocator reference per node. A node is evictable
//! when it is a leaf and its block's count is 1 (the cache alone holds it).
//! Requests only ever hold root paths of the tree (what `match_prefix`
//! returned), so the pinned nodes are closed under "parent of", and the
//! evictable count — cached blocks only the cache holds — is exactly what
//! evicting everything would free.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};

use super::{BlockAllocator, BlockId, KvError};

type NodeId = usize;

/// Children keyed by the token ids of their block.
type Children = HashMap<Vec<u32>, NodeId>;

#[derive(Debug, Clone)]
struct Node {
    /// The `block_size` token ids this block holds (also the key in the
    /// parent's `children`, kept here to unlink on eviction).
    key: Vec<u32>,
    block: BlockId,
    parent: Option<NodeId>,
    children: Children,
    /// Logical time of the last match or insert through this node.
    last_access: u64,
}

/// Lookup counters, for the prefix-cache hit-rate metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Lookups made.
    pub queries: u64,
    /// Tokens looked up.
    pub query_tokens: u64,
    /// Tokens found cached.
    pub hit_tokens: u64,
}

impl PrefixCacheStats {
    /// `hit_tokens / query_tokens`, 0 before any lookup.
    pub fn hit_rate(&self) -> f64 {
        if self.query_tokens == 0 {
            0.0
        } else {
            self.hit_tokens as f64 / self.query_tokens as f64
        }
    }
}

/// The radix prefix cache. Its methods that change references take the
/// pool's [`BlockAllocator`], which the owner keeps beside it.
#[derive(Debug, Clone)]
pub struct PrefixCache {
    block_size: usize,
    /// Node arena; `None` marks a slot left by an evicted node.
    nodes: Vec<Option<Node>>,
    free_slots: Vec<NodeId>,
    root_children: Children,
    /// Nodes without children; ordered so that eviction ties break the same
    /// way every run.
    leaves: BTreeSet<NodeId>,
    clock: u64,
    stats: PrefixCacheStats,
}

impl PrefixCache {
    /// An empty cache over blocks of `block_size` tokens.
    pub fn new(block_size: usize) -> Self {
        Self {
            block_size,
            nodes: Vec::new(),
            free_slots: Vec::new(),
            root_children: Children::new(),
            leaves: BTreeSet::new(),
            clock: 0,
            stats: PrefixCacheStats::default(),
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks the cache holds.
    pub fn num_cached_blocks(&self) -> usize {
        self.nodes.len() - self.free_slots.len()
    }

    /// Cached blocks that eviction can free (held by the cache alone). The
    /// reference counts live in the allocator, hence the argument.
    pub fn num_evictable(&self, allocator: &BlockAllocator) -> usize {
        allocator.num_cache_only()
    }

    /// Lookup counters so far.
    pub fn stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// The cached blocks of the longest prefix of `tokens` in whole blocks.
    /// Touches the LRU time of every node on the path. The caller must
    /// retain the blocks it keeps.
    pub fn match_prefix(&mut self, tokens: &[u32]) -> Vec<BlockId> {
        self.match_prefix_capped(tokens, tokens.len())
    }

    /// As [`Self::match_prefix`], but matches at most `max_tokens` tokens
    /// (rounded down to whole blocks). The query counter still counts all
    /// of `tokens`, so the hit rate reflects the whole prompt.
    pub fn match_prefix_capped(&mut self, tokens: &[u32], max_tokens: usize) -> Vec<BlockId> {
        self.clock += 1;
        let max_blocks = tokens.len().min(max_tokens) / self.block_size;
        let mut blocks = Vec::new();
        let mut parent = None;
        for key in tokens.chunks_exact(self.block_size).take(max_blocks) {
            // A dead link cannot happen (see `node`); stopping there reuses
            // less KV, which is always safe.
            let Some(&id) = self.children(parent).ok().and_then(|c| c.get(key)) else {
                break;
            };
            let now = self.clock;
            let Ok(node) = self.node_mut(id) else { break };
            node.last_access = now;
            blocks.push(node.block);
            parent = Some(id);
        }
        self.stats.queries += 1;
        self.stats.query_tokens += tokens.len() as u64;
        self.stats.hit_tokens += (blocks.len() * self.block_size) as u64;
        blocks
    }

    /// Caches the full blocks of a computed sequence: `blocks[i]` holds the
    /// KV of `tokens[i*bs..(i+1)*bs]`; a trailing partial block is ignored.
    /// Where a node already exists for a block of tokens, the existing block
    /// is kept and the given one is left to its holder. Takes one reference
    /// per newly cached block and returns how many there were. All or
    /// nothing: on error nothing changed.
    pub fn insert(
        &mut self,
        tokens: &[u32],
        blocks: &[BlockId],
        allocator: &mut BlockAllocator,
    ) -> Result<usize, KvError> {
        let full = tokens.len() / self.block_size;
        if blocks.len() < full {
            return Err(KvError::TooFewBlocks {
                tokens: tokens.len(),
                needed: full,
                blocks: blocks.len(),
            });
        }
        let keys: Vec<&[u32]> = tokens.chunks_exact(self.block_size).collect();
        let mut path = Vec::new();
        let mut parent = None;
        for key in &keys {
            let Some(&id) = self.children(parent)?.get(*key) else {
                break;
            };
            path.push(id);
            parent = Some(id);
        }
        // Everything after the existing path becomes new nodes: check them
        // all before changing anything.
        let new_blocks = &blocks[path.len()..full];
        let mut seen = HashSet::new();
        for &block in new_blocks {
            if allocator.ref_count(block)? == 0 {
                return Err(KvError::BlockNotAllocated { block });
            }
            if allocator.is_cached(block)? || !seen.insert(block) {
                return Err(KvError::BlockAlreadyCached { block });
            }
        }
        self.clock += 1;
        let now = self.clock;
        for &id in &path {
            self.node_mut(id)?.last_access = now;
        }
        for (key, &block) in keys[path.len()..].iter().zip(new_blocks) {
            let id = self.add_node(parent, key.to_vec(), block)?;
            allocator.retain_cached(block)?;
            parent = Some(id);
        }
        if !new_blocks.is_empty() {
            tracing::trace!(
                new = new_blocks.len(),
                reused = path.len(),
                "prefix cache insert"
            );
        }
        Ok(new_blocks.len())
    }

    /// Frees up to `n` blocks, least recently used first, among leaves only
    /// the cache holds; a parent becomes a candidate once its last child is
    /// gone. Returns the number freed.
    pub fn evict(&mut self, n: usize, allocator: &mut BlockAllocator) -> Result<usize, KvError> {
        if n == 0 {
            return Ok(0);
        }
        let mut candidates = BinaryHeap::new();
        for &id in &self.leaves {
            let node = self.node(id)?;
            if allocator.ref_count(node.block)? == 1 {
                candidates.push(Reverse((node.last_access, id)));
            }
        }
        let mut freed = 0;
        while freed < n {
            let Some(Reverse((_, id))) = candidates.pop() else {
                break;
            };
            let block = self.node(id)?.block;
            if !allocator.release_cached(block)? {
                return Err(KvError::Inconsistent {
                    reason: format!("evicted block {block} is still held"),
                });
            }
            freed += 1;
            if let Some(parent) = self.remove_leaf(id)? {
                let node = self.node(parent)?;
                if node.children.is_empty() && allocator.ref_count(node.block)? == 1 {
                    candidates.push(Reverse((node.last_access, parent)));
                }
            }
        }
        if freed > 0 {
            tracing::debug!(
                freed,
                asked = n,
                cached = self.num_cached_blocks(),
                "prefix cache eviction"
            );
        }
        Ok(freed)
    }

    /// Evicts every block only the cache holds; returns the number freed.
    pub fn evict_all(&mut self, allocator: &mut BlockAllocator) -> Result<usize, KvError> {
        self.evict(usize::MAX, allocator)
    }

    /// Checks the tree against itself and the allocator. O(cached blocks);
    /// for tests and debug checks.
    pub fn check_consistency(&self, allocator: &BlockAllocator) -> Result<(), KvError> {
        let fail = |reason: String| Err(KvError::Inconsistent { reason });
        let mut blocks = HashSet::new();
        let mut count = 0;
        for (id, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            count += 1;
            if node.key.len() != self.block_size {
                return fail(format!("node {id} key has {} tokens", node.key.len()));
            }
            if !blocks.insert(node.block) {
                return fail(format!("block {} is in two nodes", node.block));
            }
            if !allocator.is_cached(node.block)? {
                return fail(format!(
                    "node {id} block {} is not marked cached",
                    node.block
                ));
            }
            let parent_children = match node.parent {
                None => &self.root_children,
                Some(p) => match self.nodes.get(p) {
                    Some(Some(parent)) => {
                        // Pinned nodes must be closed under "parent of", or
                        // the evictable count would overstate what evicts.
                        if allocator.ref_count(node.block)? > 1
                            && allocator.ref_count(parent.block)? == 1
                        {
                            return fail(format!("node {id} is pinned but its parent {p} is not"));
                        }
                        &parent.children
                    }
                    _ => return fail(format!("node {id} has dead parent {p}")),
                },
            };
            if parent_children.get(&node.key) != Some(&id) {
                return fail(format!("node {id} is not linked from its parent"));
            }
            if node.children.is_empty() != self.leaves.contains(&id) {
                return fail(format!("node {id} leaf-set membership is wrong"));
            }
        }
        if count != allocator.num_cached() {
            return fail(format!(
                "{count} nodes but {} blocks marked cached",
                allocator.num_cached()
            ));
        }
        if self
            .leaves
            .iter()
            .any(|&id| !matches!(self.nodes.get(id), Some(Some(_))))
        {
            return fail("leaf set holds a dead node".into());
        }
        Ok(())
    }

    fn children(&self, parent: Option<NodeId>) -> Result<&Children, KvError> {
        match parent {
            None => Ok(&self.root_children),
            Some(id) => Ok(&self.node(id)?.children),
        }
    }

    fn children_mut(&mut self, parent: Option<NodeId>) -> Result<&mut Children, KvError> {
        match parent {
            None => Ok(&mut self.root_children),
            Some(id) => Ok(&mut self.node_mut(id)?.children),
        }
    }

    // Node ids come only from the tree's own links, so a dead id means the
    // tree itself is corrupt, never bad caller input.
    fn node(&self, id: NodeId) -> Result<&Node, KvError> {
        self.nodes
            .get(id)
            .and_then(Option::as_ref)
            .ok_or_else(|| dead_link(id))
    }

    fn node_mut(&mut self, id: NodeId) -> Result<&mut Node, KvError> {
        self.nodes
            .get_mut(id)
            .and_then(Option::as_mut)
            .ok_or_else(|| dead_link(id))
    }

    fn add_node(
        &mut self,
        parent: Option<NodeId>,
        key: Vec<u32>,
        block: BlockId,
    ) -> Result<NodeId, KvError> {
        // Check the parent before touching the arena.
        self.children(parent)?;
        let node = Node {
            key: key.clone(),
            block,
            parent,
            children: Children::new(),
            last_access: self.clock,
        };
        let id = match self.free_slots.pop() {
            Some(id) => {
                self.nodes[id] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        self.children_mut(parent)?.insert(key, id);
        if let Some(p) = parent {
            self.leaves.remove(&p);
        }
        self.leaves.insert(id);
        Ok(id)
    }

    /// Unlinks leaf `id`; returns its parent, now a leaf if it has no other child.
    fn remove_leaf(&mut self, id: NodeId) -> Result<Option<NodeId>, KvError> {
        let (parent, key) = {
            let node = self.node(id)?;
            (node.parent, node.key.clone())
        };
        let siblings = self.children_mut(parent)?;
        siblings.remove(&key);
        let parent_is_leaf = siblings.is_empty();
        self.nodes[id] = None;
        self.free_slots.push(id);
        self.leaves.remove(&id);
        if let (Some(p), true) = (parent, parent_is_leaf) {
            self.leaves.insert(p);
        }
        Ok(parent)
    }
}

fn dead_link(id: NodeId) -> KvError {
    KvError::Inconsistent {
        reason: format!("radix tree link to dead node {id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that computed `tokens` into fresh blocks.
    fn computed(alloc: &mut BlockAllocator, tokens: &[u32]) -> Vec<BlockId> {
        alloc
            .allocate_n(tokens.len().div_ceil(alloc.block_size()))
            .unwrap()
    }

    fn drop_all(alloc: &mut BlockAllocator, blocks: &[BlockId]) {
        for &b in blocks {
            alloc.release(b).unwrap();
        }
    }

    #[test]
    fn insert_then_match_longest_whole_block_prefix() {
        let mut alloc = BlockAllocator::new(8, 2).unwrap();
        let mut cache = PrefixCache::new(2);
        let tokens = [1, 2, 3, 4, 5];
        let blocks = computed(&mut alloc, &tokens);
        // Two full blocks; the partial third is not cached.
        assert_eq!(cache.insert(&tokens, &blocks, &mut alloc).unwrap(), 2);
        drop_all(&mut alloc, &blocks);
        assert_eq!(cache.num_cached_blocks(), 2);
        assert_eq!(cache.num_evictable(&alloc), 2);
        assert_eq!(alloc.num_free(), 6);

        assert_eq!(cache.match_prefix(&[1, 2, 3, 4, 9, 9]), blocks[..2]);
        assert_eq!(cache.match_prefix(&[1, 2, 3, 9]), blocks[..1]);
        assert_eq!(cache.match_prefix(&[1, 2, 3]), blocks[..1]);
        assert!(cache.match_prefix(&[2, 1, 3, 4]).is_empty());
        assert_eq!(cache.match_prefix_capped(&[1, 2, 3, 4], 3), blocks[..1]);
        let stats = cache.stats();
        assert_eq!(
            (stats.queries, stats.query_tokens, stats.hit_tokens),
            (5, 21, 10)
        );
        assert!((stats.hit_rate() - 10.0 / 21.0).abs() < 1e-12);
        cache.check_consistency(&alloc).unwrap();
    }

    #[test]
    fn insert_dedupes_existing_nodes_and_branches() {
        let mut alloc = BlockAllocator::new(8, 2).unwrap();
        let mut cache = PrefixCache::new(2);
        let a = computed(&mut alloc, &[1, 2, 3, 4]);
        cache.insert(&[1, 2, 3, 4], &a, &mut alloc).unwrap();
        // Same first block computed again elsewhere, then a different second.
        let b = computed(&mut alloc, &[1, 2, 7, 8]);
        assert_eq!(cache.insert(&[1, 2, 7, 8], &b, &mut alloc).unwrap(), 1);
        // The duplicate block stays with its writer only.
        assert!(!alloc.is_cached(b[0]).unwrap());
        assert!(alloc.is_cached(b[1]).unwrap());
        drop_all(&mut alloc, &a);
        drop_all(&mut alloc, &b);
        assert_eq!(cache.num_cached_blocks(), 3);
        assert_eq!(alloc.num_free(), 5);
        assert_eq!(cache.match_prefix(&[1, 2, 7, 8]), [a[0], b[1]]);
        // Re-inserting a cached path adds nothing.
        assert_eq!(cache.insert(&[1, 2], &[a[0]], &mut alloc).unwrap(), 0);
        cache.check_consistency(&alloc).unwrap();
    }

    #[test]
    fn insert_is_all_or_nothing() {
        let mut alloc = BlockAllocator::new(8, 2).unwrap();
        let mut cache = PrefixCache::new(2);
        let a = computed(&mut alloc, &[1, 2, 3, 4]);
        cache.insert(&[1, 2, 3, 4], &a, &mut alloc).unwrap();
        let b = computed(&mut alloc, &[5, 6]);
        // a[1] already caches other tokens.
        let err = cache
            .insert(&[5, 6, 7, 8], &[b[0], a[1]], &mut alloc)
            .unwrap_err();
        assert_eq!(err, KvError::BlockAlreadyCached { block: a[1] });
        let err = cache
            .insert(&[5, 6, 7, 8], &[b[0], b[0]], &mut alloc)
            .unwrap_err();
        assert_eq!(err, KvError::BlockAlreadyCached { block: b[0] });
        let err = cache
            .insert(&[5, 6, 7, 8], &[b[0]], &mut alloc)
            .unwrap_err();
        assert_eq!(err.error_type(), "too_few_blocks");
        let free_block = 7;
        let err = cache
            .insert(&[5, 6, 7, 8], &[b[0], free_block], &mut alloc)
            .unwrap_err();
        assert_eq!(err, KvError::BlockNotAllocated { block: free_block });
        assert_eq!(
            cache
                .insert(&[5, 6], &[99], &mut alloc)
                .unwrap_err()
                .error_type(),
            "unknown_block"
        );
        assert_eq!(cache.num_cached_blocks(), 2);
        assert!(!alloc.is_cached(b[0]).unwrap());
        cache.check_consistency(&alloc).unwrap();
        alloc.check_consistency().unwrap();
    }

    #[test]
    fn evicts_lru_leaves_first_then_parents() {
        let mut alloc = BlockAllocator::new(8, 1).unwrap();
        let mut cache = PrefixCache::new(1);
        // Tree: 1 -> 2 -> 3 and 1 -> 4.
        let a = computed(&mut alloc, &[1, 2, 3]);
        cache.insert(&[1, 2, 3], &a, &mut alloc).unwrap();
        let b = computed(&mut alloc, &[1, 4]);
        cache.insert(&[1, 4], &b, &mut alloc).unwrap();
        drop_all(&mut alloc, &a);
        drop_all(&mut alloc, &b);
        assert_eq!(cache.num_evictable(&alloc), 4);
        // Touch the long branch so [1, 4]'s leaf is the oldest.
        cache.match_prefix(&[1, 2, 3]);
        assert_eq!(cache.evict(1, &mut alloc).unwrap(), 1);
        assert!(!alloc.is_cached(b[1]).unwrap());
        assert_eq!(cache.match_prefix(&[1, 2, 3]).len(), 3);
        // Root block 1 only becomes a candidate after its children go.
        assert_eq!(cache.evict(2, &mut alloc).unwrap(), 2);
        assert_eq!(cache.match_prefix(&[1, 2, 3]), [a[0]]);
        assert_eq!(cache.evict(5, &mut alloc).unwrap(), 1);
        assert_eq!(cache.num_cached_blocks(), 0);
        assert_eq!(alloc.num_free(), 8);
        cache.check_consistency(&alloc).unwrap();
        alloc.check_consistency().unwrap();
    }

    #[test]
    fn never_evicts_blocks_a_request_holds() {
        let mut alloc = BlockAllocator::new(4, 2).unwrap();
        let mut cache = PrefixCache::new(2);
        let a = computed(&mut alloc, &[1, 2, 3, 4]);
        cache.insert(&[1, 2, 3, 4], &a, &mut alloc).unwrap();
        drop_all(&mut alloc, &a);
        // A reader pins the first block, which is a parent: the leaf can go,
        // the pinned block cannot.
        let hit = cache.match_prefix(&[1, 2, 9, 9]);
        alloc.retain(hit[0]).unwrap();
        assert_eq!(cache.num_evictable(&alloc), 1);
        assert_eq!(cache.evict_all(&mut alloc).unwrap(), 1);
        assert_eq!(cache.num_cached_blocks(), 1);
        assert_eq!(cache.evict_all(&mut alloc).unwrap(), 0);
        alloc.release(hit[0]).unwrap();
        assert_eq!(cache.evict_all(&mut alloc).unwrap(), 1);
        assert_eq!(alloc.num_free(), 4);
        cache.check_consistency(&alloc).unwrap();
    }

    #[test]
    fn evicted_slots_are_reused() {
        let mut alloc = BlockAllocator::new(2, 2).unwrap();
        let mut cache = PrefixCache::new(2);
        for round in 0..5u32 {
            let a = computed(&mut alloc, &[round, round, 1, 1]);
            cache.insert(&[round, round, 1, 1], &a, &mut alloc).unwrap();
            drop_all(&mut alloc, &a);
            assert_eq!(cache.evict_all(&mut alloc).unwrap(), 2);
        }
        assert!(cache.nodes.len() <= 2);
        cache.check_consistency(&alloc).unwrap();
    }
}
