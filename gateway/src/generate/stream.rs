//! The streaming answer: hold the first event of every choice (so that a
//! request the engine refuses still gets its HTTP status), then SSE chunks
//! as text becomes safe to show, the usage chunk, and `[DONE]`.

use std::collections::VecDeque;
use std::convert::Infallible;

use bytes::Bytes;
use futures_util::stream;
use protocol::client::StreamEvent;
use serde_json::Value;
use warp::reply::Response;

use crate::error::ApiError;
use crate::openai::response::{self, ChunkParts, Payload};
use crate::openai::Endpoint;
use crate::sse;

use super::run::Run;

impl Run {
    /// Waits for each choice's first event, so that a request the engine
    /// refuses gets a proper HTTP status; then streams the rest as SSE.
    pub async fn stream(mut self) -> Response {
        let mut buffered = VecDeque::new();
        let mut started = vec![false; self.choices.len()];
        while started.iter().any(|s| !s) {
            match self.next_event().await {
                None => break,
                Some((_, StreamEvent::Failed(e))) => {
                    let e = ApiError::from(e);
                    self.gw.count_error(&e);
                    return e.response();
                }
                Some((i, ev)) => {
                    if let Some(s) = started.get_mut(i) {
                        *s = true;
                    }
                    buffered.push_back((i, ev));
                }
            }
        }
        let mut frames = VecDeque::new();
        for i in 0..self.choices.len() {
            match self.prepared.endpoint {
                Endpoint::Chat => {
                    frames.push_back(self.chunk(i, Payload::Role, Value::Null, None, &[]));
                }
                Endpoint::Completions if self.prepared.echo => {
                    let p = &self.prepared.prompts[i / self.prepared.n.max(1)];
                    let text = Payload::Text(p.text.as_deref().unwrap_or(""));
                    frames.push_back(self.chunk(i, text, Value::Null, None, &[]));
                }
                Endpoint::Completions => {}
            }
        }
        let state = StreamState {
            run: self,
            buffered,
            frames,
            done: false,
        };
        sse::response(stream::unfold(state, |mut s| async move {
            s.next_frame().await.map(|b| (Ok::<_, Infallible>(b), s))
        }))
    }

    /// One chunk for choice `i`, framed.
    fn chunk(
        &self,
        i: usize,
        payload: Payload<'_>,
        logprobs: Value,
        finish: Option<&str>,
        writers: &[u16],
    ) -> Bytes {
        let usage = if self.prepared.continuous_usage {
            Some(self.usage_json())
        } else if self.prepared.include_usage {
            Some(Value::Null)
        } else {
            None
        };
        let parts = ChunkParts {
            index: i,
            payload,
            logprobs,
            finish,
            sources: self.sources(writers),
            usage,
        };
        sse::data(&response::chunk(&self.head(), parts))
    }
}

struct StreamState {
    run: Run,
    buffered: VecDeque<(usize, StreamEvent)>,
    frames: VecDeque<Bytes>,
    done: bool,
}

impl StreamState {
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if let Some(f) = self.frames.pop_front() {
                return Some(f);
            }
            if self.done {
                return None;
            }
            let ev = match self.buffered.pop_front() {
                Some(ev) => Some(ev),
                None => self.run.next_event().await,
            };
            match ev {
                None => self.finish(),
                Some((i, ev)) => self.on_event(i, ev),
            }
        }
    }

    /// Every choice ended: the usage chunk (if asked) and `[DONE]`.
    fn finish(&mut self) {
        self.run.record_success();
        if self.run.prepared.include_usage {
            let body = response::usage_chunk(&self.run.head(), self.run.usage_json());
            self.frames.push_back(sse::data(&body));
        }
        self.frames.push_back(sse::done());
        self.done = true;
    }

    /// Applies one event and queues the chunks it makes.
    fn on_event(&mut self, i: usize, ev: StreamEvent) {
        let is_finish = matches!(ev, StreamEvent::Finished { .. });
        let before = self.run.choices.get(i).map(|c| c.text.len()).unwrap_or(0);
        if let Err(e) = self.run.apply(i, ev) {
            tracing::warn!(error = %e, "request failed after streaming began");
            self.run.gw.count_error(&e);
            self.frames.push_back(sse::error(&e));
            self.done = true;
            return;
        }
        let has_tokenizer = self.run.text().has_tokenizer();
        let Some(c) = self.run.choices.get_mut(i) else {
            return;
        };
        let new_text = c.text[before..].to_string();
        if new_text.is_empty() && !is_finish && has_tokenizer {
            // Held back (a possible stop string, a partial character): the
            // writers go out with the next chunk that has text. Without a
            // tokenizer there is no text, and every token gets its chunk.
            return;
        }
        let writers = std::mem::take(&mut c.unsent_writers);
        let lps = std::mem::take(&mut c.unsent_logprobs);
        let finish = if is_finish { c.finish } else { None };
        let p = &self.run.prepared;
        let lp = response::logprobs_field(p.endpoint, p.logprobs.is_some(), &lps);
        let payload = Payload::Text(&new_text);
        if is_finish && !new_text.is_empty() {
            // Text first, then the finish chunk.
            let f = self.run.chunk(i, payload, lp, None, &writers);
            self.frames.push_back(f);
            let f = self
                .run
                .chunk(i, Payload::Text(""), Value::Null, finish, &[]);
            self.frames.push_back(f);
        } else {
            let f = self.run.chunk(i, payload, lp, finish, &writers);
            self.frames.push_back(f);
        }
    }
}
