//! The delayed-batching tuner now; the Kubernetes controller later.

pub mod tuner;
