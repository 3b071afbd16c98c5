//! The process-wide collectors, registered once per registry.

use prometheus::core::Collector;
use prometheus::{
    CounterVec, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use super::batch_bucket::step_latency_buckets;
use super::error::MetricsError;
use super::names;

/// Every collector of a subserver process. Cloning is cheap (the
/// collectors are reference-counted) and clones feed the same series.
#[derive(Clone)]
pub struct SubserverMetrics {
    pub(super) running: IntGaugeVec,
    pub(super) waiting: IntGaugeVec,
    pub(super) pending: IntGaugeVec,
    pub(super) kv_usage: GaugeVec,
    pub(super) threshold: IntGaugeVec,
    pub(super) threshold_table: IntGaugeVec,
    pub(super) routing_threshold: GaugeVec,
    pub(super) concurrency: IntGaugeVec,
    pub(super) step_latency: HistogramVec,
    pub(super) route_transitions: IntCounterVec,
    pub(super) route_decisions: IntCounterVec,
    pub(super) route_credited: IntCounterVec,
    pub(super) steps_by_batch: IntCounterVec,
    pub(super) step_seconds_by_batch: CounterVec,
    pub(super) step_tokens: IntCounterVec,
    pub(super) tokens_committed: IntCounterVec,
    pub(super) prefix_queries: IntCounterVec,
    pub(super) prefix_hits: IntCounterVec,
    pub(super) preemptions: IntCounterVec,
    pub(super) kv_free_errors: IntCounterVec,
    pub(super) request_success: IntCounterVec,
    pub(super) request_failure: IntCounterVec,
    pub(super) peer_messages: IntCounterVec,
    pub(super) signal_failures: IntCounterVec,
    pub(super) peer_fallbacks: IntCounterVec,
}

impl SubserverMetrics {
    /// Creates the collectors and registers them in `registry`. Call once
    /// per registry: a second call fails with
    /// [`MetricsError::AlreadyRegistered`] and registers nothing. Every model
    /// of the process shares the result through [`Self::for_model`].
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let model = &["model"];
        let metrics = Self {
            running: int_gauge(names::NUM_REQUESTS_RUNNING, "Requests in the running batch.", model)?,
            waiting: int_gauge(names::NUM_REQUESTS_WAITING, "Requests admitted and waiting to run.", model)?,
            pending: int_gauge(
                names::NUM_REQUESTS_PENDING,
                "Requests handed to a peer whose KV this model keeps.",
                model,
            )?,
            kv_usage: gauge(names::KV_CACHE_USAGE_PERC, "Fraction of KV cache blocks in use (0..1).", model)?,
            threshold: int_gauge(
                names::DELAYED_BATCHING_THRESHOLD,
                "Current delayed-batching threshold B: runnable requests needed to start a step.",
                model,
            )?,
            threshold_table: int_gauge(
                names::DELAYED_BATCHING_TABLE,
                "Delayed-batching table in force: B at each active concurrency (beyond the last, the last holds).",
                &["model", "concurrency"],
            )?,
            routing_threshold: gauge(
                names::ROUTING_THRESHOLD,
                "Routing threshold as steered by target_large_share.",
                model,
            )?,
            concurrency: int_gauge(
                names::ACTIVE_CONCURRENCY,
                "Active requests in the group as seen by this model.",
                model,
            )?,
            step_latency: HistogramVec::new(
                HistogramOpts::new(
                    names::STEP_LATENCY_SECONDS,
                    "Wall time of one step. batch_bucket: smallest of 1,2,4,...,256 at least the batch size.",
                )
                .buckets(step_latency_buckets()),
                &["model", "batch_bucket"],
            )
            .map_err(|source| register_error(names::STEP_LATENCY_SECONDS, source))?,
            route_transitions: int_counter(
                names::ROUTE_TRANSITIONS_TOTAL,
                "Token-to-token writer transitions: writer of a token (from) to writer of the next (to).",
                &["from", "to"],
            )?,
            route_decisions: int_counter(
                names::ROUTE_DECISIONS_TOTAL,
                "Routing decisions at the end of a request's step on model: to = model (stay) or the model it is handed to, dropped tokens included.",
                &["model", "to"],
            )?,
            route_credited: int_counter(
                names::ROUTE_CREDITED_TOKENS_TOTAL,
                "Output tokens credited by those decisions (a dropped token credits 0).",
                &["model", "to"],
            )?,
            steps_by_batch: int_counter(
                names::STEPS_BY_BATCH_TOTAL,
                "Steps by exact batch size (requests in the step).",
                &["model", "batch_size"],
            )?,
            step_seconds_by_batch: counter(
                names::STEP_SECONDS_BY_BATCH_TOTAL,
                "Wall seconds of the steps, by exact batch size.",
                &["model", "batch_size"],
            )?,
            step_tokens: int_counter(
                names::STEP_TOKENS_TOTAL,
                "Tokens fed through the model's forward (prefill, catch-up and decode).",
                model,
            )?,
            tokens_committed: int_counter(names::TOKENS_COMMITTED_TOTAL, "Tokens written by the model.", model)?,
            prefix_queries: int_counter(
                names::PREFIX_CACHE_QUERIES_TOTAL,
                "Prompt tokens looked up in the prefix cache.",
                model,
            )?,
            prefix_hits: int_counter(names::PREFIX_CACHE_HITS_TOTAL, "Prompt tokens found in the prefix cache.", model)?,
            preemptions: int_counter(
                names::NUM_PREEMPTIONS_TOTAL,
                "Requests preempted for lack of KV cache memory.",
                model,
            )?,
            kv_free_errors: int_counter(
                names::KV_FREE_ERRORS_TOTAL,
                "Failed KV frees: a double free or a leaked block (a bug when above zero).",
                model,
            )?,
            request_success: int_counter(
                names::REQUEST_SUCCESS_TOTAL,
                "Requests that ended normally, by finish reason.",
                &["finished_reason"],
            )?,
            request_failure: int_counter(names::REQUEST_FAILURE_TOTAL, "Requests that failed, by error type.", &["error_type"])?,
            peer_messages: int_counter(
                names::PEER_MESSAGES_TOTAL,
                "Messages sent between subservers, by sender, receiver and kind.",
                &["from", "to", "kind"],
            )?,
            signal_failures: int_counter(
                names::SIGNAL_FAILURES_TOTAL,
                "Steps whose routing signal could not be computed (the current writer kept the pen), by reason.",
                &["model", "policy", "reason"],
            )?,
            peer_fallbacks: int_counter(
                names::PEER_FALLBACKS_TOTAL,
                "Requests that continued on their home model after a peer failed (fallback_on_peer_failure).",
                &["model", "peer"],
            )?,
        };
        metrics.register(registry)?;
        Ok(metrics)
    }

    /// Counts one writer transition: the writer of the current token
    /// (`from`) to the writer of the next (`to`); `from == to` when the
    /// pen stays.
    pub fn add_transition(&self, from: &str, to: &str) {
        self.route_transitions.with_label_values(&[from, to]).inc();
    }

    /// Counts a request that ended normally (`stop`, `length`, ...).
    pub fn add_success(&self, finished_reason: &str) {
        self.request_success
            .with_label_values(&[finished_reason])
            .inc();
    }

    /// Counts a failed request; `error_type` is the error's metric label
    /// (e.g. `EngineError::error_type()`).
    pub fn add_failure(&self, error_type: &str) {
        self.request_failure.with_label_values(&[error_type]).inc();
    }

    /// Counts one message sent from model `from` to model `to`; `kind` is
    /// the message kind (`req`, `release`, `failed`). Count on the sending
    /// side only, so each message is counted once.
    pub fn add_peer_message(&self, from: &str, to: &str, kind: &str) {
        self.peer_messages
            .with_label_values(&[from, to, kind])
            .inc();
    }

    /// Counts `n` steps on `model` whose `policy` had no routing signal
    /// for `reason`.
    pub fn add_signal_failures(&self, model: &str, policy: &str, reason: &str, n: u64) {
        self.signal_failures
            .with_label_values(&[model, policy, reason])
            .inc_by(n);
    }

    /// Counts one request at home `model` that continued there after `peer` failed.
    pub fn add_peer_fallback(&self, model: &str, peer: &str) {
        self.peer_fallbacks.with_label_values(&[model, peer]).inc();
    }

    /// The collectors with their names, in registration order.
    fn collectors(&self) -> Vec<(&'static str, Box<dyn Collector>)> {
        vec![
            (names::NUM_REQUESTS_RUNNING, Box::new(self.running.clone())),
            (names::NUM_REQUESTS_WAITING, Box::new(self.waiting.clone())),
            (names::NUM_REQUESTS_PENDING, Box::new(self.pending.clone())),
            (names::KV_CACHE_USAGE_PERC, Box::new(self.kv_usage.clone())),
            (
                names::DELAYED_BATCHING_THRESHOLD,
                Box::new(self.threshold.clone()),
            ),
            (
                names::DELAYED_BATCHING_TABLE,
                Box::new(self.threshold_table.clone()),
            ),
            (
                names::ROUTING_THRESHOLD,
                Box::new(self.routing_threshold.clone()),
            ),
            (
                names::ACTIVE_CONCURRENCY,
                Box::new(self.concurrency.clone()),
            ),
            (
                names::STEP_LATENCY_SECONDS,
                Box::new(self.step_latency.clone()),
            ),
            (
                names::ROUTE_TRANSITIONS_TOTAL,
                Box::new(self.route_transitions.clone()),
            ),
            (
                names::ROUTE_DECISIONS_TOTAL,
                Box::new(self.route_decisions.clone()),
            ),
            (
                names::ROUTE_CREDITED_TOKENS_TOTAL,
                Box::new(self.route_credited.clone()),
            ),
            (
                names::STEPS_BY_BATCH_TOTAL,
                Box::new(self.steps_by_batch.clone()),
            ),
            (
                names::STEP_SECONDS_BY_BATCH_TOTAL,
                Box::new(self.step_seconds_by_batch.clone()),
            ),
            (names::STEP_TOKENS_TOTAL, Box::new(self.step_tokens.clone())),
            (
                names::TOKENS_COMMITTED_TOTAL,
                Box::new(self.tokens_committed.clone()),
            ),
            (
                names::PREFIX_CACHE_QUERIES_TOTAL,
                Box::new(self.prefix_queries.clone()),
            ),
            (
                names::PREFIX_CACHE_HITS_TOTAL,
                Box::new(self.prefix_hits.clone()),
            ),
            (
                names::NUM_PREEMPTIONS_TOTAL,
                Box::new(self.preemptions.clone()),
            ),
            (
                names::KV_FREE_ERRORS_TOTAL,
                Box::new(self.kv_free_errors.clone()),
            ),
            (
                names::REQUEST_SUCCESS_TOTAL,
                Box::new(self.request_success.clone()),
            ),
            (
                names::REQUEST_FAILURE_TOTAL,
                Box::new(self.request_failure.clone()),
            ),
            (
                names::PEER_MESSAGES_TOTAL,
                Box::new(self.peer_messages.clone()),
            ),
            (
                names::SIGNAL_FAILURES_TOTAL,
                Box::new(self.signal_failures.clone()),
            ),
            (
                names::PEER_FALLBACKS_TOTAL,
                Box::new(self.peer_fallbacks.clone()),
            ),
        ]
    }

    /// Registers all collectors, or none: on a failure the ones already
    /// registered are taken out again.
    fn register(&self, registry: &Registry) -> Result<(), MetricsError> {
        for (i, (name, collector)) in self.collectors().into_iter().enumerate() {
            if let Err(source) = registry.register(collector) {
                for (_, done) in self.collectors().into_iter().take(i) {
                    // Cannot fail: it was registered a moment ago.
                    let _ = registry.unregister(done);
                }
                return Err(match source {
                    prometheus::Error::AlreadyReg => MetricsError::AlreadyRegistered { name },
                    other => register_error(name, other),
                });
            }
        }
        Ok(())
    }
}

