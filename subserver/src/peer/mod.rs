//! Peer protocol: the messages subservers exchange and the transports that
//! carry them (in-process channels, TCP frames).

pub mod inproc;
pub mod message;
pub mod transport;
