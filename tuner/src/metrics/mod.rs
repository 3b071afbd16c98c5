//! Tuner inputs from subserver metrics: parse the Prometheus text exposition, merge scrapes,
//! take the increase between two scrapes, estimate P, C and L(b), and fetch the text over HTTP.

pub mod estimate;
pub mod exposition;
pub mod fetch;
pub mod series;

pub use estimate::{estimate, estimate_from_metrics, EstimateOptions, MetricsEstimate};
pub use exposition::{parse_exposition, MetricsText, Sample};
pub use fetch::fetch_metrics;
pub use series::MetricSeries;
