//! Counters a scheduler keeps about itself, readable from other threads
//! (benchmarks, the admin API) and mirrored into Prometheus when a metrics
//! handle is attached.

use std::sync::Mutex;
use std::time::Duration;

use crate::metrics::{ModelMetrics, SubserverMetrics};
use crate::peer::message::ModelIdx;
use crate::scheduler::policy::Dest;
use policies::routing::signal_health::SignalFailure;

/// A snapshot of one scheduler's counters.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StatsSnapshot {
    /// Forward steps taken.
    pub steps: u64,
    /// Sum of batch sizes over steps.
    pub batch_sum: u64,
    /// Sum of step seconds.
    pub step_seconds: f64,
    /// Output tokens committed at this home, by writer model.
    pub committed_by_writer: Vec<u64>,
    /// Routing transitions at this home: `transitions[from][to]`.
    pub transitions: Vec<Vec<u64>>,
    /// Routing decisions taken here, by destination model (this model's
    /// own index: the request stayed). Dropped tokens included.
    pub decisions: Vec<u64>,
    /// Output tokens those decisions credited, by destination model.
    pub credited: Vec<u64>,
    /// Tokens this model wrote as a guest and returned.
    pub guest_tokens: u64,
    /// Delayed-batching steps started below the threshold `B` although
    /// more requests could still come: the wait bound ran out or the
    /// deadlock breaker fired (the tuner's chain has neither).
    pub early_starts: u64,
    /// Requests finished, by reason.
    pub finished: u64,
    /// Requests failed.
    pub failed: u64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prompt tokens seen / served from the prefix cache.
    pub prefix_query_tokens: u64,
    /// Prompt tokens served from the prefix cache.
    pub prefix_hit_tokens: u64,
    /// Requests running / waiting / pending here.
    pub running: usize,
    /// Waiting for admission.
    pub waiting: usize,
    /// Pen at a peer.
    pub pending: usize,
    /// KV usage (0..1).
    pub kv_usage: f64,
    /// Requests holding KV.
    pub kv_requests: usize,
    /// Free plus evictable blocks.
    pub kv_available_blocks: usize,
    /// Blocks in the pool.
    pub kv_blocks: usize,
    /// Failed KV frees (a double free or a leak): a bug when above zero.
    pub kv_free_errors: u64,
    /// Active requests in the group.
    pub active: usize,
    /// Current B.
    pub threshold: usize,
    /// Current threshold table.
    pub threshold_table: Vec<usize>,
    /// Routing threshold as `target_large_share` last steered it.
    pub routing_threshold: Option<f64>,
    /// Peer messages sent and received.
    pub messages: u64,
    /// Hand-overs this home passed from one guest straight to another (the
    /// guest drew the next writer; no step here).
    pub passed_on: u64,
    /// Steps whose routing signal failed here, by reason (`missing_input`,
    /// `shape`, `compute`).
    pub signal_failures: [u64; 3],
    /// Requests at this home that continued here after a peer failed, by peer.
    pub peer_fallbacks: Vec<u64>,
}

/// Prometheus handles of the group's models, indexed by model.
struct Mirror {
    models: Vec<ModelMetrics>,
    me: usize,
}

/// Thread-safe counters of one scheduler.
pub struct SchedulerStats {
    inner: Mutex<StatsSnapshot>,
    mirror: Option<Mirror>,
    /// Requests this scheduler has freed, sent after the queue state that
    /// shows them gone was published.
    freed: tokio::sync::watch::Sender<u64>,
}

