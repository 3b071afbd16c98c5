//! `GET /metrics`: Prometheus text of the gateway and in-process subservers.

use std::sync::Arc;

use warp::http::HeaderValue;
use warp::reply::Response;

use crate::state::Gateway;

/// The exposition.
pub fn handle(gw: Arc<Gateway>) -> Response {
    gw.refresh_gauges();
    let text = gw.metrics.render(&gw.extra_registries);
    let mut resp = Response::new(text.into());
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    resp
}
