//! Every metric name TokenRouter publishes, in one place: the subservers
//! register them, the gateway re-exports them, and the tuner and operator
//! read them back from scrapes.
//!
//! Our own names follow Prometheus's rules: `tokenrouter_*`, no colons
//! (colons are reserved for recording rules, and `promtool check metrics`
//! flags them). The gateway also exports vLLM's `vllm:*` names where vLLM
//! has the metric, so existing dashboards and KEDA triggers work unchanged;
//! those are the only names with a colon. Each constant's doc gives the
//! metric type and its labels.

pub mod gateway;
pub mod subserver;

/// The prefix of every TokenRouter-specific metric.
pub const PREFIX: &str = "tokenrouter_";

/// The prefix of the vLLM-compatible gateway metrics (the only names allowed a colon).
pub const VLLM_PREFIX: &str = "vllm:";

/// What kind of collector a name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic count; its name ends in `_total`.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Buckets, `_sum` and `_count`.
    Histogram,
}

/// One published metric: name, type and label names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    /// The metric family name.
    pub name: &'static str,
    /// Its type.
    pub kind: MetricKind,
    /// Its label names (histograms add `le`).
    pub labels: &'static [&'static str],
}

impl MetricDef {
    /// A definition (for the `ALL` tables).
    pub const fn new(
        name: &'static str,
        kind: MetricKind,
        labels: &'static [&'static str],
    ) -> Self {
        Self { name, kind, labels }
    }
}

/// Every metric of the subserver and the gateway, for lints and docs.
pub fn all() -> impl Iterator<Item = &'static MetricDef> {
    subserver::ALL.iter().chain(gateway::ALL.iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus's name rule `[a-zA-Z_:][a-zA-Z0-9_:]*`, with the colon
    /// allowed only in the vLLM-compatible names.
    fn valid(name: &str) -> bool {
        let body = name.strip_prefix(VLLM_PREFIX).unwrap_or(name);
        !body.is_empty()
            && body
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && !body.starts_with(|c: char| c.is_ascii_digit())
    }

    #[test]
    fn names_follow_prometheus_rules() {
        let mut seen = std::collections::HashSet::new();
        for m in all() {
            assert!(valid(m.name), "{} breaks the naming rules", m.name);
            assert!(
                m.name.starts_with(PREFIX) || m.name.starts_with(VLLM_PREFIX),
                "{} has neither prefix",
                m.name
            );
            assert!(seen.insert(m.name), "{} is listed twice", m.name);
            let total = m.name.ends_with("_total");
            assert_eq!(
                total,
                m.kind == MetricKind::Counter,
                "{}: counters, and only counters, end in _total",
                m.name
            );
            assert!(!m.labels.contains(&"le"), "{}: `le` is reserved", m.name);
        }
    }
}
