//! In-process transport: every model of the group runs in this process and a
//! hand-over is a push onto the receiver's inbox (ordered, never blocking).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::peer::message::{ModelIdx, PeerMsg};
use crate::peer::transport::{PeerSender, TransportError};
use crate::scheduler::inbox::{Inbound, InboxSender};

/// Delivers straight into the schedulers' inboxes.
pub struct InProcSender {
    inboxes: Vec<InboxSender>,
    alive: Arc<[AtomicBool]>,
}

impl InProcSender {
    /// A sender over the group's inboxes (index = model index); `alive[m]`
    /// goes false when model `m`'s scheduler thread exits.
    pub fn new(inboxes: Vec<InboxSender>, alive: Arc<[AtomicBool]>) -> Self {
        Self { inboxes, alive }
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
        self.alive
            .get(to as usize)
            .is_some_and(|a| a.load(Ordering::SeqCst))
    }
}
