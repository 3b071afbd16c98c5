//! Running a checked request on a group: one engine request per choice,
//! their events merged, answered as one JSON body or as SSE chunks. The
//! engine requests live in the response: when the client goes away the
//! response (and with it every [`Submission`]) is dropped, which cancels
//! them in every subserver.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use serde::Serialize;
use serde_json::{json, Map, Value};
use subserver::scheduler::client::{RequestError, StreamEvent, Usage};
use warp::http::StatusCode;
use warp::reply::Response;

use crate::admission::Slot;
use crate::backend::Submission;
use crate::error::{json_response, ApiError};
use crate::openai::Endpoint;
use crate::pool::GroupEntry;
use crate::server::Gateway;
use crate::sse;
use crate::validate::{Prepared, Target};

/// The engine's failure as an HTTP error.
pub fn api_error(e: &RequestError) -> ApiError {
    match e {
        RequestError::Invalid(msg) if msg.contains("context") || msg.contains("KV pool") => {
            ApiError::ContextLength(msg.clone())
        }
        RequestError::Invalid(msg) => ApiError::invalid("", msg.clone()),
        RequestError::Shutdown => ApiError::Unavailable("the server is shutting down".into()),
        other => ApiError::Engine(other.to_string()),
    }
}

type Merged = SelectAll<BoxStream<'static, (usize, StreamEvent)>>;

/// The events of every choice, tagged with the choice index. Each inner
/// stream ends after its request's last event; a backend that drops a
/// stream yields a failure.
fn merge(subs: Vec<Submission>) -> Merged {
    stream::select_all(subs.into_iter().enumerate().map(|(i, sub)| {
        stream::unfold(Some(sub), move |state| async move {
            let mut sub = state?;
            match sub.next().await {
                None => Some((
                    (
                        i,
                        StreamEvent::Failed(RequestError::Engine(
                            "the group closed the request's stream".into(),
                        )),
                    ),
                    None,
                )),
                Some(ev @ (StreamEvent::Finished { .. } | StreamEvent::Failed(_))) => {
                    Some(((i, ev), None))
                }
                Some(ev) => Some(((i, ev), Some(sub))),
            }
        })
        .boxed()
    }))
}

/// One choice's progress.
#[derive(Default)]
struct Choice {
    text: String,
    tokens: Vec<u32>,
    writers: Vec<u16>,
    logprobs: Vec<Value>,
    finish: Option<&'static str>,
    usage: Option<Usage>,
    last_token: Option<Instant>,
    /// Streaming: tokens since the last chunk (text held back by stop strings).
    unsent_writers: Vec<u16>,
    unsent_logprobs: Vec<Value>,
}

/// A request running on a group.
pub struct Run {
    gw: Arc<Gateway>,
    prepared: Prepared,
    _group: Arc<GroupEntry>,
    _slot: Slot,
    merged: Merged,
    choices: Vec<Choice>,
    start: Instant,
    first_token: Option<Instant>,
    id: String,
    created: u64,
    ttft: prometheus::Histogram,
    itl: prometheus::Histogram,
    cancel: tokio::sync::watch::Receiver<bool>,
}

