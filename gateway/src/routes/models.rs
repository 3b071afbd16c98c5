//! `GET /v1/models`: the group name (token-level routing) and every member
//! model (query-level on that model).

use std::sync::Arc;

use serde_json::json;
use warp::http::{HeaderMap, StatusCode};
use warp::reply::Response;

use crate::error::json_response;
use crate::routes::{authorize, count};
use crate::state::Gateway;

/// Lists the served models.
pub fn handle(gw: Arc<Gateway>, headers: HeaderMap) -> Response {
    const ROUTE: &str = "/v1/models";
    if let Some(resp) = authorize(&gw, ROUTE, &headers) {
        return resp;
    }
    let entry = |id: &str, routing: &str| {
        json!({
            "id": id,
            "object": "model",
            "created": 0,
            "owned_by": "tokenrouter",
            "routing": routing,
        })
    };
    let mut data = vec![entry(&gw.catalog.served, "token-level")];
    for m in &gw.catalog.members {
        data.push(entry(m, "query-level"));
    }
    count(
        &gw,
        ROUTE,
        json_response(StatusCode::OK, &json!({"object": "list", "data": data})),
    )
}
