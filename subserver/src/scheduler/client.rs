//! The client side of a subserver: what the gateway (or a benchmark's
//! closed-loop client) submits. The events it gets back, and why a request
//! fails, are `protocol`'s (re-exported here).

use tokio::sync::mpsc::UnboundedSender;

pub use protocol::client::{RequestError, StreamEvent, SubmitOptions, Usage};

use crate::peer::message::Rid;
use crate::sampling::SamplingParams;

/// A new request for the entry subserver.
#[derive(Debug)]
pub struct GenerateReq {
    /// Unique within the group.
    pub rid: Rid,
    /// Prompt token ids (already templated and tokenized).
    pub prompt: Vec<u32>,
    /// Sampling and stop parameters.
    pub params: SamplingParams,
    /// Request-level options (pinning to one model).
    pub options: SubmitOptions,
    /// Where tokens and the outcome go. Dropping the receiver does not cancel:
    /// send `cancel(rid)` (the gateway does when its client disconnects).
    pub sink: UnboundedSender<StreamEvent>,
}
