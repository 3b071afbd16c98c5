//! Router signals live with sampling ([`crate::sampling::signals`]);
//! re-exported here for existing paths.

pub use crate::sampling::signals::normalized_entropy_rows;
