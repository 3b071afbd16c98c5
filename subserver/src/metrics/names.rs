//! The metric names, for the code that reads the exposition back (tuner,
//! dashboards, tests). They live in `protocol`, with their types and labels.

pub use protocol::metrics::subserver::*;
