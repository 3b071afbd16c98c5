//! Server-sent events, as vLLM and OpenAI frame them: `data: {json}\n\n`,
//! a final `data: [DONE]\n\n`, and errors after the stream began as
//! `event: error\ndata: {"error": ...}\n\n` before the stream closes.

use bytes::Bytes;
use warp::http::HeaderValue;
use warp::reply::Response;

use crate::error::ApiError;

/// One `data:` frame carrying `value` as JSON.
pub fn data<T: serde::Serialize + ?Sized>(value: &T) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut out, value).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The end-of-stream marker.
pub fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

/// An error event (the stream closes after it).
pub fn error(err: &ApiError) -> Bytes {
    let mut out = b"event: error\n".to_vec();
    out.extend_from_slice(&data(&err.body()));
    Bytes::from(out)
}

/// A 200 response streaming `body` as `text/event-stream`.
pub fn response<S>(body: S) -> Response
where
    S: futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
{
    let mut resp = Response::new(warp::hyper::Body::wrap_stream(body));
    let h = resp.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        assert_eq!(
            &data(&serde_json::json!({"a":1}))[..],
            b"data: {\"a\":1}\n\n"
        );
        assert_eq!(&done()[..], b"data: [DONE]\n\n");
        let e = error(&ApiError::Engine("boom".into()));
        let s = std::str::from_utf8(&e).unwrap();
        assert!(s.starts_with("event: error\ndata: {\"error\":"), "{s}");
        assert!(s.ends_with("\n\n"));
    }
}
