//! The metrics of a subserver process (one set per process, labelled by
//! `model` where the series belongs to one model of the group). The tuner's
//! estimator reads the delayed-batching chain's inputs back from
//! `route_decisions_total` (P), `route_credited_tokens_total` (C),
//! `steps_by_batch_total` / `step_seconds_by_batch_total` (L(b)) and
//! `active_concurrency`.

use super::{MetricDef, MetricKind};

/// Gauge `{model}`: requests in the running batch.
pub const NUM_REQUESTS_RUNNING: &str = "tokenrouter_num_requests_running";
/// Gauge `{model}`: requests admitted but waiting to run.
pub const NUM_REQUESTS_WAITING: &str = "tokenrouter_num_requests_waiting";
/// Gauge `{model}`: requests handed to a peer, whose KV this model keeps.
pub const NUM_REQUESTS_PENDING: &str = "tokenrouter_num_requests_pending";
/// Gauge `{model}`: fraction of KV blocks in use, 0..=1.
pub const KV_CACHE_USAGE_PERC: &str = "tokenrouter_kv_cache_usage_perc";
/// Gauge `{model}`: the current delayed-batching threshold B.
pub const DELAYED_BATCHING_THRESHOLD: &str = "tokenrouter_delayed_batching_threshold";
/// Gauge `{model, concurrency}`: the delayed-batching table in force, B at each
/// active concurrency `1..=len` (beyond it the last entry holds). It changes
/// when the tune loop pushes a table (`PUT /admin/thresholds`).
pub const DELAYED_BATCHING_TABLE: &str = "tokenrouter_delayed_batching_table";
/// Gauge `{model}`: the policy's routing threshold as `target_large_share`
/// steers it (set by the entry model).
pub const ROUTING_THRESHOLD: &str = "tokenrouter_routing_threshold";
/// Gauge `{model}`: active requests in the group, as this model sees them.
pub const ACTIVE_CONCURRENCY: &str = "tokenrouter_active_concurrency";
/// Histogram `{model, batch_bucket}`: wall time of one step, seconds.
pub const STEP_LATENCY_SECONDS: &str = "tokenrouter_step_latency_seconds";
/// The `_sum` series of [`STEP_LATENCY_SECONDS`] (what the tuner reads).
pub const STEP_LATENCY_SECONDS_SUM: &str = "tokenrouter_step_latency_seconds_sum";
/// The `_count` series of [`STEP_LATENCY_SECONDS`].
pub const STEP_LATENCY_SECONDS_COUNT: &str = "tokenrouter_step_latency_seconds_count";
/// Counter `{from, to}`: writer of a token -> writer of the next one.
pub const ROUTE_TRANSITIONS_TOTAL: &str = "tokenrouter_route_transitions_total";
/// Counter `{model, to}`: routing decisions at the end of a request's step
/// on `model`, counted where they are decided: `to == model` when the request
/// stays, else the model it is handed to. A hand-over that drops the sampled
/// token (R2R, CITER, Co-LLM, Random) counts here although nothing is
/// committed. Normalized per `model`, these are the routing matrix P of the
/// delayed-batching chain.
pub const ROUTE_DECISIONS_TOTAL: &str = "tokenrouter_route_decisions_total";
/// Counter `{model, to}`: output tokens the decisions of
/// [`ROUTE_DECISIONS_TOTAL`] credit (1 for a kept token, 0 for a dropped
/// one). Divided by the decisions, the chain's credit matrix C.
pub const ROUTE_CREDITED_TOKENS_TOTAL: &str = "tokenrouter_route_credited_tokens_total";
/// Counter `{model, batch_size}`: steps of exactly `batch_size` requests.
pub const STEPS_BY_BATCH_TOTAL: &str = "tokenrouter_steps_by_batch_total";
/// Counter `{model, batch_size}`: wall seconds of those steps; divided by
/// [`STEPS_BY_BATCH_TOTAL`], the chain's step latency L(b) at each batch size.
pub const STEP_SECONDS_BY_BATCH_TOTAL: &str = "tokenrouter_step_seconds_by_batch_total";
/// Counter `{model}`: tokens fed through the model's forward (prompt
/// chunks, the catch-up prefill of a request handed back to it, and decode
/// tokens; vLLM's iteration tokens). Per output token, what routing costs a
/// model beyond the tokens it writes.
pub const STEP_TOKENS_TOTAL: &str = "tokenrouter_step_tokens_total";
/// Counter `{model}`: tokens written by the model.
pub const TOKENS_COMMITTED_TOTAL: &str = "tokenrouter_tokens_committed_total";
/// Counter `{model}`: prompt tokens looked up in the prefix cache.
pub const PREFIX_CACHE_QUERIES_TOTAL: &str = "tokenrouter_prefix_cache_queries_total";
/// Counter `{model}`: prompt tokens found in the prefix cache.
pub const PREFIX_CACHE_HITS_TOTAL: &str = "tokenrouter_prefix_cache_hits_total";
/// Counter `{model}`: requests preempted for lack of KV memory.
pub const NUM_PREEMPTIONS_TOTAL: &str = "tokenrouter_num_preemptions_total";
/// Counter `{model}`: failed KV frees (a double free or a leaked block);
/// anything above zero is a bug.
pub const KV_FREE_ERRORS_TOTAL: &str = "tokenrouter_kv_free_errors_total";
/// Counter `{finished_reason}`: requests that ended normally.
pub const REQUEST_SUCCESS_TOTAL: &str = "tokenrouter_request_success_total";
/// Counter `{error_type}`: requests that failed.
pub const REQUEST_FAILURE_TOTAL: &str = "tokenrouter_request_failure_total";
/// Counter `{from, to, kind}`: messages sent between subservers.
pub const PEER_MESSAGES_TOTAL: &str = "tokenrouter_peer_messages_total";
/// Counter `{model, policy, reason}`: steps on `model` whose routing signal
/// could not be computed (`reason`: `missing_input`, `shape`, `compute`);
/// the current writer kept the pen for those steps. Anything above zero is
/// a fault to look at, not a routing decision.
pub const SIGNAL_FAILURES_TOTAL: &str = "tokenrouter_signal_failures_total";
/// Counter `{model, peer}`: requests at home `model` that continued on it
/// after `peer` failed (`fallback_on_peer_failure`); without the setting
/// those requests fail and count in [`REQUEST_FAILURE_TOTAL`].
pub const PEER_FALLBACKS_TOTAL: &str = "tokenrouter_peer_fallbacks_total";

