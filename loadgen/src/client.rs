//! One streaming request to an OpenAI-compatible server, timed per token.
//!
//! A server may put several tokens in one SSE chunk (ours does when a peer
//! returns a run of tokens). Each token is stamped with the arrival of the
//! chunk that carries it, so inter-token latency has one sample per token:
//! the first token of a chunk carries the gap, the others 0 ms. Stamping a
//! chunk only with its last token would drop the others and bias the
//! percentiles low.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper1::header;
use serde_json::{json, Value};

use crate::conn::{chain, Link};

/// Which OpenAI endpoint to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Endpoint {
    /// `POST /v1/chat/completions` with one user message.
    Chat,
    /// `POST /v1/completions` with the raw prompt.
    Completions,
}

/// What every request of a run shares.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// Server base URL (`http://host:port`, with or without `/v1`).
    pub base_url: String,
    /// `model` field.
    pub model: String,
    /// Endpoint.
    pub endpoint: Endpoint,
    /// Sampling temperature.
    pub temperature: f64,
    /// Generate exactly `max_tokens` (vLLM's and our `ignore_eos`).
    pub ignore_eos: bool,
    /// Bearer token, if the server wants one.
    pub api_key: Option<String>,
}

impl RequestSpec {
    /// The full URL of the endpoint.
    pub fn url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        match self.endpoint {
            Endpoint::Chat => format!("{base}/v1/chat/completions"),
            Endpoint::Completions => format!("{base}/v1/completions"),
        }
    }

    /// The JSON body for `prompt`.
    pub fn body(&self, prompt: &str, max_tokens: usize, seed: u64) -> Value {
        let mut body = json!({
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": self.temperature,
            "seed": seed,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        match self.endpoint {
            Endpoint::Chat => body["messages"] = json!([{"role": "user", "content": prompt}]),
            Endpoint::Completions => body["prompt"] = json!(prompt),
        }
        if self.ignore_eos {
            body["ignore_eos"] = json!(true);
        }
        body
    }
}

/// What one request measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// HTTP status (0: no response).
    pub status: u16,
    /// Error text when the request failed.
    pub error: Option<String>,
    /// Time to the first token.
    pub ttft: Option<Duration>,
    /// Whole request.
    pub e2e: Duration,
    /// Arrival of each token, from the request's start.
    pub token_times: Vec<Duration>,
    /// Generated text.
    pub text: String,
    /// Completion tokens: the server's `usage` if it sent one, else counted.
    pub completion_tokens: usize,
    /// Prompt tokens from `usage` (0 if not reported).
    pub prompt_tokens: usize,
    /// `usage.completion_tokens_by_model`, when the server reports it.
    pub tokens_by_model: BTreeMap<String, usize>,
    /// `usage.switches` (writer changes), when reported.
    pub switches: Option<usize>,
    /// `finish_reason` of the choice.
    pub finish_reason: Option<String>,
    /// Sends retried because they provably never reached the server (a
    /// reused keep-alive connection closed before any response byte).
    pub client_retries: usize,
}

impl Outcome {
    /// True when the server answered 200 and the stream ended cleanly.
    pub fn ok(&self) -> bool {
        self.status == 200 && self.error.is_none()
    }

    /// Inter-token gaps in ms (one per token after the first).
    pub fn itl_ms(&self) -> Vec<f64> {
        self.token_times
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
            .collect()
    }

    /// Mean time per output token after the first, in ms.
    pub fn tpot_ms(&self) -> Option<f64> {
        let ttft = self.ttft?;
        let n = self.completion_tokens.max(self.token_times.len());
        (n > 1).then(|| (self.e2e - ttft).as_secs_f64() * 1e3 / (n - 1) as f64)
    }

