//! The narrow seam between the HTTP surface and a routed group: submit a
//! validated request and get its event stream, cancel it by dropping the
//! [`Submission`], ask whether the group is healthy and how loaded.

#[cfg(feature = "inproc")]
pub mod inproc;
pub mod remote;
#[cfg(feature = "inproc")]
pub mod std_serving;

use protocol::client::StreamEvent;
use protocol::sampling::SamplingParams;
use tokio::sync::mpsc::UnboundedReceiver;

/// One group behind the gateway (in this process, or over HTTP).
pub trait Backend: Send + Sync {
    /// A short label for logs and metrics (`inproc`, a URL).
    fn id(&self) -> &str;
    /// Starts generating; `pin` makes one member model write every token.
    fn submit(&self, prompt: Vec<u32>, params: SamplingParams, pin: Option<u16>) -> Submission;
    /// True when every member of the group answers.
    fn healthy(&self) -> bool;
    /// Requests the group itself reports active.
    fn active(&self) -> usize;
    /// Fetches the group's text side (its entry model's tokenizer files,
    /// `GET /internal/text-side`) for a gateway without a copy of them;
    /// `None` when this backend has no such endpoint (an in-process group:
    /// its gateway reads the directory itself).
    fn text_side(&self) -> Option<TextSideFetch> {
        None
    }
}

/// A pending [`Backend::text_side`]: the body, or why not (a message that
/// names the group).
pub type TextSideFetch =
    futures_util::future::BoxFuture<'static, Result<protocol::text_side::TextSideBody, String>>;

/// A running request. Dropping it before the request ended cancels it in
/// every subserver of the group (the client went away, or the gateway is
/// shutting down); [`Submission::finished`] disarms that.
pub struct Submission {
    events: UnboundedReceiver<StreamEvent>,
    cancel: Option<Box<dyn FnOnce() + Send>>,
}

impl Submission {
    /// A request whose `cancel` runs if it is dropped unfinished.
    pub fn new(events: UnboundedReceiver<StreamEvent>, cancel: Box<dyn FnOnce() + Send>) -> Self {
        Self {
            events,
            cancel: Some(cancel),
        }
    }

    /// The next event; `None` when the backend dropped the stream (treated
    /// as a failure by callers).
    pub async fn next(&mut self) -> Option<StreamEvent> {
        let ev = self.events.recv().await;
        if matches!(
            ev,
            Some(StreamEvent::Finished { .. }) | Some(StreamEvent::Failed(_)) | None
        ) {
            self.finished();
        }
        ev
    }

    /// Marks the request as ended: dropping no longer cancels.
    pub fn finished(&mut self) {
        self.cancel = None;
    }
}

impl Drop for Submission {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn dropping_an_unfinished_submission_cancels_it_once() {
        let cancels = Arc::new(AtomicUsize::new(0));
        let c = cancels.clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let sub = Submission::new(
            rx,
            Box::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
            }),
        );
        drop(sub);
        assert_eq!(cancels.load(Ordering::SeqCst), 1);
        drop(tx);

        let c = cancels.clone();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut sub = Submission::new(
            rx,
            Box::new(move || {
                c.fetch_add(1, Ordering::SeqCst);
            }),
        );
        tx.send(StreamEvent::Failed(
            protocol::client::RequestError::Cancelled,
        ))
        .unwrap();
        assert!(matches!(sub.next().await, Some(StreamEvent::Failed(_))));
        drop(sub);
        assert_eq!(
            cancels.load(Ordering::SeqCst),
            1,
            "a finished request is not cancelled"
        );
    }
}
