//! A single-model batch engine: continuous batching with chunked prefill,
//! paged KV with prefix reuse, preemption by recomputation when the pool runs
//! dry. `tokenrouter generate`, the correctness tests and `bench-engine` drive
//! it; the routed subserver scheduler builds on the same pieces.

pub mod planner;
pub mod sequence;

#[cfg(test)]
mod cancel_tests;

use std::collections::VecDeque;

use tracing::debug;

use crate::error::EngineError;
use crate::runner::{ModelRunner, StepBatch, StepItem};
use crate::sampling::{FinishReason, HostLogits, SamplingParams};
use crate::tokenizer::TextTokenizer;
use planner::{Admission, PlanTable, Planner};
use sequence::Sequence;

/// Limits of one step.
#[derive(Debug, Clone, Copy)]
pub struct EngineLimits {
    /// Most new tokens in one forward (bounds prefill chunks).
    pub max_batched_tokens: usize,
    /// Most requests in one forward.
    pub max_batch_size: usize,
}

impl Default for EngineLimits {
    fn default() -> Self {
        Self {
            max_batched_tokens: 2048,
            max_batch_size: 256,
        }
    }
}

/// A token produced by a step.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    /// Request id.
    pub id: u64,
    /// The sampled token.
    pub token: u32,
    /// Text now safe to show (empty without a tokenizer).
    pub text: String,
    /// Set when this token ended the request.
    pub finish: Option<FinishReason>,
}

/// A finished request.
#[derive(Debug, Clone)]
pub struct Completion {
    /// Request id.
    pub id: u64,
    /// Generated tokens (stop tokens included when they ended generation).
    pub tokens: Vec<u32>,
    /// Why it finished.
    pub finish: FinishReason,
    /// Prompt tokens served from the prefix cache at the last admission.
    pub cached_prompt_tokens: usize,
    /// Times it was preempted.
    pub preemptions: u32,
}

/// Continuous batching over one `ModelRunner`.
pub struct BatchEngine<R: ModelRunner> {
    runner: R,
    limits: EngineLimits,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    finished: Vec<Completion>,
    next_seed: u64,
    tokenizer: Option<TextTokenizer>,
    /// The step's logits on the host, reused across steps.
    host: HostLogits,
}

impl<R: ModelRunner> BatchEngine<R> {
    /// An engine over `runner`.
    pub fn new(runner: R, limits: EngineLimits) -> Self {
        Self {
            runner,
            limits,
            waiting: VecDeque::new(),
            running: Vec::new(),
            finished: Vec::new(),
            next_seed: 0x5eed,
            tokenizer: None,
            host: HostLogits::default(),
        }
    }

    /// Decodes text as tokens are generated (needed for stop strings and `TokenEvent::text`).
    pub fn with_tokenizer(mut self, tokenizer: TextTokenizer) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// The runner (for its info and KV statistics).
    pub fn runner(&self) -> &R {
        &self.runner
    }

