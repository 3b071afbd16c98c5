//! Peer protocol: the messages subservers exchange and the transports that
//! carry them (TCP frames here; the in-process transport is a push onto a
//! scheduler's inbox, [`crate::scheduler::inproc`]).

pub mod codec;
pub mod message;
pub mod tcp;
pub mod transport;
