//! `GET /health`: 200 when every subserver of at least one group answers,
//! 503 otherwise (and while draining).

use std::sync::Arc;

use serde_json::json;
use warp::http::StatusCode;
use warp::reply::Response;

use crate::error::json_response;
use crate::state::Gateway;

/// Readiness.
pub fn handle(gw: Arc<Gateway>) -> Response {
    let groups = gw.pool.groups();
    let healthy = groups.iter().filter(|g| g.backend.healthy()).count();
    let ok = healthy > 0 && !gw.shutdown.draining();
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
            "draining": gw.shutdown.draining(),
        }),
    )
}
