//! The metrics error type.

/// What the metrics layer can refuse. Each variant names the metric at fault.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The registry already holds this metric: a process has one
    /// [`SubserverMetrics`](super::SubserverMetrics) per registry, and its
    /// models share it through `for_model`.
    #[error(
        "metric `{name}` is already registered in this registry (by an earlier \
         SubserverMetrics::new? create it once per registry, call for_model per model)"
    )]
    AlreadyRegistered {
        /// The metric name.
        name: &'static str,
    },
    /// The prometheus crate refused to create or register a collector.
    #[error("cannot register metric `{name}`: {source}")]
    Register {
        /// The metric name.
        name: &'static str,
        /// The prometheus error.
        #[source]
        source: prometheus::Error,
    },
    /// A value that the metric cannot hold (NaN, negative time, fraction
    /// above one, ...).
    #[error("invalid value for metric `{name}`: {reason}")]
    InvalidValue {
        /// The metric name.
        name: &'static str,
        /// What is wrong with the value.
        reason: String,
    },
    /// The registry's content could not be written as text.
    #[error("cannot encode metrics as text: {0}")]
    Encode(#[source] prometheus::Error),
}
