//! What subservers say to each other. A request moves between models as
//! `PeerReq`s; no KV ever travels, only token ids.

use serde::{Deserialize, Serialize};

pub use crate::ids::{ModelIdx, Rid};
use crate::sampling::{SamplingParams, TokenLogprobs};

/// Facts a peer needs the first time it sees a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestMeta {
    /// Sampling parameters (the peer samples its tokens with them).
    pub sampling: SamplingParams,
    /// Seed for the peer's sampler (derived from the request's seed, so runs repeat).
    pub seed: u64,
    /// The receiver writes the rest of the request (query-level routing):
    /// it keeps the pen, streams each token home as a `Progress`, and
    /// returns only at EOS or when the budget is spent.
    pub pinned: bool,
    /// The request's own seed (the home's, not the derived sampler seed):
    /// policies that draw per position (ME) draw the same stream at every
    /// model, so a guest can pick the next writer itself.
    pub route_seed: u64,
}

/// A hand-over of the pen: the receiver writes next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReq {
    /// Request id.
    pub rid: Rid,
    /// Sender.
    pub from: ModelIdx,
    /// Receiver.
    pub to: ModelIdx,
    /// Position in the sequence of `tokens[0]`: the anchor up to which the
    /// receiver already holds the sequence.
    pub loc: u32,
    /// The suffix the receiver has not seen, starting at `loc`.
    pub tokens: Vec<u32>,
    /// The sender has finished the request (EOS, stop, length): the receiver
    /// only records the tokens and releases its state.
    pub finished: bool,
    /// Tokens the request may still write in total (its max_tokens budget left).
    pub budget: u32,
    /// Active requests in the group when sent (peers size delayed batching with it).
    pub n_active: u32,
    /// Present on the first hand-over of a request to this receiver.
    pub meta: Option<RequestMeta>,
    /// Log-probabilities of `tokens` as their writer saw them (a guest's
    /// return, when the request asked for logprobs); else empty.
    pub logprobs: Vec<TokenLogprobs>,
    /// On a guest's return: the model the guest drew to write next (ME
    /// without a detour). The home commits `tokens` and passes the pen on
    /// to that model at once, without a step of its own; it catches up on
    /// the tokens it skipped (one prefill) when it next writes.
    pub next: Option<ModelIdx>,
}

/// Every message between subservers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerMsg {
    /// Hand the request to the receiver.
    Req(PeerReq),
    /// A pinned guest streams the tokens it wrote home while keeping the
    /// pen: the home commits them (and may finish the request) without
    /// handing anything back.
    Progress {
        /// Request id.
        rid: Rid,
        /// Sender (the pen holder).
        from: ModelIdx,
        /// Position of `tokens[0]`; must equal what the home holds.
        loc: u32,
        /// Tokens written since the last progress.
        tokens: Vec<u32>,
        /// Their log-probabilities, when the request asked for them.
        logprobs: Vec<TokenLogprobs>,
    },
    /// The request ended at its home (finished or cancelled): free all state for it.
    Release {
        /// Request id.
        rid: Rid,
        /// Sender.
        from: ModelIdx,
        /// Active requests in the group after this one ended (peers size
        /// delayed batching and report concurrency with it).
        n_active: u32,
    },
    /// The sender could not serve the request (error at the peer): the home
    /// fails it or falls back to its own model.
    Failed {
        /// Request id.
        rid: Rid,
        /// Sender.
        from: ModelIdx,
        /// What went wrong.
        reason: String,
    },
}

impl PeerMsg {
    /// The request this message concerns.
    pub fn rid(&self) -> Rid {
        match self {
            Self::Req(r) => r.rid,
            Self::Progress { rid, .. } | Self::Release { rid, .. } | Self::Failed { rid, .. } => {
                *rid
            }
        }
    }

    /// A label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Req(_) => "handover",
            Self::Progress { .. } => "progress",
            Self::Release { .. } => "release",
            Self::Failed { .. } => "failed",
        }
    }

    /// The sending model.
    pub fn from(&self) -> ModelIdx {
        match self {
            Self::Req(r) => r.from,
            Self::Progress { from, .. }
            | Self::Release { from, .. }
            | Self::Failed { from, .. } => *from,
        }
    }
}
