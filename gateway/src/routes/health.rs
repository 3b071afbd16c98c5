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

/// Readiness.
pub fn handle(gw: Arc<Gateway>) -> Response {
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
