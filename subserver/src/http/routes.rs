//! The warp filters of the endpoints (table in the module doc).

use std::convert::Infallible;
use std::sync::Arc;

use prometheus::Registry;
use serde_json::json;
use warp::http::StatusCode;
use warp::hyper::body::Bytes;
use warp::reject::{LengthRequired, MethodNotAllowed, PayloadTooLarge};
use warp::reply::Response;
use warp::{Filter, Rejection};

use super::access::{gate, AdminToken, Denied, GateKind};
use super::admin::AdminApi;
use super::reply;
use super::thresholds::{parse_thresholds, thresholds_json};
use crate::metrics::{encode_text, TEXT_CONTENT_TYPE};

/// Largest PUT body accepted: a threshold table is a few kilobytes
/// (a handful of models by a thousand `n` fit).
const MAX_BODY_BYTES: u64 = 64 * 1024;

const ENDPOINTS: &str = "GET /metrics, GET /livez, GET /health, GET|PUT /admin/thresholds, GET|PUT /admin/routing_threshold, GET /admin/state, POST /internal/generate, GET /internal/text-side";

/// Largest `/internal/generate` body (a long prompt's ids as JSON).
const MAX_GENERATE_BYTES: u64 = 64 * 1024 * 1024;

/// Every endpoint, with errors turned into JSON answers; the control
/// endpoints pass `kind`'s gate first.
pub(super) fn routes(
    state: Arc<dyn AdminApi>,
    registry: Registry,
    ingress: Option<Arc<dyn super::ingress::Ingress>>,
    kind: GateKind,
    token: Option<AdminToken>,
) -> impl Filter<Extract = (Response,), Error = Infallible> + Clone + Send + Sync + 'static {
    let gate = gate(kind, token);
    let metrics = warp::path!("metrics")
        .and(warp::get())
        .map(move || metrics(&registry));
    let s = state.clone();
    let livez = warp::path!("livez")
        .and(warp::get())
        .map(move || status_reply(s.alive()));
    let s = state.clone();
    let health = warp::path!("health")
        .and(warp::get())
        .map(move || status_reply(s.healthy()));
    let s = state.clone();
    let get_thresholds = warp::path!("admin" / "thresholds")
        .and(warp::get())
        .and(gate.clone())
        .map(move || reply::json(StatusCode::OK, &thresholds_json(&s.thresholds())));
    let s = state.clone();
    let put_thresholds = warp::path!("admin" / "thresholds")
        .and(warp::put())
        .and(gate.clone())
        .and(warp::body::content_length_limit(MAX_BODY_BYTES))
        .and(warp::body::bytes())
        .map(move |body: Bytes| put_thresholds(s.as_ref(), &body));
    let s = state.clone();
    let get_knob = warp::path!("admin" / "routing_threshold")
        .and(warp::get())
        .and(gate.clone())
        .map(move || {
            reply::json(
                StatusCode::OK,
                &json!({"routing_threshold": s.routing_threshold()}),
            )
        });
    let s = state.clone();
    let put_knob = warp::path!("admin" / "routing_threshold")
        .and(warp::put())
        .and(gate.clone())
        .and(warp::body::content_length_limit(MAX_BODY_BYTES))
        .and(warp::body::bytes())
        .map(move |body: Bytes| put_routing_threshold(s.as_ref(), &body));
    let s = state.clone();
    let admin_state = warp::path!("admin" / "state")
        .and(warp::get())
        .and(gate.clone())
        .map(move || reply::json(StatusCode::OK, &s.snapshot()));
    let text_side = warp::path!("internal" / "text-side")
        .and(warp::get())
        .and(gate.clone())
        .map(move || super::text_side::answer(state.text_dir()));
    let generate = warp::path!("internal" / "generate")
        .and(warp::post())
        .and(gate)
        .and(warp::body::content_length_limit(MAX_GENERATE_BYTES))
        .and(warp::body::bytes())
        .map(move |body: Bytes| super::ingress::generate(ingress.clone(), &body));

    metrics
        .or(livez)
        .unify()
        .or(health)
        .unify()
        .or(get_thresholds)
        .unify()
        .or(put_thresholds)
        .unify()
        .or(get_knob)
        .unify()
        .or(put_knob)
        .unify()
        .or(admin_state)
        .unify()
        .or(text_side)
        .unify()
        .or(generate)
        .unify()
        .recover(rejection)
        .unify()
}