impl SchedulerStats {
    /// Counters for a group of `num_models`.
    pub fn new(num_models: usize) -> Self {
        let snap = StatsSnapshot {
            committed_by_writer: vec![0; num_models],
            transitions: vec![vec![0; num_models]; num_models],
            decisions: vec![0; num_models],
            credited: vec![0; num_models],
            peer_fallbacks: vec![0; num_models],
            ..StatsSnapshot::default()
        };
        Self {
            inner: Mutex::new(snap),
            mirror: None,
            freed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Fires (the count of requests freed so far) each time the scheduler
    /// has freed requests and published the state without them: what a
    /// test waits on instead of polling until KV and requests are released.
    pub fn freed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.freed.subscribe()
    }

    pub(crate) fn publish_freed(&self, n: u64) {
        self.freed.send_modify(|c| *c += n);
    }

    /// Also counts into Prometheus: `names` are the group's model names by
    /// index, `me` this scheduler's index.
    pub fn with_metrics(mut self, metrics: &SubserverMetrics, names: &[String], me: usize) -> Self {
        let models = names.iter().map(|n| metrics.for_model(n)).collect();
        self.mirror = Some(Mirror { models, me });
        self
    }

    fn metrics(&self) -> Option<&ModelMetrics> {
        self.mirror.as_ref().and_then(|m| m.models.get(m.me))
    }

    fn metrics_of(&self, model: ModelIdx) -> Option<&ModelMetrics> {
        self.mirror
            .as_ref()
            .and_then(|m| m.models.get(model as usize))
    }

    fn with(&self, f: impl FnOnce(&mut StatsSnapshot)) {
        if let Ok(mut g) = self.inner.lock() {
            f(&mut g);
        }
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        self.inner.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Zeroes the rate counters (benchmarks call it after warm-up).
    pub fn reset_counters(&self) {
        self.with(|s| {
            s.steps = 0;
            s.batch_sum = 0;
            s.step_seconds = 0.0;
            s.committed_by_writer.iter_mut().for_each(|x| *x = 0);
            s.transitions.iter_mut().flatten().for_each(|x| *x = 0);
            s.decisions.iter_mut().for_each(|x| *x = 0);
            s.credited.iter_mut().for_each(|x| *x = 0);
            s.guest_tokens = 0;
            s.early_starts = 0;
        });
    }

    pub(crate) fn record_early_start(&self) {
        self.with(|s| s.early_starts += 1);
    }

    pub(crate) fn record_step(&self, batch: usize, tokens: usize, took: Duration) {
        self.with(|s| {
            s.steps += 1;
            s.batch_sum += batch as u64;
            s.step_seconds += took.as_secs_f64();
        });
        if let Some(m) = self.metrics() {
            if let Err(e) = m.observe_step(batch, tokens, took.as_secs_f64()) {
                tracing::debug!(error = %e, "step latency not recorded");
            }
        }
    }

    pub(crate) fn record_commit(&self, from: ModelIdx, writer: ModelIdx) {
        self.with(|s| {
            if let Some(c) = s.committed_by_writer.get_mut(writer as usize) {
                *c += 1;
            }
            if let Some(c) = s
                .transitions
                .get_mut(from as usize)
                .and_then(|r| r.get_mut(writer as usize))
            {
                *c += 1;
            }
        });
        if let (Some(w), Some(f)) = (self.metrics_of(writer), self.metrics_of(from)) {
            w.add_tokens(1);
            f.shared().add_transition(f.model(), w.model());
        }
    }

    /// Counts the routing decision `dest` that model `me` took at the end
    /// of a request's step (after the scheduler's own overrides): where the
    /// request goes next and whether the sampled token is credited.
    pub(crate) fn record_decision(&self, me: ModelIdx, dest: &Dest) {
        let (to, credited) = match *dest {
            Dest::Stay => (me, true),
            Dest::Delegate { to } => (to, false),
            Dest::Peer { to, keep_token } => (to, keep_token),
        };
        self.with(|s| {
            if let Some(c) = s.decisions.get_mut(to as usize) {
                *c += 1;
            }
            if let Some(c) = s.credited.get_mut(to as usize) {
                *c += u64::from(credited);
            }
        });
        if let (Some(m), Some(t)) = (self.metrics(), self.metrics_of(to)) {
            m.add_decision(t.model(), u64::from(credited));
        }
    }

    pub(crate) fn count_pass_on(&self) {
        self.with(|s| s.passed_on += 1);
    }

    /// Adds `counts` (by reason, in `SignalFailure::ALL` order) failed
    /// signal steps of `policy` on this model.
    pub(crate) fn count_signal_failures(&self, policy: &str, counts: [u64; 3]) {
        self.with(|s| {
            for (total, n) in s.signal_failures.iter_mut().zip(counts) {
                *total += n;
            }
        });
        if let Some(m) = self.metrics() {
            for (kind, n) in SignalFailure::ALL.iter().zip(counts) {
                if n > 0 {
                    m.shared()
                        .add_signal_failures(m.model(), policy, kind.label(), n);
                }
            }
        }
    }

    /// One request at this home continued here after `peer` failed.
    pub(crate) fn count_peer_fallback(&self, peer: ModelIdx) {
        self.with(|s| {
            if let Some(c) = s.peer_fallbacks.get_mut(peer as usize) {
                *c += 1;
            }
        });
        if let (Some(m), Some(p)) = (self.metrics(), self.metrics_of(peer)) {
            m.shared().add_peer_fallback(m.model(), p.model());
        }
    }

    pub(crate) fn record_guest_tokens(&self, n: usize) {
        self.with(|s| s.guest_tokens += n as u64);
    }

    pub(crate) fn count_success(&self, reason: &str) {
        self.with(|s| s.finished += 1);
        if let Some(m) = self.metrics() {
            m.add_success(reason);
        }
    }

    pub(crate) fn count_failure(&self, error_type: &str) {
        self.with(|s| s.failed += 1);
        if let Some(m) = self.metrics() {
            m.add_failure(error_type);
        }
    }

    pub(crate) fn count_preemption(&self) {
        self.with(|s| s.preemptions += 1);
        if let Some(m) = self.metrics() {
            m.add_preemptions(1);
        }
    }

    pub(crate) fn count_prefix(&self, query: usize, hit: usize) {
        self.with(|s| {
            s.prefix_query_tokens += query as u64;
            s.prefix_hit_tokens += hit as u64;
        });
        if let Some(m) = self.metrics() {
            let _ = m.add_prefix_cache(query as u64, hit as u64);
        }
    }

    pub(crate) fn count_message(&self, from: ModelIdx, to: ModelIdx, kind: &str) {
        self.with(|s| s.messages += 1);
        if let (Some(f), Some(t)) = (self.metrics_of(from), self.metrics_of(to)) {
            f.shared().add_peer_message(f.model(), t.model(), kind);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn set_queue(
        &self,
        running: usize,
        waiting: usize,
        pending: usize,
        kv_usage: f64,
        kv_requests: usize,
        kv_available_blocks: usize,
        kv_blocks: usize,
    ) {
        self.with(|s| {
            s.running = running;
            s.waiting = waiting;
            s.pending = pending;
            s.kv_usage = kv_usage;
            s.kv_requests = kv_requests;
            s.kv_available_blocks = kv_available_blocks;
            s.kv_blocks = kv_blocks;
        });
        if let Some(m) = self.metrics() {
            m.set_queue(running, waiting, pending);
            let _ = m.set_kv_usage(kv_usage.clamp(0.0, 1.0));
        }
    }

    pub(crate) fn set_kv_free_errors(&self, total: u64) {
        self.with(|s| s.kv_free_errors = total);
        if let Some(m) = self.metrics() {
            m.set_kv_free_errors(total);
        }
    }

    pub(crate) fn set_concurrency(&self, active: usize, threshold: usize) {
        self.with(|s| {
            s.active = active;
            s.threshold = threshold;
        });
        if let Some(m) = self.metrics() {
            m.set_concurrency(active);
            m.set_threshold(threshold);
        }
    }

    pub(crate) fn set_routing_threshold(&self, t: f64) {
        self.with(|s| s.routing_threshold = Some(t));
        if let Some(m) = self.metrics() {
            m.set_routing_threshold(t);
        }
    }

    pub(crate) fn set_threshold_table(&self, table: Vec<usize>) {
        if let Some(m) = self.metrics() {
            m.set_threshold_table(&table);
        }
        self.with(|s| s.threshold_table = table);
    }
}