impl Run {
    /// Submits every choice of `prepared` to `group` (slots already taken).
    pub fn start(
        gw: Arc<Gateway>,
        prepared: Prepared,
        group: Arc<GroupEntry>,
        slot: Slot,
        start: Instant,
    ) -> Self {
        let pin = match prepared.target {
            Target::Routed => None,
            Target::Pinned(m) => Some(m),
        };
        let mut subs = Vec::with_capacity(prepared.num_sequences());
        for p in &prepared.prompts {
            for j in 0..prepared.n {
                let mut params = prepared.params.clone();
                params.seed = params.seed.map(|s| s.wrapping_add(j as u64));
                subs.push(group.backend.submit(p.ids.clone(), params, pin));
            }
        }
        let n = subs.len();
        let prefix = match prepared.endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completions => "cmpl",
        };
        let id = format!("{prefix}-{}", gw.next_id());
        let label = [gw.metrics.model_name()];
        let ttft = gw.metrics.ttft.with_label_values(&label);
        let itl = gw.metrics.itl.with_label_values(&label);
        let cancel = gw.shutdown.subscribe();
        Self {
            ttft,
            itl,
            cancel,
            gw,
            prepared,
            _group: group,
            _slot: slot,
            merged: merge(subs),
            choices: (0..n).map(|_| Choice::default()).collect(),
            start,
            first_token: None,
            id,
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        }
    }

    /// The next event, or a shutdown failure when the drain deadline passed.
    async fn next_event(&mut self) -> Option<(usize, StreamEvent)> {
        let shutdown = Some((0, StreamEvent::Failed(RequestError::Shutdown)));
        if *self.cancel.borrow() {
            return shutdown;
        }
        tokio::select! {
            ev = self.merged.next() => ev,
            // The sender lives in the gateway this run holds: a change is a cancel.
            _ = self.cancel.changed() => shutdown,
        }
    }

    /// Applies one event; returns the choice index and an error if it failed.
    fn apply(&mut self, i: usize, ev: StreamEvent) -> Result<(), ApiError> {
        let now = Instant::now();
        let want_lp = self.prepared.logprobs;
        let gw = &self.gw;
        let Some(c) = self.choices.get_mut(i) else {
            return Ok(());
        };
        match ev {
            StreamEvent::Token {
                token,
                writer,
                text,
                logprobs,
            } => {
                if self.first_token.is_none() {
                    self.first_token = Some(now);
                    self.ttft.observe((now - self.start).as_secs_f64());
                }
                if let Some(prev) = c.last_token {
                    self.itl.observe((now - prev).as_secs_f64());
                }
                c.last_token = Some(now);
                c.text.push_str(&text);
                c.tokens.push(token);
                c.writers.push(writer);
                c.unsent_writers.push(writer);
                if want_lp.is_some() {
                    let Some(lp) = logprobs else {
                        return Err(ApiError::invalid(
                            "logprobs",
                            "this group's backend has no logits: logprobs are unavailable",
                        ));
                    };
                    let lp = token_logprob(&lp, token, &gw.text);
                    c.logprobs.push(lp.clone());
                    c.unsent_logprobs.push(lp);
                }
                Ok(())
            }
            StreamEvent::Finished {
                reason,
                text,
                usage,
            } => {
                c.text.push_str(&text);
                c.finish = Some(reason.as_str());
                c.usage = Some(usage);
                Ok(())
            }
            StreamEvent::Failed(e) => Err(api_error(&e)),
        }
    }

    /// Counts a finished request.
    fn record_success(&self) {
        let m = &self.gw.metrics;
        let model = m.model_name().to_string();
        let reason = self
            .choices
            .first()
            .and_then(|c| c.finish)
            .unwrap_or("stop");
        m.success.with_label_values(&[&model, reason]).inc();
        m.e2e
            .with_label_values(&[&model])
            .observe(self.start.elapsed().as_secs_f64());
        let u = self.usage();
        m.prompt_tokens
            .with_label_values(&[&model])
            .inc_by(u.prompt_tokens as u64);
        m.generation_tokens
            .with_label_values(&[&model])
            .inc_by(u.completion_tokens as u64);
        m.count_tokens(
            &self.gw.catalog.members,
            self.gw.catalog.entry,
            &u.tokens_by_model,
            u.switches,
        );
    }

    /// Usage over every choice: prompt tokens once per prompt, completion
    /// tokens of every choice.
    fn usage(&self) -> Usage {
        let members = self.gw.catalog.members.len();
        let mut total = Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            tokens_by_model: vec![0; members],
            switches: 0,
            cached_prompt_tokens: 0,
        };
        let n = self.prepared.n.max(1);
        for (idx, c) in self.choices.iter().enumerate() {
            let Some(u) = &c.usage else { continue };
            if idx % n == 0 {
                total.prompt_tokens += u.prompt_tokens;
                total.cached_prompt_tokens += u.cached_prompt_tokens;
            }
            total.completion_tokens += u.completion_tokens;
            total.switches += u.switches;
            for (m, &k) in u.tokens_by_model.iter().enumerate() {
                if m >= total.tokens_by_model.len() {
                    total.tokens_by_model.resize(m + 1, 0);
                }
                total.tokens_by_model[m] += k;
            }
        }
        total
    }

    fn usage_json(&self) -> Value {
        usage_json(&self.usage(), &self.gw.catalog.members)
    }

    fn writers_json(&self, writers: &[u16]) -> Value {
        Value::Array(
            writers
                .iter()
                .map(|&w| Value::String(self.gw.catalog.member(w)))
                .collect(),
        )
    }

    /// Collects every choice and answers with one JSON body.
    pub async fn collect(mut self) -> Response {
        while let Some((i, ev)) = self.next_event().await {
            if let Err(e) = self.apply(i, ev) {
                self.gw.count_error(&e);
                return e.response();
            }
        }
        self.record_success();
        let choices: Vec<Value> = (0..self.choices.len())
            .map(|i| self.final_choice(i))
            .collect();
        let object = match self.prepared.endpoint {
            Endpoint::Chat => "chat.completion",
            Endpoint::Completions => "text_completion",
        };
        json_response(
            StatusCode::OK,
            &json!({
                "id": self.id,
                "object": object,
                "created": self.created,
                "model": self.prepared.model,
                "choices": choices,
                "usage": self.usage_json(),
            }),
        )
    }

    fn final_choice(&self, i: usize) -> Value {
        let c = &self.choices[i];
        let mut choice = Map::new();
        choice.insert("index".into(), json!(i));
        match self.prepared.endpoint {
            Endpoint::Chat => {
                choice.insert(
                    "message".into(),
                    json!({"role": "assistant", "content": c.text}),
                );
                choice.insert(
                    "logprobs".into(),
                    match self.prepared.logprobs {
                        Some(_) => json!({"content": c.logprobs}),
                        None => Value::Null,
                    },
                );
            }
            Endpoint::Completions => {
                let mut text = String::new();
                if self.prepared.echo {
                    let p = &self.prepared.prompts[i / self.prepared.n.max(1)];
                    text.push_str(p.text.as_deref().unwrap_or(""));
                }
                text.push_str(&c.text);
                choice.insert("text".into(), json!(text));
                choice.insert(
                    "logprobs".into(),
                    match self.prepared.logprobs {
                        Some(_) => completion_logprobs(&c.logprobs),
                        None => Value::Null,
                    },
                );
            }
        }
        choice.insert("finish_reason".into(), json!(c.finish));
        if self.prepared.sources {
            choice.insert("token_sources".into(), self.writers_json(&c.writers));
        }
        Value::Object(choice)
    }

    /// Waits for each choice's first event, so that a request the engine
    /// refuses gets a proper HTTP status; then streams the rest as SSE.
    pub async fn stream(mut self) -> Response {
        let mut buffered = VecDeque::new();
        let mut started = vec![false; self.choices.len()];
        while started.iter().any(|s| !s) {
            match self.next_event().await {
                None => break,
                Some((_, StreamEvent::Failed(e))) => {
                    let e = api_error(&e);
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
                    frames.push_back(self.chunk(i, Payload::Role, Value::Null, None, Vec::new()));
                }
                Endpoint::Completions if self.prepared.echo => {
                    let p = &self.prepared.prompts[i / self.prepared.n.max(1)];
                    let text = Payload::Text(p.text.as_deref().unwrap_or(""));
                    frames.push_back(self.chunk(i, text, Value::Null, None, Vec::new()));
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

    /// One chunk for choice `i`: `payload` is the chat delta or the completion text.
    fn chunk(
        &self,
        i: usize,
        payload: Payload<'_>,
        logprobs: Value,
        finish: Option<&str>,
        writers: Vec<u16>,
    ) -> Bytes {
        let (object, delta, text) = match (self.prepared.endpoint, payload) {
            (Endpoint::Chat, Payload::Role) => (
                "chat.completion.chunk",
                Some(Delta {
                    role: Some("assistant"),
                    content: Some(""),
                }),
                None,
            ),
            (Endpoint::Chat, Payload::Text(t)) => (
                "chat.completion.chunk",
                Some(Delta {
                    role: None,
                    content: (!t.is_empty()).then_some(t),
                }),
                None,
            ),
            (Endpoint::Completions, Payload::Role) => ("text_completion", None, Some("")),
            (Endpoint::Completions, Payload::Text(t)) => ("text_completion", None, Some(t)),
        };
        let usage = if self.prepared.continuous_usage {
            Some(self.usage_json())
        } else if self.prepared.include_usage {
            Some(Value::Null)
        } else {
            None
        };
        let members = &self.gw.catalog.members;
        let chunk = Chunk {
            id: &self.id,
            object,
            created: self.created,
            model: &self.prepared.model,
            choices: [ChunkChoice {
                index: i,
                delta,
                text,
                logprobs,
                finish_reason: finish,
                token_sources: writers
                    .iter()
                    .map(|&w| members.get(w as usize).map_or("unknown", String::as_str))
                    .collect(),
            }],
            usage,
        };
        let mut out = Vec::with_capacity(320);
        out.extend_from_slice(b"data: ");
        if serde_json::to_writer(&mut out, &chunk).is_err() {
            out.extend_from_slice(b"{}");
        }
        out.extend_from_slice(b"\n\n");
        Bytes::from(out)
    }
}

/// What a chunk carries besides logprobs and the finish reason.
enum Payload<'a> {
    /// Chat: the first chunk's `{"role": "assistant"}`; completions: "".
    Role,
    /// New text (chat `delta.content`, completions `text`).
    Text(&'a str),
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    delta: Option<Delta<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    logprobs: Value,
    finish_reason: Option<&'a str>,
    token_sources: Vec<&'a str>,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChunkChoice<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Value>,
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
                None => {
                    self.run.record_success();
                    if self.run.prepared.include_usage {
                        let body = json!({
                            "id": self.run.id,
                            "object": match self.run.prepared.endpoint {
                                Endpoint::Chat => "chat.completion.chunk",
                                Endpoint::Completions => "text_completion",
                            },
                            "created": self.run.created,
                            "model": self.run.prepared.model,
                            "choices": [],
                            "usage": self.run.usage_json(),
                        });
                        self.frames.push_back(sse::data(&body));
                    }
                    self.frames.push_back(sse::done());
                    self.done = true;
                }
                Some((i, ev)) => {
                    let is_finish = matches!(ev, StreamEvent::Finished { .. });
                    let before = self.run.choices.get(i).map(|c| c.text.len()).unwrap_or(0);
                    if let Err(e) = self.run.apply(i, ev) {
                        tracing::warn!(error = %e, "request failed after streaming began");
                        self.run.gw.count_error(&e);
                        self.frames.push_back(sse::error(&e));
                        self.done = true;
                        continue;
                    }
                    let Some(c) = self.run.choices.get_mut(i) else {
                        continue;
                    };
                    let new_text = c.text[before..].to_string();
                    if new_text.is_empty() && !is_finish && self.run.gw.text.has_tokenizer() {
                        // Held back (a possible stop string, a partial
                        // character): the writers go out with the next
                        // chunk that has text. Without a tokenizer there is
                        // no text, and every token gets its chunk.
                        continue;
                    }
                    let writers = std::mem::take(&mut c.unsent_writers);
                    let lps = std::mem::take(&mut c.unsent_logprobs);
                    let finish = if is_finish { c.finish } else { None };
                    let lp = match (self.run.prepared.logprobs, self.run.prepared.endpoint) {
                        (None, _) => Value::Null,
                        (Some(_), Endpoint::Chat) => json!({"content": lps}),
                        (Some(_), Endpoint::Completions) => completion_logprobs(&lps),
                    };
                    let payload = Payload::Text(&new_text);
                    if is_finish && !new_text.is_empty() {
                        // Text first, then the finish chunk.
                        let f = self.run.chunk(i, payload, lp, None, writers);
                        self.frames.push_back(f);
                        let f =
                            self.run
                                .chunk(i, Payload::Text(""), Value::Null, finish, Vec::new());
                        self.frames.push_back(f);
                    } else {
                        let f = self.run.chunk(i, payload, lp, finish, writers);
                        self.frames.push_back(f);
                    }
                }
            }
        }
    }
}

