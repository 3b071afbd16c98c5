//! The delayed-batching tuner now; the Kubernetes controller later.
#![warn(missing_docs)]

pub mod retune;
pub mod tuner;
