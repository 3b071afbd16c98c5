//! The gateway's metrics: vLLM's own names (`vllm:*`, label `model_name`)
//! where vLLM has the metric, `tokenrouter_*` for what only we have. No
//! name here equals a subserver name, so `serve` can append the
//! subservers' exposition to the gateway's.

use super::{MetricDef, MetricKind};

/// Gauge `{model_name}`: requests generating (`vllm:num_requests_running`).
pub const NUM_REQUESTS_RUNNING: &str = "vllm:num_requests_running";
/// Gauge `{model_name}`: requests queued for a slot.
pub const NUM_REQUESTS_WAITING: &str = "vllm:num_requests_waiting";
/// Histogram `{model_name}`: time to first token, seconds.
pub const TTFT: &str = "vllm:time_to_first_token_seconds";
/// Histogram `{model_name}`: time between tokens of one sequence, seconds.
pub const ITL: &str = "vllm:inter_token_latency_seconds";
/// Histogram `{model_name}`: request start to last byte, seconds.
pub const E2E: &str = "vllm:e2e_request_latency_seconds";
/// Counter `{model_name, finished_reason}`: requests that finished.
pub const REQUEST_SUCCESS: &str = "vllm:request_success_total";
/// Counter `{model_name}`: prompt tokens.
pub const PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";
/// Counter `{model_name}`: generated tokens.
pub const GENERATION_TOKENS: &str = "vllm:generation_tokens_total";
/// Counter `{route, status}`: HTTP answers.
pub const HTTP_REQUESTS: &str = "tokenrouter_http_requests_total";
/// Counter `{error_type}`: failed requests.
pub const REQUEST_ERRORS: &str = "tokenrouter_request_errors_total";
/// Counter `{model}`: generated tokens by the model that wrote them.
pub const TOKENS_BY_MODEL: &str = "tokenrouter_generation_tokens_by_model_total";
/// Gauge (no labels): tokens written by non-entry (large) models over all
/// generated tokens, since start.
pub const LARGE_SHARE: &str = "tokenrouter_large_model_token_share";
/// Counter `{model_name}`: changes of writer between consecutive tokens.
pub const SWITCHES: &str = "tokenrouter_writer_switches_total";
/// Gauge `{state}`: groups behind the gateway, `healthy` or `unhealthy`.
pub const GROUPS: &str = "tokenrouter_gateway_groups";

const MODEL_NAME: &[&str] = &["model_name"];

/// Every gateway metric with its type and labels.
pub const ALL: &[MetricDef] = &[
    MetricDef::new(NUM_REQUESTS_RUNNING, MetricKind::Gauge, MODEL_NAME),
    MetricDef::new(NUM_REQUESTS_WAITING, MetricKind::Gauge, MODEL_NAME),
    MetricDef::new(TTFT, MetricKind::Histogram, MODEL_NAME),
    MetricDef::new(ITL, MetricKind::Histogram, MODEL_NAME),
    MetricDef::new(E2E, MetricKind::Histogram, MODEL_NAME),
    MetricDef::new(
        REQUEST_SUCCESS,
        MetricKind::Counter,
        &["model_name", "finished_reason"],
    ),
    MetricDef::new(PROMPT_TOKENS, MetricKind::Counter, MODEL_NAME),
    MetricDef::new(GENERATION_TOKENS, MetricKind::Counter, MODEL_NAME),
    MetricDef::new(HTTP_REQUESTS, MetricKind::Counter, &["route", "status"]),
    MetricDef::new(REQUEST_ERRORS, MetricKind::Counter, &["error_type"]),
    MetricDef::new(TOKENS_BY_MODEL, MetricKind::Counter, &["model"]),
    MetricDef::new(LARGE_SHARE, MetricKind::Gauge, &[]),
    MetricDef::new(SWITCHES, MetricKind::Counter, MODEL_NAME),
    MetricDef::new(GROUPS, MetricKind::Gauge, &["state"]),
];
