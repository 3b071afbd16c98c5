//! The three hooks a routing policy implements. They are request-centric: the
//! scheduler (model-centric) calls `route` once per step with the whole batch,
//! then builds hand-overs with `send` and accepts returned tokens with `receive`.

use tch::{TchError, Tensor};

use protocol::ids::{ModelIdx, Rid};

use super::signal_health::SignalHealth;
use super::ThresholdKnob;

/// Where the next token of a request is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dest {
    /// This model keeps the pen; the sampled token is committed.
    Stay,
    /// Hand the rest of the request to model `to` (query-level): this
    /// model's token is dropped, `to` writes every remaining token and
    /// streams them home. Only from the home, on first contact with `to`;
    /// otherwise it acts as `Peer { to, keep_token: false }`.
    Delegate {
        /// Receiver.
        to: ModelIdx,
    },
    /// Hand the request to model `to`. With `keep_token`, the token this model
    /// just sampled is committed first and travels; without it, it is dropped
    /// and `to` writes that position itself (R2R, CITER, Co-LLM).
    Peer {
        /// Receiver.
        to: ModelIdx,
        /// Commit the sampled token before handing over.
        keep_token: bool,
    },
}

/// One request's row of a step, as a policy sees it.
#[derive(Debug, Clone)]
pub struct RouteItem {
    /// Request id.
    pub rid: Rid,
    /// The request's home (entry) model.
    pub home: ModelIdx,
    /// The token just sampled.
    pub token: u32,
    /// Its position in the sequence.
    pub position: usize,
    /// Tokens this model has written for the request since it last got the pen.
    pub written_this_turn: usize,
    /// Seed derived for the request (policies that draw use it, so runs repeat).
    pub seed: u64,
    /// Mean normalized next-token entropy over the prompt positions this
    /// model computed; present on the request's first sample at its home
    /// when the policy asked for it (`wants_prompt_entropy`).
    pub prompt_entropy: Option<f32>,
}

/// What a policy may read after a forward.
pub struct StepView<'a> {
    /// The model that ran the step.
    pub model: ModelIdx,
    /// Models in the group.
    pub num_models: usize,
    /// One row per sampled request (rows of `logits`/`hidden` in the same order).
    pub items: &'a [RouteItem],
    /// `[B, V]` last-position logits (absent on the simulated backend).
    pub logits: Option<&'a Tensor>,
    /// `[B, H]` final hidden states (absent on the simulated backend).
    pub hidden: Option<&'a Tensor>,
    /// The model's token embeddings `[V, H]`, for routers that embed the sampled token.
    pub embeddings: Option<&'a Tensor>,
    /// Per row, the signals of its logits (entropy, max probability, ...),
    /// computed once on the host by the scheduler when the policy
    /// [wants them](RoutingPolicy::wants_logit_signals).
    pub signals: Option<&'a [kernels::RowStats]>,
}

impl StepView<'_> {
    /// The normalized next-token entropy of each row: the precomputed
    /// [`StepView::signals`] when present, else one host pass over
    /// `logits`; `None` when the backend gave no logits.
    pub fn normalized_entropies(&self) -> Option<Result<Vec<f32>, TchError>> {
        if let Some(s) = self.signals {
            return Some(Ok(s.iter().map(|r| r.normalized_entropy).collect()));
        }
        self.logits.map(crate::signals::normalized_entropy_rows)
    }
}

/// A routing policy instance for one model of a group.
pub trait RoutingPolicy: Send {
    /// The registry name.
    fn name(&self) -> &'static str;
    /// One destination per `view.items` row.
    fn route(&mut self, view: &StepView<'_>) -> Vec<Dest>;
    /// The hand-over to a peer: `(loc, suffix)` where `loc` is the anchor the
    /// peer already holds the sequence up to (default: everything after it).
    fn send(&mut self, _rid: Rid, sequence: &[u32], peer_holds: usize) -> (usize, Vec<u32>) {
        let loc = peer_holds.min(sequence.len());
        (loc, sequence[loc..].to_vec())
    }
    /// How many of the tokens a peer returned this model accepts (default: all).
    fn receive(&mut self, _rid: Rid, tokens: &[u32]) -> usize {
        tokens.len()
    }
    /// Forget per-request state (the request ended).
    fn release(&mut self, _rid: Rid) {}
    /// Picks the model that writes a new request entirely, before any
    /// compute (query-level routing on the prompt); `None` routes per token.
    fn assign(&mut self, _rid: Rid, _prompt: &[u32]) -> Option<ModelIdx> {
        None
    }
    /// Whether the home should measure the prompt's mean next-token entropy
    /// (costs one head projection per prompt token).
    fn wants_prompt_entropy(&self) -> bool {
        false
    }
    /// Whether `route` reads [`StepView::signals`]: the scheduler then
    /// computes them once per sampled row from the host copy of the logits.
    fn wants_logit_signals(&self) -> bool {
        false
    }
    /// The threshold `target_large_share` may steer (none by default).
    fn knob(&self) -> Option<ThresholdKnob> {
        None
    }
    /// The policy's per-step signal failure counts, for the scheduler to
    /// export (none for policies that read no signal).
    fn signal_health(&self) -> Option<SignalHealth> {
        None
    }
}
