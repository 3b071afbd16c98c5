//! Response bodies shared by the endpoints.

use serde_json::json;
use warp::http::{header, StatusCode};
use warp::reply::Response;
use warp::Reply;

/// `value` as JSON with `status`.
pub(super) fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    warp::reply::with_status(warp::reply::json(value), status).into_response()
}

/// An OpenAI-style error body: `{"error":{"message":..,"type":..}}`.
pub(super) fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status {
        StatusCode::NOT_FOUND => "not_found_error",
        s if s.is_server_error() => "internal_error",
        _ => "invalid_request_error",
    };
    json(
        status,
        &json!({"error": {"message": message, "type": kind}}),
    )
}

/// Plain text with an explicit content type.
pub(super) fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let reply = warp::reply::with_header(body, header::CONTENT_TYPE, content_type);
    warp::reply::with_status(reply, status).into_response()
}
