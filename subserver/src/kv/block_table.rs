//! One request's blocks, in position order.

use super::BlockId;

/// The blocks that hold a request's KV: position `p` lives in slot
/// `blocks[p / block_size] * block_size + p % block_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockTable {
    block_size: usize,
    blocks: Vec<BlockId>,
}

impl BlockTable {
    /// An empty table for blocks of `block_size` slots.
    pub fn new(block_size: usize) -> Self {
        Self {
            block_size,
            blocks: Vec::new(),
        }
    }

    /// Token slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The blocks, in position order.
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Positions `0..num_positions()` have a slot.
    pub fn num_positions(&self) -> usize {
        self.blocks.len() * self.block_size
    }

    /// The slot of position `pos`, or `None` past the covered positions.
    pub fn slot(&self, pos: usize) -> Option<i64> {
        let block = *self.blocks.get(pos / self.block_size)?;
        // The allocator guarantees num_blocks * block_size fits in i64.
        Some(block as i64 * self.block_size as i64 + (pos % self.block_size) as i64)
    }

    /// Appends blocks covering the next positions.
    pub fn extend(&mut self, blocks: impl IntoIterator<Item = BlockId>) {
        self.blocks.extend(blocks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_block_table() {
        let mut t = BlockTable::new(4);
        assert_eq!(t.num_positions(), 0);
        assert_eq!(t.slot(0), None);
        t.extend([5, 2]);
        assert_eq!(t.num_blocks(), 2);
        assert_eq!(t.num_positions(), 8);
        let slots: Vec<_> = (0..8).map(|p| t.slot(p).unwrap()).collect();
        assert_eq!(slots, [20, 21, 22, 23, 8, 9, 10, 11]);
        assert_eq!(t.slot(8), None);
        assert_eq!(t.blocks(), &[5, 2]);
    }

    #[test]
    fn block_size_one_maps_positions_to_blocks() {
        let mut t = BlockTable::new(1);
        t.extend([3, 0, 7]);
        assert_eq!(
            [t.slot(0), t.slot(1), t.slot(2), t.slot(3)],
            [Some(3), Some(0), Some(7), None]
        );
    }
}