    /// Queues a request after validating it.
    pub fn add(
        &mut self,
        id: u64,
        prompt: Vec<u32>,
        params: &SamplingParams,
    ) -> Result<(), EngineError> {
        params
            .validate()
            .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        if prompt.is_empty() {
            return Err(EngineError::InvalidRequest("prompt is empty".into()));
        }
        let info = self.runner.info();
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= info.vocab_size) {
            return Err(EngineError::InvalidRequest(format!(
                "token id {bad} is outside the vocabulary ({})",
                info.vocab_size
            )));
        }
        // Saturating: a max_tokens near usize::MAX must fail the check, not
        // wrap around it.
        let total = prompt.len().saturating_add(params.max_tokens);
        if total > info.max_context {
            return Err(EngineError::InvalidRequest(format!(
                "prompt ({}) + max_tokens ({}) exceeds the context of {}",
                prompt.len(),
                params.max_tokens,
                info.max_context
            )));
        }
        let pool = info.num_blocks * info.block_size;
        if total > pool {
            return Err(EngineError::InvalidRequest(format!(
                "prompt + max_tokens = {total} tokens can never fit the KV pool of {pool} tokens"
            )));
        }
        if !params.stop.is_empty() && self.tokenizer.is_none() {
            return Err(EngineError::InvalidRequest(
                "stop strings need a tokenizer".into(),
            ));
        }
        let in_use = self.waiting.iter().chain(&self.running).any(|s| s.id == id);
        if in_use {
            return Err(EngineError::InvalidRequest(format!(
                "request id {id} is already queued"
            )));
        }
        self.next_seed = self.next_seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let eos = info.eos_ids.clone();
        let mut seq = Sequence::new(id, prompt, params, &eos, self.next_seed);
        seq.detok = self.tokenizer.as_ref().map(|t| t.incremental_decoder(true));
        self.waiting.push_back(seq);
        Ok(())
    }

    /// True when nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Requests that finished since the last call.
    pub fn take_finished(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.finished)
    }

    /// Frees a request wherever it is (client gone). Returns whether it existed.
    pub fn cancel(&mut self, id: u64) -> bool {
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            return true;
        }
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            self.running.remove(i);
            self.runner.kv().discard(id);
            return true;
        }
        false
    }

    /// Runs one forward over the planned batch and samples where a request
    /// has consumed all its pending tokens.
    pub fn step(&mut self) -> Result<Vec<TokenEvent>, EngineError> {
        let plan = Planner::new(self.limits).plan(self)?;
        if plan.is_empty() {
            if !self.waiting.is_empty() && self.running.is_empty() {
                return Err(EngineError::InvalidRequest(
                    "the waiting request cannot fit the KV pool".into(),
                ));
            }
            return Ok(Vec::new());
        }
        // Every planned request is running now; find each one's slot.
        let plan: Vec<(usize, usize)> = plan
            .iter()
            .filter_map(|&(id, n)| Some((self.running.iter().position(|s| s.id == id)?, n)))
            .collect();
        let items: Vec<StepItem> = plan
            .iter()
            .map(|&(i, n)| {
                let s = &self.running[i];
                StepItem {
                    rid: s.id,
                    start: s.computed,
                    tokens: s.tokens_at(s.computed, n),
                }
            })
            .collect();
        let out = self.runner.forward(&StepBatch::new(items))?;
        out.host_logits_into(&mut self.host)?;
        let vocab = self.runner.info().vocab_size;
        let mut events = Vec::new();
        for (row, &(i, n)) in plan.iter().enumerate() {
            let seq = &mut self.running[i];
            seq.computed += n;
            if seq.pending() > 0 {
                continue; // mid-prefill chunk: its logits are not a next-token distribution yet
            }
            let logits = self.host.sample_row(row, vocab).ok_or_else(|| {
                EngineError::InvalidRequest(format!("the backend returned no logits row {row}"))
            })?;
            let token = seq
                .sampler
                .sample(logits)
                .map_err(|e| EngineError::InvalidRequest(format!("request {}: {e}", seq.id)))?;
            seq.output.push(token);
            let delta = match seq.detok.as_mut() {
                Some(d) => d.push(token)?,
                None => String::new(),
            };
            let finish = seq.stop.push(token, &delta).map(|f| f.reason);
            let mut text = seq.stop.take_safe();
            if finish.is_some() {
                if let Some(d) = seq.detok.as_mut() {
                    text.push_str(&d.flush()?);
                }
            }
            seq.finish = finish;
            events.push(TokenEvent {
                id: seq.id,
                token,
                text,
                finish,
            });
        }
        self.retire_finished();
        Ok(events)
    }

    fn retire_finished(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if let Some(finish) = self.running[i].finish {
                let seq = self.running.remove(i);
                let all = seq.all_tokens();
                // A failure is logged and counted once in the KV manager.
                self.runner.kv().finish(seq.id, &all[..seq.computed]);
                self.finished.push(Completion {
                    id: seq.id,
                    tokens: seq.output,
                    finish,
                    cached_prompt_tokens: seq.cached,
                    preemptions: seq.preemptions,
                });
            } else {
                i += 1;
            }
        }
    }

    /// Steps until every queued request has finished; returns them by id order.
    pub fn run_to_completion(&mut self) -> Result<Vec<Completion>, EngineError> {
        while !self.is_idle() {
            self.step()?;
        }
        let mut done = self.take_finished();
        done.sort_by_key(|c| c.id);
        Ok(done)
    }
}

/// Running requests first (decode or the rest of their prefill), then
/// admissions from the queue in order; the newest running request is
/// preempted (back to the queue's front) when the pool runs dry.
impl<R: ModelRunner> PlanTable for BatchEngine<R> {
    fn candidates(&self) -> Vec<u64> {
        self.running
            .iter()
            .chain(&self.waiting)
            .map(|s| s.id)
            .collect()
    }

    fn admit(&mut self, id: u64) -> Result<Admission, EngineError> {
        if self.running.iter().any(|s| s.id == id) {
            return Ok(Admission::Held);
        }
        let Some(i) = self.waiting.iter().position(|s| s.id == id) else {
            return Ok(Admission::Refused);
        };
        let Some(mut seq) = self.waiting.remove(i) else {
            return Ok(Admission::Refused);
        };
        let all = seq.all_tokens();
        let cached = match self.runner.kv().admit(seq.id, &all) {
            Ok(c) => c,
            Err(e) => {
                self.waiting.insert(i, seq);
                return Err(e.into());
            }
        };
        seq.computed = cached;
        seq.cached = cached;
        self.running.push(seq);
        Ok(Admission::New)
    }

    fn progress(&self, id: u64) -> Option<(usize, usize)> {
        let seq = self.running.iter().find(|s| s.id == id)?;
        Some((seq.computed, seq.pending()))
    }

    fn reserve(&mut self, id: u64, end: usize) -> bool {
        self.runner.kv().reserve(id, end).is_ok()
    }

    fn victim(&self, keep: u64, plan: &[(u64, usize)]) -> Option<u64> {
        let last = self.running.last()?;
        (last.id != keep && !plan.iter().any(|&(p, _)| p == last.id)).then_some(last.id)
    }

    fn preempt(&mut self, id: u64) {
        let Some(i) = self.running.iter().position(|s| s.id == id) else {
            return;
        };
        let mut seq = self.running.remove(i);
        self.runner.kv().discard(seq.id);
        seq.computed = 0;
        seq.preemptions += 1;
        debug!(id = seq.id, "preempted: KV pool exhausted");
        self.waiting.push_front(seq);
    }

    fn no_room(&mut self, id: u64, admission: Admission, _alone: bool) -> bool {
        if admission != Admission::New {
            // A running request that cannot grow now: later admissions may still fit.
            return true;
        }
        // Undo the admission: back to the queue's front, KV freed.
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let mut seq = self.running.remove(i);
            self.runner.kv().discard(seq.id);
            seq.computed = 0;
            self.waiting.push_front(seq);
        }
        false
    }
}
