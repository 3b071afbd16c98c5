//! Peer protocol: the messages subservers exchange and the transports that
//! carry them (in-process channels, TCP frames).

pub mod codec;
pub mod inproc;
pub mod message;
pub mod tcp;
pub mod transport;
