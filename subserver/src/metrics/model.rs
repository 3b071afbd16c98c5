//! The per-model handle the scheduler thread holds.

use prometheus::{Gauge, Histogram, IntCounter, IntGauge};

use super::batch_bucket::{batch_bucket_index, BATCH_BUCKET_NAMES};
use super::error::MetricsError;
use super::names;
use super::subserver::SubserverMetrics;

/// One model's view of the process metrics, with its `model` label bound
/// once: the per-step calls are atomic adds, no label lookup. `Send`, so
/// the scheduler thread can own it; clones feed the same series.
#[derive(Clone)]
pub struct ModelMetrics {
    model: String,
    shared: SubserverMetrics,
    running: IntGauge,
    waiting: IntGauge,
    pending: IntGauge,
    kv_usage: Gauge,
    threshold: IntGauge,
    routing_threshold: Gauge,
    concurrency: IntGauge,
    /// One histogram per `batch_bucket`, in `BATCH_BUCKETS` order.
    step_latency: Vec<Histogram>,
    tokens_committed: IntCounter,
    prefix_queries: IntCounter,
    prefix_hits: IntCounter,
    preemptions: IntCounter,
    kv_free_errors: IntCounter,
}

// Here rather than in `subserver.rs`, so that the shared collectors do not
// import the per-model handle that reads them (one-way dependency).
impl SubserverMetrics {
    /// A handle for one model, its `model` label bound. Cheap; calling it
    /// twice with the same name gives two handles on the same series.
    pub fn for_model(&self, model: &str) -> ModelMetrics {
        ModelMetrics::new(self.clone(), model)
    }
}

impl ModelMetrics {
    /// Binds the label; every per-model series exists (at zero) from here
    /// on, so a scrape shows the model before its first step.
    fn new(shared: SubserverMetrics, model: &str) -> Self {
        let m = &[model];
        Self {
            running: shared.running.with_label_values(m),
            waiting: shared.waiting.with_label_values(m),
            pending: shared.pending.with_label_values(m),
            kv_usage: shared.kv_usage.with_label_values(m),
            threshold: shared.threshold.with_label_values(m),
            routing_threshold: shared.routing_threshold.with_label_values(m),
            concurrency: shared.concurrency.with_label_values(m),
            step_latency: BATCH_BUCKET_NAMES
                .iter()
                .map(|bucket| shared.step_latency.with_label_values(&[model, bucket]))
                .collect(),
            tokens_committed: shared.tokens_committed.with_label_values(m),
            prefix_queries: shared.prefix_queries.with_label_values(m),
            prefix_hits: shared.prefix_hits.with_label_values(m),
            preemptions: shared.preemptions.with_label_values(m),
            kv_free_errors: shared.kv_free_errors.with_label_values(m),
            model: model.to_string(),
            shared,
        }
    }

    /// The model's name (its `model` label).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The process-wide collectors this handle feeds.
    pub fn shared(&self) -> &SubserverMetrics {
        &self.shared
    }

    /// Records one step of `batch` requests feeding `tokens` tokens that took
    /// `seconds`, in the histogram of the batch's bucket (see
    /// [`batch_bucket()`](super::batch_bucket())).
    pub fn observe_step(
        &self,
        batch: usize,
        tokens: usize,
        seconds: f64,
    ) -> Result<(), MetricsError> {
        if !seconds.is_finite() || seconds < 0.0 {
            return Err(MetricsError::InvalidValue {
                name: names::STEP_LATENCY_SECONDS,
                reason: format!("step time must be a finite number of seconds >= 0, got {seconds}"),
            });
        }
        if batch == 0 {
            return Err(MetricsError::InvalidValue {
                name: names::STEP_LATENCY_SECONDS,
                reason: "a step needs a batch of at least one request, got 0".to_string(),
            });
        }
        self.step_latency[batch_bucket_index(batch)].observe(seconds);
        let labels = [self.model.as_str(), &batch.to_string()];
        self.shared.steps_by_batch.with_label_values(&labels).inc();
        self.shared
            .step_seconds_by_batch
            .with_label_values(&labels)
            .inc_by(seconds);
        self.shared
            .step_tokens
            .with_label_values(&[self.model.as_str()])
            .inc_by(tokens as u64);
        Ok(())
    }