fn int_gauge(name: &'static str, help: &str, labels: &[&str]) -> Result<IntGaugeVec, MetricsError> {
    IntGaugeVec::new(Opts::new(name, help), labels).map_err(|source| register_error(name, source))
}

fn gauge(name: &'static str, help: &str, labels: &[&str]) -> Result<GaugeVec, MetricsError> {
    GaugeVec::new(Opts::new(name, help), labels).map_err(|source| register_error(name, source))
}

fn counter(name: &'static str, help: &str, labels: &[&str]) -> Result<CounterVec, MetricsError> {
    CounterVec::new(Opts::new(name, help), labels).map_err(|source| register_error(name, source))
}

fn int_counter(
    name: &'static str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, MetricsError> {
    IntCounterVec::new(Opts::new(name, help), labels).map_err(|source| register_error(name, source))
}

fn register_error(name: &'static str, source: prometheus::Error) -> MetricsError {
    MetricsError::Register { name, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{encode_text, exposition};

    #[test]
    fn two_models_share_one_registry_and_one_set_of_collectors() {
        let registry = Registry::new();
        let metrics = SubserverMetrics::new(&registry).unwrap();
        let quick = metrics.for_model("quick");
        let reference = metrics.for_model("reference");
        quick.add_tokens(3);
        reference.add_tokens(5);
        quick.add_transition("quick", "reference");
        reference.add_transition("reference", "quick");
        reference.add_transition("reference", "reference");

        let text = encode_text(&registry).unwrap();
        let e = exposition::parse(&text).unwrap();
        let tokens = names::TOKENS_COMMITTED_TOTAL;
        assert_eq!(e.value(tokens, &[("model", "quick")]), Some(3.0));
        assert_eq!(e.value(tokens, &[("model", "reference")]), Some(5.0));
        let tr = names::ROUTE_TRANSITIONS_TOTAL;
        assert_eq!(
            e.value(tr, &[("from", "quick"), ("to", "reference")]),
            Some(1.0)
        );
        assert_eq!(
            e.value(tr, &[("from", "reference"), ("to", "quick")]),
            Some(1.0)
        );
        assert_eq!(
            e.value(tr, &[("from", "reference"), ("to", "reference")]),
            Some(1.0)
        );
        // One family per name, however many models.
        assert_eq!(text.matches(&format!("# TYPE {tokens} counter")).count(), 1);
    }

    #[test]
    fn second_registration_in_the_same_registry_fails_and_changes_nothing() {
        let registry = Registry::new();
        let first = SubserverMetrics::new(&registry).unwrap();
        let err = SubserverMetrics::new(&registry)
            .err()
            .expect("second registration accepted");
        assert!(
            matches!(err, MetricsError::AlreadyRegistered { name } if name == names::NUM_REQUESTS_RUNNING),
            "{err}"
        );
        assert!(
            err.to_string().contains(names::NUM_REQUESTS_RUNNING),
            "{err}"
        );
        // The first set still works and still is the only one.
        first.for_model("quick").add_tokens(1);
        let text = encode_text(&registry).unwrap();
        let type_line = format!("# TYPE {} counter", names::TOKENS_COMMITTED_TOTAL);
        assert_eq!(text.matches(&type_line).count(), 1, "{text}");
        let e = exposition::parse(&text).unwrap();
        assert_eq!(
            e.value(names::TOKENS_COMMITTED_TOTAL, &[("model", "quick")]),
            Some(1.0)
        );
    }

    #[test]
    fn a_clash_midway_rolls_back_the_collectors_already_registered() {
        let registry = Registry::new();
        // Someone else owns one of our names (the 7th we register).
        let squatter =
            IntCounterVec::new(Opts::new(names::STEP_LATENCY_SECONDS, "other"), &["x"]).unwrap();
        registry.register(Box::new(squatter.clone())).unwrap();
        let err = SubserverMetrics::new(&registry)
            .err()
            .expect("clash accepted");
        assert!(
            err.to_string().contains(names::STEP_LATENCY_SECONDS),
            "{err}"
        );
        // Rolled back: a second try fails on the same clash, not on the
        // first name (which it would find still registered otherwise).
        let again = SubserverMetrics::new(&registry)
            .err()
            .expect("clash accepted");
        assert!(
            matches!(again, MetricsError::AlreadyRegistered { name } if name == names::STEP_LATENCY_SECONDS),
            "{again}"
        );
        // Only the squatter's family is in the registry.
        squatter.with_label_values(&["1"]).inc();
        let left: Vec<String> = registry
            .gather()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        assert_eq!(left, vec![names::STEP_LATENCY_SECONDS.to_string()]);
    }

    #[test]
    fn separate_registries_are_independent() {
        let (r1, r2) = (Registry::new(), Registry::new());
        let m1 = SubserverMetrics::new(&r1).unwrap();
        let _m2 = SubserverMetrics::new(&r2).unwrap();
        m1.add_success("stop");
        let e1 = exposition::parse(&encode_text(&r1).unwrap()).unwrap();
        let e2 = exposition::parse(&encode_text(&r2).unwrap()).unwrap();
        let name = names::REQUEST_SUCCESS_TOTAL;
        assert_eq!(e1.value(name, &[("finished_reason", "stop")]), Some(1.0));
        assert_eq!(e2.value(name, &[("finished_reason", "stop")]), None);
    }
}
