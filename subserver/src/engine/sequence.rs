//! One request inside a single-model batch engine: its tokens, how many of
//! them are in the KV cache, its sampler and its stop conditions.

use crate::sampling::{FinishReason, Sampler, SamplingParams, StopChecker};
use crate::tokenizer::IncrementalDecoder;

/// A request being generated.
pub struct Sequence {
    /// Request id (also the KV key).
    pub id: u64,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Generated token ids.
    pub output: Vec<u32>,
    /// Tokens of `prompt ++ output` whose K/V is in the cache.
    pub computed: usize,
    /// Prompt tokens served from the prefix cache at the last admission.
    pub cached: usize,
    /// Times this request was preempted and recomputed.
    pub preemptions: u32,
    /// Per-request sampler (seeded).
    pub sampler: Sampler,
    /// Stop conditions.
    pub stop: StopChecker,
    /// Why it finished, once it has.
    pub finish: Option<FinishReason>,
    /// Text decoder (when the engine has a tokenizer).
    pub detok: Option<IncrementalDecoder>,
}

impl Sequence {
    /// A new request; `fallback_seed` seeds sampling when the params carry no seed.
    pub fn new(
        id: u64,
        prompt: Vec<u32>,
        params: &SamplingParams,
        eos_ids: &[u32],
        fallback_seed: u64,
    ) -> Self {
        Self {
            id,
            prompt,
            output: Vec::new(),
            computed: 0,
            cached: 0,
            preemptions: 0,
            sampler: Sampler::new(params, fallback_seed),
            stop: StopChecker::new(params, eos_ids),
            finish: None,
            detok: None,
        }
    }

    /// `prompt ++ output`.
    pub fn all_tokens(&self) -> Vec<u32> {
        let mut all = Vec::with_capacity(self.len());
        all.extend_from_slice(&self.prompt);
        all.extend_from_slice(&self.output);
        all
    }

    /// Prompt plus output length.
    pub fn len(&self) -> usize {
        self.prompt.len() + self.output.len()
    }

    /// True for an empty prompt with no output (never admitted).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens still to be fed to the model before the next sample.
    pub fn pending(&self) -> usize {
        self.len() - self.computed
    }

    /// The token ids at positions `start..start + n`.
    pub fn tokens_at(&self, start: usize, n: usize) -> Vec<u32> {
        let p = self.prompt.len();
        (start..start + n)
            .map(|i| {
                if i < p {
                    self.prompt[i]
                } else {
                    self.output[i - p]
                }
            })
            .collect()
    }
}
