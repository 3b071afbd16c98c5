//! Every way a request can fail at the gateway, with its HTTP status and the
//! OpenAI error body `{"error": {"message", "type", "param", "code"}}`.

use protocol::client::RequestError;
use serde_json::json;
use warp::http::{HeaderValue, StatusCode};
use warp::reply::Response;

/// A request the gateway answers with an error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// The body is not valid JSON (or not UTF-8, or not an object).
    #[error("{0}")]
    BadJson(String),
    /// A field has a bad value; `param` names it.
    #[error("{message}")]
    InvalidParam {
        /// The offending field (`messages[1].role`, `temperature`, ...).
        param: String,
        /// What is wrong with it.
        message: String,
    },
    /// Fields the gateway does not implement (never silently ignored).
    #[error("unsupported parameter(s): {}", .0.join(", "))]
    Unsupported(Vec<String>),
    /// The prompt plus `max_tokens` does not fit the model's context.
    #[error("{0}")]
    ContextLength(String),
    /// Missing or wrong API key.
    #[error("invalid or missing API key")]
    Unauthorized,
    /// `model` names no served model.
    #[error("the model `{0}` does not exist")]
    ModelNotFound(String),
    /// No such route.
    #[error("not found: {0}")]
    NotFound(String),
    /// Wrong HTTP method for the route.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The client did not send its body in time.
    #[error("the request body did not arrive within {0} s")]
    RequestTimeout(u64),
    /// The body is larger than `gateway.max_body_bytes`.
    #[error("request body larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// Every slot and queue place is taken.
    #[error("the server is over capacity, retry later")]
    Overloaded {
        /// `Retry-After` seconds.
        retry_after_s: u64,
    },
    /// No group is healthy, or the gateway is shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// The engine failed while serving the request.
    #[error("{0}")]
    Engine(String),
}

