//! Prompt difficulty remembered across requests. A query-level policy
//! judges a prompt by its mean next-token entropy, measured at prefill over
//! the positions the prefix cache did not serve. Served again, the same
//! prompt would be measured over its last, uncached block only and score
//! differently (repeated benchmark prompts then all looked hard). The memo
//! keeps each prompt's first score, keyed by a hash of its tokens, so a
//! prompt always scores the same. Prompts sharing a cached prefix (a system
//! prompt) are scored over what follows it: their own question.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

/// Prompts the memo remembers (oldest forgotten first).
pub const PROMPT_MEMO_CAPACITY: usize = 4096;

/// Whole-prompt mean entropies by prompt.
#[derive(Debug, Default)]
pub struct PromptMemo {
    means: HashMap<u64, f32>,
    order: VecDeque<u64>,
}

impl PromptMemo {
    /// The score of `prompt` whose uncached positions averaged `measured`:
    /// its first score when it was seen before, else `measured` (remembered).
    pub fn score(&mut self, prompt: &[u32], measured: Option<f32>) -> Option<f32> {
        let key = key_of(prompt);
        if let Some(&first) = self.means.get(&key) {
            return Some(first);
        }
        if let Some(mean) = measured {
            self.remember(key, mean);
        }
        measured
    }

    fn remember(&mut self, key: u64, mean: f32) {
        if self.means.insert(key, mean).is_none() {
            self.order.push_back(key);
            if self.order.len() > PROMPT_MEMO_CAPACITY {
                if let Some(old) = self.order.pop_front() {
                    self.means.remove(&old);
                }
            }
        }
    }

    /// Prompts remembered.
    pub fn len(&self) -> usize {
        self.means.len()
    }

    /// Nothing remembered yet.
    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }
}

fn key_of(prompt: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    prompt.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_prompt_keeps_its_first_score() {
        let mut memo = PromptMemo::default();
        let prompt = [5, 6, 7, 8];
        assert_eq!(memo.score(&prompt, Some(0.4)), Some(0.4));
        // Served from the cache: only the tail was measured.
        assert_eq!(memo.score(&prompt, Some(0.9)), Some(0.4));
        // Another prompt behind the same cached prefix gets its own score.
        assert_eq!(memo.score(&[5, 6, 7, 9], Some(0.7)), Some(0.7));
        // Nothing measured, nothing remembered.
        assert_eq!(memo.score(&[1], None), None);
        assert_eq!(memo.score(&[1], Some(0.2)), Some(0.2));
    }

    #[test]
    fn the_memo_forgets_the_oldest_prompt_past_its_capacity() {
        let mut memo = PromptMemo::default();
        for t in 0..=PROMPT_MEMO_CAPACITY as u32 {
            memo.score(&[t], Some(t as f32));
        }
        assert_eq!(memo.len(), PROMPT_MEMO_CAPACITY);
        assert_eq!(memo.score(&[0], None), None, "the first is forgotten");
        assert_eq!(memo.score(&[1], None), Some(1.0));
    }
}
