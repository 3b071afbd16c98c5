//! `GET /v1/models`: every routed group's name (token-level routing) and
//! every member model (query-level on that model), each with the sampling
//! defaults a request that leaves them out gets (`sampling_defaults`).

use std::sync::Arc;

use engine_config::GenerationDefaults;
use serde_json::{json, Value};
use warp::http::{HeaderMap, StatusCode};
use warp::reply::Response;

use crate::error::json_response;
use crate::routes::{authorize, count};
use crate::state::Gateway;
use crate::validate::Target;

/// The values in force (vLLM's spelling: `top_k` -1 when off).
fn in_force(d: &GenerationDefaults) -> Value {
    let p = d.params();
    json!({
        "temperature": p.temperature,
        "top_p": p.top_p,
        "top_k": if p.top_k == 0 { -1 } else { p.top_k as i64 },
        "min_p": p.min_p,
    })
}

/// One model object: OpenAI's fields plus `routing`, `group`,
/// `sampling_defaults` and, where known, `precision` (a member: what its
/// weights are computed in; a group: each member's, by name).
fn entry(
    id: &str,
    routing: &str,
    group: &str,
    defaults: &GenerationDefaults,
    precision: Option<Value>,
) -> Value {
    let mut v = json!({
        "id": id,
        "object": "model",
        "created": 0,
        "owned_by": "tokenrouter",
        "routing": routing,
        "group": group,
        "sampling_defaults": in_force(defaults),
    });
    if let (Some(p), Some(obj)) = (precision, v.as_object_mut()) {
        obj.insert("precision".into(), p);
    }
    v
}

/// Every served name, groups first (in configuration order), then the
/// members; a member name two groups share is listed once, for the group
/// that serves it (the first).
pub fn list(gw: &Gateway) -> Vec<Value> {
    let mut data: Vec<Value> = gw
        .served
        .iter()
        .map(|g| {
            let c = &g.catalog;
            let d = c.defaults_for(Target::Routed);
            let members: serde_json::Map<String, Value> = c
                .members
                .iter()
                .zip(&c.member_precision)
                .map(|(m, p)| (m.clone(), Value::from(p.as_str())))
                .collect();
            let precision = (!members.is_empty()).then_some(Value::Object(members));
            entry(&c.served, "token-level", &c.served, &d, precision)
        })
        .collect();
    let mut seen: Vec<&str> = gw
        .served
        .iter()
        .map(|g| g.catalog.served.as_str())
        .collect();
    for g in &gw.served {
        let c = &g.catalog;
        for (i, m) in c.members.iter().enumerate() {
            if seen.contains(&m.as_str()) {
                continue;
            }
            seen.push(m);
            let d = c.defaults_for(Target::Pinned(i as u16));
            let precision = c.member_precision.get(i).map(|p| Value::from(p.as_str()));
            data.push(entry(m, "query-level", &c.served, &d, precision));
        }
    }
    data
}

/// Lists the served models.
pub fn handle(gw: Arc<Gateway>, headers: HeaderMap) -> Response {
    const ROUTE: &str = "/v1/models";
    if let Some(resp) = authorize(&gw, ROUTE, &headers) {
        return resp;
    }
    let data = list(&gw);
    count(
        &gw,
        ROUTE,
        json_response(StatusCode::OK, &json!({"object": "list", "data": data})),
    )
}