impl ApiError {
    /// A bad value of `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidParam {
            param: param.into(),
            message: message.into(),
        }
    }

    /// Stable label for metrics (also the OpenAI `code`).
    pub fn error_type(&self) -> &'static str {
        match self {
            Self::BadJson(_) => "invalid_json",
            Self::InvalidParam { .. } => "invalid_parameter",
            Self::Unsupported(_) => "unsupported_parameter",
            Self::ContextLength(_) => "context_length_exceeded",
            Self::Unauthorized => "invalid_api_key",
            Self::ModelNotFound(_) => "model_not_found",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::RequestTimeout(_) => "request_timeout",
            Self::Overloaded { .. } => "over_capacity",
            Self::Unavailable(_) => "unavailable",
            Self::Engine(_) => "engine_error",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadJson(_)
            | Self::InvalidParam { .. }
            | Self::Unsupported(_)
            | Self::ContextLength(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::ModelNotFound(_) | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Engine(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's error `type`.
    fn openai_type(&self) -> &'static str {
        match self {
            Self::Unauthorized => "authentication_error",
            Self::ModelNotFound(_) | Self::NotFound(_) => "not_found_error",
            Self::Overloaded { .. } => "rate_limit_error",
            Self::Unavailable(_) | Self::Engine(_) => "server_error",
            _ => "invalid_request_error",
        }
    }

    /// The field the error is about, if any.
    fn param(&self) -> Option<String> {
        match self {
            Self::InvalidParam { param, .. } => Some(param.clone()),
            Self::Unsupported(fields) => fields.first().cloned(),
            Self::ModelNotFound(_) => Some("model".into()),
            Self::ContextLength(_) => Some("max_tokens".into()),
            _ => None,
        }
    }

    /// `{"error": {"message", "type", "param", "code"}}`. An engine
    /// failure's text is cut to its first line: a library's internal trace
    /// (C++ frames, local paths) never reaches a client.
    pub fn body(&self) -> serde_json::Value {
        let message = match self {
            Self::Engine(m) => client_safe(m),
            other => other.to_string(),
        };
        json!({
            "error": {
                "message": message,
                "type": self.openai_type(),
                "param": self.param(),
                "code": self.error_type(),
            }
        })
    }

    /// The full HTTP response (status, JSON body, `Retry-After` on 429).
    pub fn response(&self) -> Response {
        let mut resp = json_response(self.status(), &self.body());
        if let Self::Overloaded { retry_after_s } = self {
            if let Ok(v) = HeaderValue::from_str(&retry_after_s.to_string()) {
                resp.headers_mut().insert("retry-after", v);
            }
        }
        if matches!(self, Self::Unauthorized) {
            resp.headers_mut()
                .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

/// Longest engine message shown to a client.
const MAX_ENGINE_MESSAGE: usize = 300;

/// The first line of an internal error, without libtorch's trace marker and
/// at most [`MAX_ENGINE_MESSAGE`] bytes; the full text goes to the log.
fn client_safe(message: &str) -> String {
    let first = message.lines().next().unwrap_or("").trim();
    let first = first
        .split(" (Exception raised from")
        .next()
        .unwrap_or(first)
        .trim();
    if first.len() != message.trim().len() {
        tracing::warn!(%message, "engine error shortened for the client");
    }
    let mut end = first.len().min(MAX_ENGINE_MESSAGE);
    while !first.is_char_boundary(end) {
        end -= 1;
    }
    if first.is_empty() {
        "internal engine error".into()
    } else {
        first[..end].to_string()
    }
}

/// The one mapping of an engine failure to an OpenAI error: requests that
/// cannot fit the model are `context_length_exceeded`, a bad sampling
/// parameter names its field, other checks are `invalid_parameter`, a
/// shutdown is 503, and everything that failed while running is a 500.
impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::ContextExceeded { .. } | RequestError::KvPoolTooSmall { .. } => {
                Self::ContextLength(e.to_string())
            }
            RequestError::Sampling(p) => {
                let message = format!("{} {}", p.field, p.reason);
                Self::invalid(p.field, message)
            }
            RequestError::Shutdown => Self::Unavailable("the server is shutting down".into()),
            e if e.is_invalid() => Self::invalid("", e.message()),
            e => Self::Engine(e.to_string()),
        }
    }
}

/// A JSON response with `status`.
pub fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = Response::new(bytes.into());
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_follow_the_openai_shape() {
        let e = ApiError::Unsupported(vec!["tools".into(), "response_format".into()]);
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let b = e.body();
        assert_eq!(b["error"]["param"], "tools");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        assert!(b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tools, response_format"));
        let r = ApiError::Overloaded { retry_after_s: 2 }.response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()["retry-after"], "2");
        assert_eq!(ApiError::Unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            ApiError::ModelNotFound("x".into()).body()["error"]["code"],
            "model_not_found"
        );
        assert_eq!(ApiError::PayloadTooLarge(10).status().as_u16(), 413);
        assert_eq!(ApiError::Unavailable("x".into()).status().as_u16(), 503);
        assert_eq!(ApiError::RequestTimeout(3).status().as_u16(), 408);
    }

    #[test]
    fn engine_traces_never_reach_the_client() {
        let trace = "forward: index out of range in self\nException raised from \
                     operator() at /root/pytorch/aten/src/ATen/native/TensorAdvancedIndexing.cpp:1234\n\
                     frame #0: c10::Error::Error(...) + 0x99 (0x7f in /opt/libtorch/lib/libc10.so)";
        let b = ApiError::Engine(trace.into()).body();
        let m = b["error"]["message"].as_str().unwrap();
        assert_eq!(m, "forward: index out of range in self");
        let one_line =
            "mat1 and mat2 shapes cannot be multiplied (Exception raised from meta at /x/y.cpp:1)";
        let b = ApiError::Engine(one_line.into()).body();
        assert_eq!(
            b["error"]["message"],
            "mat1 and mat2 shapes cannot be multiplied"
        );
        let long = "x".repeat(5000);
        let b = ApiError::Engine(long).body();
        assert_eq!(
            b["error"]["message"].as_str().unwrap().len(),
            MAX_ENGINE_MESSAGE
        );
        assert_eq!(
            ApiError::Engine("\n".into()).body()["error"]["message"],
            "internal engine error"
        );
    }

    #[test]
    fn engine_failures_map_by_their_reason() {
        let ctx = ApiError::from(RequestError::ContextExceeded {
            prompt: 10,
            max_tokens: 20,
            context: 16,
        });
        assert_eq!(ctx.error_type(), "context_length_exceeded");
        assert_eq!(ctx.body()["error"]["param"], "max_tokens");
        assert!(ctx.to_string().contains("16"), "{ctx}");
        let pool = ApiError::from(RequestError::KvPoolTooSmall {
            needed: 100,
            pool: 64,
        });
        assert_eq!(pool.error_type(), "context_length_exceeded");
        let top_p = ApiError::from(RequestError::Sampling(protocol::sampling::ParamError {
            field: "top_p".into(),
            reason: "must be in (0, 1], got 2".into(),
        }));
        assert_eq!(top_p.body()["error"]["param"], "top_p");
        assert_eq!(top_p.status(), StatusCode::BAD_REQUEST);
        let empty = ApiError::from(RequestError::EmptyPrompt);
        assert_eq!(empty, ApiError::invalid("", "the prompt is empty"));
        let rejected = ApiError::from(RequestError::Rejected("nope".into()));
        assert_eq!(rejected, ApiError::invalid("", "nope"));
        assert_eq!(
            ApiError::from(RequestError::Shutdown).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let peer = ApiError::from(RequestError::PeerFailed {
            model: 1,
            reason: "gone".into(),
        });
        assert_eq!(peer.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            ApiError::from(RequestError::KvExhausted).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
