//! `POST /internal/generate`: the client ingress a remote gateway uses.
//!
//! Body: `{"prompt": [ids], "params": SamplingParams, "pin": null | model}`.
//! Answer: `application/x-ndjson`, one [`WireEvent`] per line, in order; the
//! last line is `finished` or `failed`. A client that closes the connection
//! before the last line cancels the request in every model of the group.

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;
use warp::http::{HeaderValue, StatusCode};
use warp::reply::Response;

use super::reply;
use crate::peer::message::Rid;
use crate::sampling::SamplingParams;
use crate::scheduler::client::{RequestError, StreamEvent, SubmitOptions};

pub use protocol::wire::{GenerateBody, WireEvent, WireLogprobs, WireUsage, GENERATE_PATH};

/// What the ingress asks of the subserver: the entry model's submit and cancel.
pub trait Ingress: Send + Sync {
    /// `Ok` while new requests are taken; otherwise why not (503).
    fn accepting(&self) -> Result<(), String> {
        Ok(())
    }
    /// Starts a request.
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        options: SubmitOptions,
    ) -> (Rid, UnboundedReceiver<StreamEvent>);
    /// Cancels it everywhere.
    fn cancel(&self, rid: Rid);
}

impl Ingress for crate::scheduler::group::Group {
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        options: SubmitOptions,
    ) -> (Rid, UnboundedReceiver<StreamEvent>) {
        self.submit_with(prompt, params, options)
    }

    fn cancel(&self, rid: Rid) {
        crate::scheduler::group::Group::cancel(self, rid)
    }
}

impl Ingress for crate::scheduler::member::MemberProcess {
    fn submit(
        &self,
        prompt: Vec<u32>,
        params: SamplingParams,
        options: SubmitOptions,
    ) -> (Rid, UnboundedReceiver<StreamEvent>) {
        crate::scheduler::member::MemberProcess::submit(self, prompt, params, options)
    }

    fn cancel(&self, rid: Rid) {
        crate::scheduler::member::MemberProcess::cancel(self, rid)
    }
}

/// Cancels the request when the response body is dropped before its end.
struct CancelGuard {
    ingress: Arc<dyn Ingress>,
    rid: Rid,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            self.ingress.cancel(self.rid);
        }
    }
}

/// Handles one `POST /internal/generate`.
pub(super) fn generate(ingress: Option<Arc<dyn Ingress>>, body: &[u8]) -> Response {
    let Some(ingress) = ingress else {
        return reply::error(
            StatusCode::NOT_FOUND,
            "this subserver takes no requests (not the entry model)",
        );
    };
    if let Err(why) = ingress.accepting() {
        return reply::error(StatusCode::SERVICE_UNAVAILABLE, &why);
    }
    let req: GenerateBody = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return reply::error(StatusCode::BAD_REQUEST, &format!("bad generate body: {e}")),
    };
    if let Err(e) = req.params.validate() {
        return reply::error(StatusCode::BAD_REQUEST, &e.to_string());
    }
    let (rid, rx) = ingress.submit(req.prompt, req.params, SubmitOptions { pin: req.pin });
    let guard = CancelGuard {
        ingress,
        rid,
        armed: true,
    };
    let lines = futures_util::stream::unfold((rx, guard), |(mut rx, mut guard)| async move {
        if !guard.armed {
            return None;
        }
        let ev = rx
            .recv()
            .await
            .unwrap_or(StreamEvent::Failed(RequestError::Shutdown));
        if matches!(ev, StreamEvent::Finished { .. } | StreamEvent::Failed(_)) {
            guard.armed = false;
        }
        let mut line = serde_json::to_vec(&WireEvent::from(&ev)).unwrap_or_default();
        line.push(b'\n');
        Some((
            Ok::<_, std::convert::Infallible>(warp::hyper::body::Bytes::from(line)),
            (rx, guard),
        ))
    });
    let mut resp = Response::new(warp::hyper::Body::wrap_stream(lines));
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}
