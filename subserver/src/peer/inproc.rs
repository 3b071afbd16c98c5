//! In-process transport: every model of the group runs in this process and a
//! hand-over is a push onto the receiver's inbox (ordered, never blocking).

use crate::peer::message::{ModelIdx, PeerMsg};
use crate::peer::transport::{PeerSender, TransportError};
use crate::scheduler::inbox::{Inbound, InboxSender};

/// Delivers straight into the schedulers' inboxes.
pub struct InProcSender {
    inboxes: Vec<InboxSender>,
}

impl InProcSender {
    /// A sender over the group's inboxes (index = model index).
    pub fn new(inboxes: Vec<InboxSender>) -> Self {
        Self { inboxes }
    }
}

impl PeerSender for InProcSender {
    fn send(&self, to: ModelIdx, msg: PeerMsg) -> Result<(), TransportError> {
        let inbox = self
            .inboxes
            .get(to as usize)
            .ok_or_else(|| TransportError::Unreachable(to, "no such model".into()))?;
        inbox
            .send(Inbound::Peer(msg))
            .map_err(|_| TransportError::Unreachable(to, "its scheduler has stopped".into()))
    }

    fn is_up(&self, to: ModelIdx) -> bool {
        (to as usize) < self.inboxes.len()
    }
}
