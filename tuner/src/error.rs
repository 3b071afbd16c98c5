//! Errors of the tuner: bad inputs, deadlocks, solver limits, bad metrics.

/// Everything that can go wrong while building, solving, simulating or estimating.
#[derive(Debug, thiserror::Error)]
pub enum TunerError {
    /// An input is malformed: wrong dimension, negative value, row not summing to 1, ...
    #[error("invalid tuner input `{field}`: {reason}")]
    InvalidInput {
        /// The offending field, e.g. `transition[1]` or `latency[0]`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A threshold vector under which the system reaches a state where nothing runs and nothing can start.
    #[error("thresholds {thresholds:?} deadlock at concurrency {concurrency}: reachable state {witness} has no running step and none can start")]
    Infeasible {
        /// The threshold vector.
        thresholds: Vec<usize>,
        /// The concurrency N.
        concurrency: usize,
        /// A human-readable deadlocked state (waiting counts per model).
        witness: String,
    },
    /// The reachable state space exceeds the configured limit.
    #[error("thresholds {thresholds:?} at concurrency {concurrency}: more than {limit} reachable states; raise the state limit or use --simulate")]
    StateSpaceTooLarge {
        /// The threshold vector.
        thresholds: Vec<usize>,
        /// The concurrency N.
        concurrency: usize,
        /// The limit that was hit.
        limit: usize,
    },
    /// A quantity does not fit the packed state encoding of the exact solver.
    #[error("exact solver limit: {what}")]
    Unsupported {
        /// What exceeded the encoding.
        what: String,
    },
    /// The iterative stationary solver did not reach its tolerance.
    #[error("stationary solver did not converge after {sweeps} sweeps on {states} states (last change {change:e})")]
    NotConverged {
        /// Sweeps performed.
        sweeps: usize,
        /// Size of the solved class.
        states: usize,
        /// L1 change of the last sweep.
        change: f64,
    },
    /// A line of Prometheus text exposition could not be parsed.
    #[error("metrics from {source_name}, line {line}: {reason}")]
    MetricsParse {
        /// The URL or file the text came from.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
    /// The metrics hold too few observations to estimate an input.
    #[error("too few samples to estimate {what}: {found} < {required} required")]
    TooFewSamples {
        /// What was being estimated, e.g. `transition row of model "quick"`.
        what: String,
        /// Samples found.
        found: f64,
        /// Samples required.
        required: f64,
    },
    /// A metric needed for the estimation is absent.
    #[error("metric {metric} is missing{detail}")]
    MissingMetric {
        /// Metric name.
        metric: String,
        /// Extra context (labels, model), starting with a space or empty.
        detail: String,
    },
    /// Fetching metrics over HTTP failed.
    #[error("fetching metrics from {url}: {reason}")]
    Fetch {
        /// The URL.
        url: String,
        /// The transport or status error.
        reason: String,
    },
    /// Reading an argument file or writing the report failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
}