    /// Applies one SSE `data:` payload that arrived `at` after the start.
    pub fn apply(&mut self, data: &Value, at: Duration) {
        if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).map(|v| v as usize);
            self.completion_tokens = n("completion_tokens").unwrap_or(self.completion_tokens);
            self.prompt_tokens = n("prompt_tokens").unwrap_or(0);
            self.switches = n("switches").or(self.switches);
            if let Some(by) = u
                .get("completion_tokens_by_model")
                .and_then(Value::as_object)
            {
                for (k, v) in by {
                    self.tokens_by_model
                        .insert(k.clone(), v.as_u64().unwrap_or(0) as usize);
                }
            }
        }
        let Some(choice) = data.get("choices").and_then(|c| c.get(0)) else {
            return;
        };
        let piece = choice
            .get("delta")
            .and_then(|d| d.get("content"))
            .or_else(|| choice.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("");
        self.text.push_str(piece);
        // Tokens in this chunk: our gateway names each token's writer; other
        // servers send one token per content chunk.
        let tokens = match choice.get("token_sources").and_then(Value::as_array) {
            Some(w) => w.len(),
            None => usize::from(!piece.is_empty()),
        };
        if tokens > 0 && self.ttft.is_none() {
            self.ttft = Some(at);
        }
        self.token_times.extend(std::iter::repeat_n(at, tokens));
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(f.to_string());
        }
    }
}

/// Splits complete SSE events off the front of `buf`; returns their data.
pub fn drain_events(buf: &mut String) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let cut = match (buf.find("\n\n"), buf.find("\r\n\r\n")) {
            (Some(a), Some(b)) if b < a => (b, 4),
            (Some(a), _) => (a, 2),
            (None, Some(b)) => (b, 4),
            (None, None) => break,
        };
        let event: String = buf.drain(..cut.0 + cut.1).collect();
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .collect();
        if !data.is_empty() {
            out.push(data.join("\n"));
        }
    }
    out
}

/// The request `spec` sends for `prompt`, built anew for each try.
fn build_request(
    spec: &RequestSpec,
    link: &Link,
    body: &Bytes,
) -> Result<hyper1::Request<Full<Bytes>>, hyper1::http::Error> {
    let url = spec.url();
    // The path after `http://authority` (the URL the link was made from).
    let path = url
        .strip_prefix("http://")
        .and_then(|r| r.find('/').map(|i| &r[i..]))
        .unwrap_or("/");
    let mut req = hyper1::Request::post(path)
        .header(header::HOST, link.authority())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "text/event-stream");
    if let Some(key) = &spec.api_key {
        req = req.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    req.body(Full::new(body.clone()))
}

