//! What subservers say to each other ([`message`]) and how it is framed on
//! a TCP connection ([`codec`]). A request moves between models as
//! `PeerReq`s; no KV ever travels, only token ids.

pub mod codec;
mod error;
pub mod message;

pub use error::TransportError;
pub use message::{PeerMsg, PeerReq, RequestMeta};