    /// Sets the queue gauges: running, waiting, and pending at a peer.
    pub fn set_queue(&self, running: usize, waiting: usize, pending: usize) {
        self.running.set(to_i64(running));
        self.waiting.set(to_i64(waiting));
        self.pending.set(to_i64(pending));
    }

    /// Sets the fraction of KV blocks in use; must lie in `0..=1`.
    pub fn set_kv_usage(&self, fraction: f64) -> Result<(), MetricsError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(MetricsError::InvalidValue {
                name: names::KV_CACHE_USAGE_PERC,
                reason: format!("usage must be a fraction in 0..=1, got {fraction}"),
            });
        }
        self.kv_usage.set(fraction);
        Ok(())
    }

    /// Sets the routing threshold the share controller steered to.
    pub fn set_routing_threshold(&self, t: f64) {
        self.routing_threshold.set(t);
    }

    /// Sets the current delayed-batching threshold B.
    pub fn set_threshold(&self, b: usize) {
        self.threshold.set(to_i64(b));
    }

    /// Shows the delayed-batching table in force: one series per active
    /// concurrency `1..=table.len()`; series of a longer, older table go.
    pub fn set_threshold_table(&self, table: &[usize]) {
        let gauge = &self.shared.threshold_table;
        let mut n = table.len() + 1;
        // Older tables never reach past the largest table the tuner writes.
        while gauge
            .remove_label_values(&[self.model.as_str(), &n.to_string()])
            .is_ok()
        {
            n += 1;
        }
        for (i, b) in table.iter().enumerate() {
            gauge
                .with_label_values(&[self.model.as_str(), &(i + 1).to_string()])
                .set(to_i64(*b));
        }
    }

    /// Sets the number of active requests in the group.
    pub fn set_concurrency(&self, n: usize) {
        self.concurrency.set(to_i64(n));
    }

    /// Counts one writer transition (see [`SubserverMetrics::add_transition`]).
    pub fn add_transition(&self, from: &str, to: &str) {
        self.shared.add_transition(from, to);
    }

    /// Counts one routing decision taken here at the end of a request's
    /// step: to model `to` (this model's own name when the request stays),
    /// crediting `credited` output tokens (0 when the token is dropped).
    pub fn add_decision(&self, to: &str, credited: u64) {
        let labels = [self.model.as_str(), to];
        self.shared.route_decisions.with_label_values(&labels).inc();
        self.shared
            .route_credited
            .with_label_values(&labels)
            .inc_by(credited);
    }

    /// Counts `n` tokens written by this model.
    pub fn add_tokens(&self, n: u64) {
        self.tokens_committed.inc_by(n);
    }

    /// Counts a prefix-cache lookup of `queried` prompt tokens of which
    /// `hits` were cached.
    pub fn add_prefix_cache(&self, queried: u64, hits: u64) -> Result<(), MetricsError> {
        if hits > queried {
            return Err(MetricsError::InvalidValue {
                name: names::PREFIX_CACHE_HITS_TOTAL,
                reason: format!("{hits} hit tokens out of only {queried} queried"),
            });
        }
        self.prefix_queries.inc_by(queried);
        self.prefix_hits.inc_by(hits);
        Ok(())
    }

    /// Counts `n` preempted requests.
    pub fn add_preemptions(&self, n: u64) {
        self.preemptions.inc_by(n);
    }

    /// Raises the failed-KV-free counter to `total` (the KV pool's own
    /// count); a counter never goes down.
    pub fn set_kv_free_errors(&self, total: u64) {
        self.kv_free_errors
            .inc_by(total.saturating_sub(self.kv_free_errors.get()));
    }

    /// Counts a request that ended normally (see [`SubserverMetrics::add_success`]).
    pub fn add_success(&self, finished_reason: &str) {
        self.shared.add_success(finished_reason);
    }

    /// Counts a failed request (see [`SubserverMetrics::add_failure`]).
    pub fn add_failure(&self, error_type: &str) {
        self.shared.add_failure(error_type);
    }

    /// Counts one message this model sends to model `to`; `kind` is `req`,
    /// `release` or `failed`.
    pub fn add_peer_message(&self, to: &str, kind: &str) {
        self.shared.add_peer_message(&self.model, to, kind);
    }
}