/// Sends one streaming request over `link` and times it. A send that
/// provably never reached the server is retried (see [`crate::conn`]) and
/// counted in [`Outcome::client_retries`], from the same start time.
pub async fn send(
    link: &mut Link,
    spec: &RequestSpec,
    prompt: &str,
    max_tokens: usize,
    seed: u64,
) -> Outcome {
    let t0 = Instant::now();
    let mut out = Outcome::default();
    let body = Bytes::from(spec.body(prompt, max_tokens, seed).to_string());
    let request = match build_request(spec, link, &body) {
        Ok(r) => r,
        Err(e) => {
            out.error = Some(format!("bad request: {}", chain(&e)));
            return out;
        }
    };
    // Built once above (so a bad header fails before any send); cloned per try.
    let sent = link
        .send(|| {
            let mut r = hyper1::Request::new(request.body().clone());
            *r.method_mut() = request.method().clone();
            *r.uri_mut() = request.uri().clone();
            *r.headers_mut() = request.headers().clone();
            r
        })
        .await;
    let resp = match sent {
        Ok(s) => {
            out.client_retries = s.retries;
            s.response
        }
        Err(f) => {
            out.client_retries = f.retries;
            out.error = Some(f.error.to_string());
            out.e2e = t0.elapsed();
            return out;
        }
    };
    out.status = resp.status().as_u16();
    let mut body = resp.into_body();
    if out.status != 200 {
        let text = body
            .collect()
            .await
            .map(|c| String::from_utf8_lossy(&c.to_bytes()).trim().to_string())
            .unwrap_or_default();
        out.error = Some(format!("HTTP {}: {text}", out.status));
        out.e2e = t0.elapsed();
        return out;
    }
    let mut done = false;
    let mut buf = String::new();
    while let Some(frame) = body.frame().await {
        let piece = match frame {
            Ok(f) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue, // trailers
            },
            Err(e) => {
                out.error = Some(format!("stream: {}", chain(&e)));
                break;
            }
        };
        let at = t0.elapsed();
        buf.push_str(&String::from_utf8_lossy(&piece));
        for data in drain_events(&mut buf) {
            if data.trim() == "[DONE]" {
                done = true;
                continue;
            }
            match serde_json::from_str::<Value>(&data) {
                Ok(v) if v.get("error").is_some() => {
                    out.error = Some(format!("server error: {}", v["error"]));
                }
                Ok(v) => out.apply(&v, at),
                Err(e) => out.error = Some(format!("bad chunk ({e}): {data}")),
            }
        }
    }
    out.e2e = t0.elapsed();
    link.mark_idle();
    if out.completion_tokens == 0 {
        out.completion_tokens = out.token_times.len();
    }
    if !done && out.error.is_none() {
        out.error = Some("stream ended without [DONE]".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_on_blank_lines_and_keep_partial_tails() {
        let mut buf = "data: {\"a\":1}\n\ndata: [DONE]\r\n\r\ndata: {\"b\"".to_string();
        assert_eq!(drain_events(&mut buf), vec!["{\"a\":1}", "[DONE]"]);
        assert_eq!(buf, "data: {\"b\"");
        buf.push_str(":2}\n\n: comment only\n\n");
        assert_eq!(drain_events(&mut buf), vec!["{\"b\":2}"]);
        assert!(buf.is_empty());
    }

    #[test]
    fn every_token_of_a_multi_token_chunk_gets_a_stamp() {
        let mut o = Outcome::default();
        let ms = Duration::from_millis;
        o.apply(
            &json!({"choices": [{"text": "", "token_sources": []}]}),
            ms(1),
        );
        assert!(o.ttft.is_none());
        o.apply(
            &json!({"choices": [{"text": "ab", "token_sources": ["quick", "quick"]}]}),
            ms(10),
        );
        o.apply(
            &json!({"choices": [{"text": "c", "token_sources": ["reference"]}]}),
            ms(40),
        );
        o.apply(
            &json!({"choices": [{"delta": {"content": "d"}, "finish_reason": "length"}]}),
            ms(50),
        );
        o.apply(
            &json!({"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 3,
                "completion_tokens_by_model": {"quick": 2, "reference": 2}, "switches": 1}}),
            ms(51),
        );
        o.e2e = ms(51);
        assert_eq!(o.ttft, Some(ms(10)));
        assert_eq!(o.text, "abcd");
        assert_eq!(o.itl_ms(), vec![0.0, 30.0, 10.0]);
        assert_eq!(o.completion_tokens, 4);
        assert_eq!(o.tokens_by_model["reference"], 2);
        assert_eq!(o.switches, Some(1));
        assert_eq!(o.finish_reason.as_deref(), Some("length"));
        assert!((o.tpot_ms().unwrap() - 41.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn urls_and_bodies() {
        let spec = RequestSpec {
            base_url: "http://h:1/v1/".into(),
            model: "m".into(),
            endpoint: Endpoint::Chat,
            temperature: 0.0,
            ignore_eos: true,
            api_key: None,
        };
        assert_eq!(spec.url(), "http://h:1/v1/chat/completions");
        let b = spec.body("hi", 8, 42);
        assert_eq!(b["messages"][0]["content"], "hi");
        assert_eq!(b["seed"], 42);
        assert_eq!(b["ignore_eos"], true);
        let c = RequestSpec {
            endpoint: Endpoint::Completions,
            ignore_eos: false,
            ..spec
        };
        assert_eq!(c.url(), "http://h:1/v1/completions");
        assert!(c.body("x", 1, 0).get("ignore_eos").is_none());
    }
}
