//! Prometheus metrics of a subserver process.
//!
//! One [`prometheus::Registry`] per process holds one set of collectors,
//! [`SubserverMetrics`], shared by every model the process serves. Each
//! model's scheduler thread gets a [`ModelMetrics`] handle with its `model`
//! label bound once (`metrics.for_model("quick")`), so the per-step calls
//! touch no label hash map.
//!
//! Names follow vLLM where it has one, with a `tokenrouter_` prefix; they
//! are listed in [`names`] (from `protocol::metrics`). The operator's tuner reads the text exposition
//! ([`encode_text`]) back: routing probabilities from
//! `route_transitions_total`, step latency as a function of batch size from
//! `step_latency_seconds{batch_bucket}` (see [`batch_bucket()`]).

mod batch_bucket;
mod encode;
mod error;
#[cfg(test)]
pub(crate) mod exposition;
mod model;
pub mod names;
mod subserver;

pub use batch_bucket::{
    batch_bucket, batch_bucket_index, step_latency_buckets, BATCH_BUCKETS, BATCH_BUCKET_NAMES,
};
pub use encode::{encode_text, TEXT_CONTENT_TYPE};
pub use error::MetricsError;
pub use model::ModelMetrics;
pub use subserver::SubserverMetrics;