/// Gauges are i64; counts beyond that cannot occur, saturate rather than wrap.
fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use prometheus::Registry;

    use super::*;
    use crate::metrics::{encode_text, exposition, step_latency_buckets};

    /// Metric name, declared type, labels, value.
    type Expected<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], f64);

    fn setup() -> (Registry, ModelMetrics) {
        let registry = Registry::new();
        let metrics = SubserverMetrics::new(&registry).unwrap();
        let quick = metrics.for_model("quick");
        (registry, quick)
    }

    fn scrape(registry: &Registry) -> (String, exposition::Exposition) {
        let text = encode_text(registry).unwrap();
        let e = exposition::parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
        (text, e)
    }

    #[test]
    fn text_output_has_every_name_type_and_label_exactly() {
        let (registry, quick) = setup();
        quick.set_queue(3, 2, 1);
        quick.set_kv_usage(0.25).unwrap();
        quick.set_threshold(4);
        quick.set_concurrency(7);
        quick.observe_step(3, 3, 0.004).unwrap();
        quick.add_transition("quick", "reference");
        quick.add_tokens(11);
        quick.add_prefix_cache(10, 6).unwrap();
        quick.add_preemptions(2);
        quick.set_kv_free_errors(3);
        quick.set_kv_free_errors(2);
        quick.add_success("stop");
        quick.add_failure("kv_cache");
        quick.add_peer_message("reference", "req");
        let (text, e) = scrape(&registry);

        let m = [("model", "quick")];
        let expect: [Expected; 15] = [
            (names::NUM_REQUESTS_RUNNING, "gauge", &m, 3.0),
            (names::NUM_REQUESTS_WAITING, "gauge", &m, 2.0),
            (names::NUM_REQUESTS_PENDING, "gauge", &m, 1.0),
            (names::KV_CACHE_USAGE_PERC, "gauge", &m, 0.25),
            (names::DELAYED_BATCHING_THRESHOLD, "gauge", &m, 4.0),
            (names::ACTIVE_CONCURRENCY, "gauge", &m, 7.0),
            (
                names::ROUTE_TRANSITIONS_TOTAL,
                "counter",
                &[("from", "quick"), ("to", "reference")],
                1.0,
            ),
            (names::TOKENS_COMMITTED_TOTAL, "counter", &m, 11.0),
            (names::PREFIX_CACHE_QUERIES_TOTAL, "counter", &m, 10.0),
            (names::PREFIX_CACHE_HITS_TOTAL, "counter", &m, 6.0),
            (names::NUM_PREEMPTIONS_TOTAL, "counter", &m, 2.0),
            (names::KV_FREE_ERRORS_TOTAL, "counter", &m, 3.0),
            (
                names::REQUEST_SUCCESS_TOTAL,
                "counter",
                &[("finished_reason", "stop")],
                1.0,
            ),
            (
                names::REQUEST_FAILURE_TOTAL,
                "counter",
                &[("error_type", "kv_cache")],
                1.0,
            ),
            (
                names::PEER_MESSAGES_TOTAL,
                "counter",
                &[("from", "quick"), ("to", "reference"), ("kind", "req")],
                1.0,
            ),
        ];
        for (name, ty, labels, value) in expect {
            assert_eq!(
                e.types.get(name).map(String::as_str),
                Some(ty),
                "type of {name}"
            );
            assert_eq!(
                e.value(name, labels),
                Some(value),
                "{name}{labels:?}\n{text}"
            );
        }
        assert_eq!(
            e.types.get(names::STEP_LATENCY_SECONDS).map(String::as_str),
            Some("histogram")
        );
        // The exact spelling the tuner greps for.
        assert!(
            text.contains("tokenrouter_num_requests_running{model=\"quick\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "tokenrouter_step_latency_seconds_count{batch_bucket=\"4\",model=\"quick\"} 1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn decisions_credits_and_exact_batch_steps_have_their_own_series() {
        let (registry, quick) = setup();
        // R2R at the small model: two stays, one hand-over that drops its token.
        quick.add_decision("quick", 1);
        quick.add_decision("quick", 1);
        quick.add_decision("reference", 0);
        quick.observe_step(3, 3, 0.006).unwrap();
        quick.observe_step(3, 3, 0.007).unwrap();
        quick.observe_step(4, 4, 0.008).unwrap();
        let (text, e) = scrape(&registry);
        let to = |t| [("model", "quick"), ("to", t)];
        assert_eq!(
            e.value(names::ROUTE_DECISIONS_TOTAL, &to("quick")),
            Some(2.0)
        );
        assert_eq!(
            e.value(names::ROUTE_DECISIONS_TOTAL, &to("reference")),
            Some(1.0)
        );
        assert_eq!(
            e.value(names::ROUTE_CREDITED_TOKENS_TOTAL, &to("quick")),
            Some(2.0)
        );
        assert_eq!(
            e.value(names::ROUTE_CREDITED_TOKENS_TOTAL, &to("reference")),
            Some(0.0),
            "{text}"
        );
        let b = |n| [("model", "quick"), ("batch_size", n)];
        assert_eq!(e.value(names::STEPS_BY_BATCH_TOTAL, &b("3")), Some(2.0));
        assert_eq!(e.value(names::STEPS_BY_BATCH_TOTAL, &b("4")), Some(1.0));
        let s3 = e
            .value(names::STEP_SECONDS_BY_BATCH_TOTAL, &b("3"))
            .unwrap();
        assert!((s3 - 0.013).abs() < 1e-12, "{s3}");
        for name in [
            names::ROUTE_DECISIONS_TOTAL,
            names::ROUTE_CREDITED_TOKENS_TOTAL,
            names::STEPS_BY_BATCH_TOTAL,
            names::STEP_SECONDS_BY_BATCH_TOTAL,
        ] {
            assert_eq!(
                e.types.get(name).map(String::as_str),
                Some("counter"),
                "{name}"
            );
        }
    }

    #[test]
    fn every_batch_bucket_series_exists_from_the_start() {
        let (registry, _quick) = setup();
        let (_, e) = scrape(&registry);
        let count = format!("{}_count", names::STEP_LATENCY_SECONDS);
        for bucket in BATCH_BUCKET_NAMES {
            let labels = [("model", "quick"), ("batch_bucket", bucket)];
            assert_eq!(e.value(&count, &labels), Some(0.0), "bucket {bucket}");
        }
    }

    #[test]
    fn step_histograms_sum_and_count_per_batch_bucket() {
        let (registry, quick) = setup();
        // Batches 3 and 4 share bucket "4"; 5 goes to "8"; 300 to "256".
        quick.observe_step(3, 3, 0.002).unwrap();
        quick.observe_step(4, 4, 0.003).unwrap();
        quick.observe_step(5, 5, 0.010).unwrap();
        quick.observe_step(300, 300, 2.0).unwrap();
        let (_, e) = scrape(&registry);
        let n = names::STEP_LATENCY_SECONDS;
        let get = |suffix: &str, bucket: &str, le: Option<&str>| {
            let mut labels = vec![("model", "quick"), ("batch_bucket", bucket)];
            if let Some(le) = le {
                labels.push(("le", le));
            }
            e.value(&format!("{n}_{suffix}"), &labels)
        };
        assert_eq!(get("count", "4", None), Some(2.0));
        let sum4 = get("sum", "4", None).unwrap();
        assert!((sum4 - 0.005).abs() < 1e-12, "{sum4}");
        assert_eq!(get("count", "8", None), Some(1.0));
        assert!((get("sum", "8", None).unwrap() - 0.010).abs() < 1e-12);
        assert_eq!(get("count", "256", None), Some(1.0));
        assert_eq!(get("count", "2", None), Some(0.0));
        // Cumulative buckets, one `le` per bound of the ladder.
        let bounds = step_latency_buckets();
        for le in bounds.iter() {
            let want = [0.002, 0.003].iter().filter(|&&x| x <= *le).count() as f64;
            assert_eq!(
                get("bucket", "4", Some(&le.to_string())),
                Some(want),
                "le {le}"
            );
        }
        assert_eq!(get("bucket", "4", Some("+Inf")), Some(2.0));
    }

    #[test]
    fn gauges_follow_the_latest_value() {
        let (registry, quick) = setup();
        quick.set_queue(5, 5, 5);
        quick.set_queue(0, 1, 2);
        quick.set_threshold(8);
        quick.set_threshold(2);
        let (_, e) = scrape(&registry);
        let m = [("model", "quick")];
        assert_eq!(e.value(names::NUM_REQUESTS_RUNNING, &m), Some(0.0));
        assert_eq!(e.value(names::NUM_REQUESTS_WAITING, &m), Some(1.0));
        assert_eq!(e.value(names::NUM_REQUESTS_PENDING, &m), Some(2.0));
        assert_eq!(e.value(names::DELAYED_BATCHING_THRESHOLD, &m), Some(2.0));
    }

    #[test]
    fn the_table_gauge_shows_the_table_in_force_and_drops_older_entries() {
        let (registry, quick) = setup();
        quick.set_threshold_table(&[1, 2, 3]);
        quick.set_threshold_table(&[4, 5]);
        let (text, e) = scrape(&registry);
        let at = |c: &str| {
            e.value(
                names::DELAYED_BATCHING_TABLE,
                &[("model", "quick"), ("concurrency", c)],
            )
        };
        assert_eq!((at("1"), at("2")), (Some(4.0), Some(5.0)), "{text}");
        assert_eq!(
            at("3"),
            None,
            "the older table's third entry is gone:\n{text}"
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_metric_named_and_nothing_recorded() {
        let (registry, quick) = setup();
        for bad in [f64::NAN, -0.001, f64::INFINITY] {
            let err = quick.observe_step(4, 4, bad).unwrap_err();
            assert!(
                err.to_string().contains(names::STEP_LATENCY_SECONDS),
                "{err}"
            );
        }
        let err = quick.observe_step(0, 0, 0.01).unwrap_err();
        assert!(err.to_string().contains("got 0"), "{err}");
        for bad in [1.5, -0.1, f64::NAN] {
            let err = quick.set_kv_usage(bad).unwrap_err();
            assert!(
                err.to_string().contains(names::KV_CACHE_USAGE_PERC),
                "{err}"
            );
        }
        let err = quick.add_prefix_cache(3, 4).unwrap_err();
        assert!(
            err.to_string().contains(names::PREFIX_CACHE_HITS_TOTAL),
            "{err}"
        );

        let (_, e) = scrape(&registry);
        let count = format!("{}_count", names::STEP_LATENCY_SECONDS);
        for bucket in BATCH_BUCKET_NAMES {
            assert_eq!(
                e.value(&count, &[("model", "quick"), ("batch_bucket", bucket)]),
                Some(0.0)
            );
        }
        let m = [("model", "quick")];
        assert_eq!(e.value(names::KV_CACHE_USAGE_PERC, &m), Some(0.0));
        assert_eq!(e.value(names::PREFIX_CACHE_QUERIES_TOTAL, &m), Some(0.0));
    }

    #[test]
    fn label_values_with_quotes_and_backslashes_stay_valid_text() {
        let registry = Registry::new();
        let metrics = SubserverMetrics::new(&registry).unwrap();
        let odd = metrics.for_model("we\"ird\\name\nx");
        odd.add_tokens(2);
        let (_, e) = scrape(&registry);
        assert_eq!(
            e.value(
                names::TOKENS_COMMITTED_TOTAL,
                &[("model", "we\"ird\\name\nx")]
            ),
            Some(2.0)
        );
    }

    #[test]
    fn handle_moves_to_a_scheduler_thread() {
        let (registry, quick) = setup();
        std::thread::spawn(move || quick.add_tokens(4))
            .join()
            .unwrap();
        let (_, e) = scrape(&registry);
        assert_eq!(
            e.value(names::TOKENS_COMMITTED_TOTAL, &[("model", "quick")]),
            Some(4.0)
        );
    }
}
