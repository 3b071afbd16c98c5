//! Why a message could not reach a peer.

use crate::ids::ModelIdx;

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
