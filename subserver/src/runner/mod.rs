//! The `ModelRunner` seam: one model's forward over a ragged batch, and the
//! KV cache it owns. The scheduler sees only this trait, so a simulated
//! backend can stand in for libtorch.

/// The ragged-batch layout lives with the decoder that reads it.
pub use crate::model::layout;
pub mod cgroup;
pub mod memory;
pub mod mps_limit;
pub mod sim;
pub mod tch_runner;
#[doc(hidden)]
pub mod testing;

use tch::Tensor;

use crate::error::EngineError;
use crate::kv::KvManager;
use crate::sampling::HostLogits;

/// One request's share of a step.
#[derive(Debug, Clone)]
pub struct StepItem {
    /// Request id (the KV cache is keyed by it).
    pub rid: u64,
    /// Tokens already in this model's KV for the request.
    pub start: usize,
    /// New tokens: a prefill chunk, one decode token, or a peer's suffix.
    pub tokens: Vec<u32>,
}

/// A ragged batch.
#[derive(Debug, Clone, Default)]
pub struct StepBatch {
    /// Items; each brings at least one token.
    pub items: Vec<StepItem>,
    /// Indices of items whose every new position's next-token entropy is
    /// wanted (a policy that classifies the prompt); usually empty.
    pub entropy_items: Vec<usize>,
}

impl StepBatch {
    /// A batch of `items` with no extra outputs.
    pub fn new(items: Vec<StepItem>) -> Self {
        Self {
            items,
            entropy_items: Vec::new(),
        }
    }

    /// Total new tokens in the step.
    pub fn num_tokens(&self) -> usize {
        self.items.iter().map(|i| i.tokens.len()).sum()
    }
}

/// What a forward returns, one row per batch item, in batch order.
pub struct StepOutput {
    /// Logits of each item's last new position, `[B, V]`, f32, on the runner's device.
    pub logits: Option<Tensor>,
    /// Final hidden state (after the last norm) of the same positions, `[B, H]`.
    pub hidden: Option<Tensor>,
    /// Tokens the backend chose itself (the simulated backend has no logits).
    pub tokens: Option<Vec<u32>>,
    /// Per item, the sum over its new positions of the normalized
    /// next-token entropy (0 for items not in `entropy_items`); `None` when
    /// nothing was asked or the backend cannot.
    pub entropy_sums: Option<Vec<f32>>,
}

impl StepOutput {
    /// Copies the logits to host memory once (one contiguous `f32` buffer).
    pub fn host_logits(&self) -> Result<HostLogits, EngineError> {
        let logits = self
            .logits
            .as_ref()
            .ok_or_else(|| EngineError::InvalidRequest("this backend returns no logits".into()))?;
        Ok(HostLogits::from_tensor(logits)?)
    }

    /// Like [`StepOutput::host_logits`], into a buffer kept across steps.
    pub fn host_logits_into(&self, buf: &mut HostLogits) -> Result<(), EngineError> {
        let logits = self
            .logits
            .as_ref()
            .ok_or_else(|| EngineError::InvalidRequest("this backend returns no logits".into()))?;
        Ok(buf.refill(logits)?)
    }

    /// The logits as one `Vec` per item (tests and tools that keep rows).
    pub fn logits_rows(&self) -> Result<Vec<Vec<f32>>, EngineError> {
        Ok(self.host_logits()?.to_rows())
    }
}

/// Static facts about a loaded model that schedulers and samplers need.
#[derive(Debug, Clone)]
pub struct RunnerInfo {
    /// A display name (directory name).
    pub name: String,
    /// Vocabulary size: the token ids that can be fed and sampled. The
    /// logits may carry extra columns after these (a Co-LLM deferral
    /// column, `deferral_columns` in config.json); samplers use
    /// [`HostLogits::sample_row`] with this width, policies see the full head.
    pub vocab_size: usize,
    /// Hidden size.
    pub hidden_size: usize,
    /// EOS ids (config + generation config).
    pub eos_ids: Vec<u32>,
    /// Longest context (prompt + output).
    pub max_context: usize,
    /// KV block size.
    pub block_size: usize,
    /// KV blocks in the pool.
    pub num_blocks: usize,
}

/// One model's forward, model-centric: the scheduler batches, the runner computes.
pub trait ModelRunner: Send {
    /// Facts about the model.
    fn info(&self) -> &RunnerInfo;
    /// Reserves KV for every item, writes the new tokens' K/V, and returns
    /// last-position logits and hidden states per item.
    fn forward(&mut self, batch: &StepBatch) -> Result<StepOutput, EngineError>;
    /// The KV bookkeeping (admission, reservation, release).
    fn kv(&mut self) -> &mut KvManager;
    /// Read-only view of the KV bookkeeping.
    fn kv_ref(&self) -> &KvManager;
    /// The token embedding matrix `[vocab, hidden]` on the runner's device,
    /// for routers that embed the sampled token (none on the simulated backend).
    fn embeddings(&self) -> Option<&Tensor> {
        None
    }
}

impl<R: ModelRunner + ?Sized> ModelRunner for Box<R> {
    fn info(&self) -> &RunnerInfo {
        (**self).info()
    }
    fn forward(&mut self, batch: &StepBatch) -> Result<StepOutput, EngineError> {
        (**self).forward(batch)
    }
    fn kv(&mut self) -> &mut KvManager {
        (**self).kv()
    }
    fn kv_ref(&self) -> &KvManager {
        (**self).kv_ref()
    }
    fn embeddings(&self) -> Option<&Tensor> {
        (**self).embeddings()
    }
}
