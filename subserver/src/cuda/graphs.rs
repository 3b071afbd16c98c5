//! Decode steps as CUDA graphs at padded shapes.
//!
//! A pure-decode step (every item brings one token, no entropy rows) of `B`
//! items whose longest context is `C` runs at the bucket
//! `(batch_bucket(B), ctx_bucket(C))`. The first step of a bucket runs
//! eagerly on that bucket's static input tensors (warm-up: cuBLAS handles,
//! lazy inits), then is captured; every later step copies its indices into
//! the static inputs and replays. Graphs of one model share one memory pool
//! (they never run concurrently). Steps that do not fit (prefill chunks,
//! batches above the largest bucket, contexts beyond the cap) run eagerly
//! and count as misses.
//!
//! The capture API is a trait so the bucketing, padding and static-buffer
//! plumbing run on the CPU in tests, with an implementation that replays by
//! running the step again.

use std::collections::HashMap;

use tch::{Device, Tensor};

use crate::cuda::static_layout::{copy_into, decode_layout, DecodeItem};
use crate::error::EngineError;
use crate::kv::storage::KvStorage;
use crate::model::decoder::Decoder;
use crate::model::layout::BatchLayout;

/// Batch sizes graphs are captured at (SGLang-like: dense at the small end).
pub const BATCH_BUCKETS: [usize; 8] = [1, 2, 4, 8, 12, 16, 24, 32];

/// Smallest attention window a graph is captured at.
pub const MIN_CTX_BUCKET: usize = 256;

/// The smallest batch bucket holding `b` items.
pub fn batch_bucket(b: usize) -> Option<usize> {
    BATCH_BUCKETS.iter().copied().find(|&x| x >= b)
}

/// The attention window for a longest context of `ctx`: the next power of
/// two from [`MIN_CTX_BUCKET`], at most `cap`. `None` beyond `cap`.
pub fn ctx_bucket(ctx: usize, cap: usize) -> Option<usize> {
    if ctx > cap {
        return None;
    }
    Some(ctx.max(MIN_CTX_BUCKET).next_power_of_two().min(cap))
}

/// Capturing and replaying graphs.
pub trait GraphApi {
    /// A captured graph.
    type Graph;
    /// Captures what `body` issues on the calling thread's current stream,
    /// sharing the memory pool of `pool_from` when given.
    fn capture(
        &self,
        pool_from: Option<&Self::Graph>,
        body: &mut dyn FnMut() -> Result<(), EngineError>,
    ) -> Result<Self::Graph, EngineError>;
    /// Replays `graph`. `rerun` issues the step again: a CUDA graph never
    /// calls it; the test implementation does.
    fn replay(
        &self,
        graph: &Self::Graph,
        rerun: &mut dyn FnMut() -> Result<(), EngineError>,
    ) -> Result<(), EngineError>;
}

/// Counts of a model's decode graphs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphCounts {
    /// Steps served by a replay (graph hits).
    pub replays: u64,
    /// Graphs captured.
    pub captures: u64,
    /// Pure-decode steps that did not fit a bucket and ran eagerly.
    pub misses: u64,
}

struct Bucket<G> {
    layout: BatchLayout,
    logits: Tensor,
    hidden: Tensor,
    graph: G,
}

/// A model's decode graphs, keyed by `(batch bucket, ctx bucket)`.
pub struct DecodeGraphs<A: GraphApi> {
    api: A,
    buckets: HashMap<(usize, usize), Bucket<A::Graph>>,
    /// The first graph captured: its pool is shared by the later ones.
    pool_owner: Option<(usize, usize)>,
    ctx_cap: usize,
    pad_slot: i64,
    device: Device,
    counts: GraphCounts,
}

/// One decoding item as the runner hands it over.
pub struct DecodeStep<'a> {
    /// The new token.
    pub token: u32,
    /// Slots of positions `0..=pos`.
    pub slots: &'a [i64],
}

impl<A: GraphApi> DecodeGraphs<A> {
    /// Graphs for a model whose contexts reach `ctx_cap`, with padding rows
    /// on the scratch slot `pad_slot` (one no request owns).
    pub fn new(api: A, ctx_cap: usize, pad_slot: i64, device: Device) -> Self {
        Self {
            api,
            buckets: HashMap::new(),
            pool_owner: None,
            ctx_cap,
            pad_slot,
            device,
            counts: GraphCounts::default(),
        }
    }

    /// Counts so far.
    pub fn counts(&self) -> GraphCounts {
        self.counts
    }

    /// Records a pure-decode step that must run eagerly (it did not fit).
    pub fn count_miss(&mut self) {
        self.counts.misses += 1;
    }

