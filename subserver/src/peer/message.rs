//! What subservers say to each other: the messages live in `protocol`;
//! re-exported here for existing paths.

pub use protocol::ids::{ModelIdx, Rid};
pub use protocol::peer::message::*;
