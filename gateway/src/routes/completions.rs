//! `POST /v1/chat/completions` and `POST /v1/completions`: auth, parse,
//! validate, pick a group, admit, run.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use warp::http::HeaderMap;
use warp::reply::Response;

use crate::admission::AdmissionError;
use crate::error::ApiError;
use crate::generate::Run;
use crate::openai::request::{parse_object, typed, ChatRequest, CompletionRequest};
use crate::openai::Endpoint;
use crate::routes::{authorize, count, fail};
use crate::state::Gateway;
use crate::validate::{self, Prepared};

/// A generation request while the text side is pending: the 503 (counted)
/// that says why, or `None` to go on. With no group listed (scaled to zero)
/// the request first waits, counted as waiting, for a group and then for
/// the text side, within `gateway.group_wait_ms`, as it would for a group.
async fn text_gate(gw: &Gateway, route: &str) -> Option<Response> {
    let pending = gw.pending_text()?;
    let wait = gw.options.group_wait;
    if pending.pool.groups().is_empty() && !wait.is_zero() && !gw.shutdown.draining() {
        let start = Instant::now();
        if pending.pool.pick_or_wait(wait).await.is_some() {
            pending
                .text
                .wait_loaded(wait.saturating_sub(start.elapsed()))
                .await;
        }
    }
    pending.text.not_loaded().map(|e| fail(gw, route, e))
}

/// Handles one generation request.
pub async fn handle(
    gw: Arc<Gateway>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let start = Instant::now();
    let route = match endpoint {
        Endpoint::Chat => "/v1/chat/completions",
        Endpoint::Completions => "/v1/completions",
    };
    if let Some(resp) = authorize(&gw, route, &headers) {
        return resp;
    }
    if let Some(resp) = text_gate(&gw, route).await {
        return resp;
    }
    if gw.shutdown.draining() {
        return fail(
            &gw,
            route,
            ApiError::Unavailable("the server is shutting down".into()),
        );
    }
    let (served, prepared) = match prepare(&gw, endpoint, &body) {
        Ok(p) => p,
        Err(e) => return fail(&gw, route, e),
    };
    let pool = &gw.served[served].pool;
    let Some(group) = pool.pick_or_wait(gw.options.group_wait).await else {
        return fail(&gw, route, ApiError::Unavailable("no healthy group".into()));
    };
    let slot = match group.admission.acquire(prepared.num_sequences()).await {
        Ok(s) => s,
        Err(AdmissionError::Full { .. }) => {
            return fail(
                &gw,
                route,
                ApiError::Overloaded {
                    retry_after_s: gw.options.retry_after_s,
                },
            )
        }
        Err(e @ AdmissionError::TooLarge { .. }) => {
            return fail(&gw, route, ApiError::invalid("n", e.to_string()))
        }
    };
    let stream = prepared.stream;
    let run = Run::start(gw.clone(), served, prepared, group, slot, start);
    let resp = if stream {
        run.stream().await
    } else {
        run.collect().await
    };
    count(&gw, route, resp)
}

/// The request checked against the group its `model` names: that group's
/// index and the prepared request.
fn prepare(gw: &Gateway, endpoint: Endpoint, body: &[u8]) -> Result<(usize, Prepared), ApiError> {
    let map = parse_object(body, endpoint)?;
    match endpoint {
        Endpoint::Chat => {
            let req: ChatRequest = typed(map)?;
            let i = gw.group_of(&req.model)?;
            let g = &gw.served[i];
            Ok((i, validate::chat(req, &g.catalog, &g.text)?))
        }
        Endpoint::Completions => {
            let req: CompletionRequest = typed(map)?;
            let i = gw.group_of(&req.model)?;
            let g = &gw.served[i];
            Ok((i, validate::completion(req, &g.catalog, &g.text)?))
        }
    }
}
