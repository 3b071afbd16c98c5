//! `GET /health` (readiness): 200 when every subserver of at least one
//! group answers, or when no group is listed at all (scaled to zero:
//! requests wait for the first group, see `Pool::pick_or_wait`); 503
//! otherwise and while draining. `GET /livez`
//! (liveness): 200 while the process serves, whatever the groups do, so an
//! outage of the groups does not restart the gateways.

use std::sync::Arc;

use serde_json::json;
use warp::http::StatusCode;
use warp::reply::Response;

use crate::error::json_response;
use crate::state::Gateway;

/// Liveness: this process answers (also while it drains: SIGTERM already
/// decides its end).
pub fn live() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

/// Readiness while the text side is pending and groups are listed: 503
/// with the reason (the gateway could not tokenize a request). With no
/// group listed the usual rule holds (ready when scaled to zero), so the
/// first request can still be the load that scales up.
fn text_unready(gw: &Gateway) -> Option<Response> {
    let pending = gw.pending_text()?;
    if pending.pool.groups().is_empty() {
        return None;
    }
    let reason = pending.text.not_loaded()?.to_string();
    Some(json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({"status": "unavailable", "reason": reason}),
    ))
}

/// Readiness.
pub fn handle(gw: Arc<Gateway>) -> Response {
    if let Some(unready) = text_unready(&gw) {
        return unready;
    }
    let groups = gw.all_replicas();
    let healthy = groups.iter().filter(|g| g.backend.healthy()).count();
    let scaled_to_zero = groups.is_empty() && !gw.options.group_wait.is_zero();
    let ok = (healthy > 0 || scaled_to_zero) && !gw.shutdown.closing();
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(
        status,
        &json!({
            "status": if ok { "ok" } else { "unavailable" },
            "groups": groups.len(),
            "healthy_groups": healthy,
            "draining": gw.shutdown.closing(),
        }),
    )
}
