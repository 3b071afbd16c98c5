//! The warp filters: one module per endpoint, plus the rejection handler
//! that turns warp's own refusals (size, method, route) into OpenAI errors.

pub mod completions;
pub mod health;
pub mod metrics;
pub mod models;
pub mod tokenize;
pub mod ui;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use warp::http::HeaderMap;
use warp::reply::Response;
use warp::{Filter, Rejection};

use crate::error::ApiError;
use crate::state::Gateway;

/// Every route of the gateway.
pub fn routes(gw: Arc<Gateway>) -> warp::filters::BoxedFilter<(Response,)> {
    let limit = gw.options.max_body_bytes as u64;
    let body_timeout = gw.options.body_timeout;
    let with_gw = {
        let gw = gw.clone();
        warp::any().map(move || gw.clone())
    };
    let body = warp::header::optional::<u64>("content-length")
        .and(warp::body::stream())
        .and_then(move |len, stream| async move {
            tokio::time::timeout(body_timeout, read_limited(len, stream, limit))
                .await
                .unwrap_or_else(|_| Err(warp::reject::custom(BodyTimeout)))
        });
    // Path before method: a known path with the wrong method is a 405,
    // an unknown path a 404.
    let post = |path: &'static str| {
        warp::path::path(path)
            .and(warp::path::end())
            .and(warp::post())
    };
    let chat = warp::path!("v1" / "chat" / "completions")
        .and(warp::post())
        .and(with_gw.clone())
        .and(warp::header::headers_cloned())
        .and(body)
        .then(|gw: Arc<Gateway>, h: HeaderMap, b: Bytes| async move {
            completions::handle(gw, crate::openai::Endpoint::Chat, h, b).await
        });
    let completions = warp::path!("v1" / "completions")
        .and(warp::post())
        .and(with_gw.clone())
        .and(warp::header::headers_cloned())
        .and(body)
        .then(|gw: Arc<Gateway>, h: HeaderMap, b: Bytes| async move {
            completions::handle(gw, crate::openai::Endpoint::Completions, h, b).await
        });
    let models = warp::path!("v1" / "models")
        .and(warp::get())
        .and(with_gw.clone())
        .and(warp::header::headers_cloned())
        .map(models::handle);
    let tokenize = post("tokenize")
        .and(with_gw.clone())
        .and(warp::header::headers_cloned())
        .and(body)
        .map(tokenize::tokenize);
    let detokenize = post("detokenize")
        .and(with_gw.clone())
        .and(warp::header::headers_cloned())
        .and(body)
        .map(tokenize::detokenize);
    let health = warp::path!("health")
        .and(warp::get())
        .and(with_gw.clone())
        .map(health::handle);
    let livez = warp::path!("livez").and(warp::get()).map(health::live);
    let metrics = warp::path!("metrics")
        .and(warp::get())
        .and(with_gw.clone())
        .map(metrics::handle);
    let ui = warp::path!("ui")
        .and(warp::get())
        .and(with_gw.clone())
        .map(ui::handle);
    let recover_gw = gw;
    chat.or(completions)
        .unify()
        .or(models)
        .unify()
        .or(tokenize)
        .unify()
        .or(detokenize)
        .unify()
        .or(health)
        .unify()
        .or(livez)
        .unify()
        .or(metrics)
        .unify()
        .or(ui)
        .unify()
        .recover(move |r| recover(recover_gw.clone(), r))
        .unify()
        .boxed()
}

/// Checks the API key: `Some(401 response)` (counted) when it is wrong.
pub fn authorize(gw: &Gateway, route: &str, headers: &HeaderMap) -> Option<Response> {
    let value = headers.get("authorization").and_then(|v| v.to_str().ok());
    if gw.keys.check(value) {
        None
    } else {
        Some(fail(gw, route, ApiError::Unauthorized))
    }
}

/// Counts `resp` under `route` and returns it.
pub fn count(gw: &Gateway, route: &str, resp: Response) -> Response {
    gw.metrics
        .http
        .with_label_values(&[route, resp.status().as_str()])
        .inc();
    resp
}

/// The error response for `e`, counted.
pub fn fail(gw: &Gateway, route: &str, e: ApiError) -> Response {
    gw.count_error(&e);
    count(gw, route, e.response())
}

/// The body was larger than `gateway.max_body_bytes`.
#[derive(Debug)]
struct BodyTooLarge;
impl warp::reject::Reject for BodyTooLarge {}

/// The body did not arrive within `gateway.body_timeout`.
#[derive(Debug)]
struct BodyTimeout;
impl warp::reject::Reject for BodyTimeout {}

/// The body could not be read (the client went away mid-body).
#[derive(Debug)]
struct BodyUnreadable;
impl warp::reject::Reject for BodyUnreadable {}

/// Reads a body of at most `limit` bytes, with or without `Content-Length`
/// (chunked bodies are counted as they arrive).
async fn read_limited<S, B>(len: Option<u64>, stream: S, limit: u64) -> Result<Bytes, Rejection>
where
    S: futures_util::Stream<Item = Result<B, warp::Error>> + Send,
    B: bytes::Buf,
{
    use futures_util::StreamExt;
    if len.is_some_and(|l| l > limit) {
        return Err(warp::reject::custom(BodyTooLarge));
    }
    let mut out = bytes::BytesMut::new();
    let mut stream = std::pin::pin!(stream);
    while let Some(piece) = stream.next().await {
        let mut piece = piece.map_err(|_| warp::reject::custom(BodyUnreadable))?;
        if (out.len() + piece.remaining()) as u64 > limit {
            return Err(warp::reject::custom(BodyTooLarge));
        }
        while piece.has_remaining() {
            let chunk = piece.chunk();
            let n = chunk.len();
            out.extend_from_slice(chunk);
            piece.advance(n);
        }
    }
    Ok(out.freeze())
}

async fn recover(gw: Arc<Gateway>, r: Rejection) -> Result<Response, Infallible> {
    let e = if r.is_not_found() {
        ApiError::NotFound("no such route".into())
    } else if r.find::<BodyTooLarge>().is_some() {
        ApiError::PayloadTooLarge(gw.options.max_body_bytes)
    } else if r.find::<BodyTimeout>().is_some() {
        ApiError::RequestTimeout(gw.options.body_timeout.as_secs())
    } else if r.find::<BodyUnreadable>().is_some() {
        ApiError::BadJson("the body could not be read".into())
    } else if r.find::<warp::reject::InvalidHeader>().is_some() {
        ApiError::BadJson("a header is malformed (Content-Length?)".into())
    } else if r.find::<warp::reject::PayloadTooLarge>().is_some() {
        ApiError::PayloadTooLarge(gw.options.max_body_bytes)
    } else if r.find::<warp::reject::LengthRequired>().is_some() {
        ApiError::BadJson("a Content-Length header is required".into())
    } else if r.find::<warp::reject::MethodNotAllowed>().is_some() {
        ApiError::MethodNotAllowed
    } else {
        ApiError::BadJson(format!("bad request: {r:?}"))
    };
    Ok(fail(&gw, "other", e))
}