const MODEL: &[&str] = &["model"];

/// Every subserver metric with its type and labels.
pub const ALL: &[MetricDef] = &[
    MetricDef::new(NUM_REQUESTS_RUNNING, MetricKind::Gauge, MODEL),
    MetricDef::new(NUM_REQUESTS_WAITING, MetricKind::Gauge, MODEL),
    MetricDef::new(NUM_REQUESTS_PENDING, MetricKind::Gauge, MODEL),
    MetricDef::new(KV_CACHE_USAGE_PERC, MetricKind::Gauge, MODEL),
    MetricDef::new(DELAYED_BATCHING_THRESHOLD, MetricKind::Gauge, MODEL),
    MetricDef::new(
        DELAYED_BATCHING_TABLE,
        MetricKind::Gauge,
        &["model", "concurrency"],
    ),
    MetricDef::new(ROUTING_THRESHOLD, MetricKind::Gauge, MODEL),
    MetricDef::new(ACTIVE_CONCURRENCY, MetricKind::Gauge, MODEL),
    MetricDef::new(
        STEP_LATENCY_SECONDS,
        MetricKind::Histogram,
        &["model", "batch_bucket"],
    ),
    MetricDef::new(
        ROUTE_TRANSITIONS_TOTAL,
        MetricKind::Counter,
        &["from", "to"],
    ),
    MetricDef::new(ROUTE_DECISIONS_TOTAL, MetricKind::Counter, &["model", "to"]),
    MetricDef::new(
        ROUTE_CREDITED_TOKENS_TOTAL,
        MetricKind::Counter,
        &["model", "to"],
    ),
    MetricDef::new(
        STEPS_BY_BATCH_TOTAL,
        MetricKind::Counter,
        &["model", "batch_size"],
    ),
    MetricDef::new(
        STEP_SECONDS_BY_BATCH_TOTAL,
        MetricKind::Counter,
        &["model", "batch_size"],
    ),
    MetricDef::new(STEP_TOKENS_TOTAL, MetricKind::Counter, MODEL),
    MetricDef::new(TOKENS_COMMITTED_TOTAL, MetricKind::Counter, MODEL),
    MetricDef::new(PREFIX_CACHE_QUERIES_TOTAL, MetricKind::Counter, MODEL),
    MetricDef::new(PREFIX_CACHE_HITS_TOTAL, MetricKind::Counter, MODEL),
    MetricDef::new(NUM_PREEMPTIONS_TOTAL, MetricKind::Counter, MODEL),
    MetricDef::new(KV_FREE_ERRORS_TOTAL, MetricKind::Counter, MODEL),
    MetricDef::new(
        REQUEST_SUCCESS_TOTAL,
        MetricKind::Counter,
        &["finished_reason"],
    ),
    MetricDef::new(REQUEST_FAILURE_TOTAL, MetricKind::Counter, &["error_type"]),
    MetricDef::new(
        PEER_MESSAGES_TOTAL,
        MetricKind::Counter,
        &["from", "to", "kind"],
    ),
    MetricDef::new(
        SIGNAL_FAILURES_TOTAL,
        MetricKind::Counter,
        &["model", "policy", "reason"],
    ),
    MetricDef::new(
        PEER_FALLBACKS_TOTAL,
        MetricKind::Counter,
        &["model", "peer"],
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_series_names_match_the_family() {
        assert_eq!(
            STEP_LATENCY_SECONDS_SUM,
            format!("{STEP_LATENCY_SECONDS}_sum")
        );
        assert_eq!(
            STEP_LATENCY_SECONDS_COUNT,
            format!("{STEP_LATENCY_SECONDS}_count")
        );
    }
}
