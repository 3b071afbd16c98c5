//! The request-to-engine run: one engine request per choice, their events
//! merged and applied to each choice's progress (text, tokens, writers,
//! logprobs, timing metrics), with the shutdown drain as a cancel.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use protocol::client::{RequestError, StreamEvent, Usage};
use serde_json::Value;

use crate::admission::Slot;
use crate::backend::Submission;
use crate::error::ApiError;
use crate::openai::response::{self, Head};
use crate::pool::GroupEntry;
use crate::state::Gateway;
use crate::validate::{Catalog, Prepared, Target};

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
pub(super) struct Choice {
    pub(super) text: String,
    tokens: Vec<u32>,
    pub(super) writers: Vec<u16>,
    pub(super) logprobs: Vec<Value>,
    pub(super) finish: Option<&'static str>,
    usage: Option<Usage>,
    last_token: Option<Instant>,
    /// Streaming: tokens since the last chunk (text held back by stop strings).
    pub(super) unsent_writers: Vec<u16>,
    pub(super) unsent_logprobs: Vec<Value>,
}

/// A request running on a group.
pub struct Run {
    pub(super) gw: Arc<Gateway>,
    /// Index of the served group in `gw.served`.
    served: usize,
    pub(super) prepared: Prepared,
    _group: Arc<GroupEntry>,
    _slot: Slot,
    merged: Merged,
    pub(super) choices: Vec<Choice>,
    start: Instant,
    first_token: Option<Instant>,
    id: String,
    created: u64,
    ttft: prometheus::Histogram,
    itl: prometheus::Histogram,
    cancel: tokio::sync::watch::Receiver<bool>,
}

impl Run {
    /// Submits every choice of `prepared` to `group`, a replica of served
    /// group `served` (slots already taken).
    pub fn start(
        gw: Arc<Gateway>,
        served: usize,
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
        let prefix = response::id_prefix(prepared.endpoint);
        let id = format!("{prefix}-{}", gw.next_id());
        // vLLM's `model_name`: the served group's name.
        let label = [gw.served[served].catalog.served.as_str()];
        let ttft = gw.metrics.ttft.with_label_values(&label);
        let itl = gw.metrics.itl.with_label_values(&label);
        let cancel = gw.shutdown.subscribe();
        Self {
            served,
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
    pub(super) async fn next_event(&mut self) -> Option<(usize, StreamEvent)> {
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
    pub(super) fn apply(&mut self, i: usize, ev: StreamEvent) -> Result<(), ApiError> {
        let now = Instant::now();
        let want_lp = self.prepared.logprobs;
        let text_side = &self.gw.served[self.served].text;
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
                    // Without a tokenizer, a token is shown as its id.
                    let lp = response::token_logprob(&lp, token, |id| {
                        text_side
                            .decode(&[id], false)
                            .unwrap_or_else(|_| format!("token_id:{id}"))
                    });
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
            StreamEvent::Failed(e) => Err(ApiError::from(e)),
        }
    }

    /// Counts a finished request.
    pub(super) fn record_success(&self) {
        let m = &self.gw.metrics;
        let catalog = self.catalog();
        let model = catalog.served.clone();
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
            &catalog.members,
            catalog.entry,
            &u.tokens_by_model,
            u.switches,
        );
    }

    /// Usage over every choice: prompt tokens once per prompt, completion
    /// tokens of every choice.
    fn usage(&self) -> Usage {
        let members = self.catalog().members.len();
        let mut total = Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            tokens_by_model: vec![0; members],
            switches: 0,
            cached_prompt_tokens: 0,
            peer_fallbacks: 0,
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
            total.peer_fallbacks += u.peer_fallbacks;
            for (m, &k) in u.tokens_by_model.iter().enumerate() {
                if m >= total.tokens_by_model.len() {
                    total.tokens_by_model.resize(m + 1, 0);
                }
                total.tokens_by_model[m] += k;
            }
        }
        total
    }

    pub(super) fn usage_json(&self) -> Value {
        response::usage_json(&self.usage(), &self.catalog().members)
    }

    /// The writers' names (`unknown` for an index outside the group).
    pub(super) fn sources(&self, writers: &[u16]) -> Vec<&str> {
        let members = &self.catalog().members;
        writers
            .iter()
            .map(|&w| members.get(w as usize).map_or("unknown", String::as_str))
            .collect()
    }

    /// The served group's catalog.
    pub(super) fn catalog(&self) -> &Catalog {
        &self.gw.served[self.served].catalog
    }

    /// The served group's tokenizer side.
    pub(super) fn text(&self) -> &crate::text::TextSide {
        &self.gw.served[self.served].text
    }

    /// The fields every object of this answer repeats.
    pub(super) fn head(&self) -> Head<'_> {
        Head {
            id: &self.id,
            created: self.created,
            model: &self.prepared.model,
            endpoint: self.prepared.endpoint,
        }
    }
}
