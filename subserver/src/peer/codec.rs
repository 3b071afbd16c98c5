//! Wire format of the TCP peer transport: it lives in `protocol`;
//! re-exported here for existing paths.

pub use protocol::peer::codec::*;