fn metrics(registry: &Registry) -> Response {
    match encode_text(registry) {
        Ok(text) => reply::text(StatusCode::OK, TEXT_CONTENT_TYPE, text),
        Err(e) => {
            tracing::error!(error = %e, "GET /metrics");
            reply::error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())
        }
    }
}

/// 200 `{"status":"ok"}`, or 503 with the reason.
fn status_reply(verdict: Result<(), String>) -> Response {
    match verdict {
        Ok(()) => reply::json(StatusCode::OK, &json!({"status": "ok"})),
        Err(reason) => reply::json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "unhealthy", "reason": reason}),
        ),
    }
}

fn put_thresholds(state: &dyn AdminApi, body: &[u8]) -> Response {
    let table = match parse_thresholds(body, &state.thresholds()) {
        Ok(table) => table,
        Err(message) => {
            tracing::warn!(%message, "PUT /admin/thresholds refused");
            return reply::error(StatusCode::BAD_REQUEST, &message);
        }
    };
    tracing::info!(?table, "PUT /admin/thresholds");
    match state.set_thresholds(table) {
        Ok(now) => reply::json(StatusCode::OK, &thresholds_json(&now)),
        Err(message) => {
            tracing::warn!(%message, "PUT /admin/thresholds refused by the subserver");
            reply::error(StatusCode::BAD_REQUEST, &message)
        }
    }
}

fn put_routing_threshold(state: &dyn AdminApi, body: &[u8]) -> Response {
    let value = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("routing_threshold")
                .and_then(serde_json::Value::as_f64)
        });
    let Some(value) = value else {
        return reply::error(
            StatusCode::BAD_REQUEST,
            "body must be {\"routing_threshold\": <number>}",
        );
    };
    match state.set_routing_threshold(value) {
        Ok(now) => {
            tracing::info!(routing_threshold = now, "PUT /admin/routing_threshold");
            reply::json(StatusCode::OK, &json!({"routing_threshold": now}))
        }
        Err(message) => reply::error(StatusCode::BAD_REQUEST, &message),
    }
}

/// What no endpoint took: unknown path, wrong method, bad body framing.
async fn rejection(r: Rejection) -> Result<Response, Infallible> {
    // A combined rejection holds every branch's reason; `find` returns the
    // first present, so the body errors (from the branch whose path and
    // method matched) are looked for before the other branches' 405s.
    if let Some(denied) = r.find::<Denied>() {
        let mut resp = reply::error(denied.status, denied.message);
        if denied.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                warp::http::header::WWW_AUTHENTICATE,
                warp::http::HeaderValue::from_static("Bearer"),
            );
        }
        return Ok(resp);
    }
    let (status, message) = if r.find::<PayloadTooLarge>().is_some() {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body larger than {MAX_BODY_BYTES} bytes"),
        )
    } else if r.find::<LengthRequired>().is_some() {
        (
            StatusCode::LENGTH_REQUIRED,
            "a Content-Length header is required".to_string(),
        )
    } else if r.find::<MethodNotAllowed>().is_some() {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method not allowed; endpoints: {ENDPOINTS}"),
        )
    } else if r.is_not_found() {
        (
            StatusCode::NOT_FOUND,
            format!("no such endpoint; endpoints: {ENDPOINTS}"),
        )
    } else {
        (StatusCode::BAD_REQUEST, format!("bad request: {r:?}"))
    };
    Ok(reply::error(status, &message))
}
