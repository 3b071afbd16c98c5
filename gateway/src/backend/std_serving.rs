//! The Std. Serving baseline behind the gateway (`tokenrouter std-serving
//! --serve`): one ordinary single-model server per model and the external
//! forwarder that asks for one token per call, so the same OpenAI endpoint
//! and load generator measure it beside the routed group.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use protocol::client::{RequestError, StreamEvent, Usage};
use protocol::sampling::{FinishReason, SamplingParams};
use subserver::sampling::StopChecker;
use subserver::std_serving::{generate, ForwardRule, StdServers};
use subserver::tokenizer::TextTokenizer;

use super::{Backend, Submission};

/// Std. Serving as a [`Backend`]: each request runs the forwarder on its
/// own thread; the forwarder applies the stop rules (each server is asked
/// for one token with `ignore_eos`).
pub struct StdServingBackend {
    servers: Arc<StdServers>,
    rule: ForwardRule,
    tokenizer: Arc<TextTokenizer>,
    active: Arc<AtomicUsize>,
}

impl StdServingBackend {
    /// Fronts `servers`, routing with `rule`; `tokenizer` is the entry model's.
    pub fn new(servers: StdServers, rule: ForwardRule, tokenizer: TextTokenizer) -> Self {
        Self {
            servers: Arc::new(servers),
            rule,
            tokenizer: Arc::new(tokenizer),
            active: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// What one forwarded request needs on its thread.
struct Job {
    servers: Arc<StdServers>,
    rule: ForwardRule,
    tokenizer: Arc<TextTokenizer>,
    prompt: Vec<u32>,
    params: SamplingParams,
    cancel: Arc<AtomicBool>,
    events: tokio::sync::mpsc::UnboundedSender<StreamEvent>,
}

impl Job {
    fn run(self) {
        let n_models = self.servers.servers.len();
        let mut stop = StopChecker::new(&self.params, &self.servers.eos_ids);
        let mut decoder = self.tokenizer.incremental_decoder(true);
        let mut usage = Usage {
            prompt_tokens: self.prompt.len(),
            completion_tokens: 0,
            tokens_by_model: vec![0; n_models],
            switches: 0,
            cached_prompt_tokens: 0,
            peer_fallbacks: 0,
        };
        let mut last_writer = None;
        let mut finish = None;
        // One token per call; EOS comes back as a token and is judged here.
        let mut one = self.params.clone();
        one.ignore_eos = true;
        one.stop.clear();
        one.stop_token_ids.clear();
        one.logprobs = None;
        let seed = self.params.seed.unwrap_or(0);
        let result = generate(
            &self.servers,
            self.rule,
            seed,
            &self.prompt,
            self.params.max_tokens,
            &one,
            |token, writer| {
                if self.cancel.load(Ordering::Relaxed) {
                    return false;
                }
                let delta = decoder.push(token).unwrap_or_default();
                finish = stop.push(token, &delta);
                let ends_without_token = finish.as_ref().is_some_and(|f| {
                    (f.reason == FinishReason::Stop && f.matched.is_none())
                        || f.stop_token.is_some()
                });
                if !ends_without_token {
                    usage.completion_tokens += 1;
                    usage.tokens_by_model[writer] += 1;
                    if last_writer.is_some_and(|w| w != writer) {
                        usage.switches += 1;
                    }
                    last_writer = Some(writer);
                    let _ = self.events.send(StreamEvent::Token {
                        token,
                        writer: writer as u16,
                        text: stop.take_safe(),
                        logprobs: None,
                    });
                }
                finish.is_none()
            },
        );
        let event = match result {
            Err(e) => StreamEvent::Failed(e),
            Ok(_) if self.cancel.load(Ordering::Relaxed) => {
                StreamEvent::Failed(RequestError::Cancelled)
            }
            Ok(_) => StreamEvent::Finished {
                reason: finish.map_or(FinishReason::Length, |f| f.reason),
                text: stop.take_safe(),
                usage,
            },
        };
        let _ = self.events.send(event);
    }
}

impl Backend for StdServingBackend {
    fn id(&self) -> &str {
        "std-serving"
    }

    fn submit(&self, prompt: Vec<u32>, params: SamplingParams, pin: Option<u16>) -> Submission {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let mut rule = self.rule;
        // A pinned request (query-level routing) is written by one model.
        match pin.map(usize::from) {
            Some(m) if m == rule.large => rule.probability = 1.0,
            Some(_) => rule.probability = 0.0,
            None => {}
        }
        let job = Job {
            servers: self.servers.clone(),
            rule,
            tokenizer: self.tokenizer.clone(),
            prompt,
            params,
            cancel: cancel.clone(),
            events: tx,
        };
        let active = self.active.clone();
        active.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("std-serving".into())
            .spawn(move || {
                job.run();
                active.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.active.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(error = %e, "std-serving: no thread for a request");
        }
        Submission::new(rx, Box::new(move || cancel.store(true, Ordering::Relaxed)))
    }

    fn healthy(&self) -> bool {
        self.servers.servers.iter().all(|g| g.is_alive(0))
    }

    fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }
}