/// `usage` with the routing extensions.
pub fn usage_json(u: &Usage, names: &[String]) -> Value {
    let mut by_model = Map::new();
    for (i, name) in names.iter().enumerate() {
        by_model.insert(
            name.clone(),
            json!(u.tokens_by_model.get(i).copied().unwrap_or(0)),
        );
    }
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
        "completion_tokens_by_model": by_model,
        "switches": u.switches,
    })
}

/// One token's entry in chat `logprobs.content`.
fn token_logprob(
    lp: &subserver::sampling::TokenLogprobs,
    token: u32,
    text: &crate::text::TextSide,
) -> Value {
    // Without a tokenizer, a token is shown as its id.
    let tok_text = |id: u32| {
        text.decode(&[id], false)
            .unwrap_or_else(|_| format!("token_id:{id}"))
    };
    // The engine reports -inf for a masked token; JSON has no infinity.
    let finite = |x: f32| if x.is_finite() { x } else { -9999.0 };
    json!({
        "token": tok_text(token),
        "logprob": finite(lp.logprob),
        "bytes": tok_text(token).into_bytes(),
        "top_logprobs": lp.top.iter().map(|&(id, l)| json!({
            "token": tok_text(id),
            "logprob": finite(l),
            "bytes": tok_text(id).into_bytes(),
        })).collect::<Vec<_>>(),
    })
}

/// Completions-style `logprobs` from chat-style entries.
fn completion_logprobs(entries: &[Value]) -> Value {
    let mut offset = 0usize;
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top = Vec::new();
    let mut offsets = Vec::new();
    for e in entries {
        let t = e["token"].as_str().unwrap_or("").to_string();
        offsets.push(offset);
        offset += t.len();
        tokens.push(json!(t));
        token_logprobs.push(e["logprob"].clone());
        let mut m = Map::new();
        if let Some(alts) = e["top_logprobs"].as_array() {
            for a in alts {
                m.insert(
                    a["token"].as_str().unwrap_or("").to_string(),
                    a["logprob"].clone(),
                );
            }
        }
        top.push(Value::Object(m));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    })
}
