//! Intake: a client's new request (validated, then admitted to the
//! table) and its cancellation.

use std::time::Instant;

use crate::peer::message::Rid;
use crate::runner::ModelRunner;
use crate::sampling::{Sampler, StopChecker};
use crate::scheduler::client::{GenerateReq, RequestError, StreamEvent};
use crate::scheduler::seq::{HomeState, PromptEntropy, Seq, SeqState};

use super::{derive_seed, Scheduler};

impl<R: ModelRunner> Scheduler<R> {
    /// The checks a request passes before it queues (typed, with the
    /// numbers that failed it).
    pub(super) fn validate(&self, req: &GenerateReq) -> Result<(), RequestError> {
        req.params.validate().map_err(RequestError::Sampling)?;
        let info = self.runner.info();
        if req.prompt.is_empty() {
            return Err(RequestError::EmptyPrompt);
        }
        if let Some(&bad) = req.prompt.iter().find(|&&t| t as usize >= info.vocab_size) {
            return Err(RequestError::TokenOutOfVocab {
                token: bad,
                vocab_size: info.vocab_size,
            });
        }
        // Saturating: a max_tokens near usize::MAX must fail the check, not
        // wrap around it.
        let total = req.prompt.len().saturating_add(req.params.max_tokens);
        if total > info.max_context {
            return Err(RequestError::ContextExceeded {
                prompt: req.prompt.len(),
                max_tokens: req.params.max_tokens,
                context: info.max_context,
            });
        }
        let pool = info.num_blocks * info.block_size;
        if total > pool {
            return Err(RequestError::KvPoolTooSmall {
                needed: total,
                pool,
            });
        }
        if !req.params.stop.is_empty() && self.tokenizer.is_none() {
            return Err(RequestError::StopNeedsTokenizer);
        }
        if self.seqs.contains_key(&req.rid) {
            return Err(RequestError::DuplicateId { rid: req.rid });
        }
        if let Some(m) = req.options.pin {
            if m as usize >= self.num_models() {
                return Err(RequestError::PinOutOfRange {
                    model: m,
                    models: self.num_models(),
                });
            }
            if m != self.me() && !self.peers.is_up(m) {
                return Err(RequestError::PeerDown {
                    model: self.cfg.model_names[m as usize].clone(),
                });
            }
        }
        Ok(())
    }

    pub(super) fn on_generate(&mut self, req: GenerateReq) {
        if let Err(e) = self.validate(&req) {
            self.stats.count_failure(e.error_type());
            let _ = req.sink.send(StreamEvent::Failed(e));
            return;
        }
        let seed = req
            .params
            .seed
            .unwrap_or_else(|| derive_seed(req.rid, u16::MAX));
        let home_state = HomeState {
            stop: StopChecker::new(&req.params, &self.runner.info().eos_ids),
            detok: self.tokenizer.as_ref().map(|t| t.incremental_decoder(true)),
            params: req.params.clone(),
            prompt_len: req.prompt.len(),
            sink: req.sink,
            tokens_by_model: vec![0; self.num_models()],
            last_writer: None,
            switches: 0,
            peer_holds: vec![0; self.num_models()],
            cached_prompt: 0,
            failed_peers: vec![false; self.num_models()],
            peer_fallbacks: 0,
            pinned_to: req.options.pin,
            prompt_entropy: PromptEntropy::default(),
            first_routed: false,
        };
        let seq = Seq {
            rid: req.rid,
            home: self.me(),
            computed: 0,
            state: SeqState::Runnable,
            admitted: false,
            turn_start: req.prompt.len(),
            runnable_since: Instant::now(),
            sampler: Sampler::new(&req.params, derive_seed(seed, self.me())),
            budget: req.params.max_tokens,
            written_this_turn: 0,
            seed,
            logprobs: req.params.logprobs,
            turn_logprobs: Vec::new(),
            pinned: false,
            home_state: Some(home_state),
            tokens: req.prompt,
        };
        let rid = req.rid;
        self.seqs.insert(rid, seq);
        self.home_active += 1;
        if let Some(s) = &self.shared {
            s.request_started();
        }
        let pin = req.options.pin.or_else(|| {
            let assigned = self.policy.assign(rid, &self.seqs[&rid].tokens)?;
            ((assigned as usize) < self.num_models()).then_some(assigned)
        });
        if let Some(hs) = self.seqs.get_mut(&rid).and_then(|s| s.home_state.as_mut()) {
            hs.pinned_to = pin;
        }
        if let Some(m) = pin.filter(|&m| m != self.me()) {
            // Query-level on a peer: it writes everything; this model never
            // computes the request.
            self.send_to_peer(rid, m);
        }
    }

    pub(super) fn on_cancel(&mut self, rid: Rid) {
        if self.seqs.get(&rid).is_some_and(|s| s.is_home()) {
            self.end_failed(rid, RequestError::Cancelled);
        }
    }
}
