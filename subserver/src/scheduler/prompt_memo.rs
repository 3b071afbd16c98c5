//! Prompt difficulty remembered across requests. A query-level policy
//! judges a prompt by its mean next-token entropy, measured at prefill; a
//! prompt served from the prefix cache is not recomputed, so only its tail
//! would be measured and the same prompt would score differently the second
//! time. The memo keeps the whole-prompt mean of each fully measured prompt,
//! keyed by a hash of its tokens, so a cached repeat gets the same score.

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
    /// The score of a prompt whose first `cached` tokens came from the
    /// prefix cache and whose other positions averaged `measured`: a fully
    /// measured prompt is remembered and scored as measured; a cached one
    /// takes its remembered score when there is one, else the tail's mean.
    pub fn score(&mut self, prompt: &[u32], cached: usize, measured: Option<f32>) -> Option<f32> {
        let key = key_of(prompt);
        if cached == 0 {
            if let Some(mean) = measured {
                self.remember(key, mean);
            }
            return measured;
        }
        self.means.get(&key).copied().or(measured)
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
    fn a_cached_repeat_scores_like_its_first_measurement() {
        let mut memo = PromptMemo::default();
        let prompt = [5, 6, 7, 8];
        assert_eq!(memo.score(&prompt, 0, Some(0.4)), Some(0.4));
        // Served from the cache: only the tail was measured.
        assert_eq!(memo.score(&prompt, 3, Some(0.9)), Some(0.4));
        // Another prompt behind a cached prefix keeps its tail's mean.
        assert_eq!(memo.score(&[5, 6, 7, 9], 3, Some(0.7)), Some(0.7));
        assert_eq!(memo.score(&[1], 1, None), None);
    }

    #[test]
    fn the_memo_forgets_the_oldest_prompt_past_its_capacity() {
        let mut memo = PromptMemo::default();
        for t in 0..=PROMPT_MEMO_CAPACITY as u32 {
            memo.score(&[t], 0, Some(t as f32));
        }
        assert_eq!(memo.len(), PROMPT_MEMO_CAPACITY);
        assert_eq!(memo.score(&[0], 1, None), None, "the first is forgotten");
        assert_eq!(memo.score(&[1], 1, None), Some(1.0));
    }
}
