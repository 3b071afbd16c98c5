//! Metrics of the tune loop itself.

use prometheus::{Gauge, IntCounter, IntCounterVec, Opts, Registry};

/// Counter `{result}`: tune rounds by outcome (`pushed`, `kept`, `too_few_samples`,
/// `baseline`, or an error type such as `pod_error`).
pub const TUNE_TOTAL: &str = "tokenrouter_operator_tune_total";
/// Counter: pods a tune round skipped because their scrape or push failed.
pub const PODS_SKIPPED_TOTAL: &str = "tokenrouter_operator_tune_pods_skipped_total";
/// Gauge: Unix time of the last tune round that estimated (pushed or kept).
pub const LAST_TUNE_TIMESTAMP: &str = "tokenrouter_operator_last_tune_timestamp_seconds";

/// The tune loop's collectors.
#[derive(Clone)]
pub struct RetuneMetrics {
    tune_total: IntCounterVec,
    pods_skipped: IntCounter,
    last_tune: Gauge,
}

impl RetuneMetrics {
    /// Creates the collectors and registers them in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let tune_total = IntCounterVec::new(
            Opts::new(
                TUNE_TOTAL,
                "Tune rounds of the delayed-batching thresholds, by result.",
            ),
            &["result"],
        )?;
        let pods_skipped = IntCounter::new(
            PODS_SKIPPED_TOTAL,
            "Pods a tune round skipped because their scrape or push failed.",
        )?;
        let last_tune = Gauge::new(
            LAST_TUNE_TIMESTAMP,
            "Unix time of the last tune round that produced an estimate.",
        )?;
        registry.register(Box::new(tune_total.clone()))?;
        registry.register(Box::new(pods_skipped.clone()))?;
        registry.register(Box::new(last_tune.clone()))?;
        Ok(RetuneMetrics {
            tune_total,
            pods_skipped,
            last_tune,
        })
    }

    /// Counts `n` pods a round skipped.
    pub fn skip_pods(&self, n: usize) {
        self.pods_skipped.inc_by(n as u64);
    }

    /// Counts one round with `result`; an estimating round also sets the last tune time.
    pub fn count(&self, result: &str, unix_seconds: f64) {
        self.tune_total.with_label_values(&[result]).inc();
        if matches!(result, "pushed" | "kept") {
            self.last_tune.set(unix_seconds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_result_and_keeps_the_last_estimating_time() {
        let registry = Registry::new();
        let m = RetuneMetrics::new(&registry).unwrap();
        m.count("pushed", 100.0);
        m.count("too_few_samples", 200.0);
        m.count("pushed", 300.0);
        m.skip_pods(2);
        let mut text = String::new();
        let encoder = prometheus::TextEncoder::new();
        encoder.encode_utf8(&registry.gather(), &mut text).unwrap();
        assert!(
            text.contains("tokenrouter_operator_tune_total{result=\"pushed\"} 2"),
            "{text}"
        );
        assert!(text.contains("tokenrouter_operator_tune_total{result=\"too_few_samples\"} 1"));
        assert!(
            text.contains("tokenrouter_operator_tune_pods_skipped_total 2"),
            "{text}"
        );
        assert!(
            text.contains("tokenrouter_operator_last_tune_timestamp_seconds 300"),
            "{text}"
        );
    }
}
