//! The seam between subservers: a transport moves `PeerMsg`s to a model of
//! the group and delivers the ones addressed to this model to its inbox.

use crate::peer::message::{ModelIdx, PeerMsg};
pub use protocol::peer::TransportError;

/// Sends to peers. Messages to one peer arrive in the order sent (so a
/// request's hand-overs never overtake each other). `send` never blocks on a
/// slow peer: it queues.
pub trait PeerSender: Send + Sync {
    /// Queues `msg` for model `to`.
    fn send(&self, to: ModelIdx, msg: PeerMsg) -> Result<(), TransportError>;
    /// True while model `to` is believed reachable.
    fn is_up(&self, to: ModelIdx) -> bool;
}

/// Where a transport hands the messages addressed to this model: the
/// subserver's inbox (its scheduler thread wakes on it).
pub type Deliver = std::sync::Arc<dyn Fn(PeerMsg) + Send + Sync>;
