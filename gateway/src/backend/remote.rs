//! A group in other processes, reached at its entry subserver's
//! `POST /internal/generate` (NDJSON events). Dropping a [`Submission`]
//! aborts its HTTP exchange; the subserver sees the connection close and
//! cancels the request in every model. Health is `GET /health`, polled.
//! A gateway without the model's files fetches them from
//! `GET /internal/text-side` ([`Backend::text_side`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use protocol::client::{RequestError, StreamEvent};
use protocol::sampling::SamplingParams;
use protocol::text_side::{TextSideBody, TEXT_SIDE_PATH};
use protocol::wire::{GenerateBody, WireEvent, GENERATE_PATH};
use tokio::task::JoinHandle;

use super::{Backend, Submission};

/// How often `/health` is polled.
const HEALTH_EVERY: Duration = Duration::from_millis(500);

/// One remote group.
pub struct RemoteBackend {
    url: String,
    client: reqwest::Client,
    healthy: Arc<AtomicBool>,
    active: Arc<AtomicUsize>,
    poll: JoinHandle<()>,
}

impl RemoteBackend {
    /// Fronts the group whose entry subserver serves at `url`
    /// (`http://host:port`); starts polling its health (needs a tokio runtime).
    pub fn new(url: &str, client: reqwest::Client) -> Self {
        let url = url.trim_end_matches('/').to_string();
        let healthy = Arc::new(AtomicBool::new(false));
        let poll = {
            let (url, client, healthy) = (url.clone(), client.clone(), healthy.clone());
            tokio::spawn(async move {
                loop {
                    let up = matches!(
                        client
                            .get(format!("{url}/health"))
                            .timeout(Duration::from_secs(2))
                            .send()
                            .await,
                        Ok(r) if r.status().is_success()
                    );
                    if healthy.swap(up, Ordering::SeqCst) != up {
                        tracing::info!(%url, up, "group health changed");
                    }
                    tokio::time::sleep(HEALTH_EVERY).await;
                }
            })
        };
        Self {
            url,
            client,
            healthy,
            active: Arc::new(AtomicUsize::new(0)),
            poll,
        }
    }

    /// Waits (bounded) for the first health answer; true when healthy.
    pub async fn wait_healthy(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if self.healthy() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.healthy()
    }
}

impl Drop for RemoteBackend {
    fn drop(&mut self) {
        self.poll.abort();
    }
}

/// Decrements the active count when a request's task ends, however it ends.
struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn exchange(
    client: reqwest::Client,
    url: String,
    body: GenerateBody,
    tx: tokio::sync::mpsc::UnboundedSender<StreamEvent>,
) {
    let failed = |msg: String| StreamEvent::Failed(RequestError::Engine(msg));
    let resp = match client.post(&url).json(&body).send().await {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(failed(format!("group at {url} unreachable: {e}")));
            return;
        }
    };
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        let ev = if status.is_client_error() {
            StreamEvent::Failed(RequestError::Rejected(text))
        } else {
            failed(format!("group answered {status}: {text}"))
        };
        let _ = tx.send(ev);
        return;
    }
    let mut bytes = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(piece) = bytes.next().await {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(failed(format!("group stream broke: {e}")));
                return;
            }
        };
        buf.extend_from_slice(&piece);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let ev = match serde_json::from_slice::<WireEvent>(&line) {
                Ok(w) => w.into_event(),
                Err(e) => failed(format!("bad event from the group: {e}")),
            };
            let last = matches!(ev, StreamEvent::Finished { .. } | StreamEvent::Failed(_));
            if tx.send(ev).is_err() || last {
                return;
            }
        }
    }
    let _ = tx.send(failed("the group closed the stream early".into()));
}

impl Backend for RemoteBackend {
    fn id(&self) -> &str {
        &self.url
    }

    fn submit(&self, prompt: Vec<u32>, params: SamplingParams, pin: Option<u16>) -> Submission {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.active.fetch_add(1, Ordering::SeqCst);
        let active = Active(self.active.clone());
        let body = GenerateBody {
            prompt,
            params,
            pin,
        };
        let (client, url) = (self.client.clone(), format!("{}{GENERATE_PATH}", self.url));
        let task = tokio::spawn(async move {
            let _active = active;
            exchange(client, url, body, tx).await;
        });
        Submission::new(rx, Box::new(move || task.abort()))
    }

    fn healthy(&self) -> bool {
        self.healthy.load(Ordering::SeqCst)
    }

    fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    fn text_side(&self) -> Option<super::TextSideFetch> {
        let (client, url) = (self.client.clone(), self.url.clone());
        Some(Box::pin(fetch_text_side(client, url)))
    }
}

/// How long one text-side fetch may take (a tokenizer is a few megabytes).
const TEXT_SIDE_TIMEOUT: Duration = Duration::from_secs(60);

/// `GET {url}/internal/text-side`, parsed and checked.
async fn fetch_text_side(client: reqwest::Client, url: String) -> Result<TextSideBody, String> {
    let endpoint = format!("{url}{TEXT_SIDE_PATH}");
    let resp = client
        .get(&endpoint)
        .timeout(TEXT_SIDE_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("{endpoint} unreachable: {e}"))?;
    let status = resp.status();
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| format!("{endpoint}: the answer broke off: {e}"))?;
    if !status.is_success() {
        // The subserver's errors are `{"error": {"message": ..}}`.
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        return Err(format!("{endpoint} answered {status}: {message}"));
    }
    let body: TextSideBody =
        serde_json::from_slice(&bytes).map_err(|e| format!("{endpoint}: not a text side: {e}"))?;
    body.check().map_err(|e| format!("{endpoint}: {e}"))?;
    Ok(body)
}
