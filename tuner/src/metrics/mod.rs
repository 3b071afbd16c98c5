//! Tuner inputs from subserver metrics: parse the Prometheus text exposition, estimate P, L(b),
//! the credit per step and N, and fetch the text over HTTP.

pub mod estimate;
pub mod exposition;
pub mod fetch;

pub use estimate::{estimate_from_metrics, EstimateOptions, MetricsEstimate};
pub use exposition::{parse_exposition, MetricsText, Sample};
pub use fetch::fetch_metrics;
