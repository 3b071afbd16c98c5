//! The steerable threshold lives in the routing seam
//! ([`crate::routing`]); re-exported here for existing paths.

pub use crate::routing::{LiveThreshold, ShareDirection, ThresholdKnob};
