//! The one queue a scheduler thread waits on: client requests, peer
//! messages, admin commands and wake-ups all arrive here, so a step never
//! blocks on I/O and the thread sleeps only when it has nothing to do.

use std::sync::mpsc;

use crate::peer::message::{PeerMsg, Rid};
use crate::scheduler::client::GenerateReq;

/// Everything a scheduler reacts to.
#[derive(Debug)]
pub enum Inbound {
    /// A new request (entry model only).
    Generate(GenerateReq),
    /// The client went away: free the request everywhere.
    Cancel(Rid),
    /// A message from a peer subserver.
    Peer(PeerMsg),
    /// Replace this model's delayed-batching table (B at concurrency 1, 2, ...).
    SetThresholds(Vec<usize>),
    /// Re-evaluate whether to step (the group's state changed).
    Nudge,
    /// Fail what is left and exit.
    Shutdown,
    /// Check the request table against the KV bookkeeping and reply with
    /// the first broken invariant (soak runs and tests; O(pool)).
    CheckInvariants(mpsc::Sender<Result<(), String>>),
}

/// Sending side of a scheduler's inbox.
pub type InboxSender = mpsc::Sender<Inbound>;

/// Receiving side, owned by the scheduler thread.
pub type InboxReceiver = mpsc::Receiver<Inbound>;

/// A new inbox.
pub fn inbox() -> (InboxSender, InboxReceiver) {
    mpsc::channel()
}

/// Queues a new request on `inbox`; its events arrive on the returned
/// receiver (a `Shutdown` failure at once when the scheduler is gone).
pub fn submit(
    inbox: &InboxSender,
    rid: crate::peer::message::Rid,
    prompt: Vec<u32>,
    params: crate::sampling::SamplingParams,
    options: crate::scheduler::client::SubmitOptions,
) -> tokio::sync::mpsc::UnboundedReceiver<crate::scheduler::client::StreamEvent> {
    use crate::scheduler::client::{RequestError, StreamEvent};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let req = GenerateReq {
        rid,
        prompt,
        params,
        options,
        sink: tx,
    };
    if let Err(mpsc::SendError(Inbound::Generate(req))) = inbox.send(Inbound::Generate(req)) {
        let _ = req.sink.send(StreamEvent::Failed(RequestError::Shutdown));
    }
    rx
}
