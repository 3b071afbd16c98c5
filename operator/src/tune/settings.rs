//! A resource's `spec.tuning`, resolved into what one tune round needs.

use std::time::Duration;

use crds::TokenRouterDeployment;

use crate::build::serving;
use crate::names;
use crate::retune::{MetricsSource, TuneSettings};

/// Fewest steps at one batch size for a latency point (not in the spec: the defaults of
/// `tokenrouter tune --from-metrics`).
const MIN_LATENCY_SAMPLES: f64 = 20.0;
/// Largest concurrency a table may cover (the chain's solves grow with it).
pub const MAX_TABLE_CONCURRENCY: usize = 64;

/// Everything a round of one resource needs from its spec.
#[derive(Debug, Clone)]
pub struct LoopSettings {
    /// Time between two rounds.
    pub interval: Duration,
    /// Hysteresis and sample floors.
    pub tune: TuneSettings,
    /// The table covers concurrency `1..=max_concurrency`.
    pub max_concurrency: usize,
    /// Pods or Prometheus.
    pub source: MetricsSource,
    /// Model names, entry model first (the chain's order).
    pub models: Vec<String>,
}

/// The resource's tune settings, or `None` when the loop is off for it
/// ([`super::enabled`]).
pub fn resolve(trd: &TokenRouterDeployment, namespace: &str) -> Option<LoopSettings> {
    if !super::enabled(trd) {
        return None;
    }
    let tuning = trd.spec.tuning.as_ref()?;
    let interval = Duration::from_secs(u64::try_from(tuning.interval_seconds.max(1)).unwrap_or(1));
    let source = match &tuning.prometheus_url {
        Some(url) => MetricsSource::Prometheus {
            url: url.clone(),
            selector: prometheus_selector(trd, namespace),
            window_s: interval.as_secs(),
        },
        None => MetricsSource::Pods,
    };
    let min_decisions = tuning.min_samples.max(1) as f64;
    Some(LoopSettings {
        interval,
        tune: TuneSettings {
            min_gain_percent: 100.0 * tuning.hysteresis.max(0.0),
            min_decisions,
            min_latency_samples: MIN_LATENCY_SAMPLES.min(min_decisions),
            ..TuneSettings::default()
        },
        max_concurrency: max_concurrency(trd),
        source,
        models: model_order(trd),
    })
}

/// Model names, the entry model first, then the spec's order.
pub fn model_order(trd: &TokenRouterDeployment) -> Vec<String> {
    let entry = serving::entry_model(trd).name.clone();
    std::iter::once(entry.clone())
        .chain(
            trd.spec
                .models
                .iter()
                .map(|m| m.name.clone())
                .filter(|n| *n != entry),
        )
        .collect()
}

/// The largest concurrency the table covers: `tuning.maxConcurrency`, else what the
/// gateways admit per group (`maxInflight` × gateway replicas over the groups), else the
/// autoscaler's target per group; within `1..=64`.
pub fn max_concurrency(trd: &TokenRouterDeployment) -> usize {
    let spec = &trd.spec;
    let explicit = spec
        .tuning
        .as_ref()
        .and_then(|t| t.max_concurrency)
        .map(i64::from);
    let groups = trd
        .status
        .as_ref()
        .map(|s| s.desired_groups)
        .filter(|&g| g > 0)
        .unwrap_or(spec.groups)
        .max(1);
    let admitted = spec.gateway.max_inflight.map(|per_pod| {
        let total = per_pod * i64::from(spec.gateway.replicas.max(1));
        (total + i64::from(groups) - 1) / i64::from(groups)
    });
    let n = explicit
        .or(admitted)
        .unwrap_or(i64::from(spec.autoscaling.target_concurrency_per_group));
    usize::try_from(n.max(1))
        .unwrap_or(1)
        .min(MAX_TABLE_CONCURRENCY)
}

/// PromQL label matchers of the resource's serving pods (`namespace` and `pod` labels, as
/// the Prometheus operator's ServiceMonitor and the usual pod scrape configs set them).
pub fn prometheus_selector(trd: &TokenRouterDeployment, namespace: &str) -> String {
    let sets: Vec<String> = match trd.spec.placement {
        crds::v1alpha1::Placement::PodPerModel => trd
            .spec
            .models
            .iter()
            .map(|m| names::model_set(trd, &m.name))
            .collect(),
        crds::v1alpha1::Placement::PodPerGroup => vec![names::group_set(trd)],
    };
    format!(
        "namespace=\"{namespace}\",pod=~\"({})-[0-9]+\"",
        sets.join("|")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trd(extra: &str) -> TokenRouterDeployment {
        serde_yaml::from_str(&format!(
            r#"
apiVersion: tokenrouter.io/v1alpha1
kind: TokenRouterDeployment
metadata: {{name: chat, namespace: llm}}
spec:
  backend: sim
  models:
    - {{name: big}}
    - {{name: small, entry: true}}
  policy: {{class: Random}}
  groups: 2
{extra}
"#
        ))
        .unwrap()
    }

    #[test]
    fn off_without_tuning_or_with_fixed_mode() {
        assert!(resolve(&trd(""), "llm").is_none());
        let fixed = trd("  tuning: {}\n  delayedBatching: {mode: fixed}\n");
        assert!(resolve(&fixed, "llm").is_none());
    }

    #[test]
    fn resolves_the_spec() {
        let t = trd("  tuning: {intervalSeconds: 7, minSamples: 300, hysteresis: 0.05}\n  gateway: {maxInflight: 12}\n");
        let s = resolve(&t, "llm").unwrap();
        assert_eq!(s.interval, Duration::from_secs(7));
        assert_eq!(s.models, ["small", "big"], "entry model first");
        assert_eq!(s.tune.min_decisions, 300.0);
        assert!((s.tune.min_gain_percent - 5.0).abs() < 1e-9);
        assert_eq!(s.max_concurrency, 6, "12 admitted over 2 groups");
        assert!(matches!(s.source, MetricsSource::Pods));
    }

    #[test]
    fn concurrency_defaults_and_caps() {
        assert_eq!(
            max_concurrency(&trd("  tuning: {}\n")),
            16,
            "autoscaler target"
        );
        assert_eq!(max_concurrency(&trd("  tuning: {maxConcurrency: 5}\n")), 5);
        let huge = trd("  tuning: {}\n  gateway: {maxInflight: 10000}\n");
        assert_eq!(max_concurrency(&huge), MAX_TABLE_CONCURRENCY);
    }

    #[test]
    fn prometheus_reads_the_resources_pods() {
        let t = trd("  tuning: {prometheusUrl: \"http://prom:9090\"}\n");
        let s = resolve(&t, "llm").unwrap();
        let MetricsSource::Prometheus { selector, url, .. } = s.source else {
            panic!()
        };
        assert_eq!(url, "http://prom:9090");
        assert_eq!(
            selector,
            "namespace=\"llm\",pod=~\"(chat-big|chat-small)-[0-9]+\""
        );
    }
}
