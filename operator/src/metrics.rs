//! Reconcile metrics (Prometheus): how many, how long, which failed.

use std::time::Instant;

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry};

use crate::error::Error;

/// The operator's metrics, registered in one registry.
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles started.
    pub reconciles: IntCounter,
    /// Reconciles that failed, by `Error::metric_label`.
    pub failures: IntCounterVec,
    /// Reconcile duration.
    pub duration: Histogram,
    /// Group-count changes the autoscaler made.
    pub scalings: IntCounter,
    /// The registry holding all of the above.
    pub registry: Registry,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let reconciles = IntCounter::new(
            "tokenrouter_operator_reconciles_total",
            "Reconciles started.",
        )?;
        let failures = IntCounterVec::new(
            Opts::new(
                "tokenrouter_operator_reconcile_errors_total",
                "Reconciles that failed, by error type.",
            ),
            &["error"],
        )?;
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "tokenrouter_operator_reconcile_duration_seconds",
                "Time one reconcile took.",
            )
            .buckets(vec![0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
        )?;
        let scalings = IntCounter::new(
            "tokenrouter_operator_scalings_total",
            "Group-count changes made by the autoscaler.",
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(failures.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(scalings.clone()))?;
        Ok(Self {
            reconciles,
            failures,
            duration,
            scalings,
            registry,
        })
    }

    /// Counts a reconcile and times it until the guard drops.
    pub fn start(&self) -> ReconcileTimer {
        self.reconciles.inc();
        ReconcileTimer {
            started: Instant::now(),
            histogram: self.duration.clone(),
        }
    }

    /// Counts a failed reconcile.
    pub fn failed(&self, e: &Error) {
        self.failures.with_label_values(&[e.metric_label()]).inc();
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let encoder = prometheus::TextEncoder::new();
        // Encoding our own registry into a String cannot fail.
        let _ = encoder.encode_utf8(&self.registry.gather(), &mut out);
        out
    }
}

/// Observes the reconcile's duration on drop.
pub struct ReconcileTimer {
    started: Instant,
    histogram: Histogram,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.started.elapsed().as_secs_f64());
    }
}
