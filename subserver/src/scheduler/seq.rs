//! A request as one subserver holds it: at its home (the entry model, which
//! owns the client stream and the stop conditions) or as a guest (a peer that
//! writes when handed the pen).
//!
//! State machine (per subserver):
//! ```text
//!   Runnable ──route: Peer──▶ Pending{at} ──PeerReq back──▶ Runnable
//!   any ──finish | cancel | release──▶ removed (KV cached or freed)
//! ```
//! Orthogonal to that, `admitted` says whether the request holds KV blocks
//! here: a runnable request that is not admitted is "waiting" (new or
//! preempted); admission and preemption flip it. Pending requests keep their
//! blocks (and so their prefix locks) unless memory pressure preempts them.

use std::time::Instant;

use crate::peer::message::{ModelIdx, Rid};
use crate::sampling::logprobs::TokenLogprobs;
use crate::sampling::{Sampler, SamplingParams, StopChecker};
use crate::scheduler::client::StreamEvent;
use crate::tokenizer::IncrementalDecoder;

/// Where a request is in this subserver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqState {
    /// The pen is here.
    Runnable,
    /// The pen is at another model; KV and prefix locks stay.
    Pending {
        /// Who holds the pen.
        at: ModelIdx,
        /// Since when.
        since: Instant,
    },
}

/// Home-only state: the client stream and the request's accounting.
pub struct HomeState {
    /// Sampling parameters (sent to peers on first contact).
    pub params: SamplingParams,
    /// Prompt length.
    pub prompt_len: usize,
    /// Stop conditions over committed tokens.
    pub stop: StopChecker,
    /// Text of committed tokens (when the subserver has a tokenizer).
    pub detok: Option<IncrementalDecoder>,
    /// The client's event stream.
    pub sink: tokio::sync::mpsc::UnboundedSender<StreamEvent>,
    /// Tokens written by each model.
    pub tokens_by_model: Vec<usize>,
    /// Writer of the previous committed token.
    pub last_writer: Option<ModelIdx>,
    /// Writer changes.
    pub switches: usize,
    /// Sequence length each model holds (its anchor); 0 = never contacted.
    pub peer_holds: Vec<usize>,
    /// Prompt tokens served from the prefix cache.
    pub cached_prompt: usize,
    /// Peers that failed this request (fallback keeps the pen at home).
    pub failed_peers: Vec<bool>,
    /// Peer failures this request survived by continuing at home.
    pub peer_fallbacks: usize,
    /// The model that writes every token (query-level), when pinned.
    pub pinned_to: Option<ModelIdx>,
    /// Entropies over the prompt (when the policy asks for them).
    pub prompt_entropy: PromptEntropy,
    /// The first sample after the prompt has been routed.
    pub first_routed: bool,
}

/// Running mean of the normalized next-token entropy over prompt positions.
#[derive(Debug, Clone, Copy, Default)]
pub struct PromptEntropy {
    /// Sum over measured positions.
    pub sum: f32,
    /// Positions measured.
    pub count: usize,
    /// Prompt positions before this one are measured (or were cached).
    pub upto: usize,
}

impl PromptEntropy {
    /// Adds a chunk of `n` positions ending at `end` whose entropies sum to `sum`.
    pub fn add(&mut self, sum: f32, n: usize, end: usize) {
        self.sum += sum;
        self.count += n;
        self.upto = end;
    }

    /// The mean, when anything was measured.
    pub fn mean(&self) -> Option<f32> {
        (self.count > 0).then(|| self.sum / self.count as f32)
    }
}

/// One request in one subserver.
pub struct Seq {
    /// Request id.
    pub rid: Rid,
    /// The home model.
    pub home: ModelIdx,
    /// The whole sequence as this model knows it (prompt + output).
    pub tokens: Vec<u32>,
    /// Tokens whose K/V this model has computed.
    pub computed: usize,
    /// Scheduling state.
    pub state: SeqState,
    /// Holds KV blocks here.
    pub admitted: bool,
    /// Sequence length when the pen last arrived.
    pub turn_start: usize,
    /// When it last became runnable (FCFS order and the batching wait bound).
    pub runnable_since: Instant,
    /// This model's sampler for the request.
    pub sampler: Sampler,
    /// Tokens the request may still write.
    pub budget: usize,
    /// Tokens written here since the pen arrived.
    pub written_this_turn: usize,
    /// Seed of the request (policies derive draws from it).
    pub seed: u64,
    /// Alternatives per token when the request wants logprobs.
    pub logprobs: Option<usize>,
    /// Logprobs of `tokens[turn_start..]` (a guest's turn, sent home with them).
    pub turn_logprobs: Vec<TokenLogprobs>,
    /// A guest that writes the rest of the request (streams `Progress` home).
    pub pinned: bool,
    /// Present at the home only.
    pub home_state: Option<HomeState>,
}

impl Seq {
    /// True when the pen is here.
    pub fn runnable(&self) -> bool {
        !matches!(self.state, SeqState::Pending { .. })
    }

    /// Tokens to feed before the next sample.
    pub fn pending_tokens(&self) -> usize {
        self.tokens.len() - self.computed
    }

    /// Takes what this model wrote since `turn_start` (or the last
    /// progress): `(loc, tokens, logprobs)`; the turn then starts after it.
    pub fn take_turn(&mut self) -> (usize, Vec<u32>, Vec<TokenLogprobs>) {
        let loc = self.turn_start;
        let tokens = self.tokens[loc..].to_vec();
        self.turn_start = self.tokens.len();
        (loc, tokens, std::mem::take(&mut self.turn_logprobs))
    }

    /// True at the home model.
    pub fn is_home(&self) -> bool {
        self.home_state.is_some()
    }
}
