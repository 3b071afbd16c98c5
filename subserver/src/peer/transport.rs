//! The seam between subservers: a transport moves `PeerMsg`s to a model of
//! the group and delivers the ones addressed to this model to its inbox.

use crate::peer::message::{ModelIdx, PeerMsg};

/// Transport failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No route to that model (not configured, or its process is gone).
    #[error("peer model {0} is unreachable: {1}")]
    Unreachable(ModelIdx, String),
    /// The transport was shut down.
    #[error("transport closed")]
    Closed,
    /// A frame could not be encoded or decoded.
    #[error("bad frame: {0}")]
    Codec(String),
}

impl TransportError {
    /// Stable label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::Unreachable(..) => "unreachable",
            Self::Closed => "closed",
            Self::Codec(_) => "codec",
        }
    }
}

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