    /// The bucket of a decode step, `None` when it does not fit one.
    pub fn bucket_of(&self, steps: &[DecodeStep<'_>]) -> Option<(usize, usize)> {
        let longest = steps.iter().map(|s| s.slots.len()).max()?;
        Some((
            batch_bucket(steps.len())?,
            ctx_bucket(longest, self.ctx_cap)?,
        ))
    }

    /// Runs a decode step through its bucket's graph, capturing it first
    /// when new. Returns the real rows' logits `[B, V]` and hidden states
    /// `[B, H]` (copies: the static outputs change on the next replay), or
    /// `None` when the step fits no bucket (the caller runs it eagerly).
    pub fn run(
        &mut self,
        decoder: &Decoder,
        kv: &mut KvStorage,
        steps: &[DecodeStep<'_>],
    ) -> Result<Option<(Tensor, Tensor)>, EngineError> {
        let Some(key) = self.bucket_of(steps) else {
            self.counts.misses += 1;
            return Ok(None);
        };
        let items: Vec<DecodeItem<'_>> = steps
            .iter()
            .map(|s| DecodeItem {
                token: s.token,
                slots: s.slots,
            })
            .collect();
        let fresh = decode_layout(&items, key.0, key.1, self.pad_slot, self.device)?;
        if let Some(bucket) = self.buckets.get_mut(&key) {
            copy_into(&mut bucket.layout, &fresh)?;
            let (layout, logits, hidden) = (&bucket.layout, &mut bucket.logits, &mut bucket.hidden);
            self.api.replay(&bucket.graph, &mut || {
                let (l, h, _) = decoder.forward(layout, kv, None)?;
                *logits = l;
                *hidden = h;
                Ok(())
            })?;
            self.counts.replays += 1;
        } else {
            // Warm-up on the static inputs: this step's real result.
            let (logits, hidden, _) = decoder.forward(&fresh, kv, None)?;
            let mut out: Option<(Tensor, Tensor)> = None;
            let pool = self
                .pool_owner
                .and_then(|k| self.buckets.get(&k))
                .map(|b| &b.graph);
            let graph = self.api.capture(pool, &mut || {
                let (l, h, _) = decoder.forward(&fresh, kv, None)?;
                out = Some((l, h));
                Ok(())
            })?;
            let (mut captured_logits, mut captured_hidden) = out.ok_or_else(|| {
                EngineError::InvalidDevice("graph capture produced no outputs".into())
            })?;
            // The captured outputs hold nothing yet; this step's values come
            // from the warm-up, later steps' from replays into them.
            captured_logits.f_copy_(&logits)?;
            captured_hidden.f_copy_(&hidden)?;
            self.buckets.insert(
                key,
                Bucket {
                    layout: fresh,
                    logits: captured_logits,
                    hidden: captured_hidden,
                    graph,
                },
            );
            self.pool_owner.get_or_insert(key);
            self.counts.captures += 1;
        }
        let bucket = &self.buckets[&key];
        let b = steps.len() as i64;
        Ok(Some((
            bucket.logits.f_narrow(0, 0, b)?.copy(),
            bucket.hidden.f_narrow(0, 0, b)?.copy(),
        )))
    }
}

#[cfg(test)]
pub(crate) mod eager {
    //! A [`GraphApi`] that "replays" by running the step again: the CPU
    //! stand-in that lets tests drive the bucketing and buffer plumbing.

    use super::*;

    /// Replays by re-running; captures by running once.
    pub struct EagerGraphs;

    impl GraphApi for EagerGraphs {
        type Graph = ();
        fn capture(
            &self,
            _pool_from: Option<&()>,
            body: &mut dyn FnMut() -> Result<(), EngineError>,
        ) -> Result<(), EngineError> {
            body()
        }
        fn replay(
            &self,
            _graph: &(),
            rerun: &mut dyn FnMut() -> Result<(), EngineError>,
        ) -> Result<(), EngineError> {
            rerun()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_up_and_stop_at_the_caps() {
        assert_eq!(batch_bucket(1), Some(1));
        assert_eq!(batch_bucket(3), Some(4));
        assert_eq!(batch_bucket(13), Some(16));
        assert_eq!(batch_bucket(33), None);
        assert_eq!(ctx_bucket(10, 4096), Some(256));
        assert_eq!(ctx_bucket(257, 4096), Some(512));
        assert_eq!(ctx_bucket(3000, 3000), Some(3000));
        assert_eq!(ctx_bucket(3001, 3000), None);
    }
}
