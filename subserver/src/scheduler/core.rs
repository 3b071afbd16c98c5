//! The per-model scheduler: one thread that owns a `ModelRunner`, its KV
//! cache and its request table. Code is request-centric (the policy's hooks),
//! execution is model-centric (one forward per step over every runnable
//! request). The thread waits only on its inbox, so peers and clients never
//! block a step and a step never waits for a peer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::engine::EngineLimits;
use crate::peer::message::{ModelIdx, PeerMsg, PeerReq, RequestMeta, Rid};
use crate::peer::transport::PeerSender;
use crate::runner::{ModelRunner, StepBatch, StepItem};
use crate::sampling::logprobs::{logprobs, TokenLogprobs};
use crate::sampling::{FinishReason, Sampler, StopChecker};
use crate::scheduler::batching::{should_step, threshold, ExecutionMode, StepInputs};
use crate::scheduler::client::{GenerateReq, RequestError, StreamEvent, Usage};
use crate::scheduler::inbox::{Inbound, InboxReceiver};
use crate::scheduler::policy::{Dest, RouteItem, RoutingPolicy, StepView};
use crate::scheduler::seq::{HomeState, PromptEntropy, Seq, SeqState};
use crate::scheduler::share_control::ShareController;
use crate::scheduler::shared::GroupShared;
use crate::scheduler::stats::SchedulerStats;
use crate::tokenizer::TextTokenizer;

/// Static settings of one model's scheduler.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// This model's index in the group.
    pub model: ModelIdx,
    /// Names of the group's models, by index.
    pub model_names: Vec<String>,
    /// How models take steps.
    pub mode: ExecutionMode,
    /// Delayed-batching table for this model (B at concurrency 1, 2, ...).
    pub thresholds: Vec<usize>,
    /// Bound on any delayed-batching wait.
    pub max_batch_wait: Duration,
    /// Step budgets.
    pub limits: EngineLimits,
    /// Continue on the entry model when a peer fails.
    pub fallback_on_peer_failure: bool,
    /// A request pending at a peer fails (or falls back) after this long.
    pub peer_timeout: Duration,
    /// Target share of output written by non-entry models (steers the
    /// policy's threshold from the home's commits).
    pub target_large_share: Option<f64>,
}

/// Seed for a request at model `m` (peers draw from a derived stream, so runs repeat).
fn derive_seed(seed: u64, m: ModelIdx) -> u64 {
    let mut x = seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(m as u64 + 1));
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}

/// One model's scheduler.
pub struct Scheduler<R: ModelRunner> {
    cfg: SchedulerConfig,
    runner: R,
    policy: Box<dyn RoutingPolicy>,
    tokenizer: Option<TextTokenizer>,
    inbox: InboxReceiver,
    peers: Arc<dyn PeerSender>,
    shared: Option<Arc<GroupShared>>,
    stats: Arc<SchedulerStats>,
    seqs: HashMap<Rid, Seq>,
    /// Active requests as last reported by a home (for models that are never home).
    reported_active: usize,
    home_active: usize,
    shutting_down: bool,
    share: Option<ShareController>,
}

impl<R: ModelRunner> Scheduler<R> {
    /// A scheduler; run it with [`Scheduler::run`] on its own thread.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: SchedulerConfig,
        runner: R,
        policy: Box<dyn RoutingPolicy>,
        tokenizer: Option<TextTokenizer>,
        inbox: InboxReceiver,
        peers: Arc<dyn PeerSender>,
        shared: Option<Arc<GroupShared>>,
        stats: Arc<SchedulerStats>,
    ) -> Self {
        stats.set_threshold_table(cfg.thresholds.clone());
        let share = cfg
            .target_large_share
            .zip(policy.knob())
            .map(|(target, knob)| ShareController::new(target, knob, cfg.model));
        Self {
            cfg,
            runner,
            policy,
            tokenizer,
            inbox,
            peers,
            shared,
            stats,
            seqs: HashMap::new(),
            reported_active: 0,
            home_active: 0,
            shutting_down: false,
            share,
        }
    }

    fn me(&self) -> ModelIdx {
        self.cfg.model
    }

    fn num_models(&self) -> usize {
        self.cfg.model_names.len()
    }

    /// Active requests in the group as this model knows it.
    fn n_active(&self) -> usize {
        match &self.shared {
            Some(s) => s.active(),
            None => self.home_active.max(self.reported_active),
        }
    }

    fn runnable(&self) -> usize {
        self.seqs.values().filter(|s| s.runnable()).count()
    }

    fn oldest_runnable(&self) -> Option<Instant> {
        self.seqs
            .values()
            .filter(|s| s.runnable())
            .map(|s| s.runnable_since)
            .min()
    }

    /// The thread body: wait on the inbox, step when the rules say so.
    pub fn run(mut self) {
        let lockstep = self.cfg.mode == ExecutionMode::Lockstep;
        loop {
            let timeout = self.wait_timeout(lockstep);
            match self.inbox.recv_timeout(timeout) {
                Ok(msg) => self.handle(msg),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.shutting_down = true,
            }
            while let Ok(msg) = self.inbox.try_recv() {
                self.handle(msg);
            }
            if self.shutting_down {
                self.fail_all(RequestError::Shutdown);
                if let Some(s) = &self.shared {
                    s.barrier.abort();
                }
                return;
            }
            self.check_peer_timeouts();
            if lockstep {
                let Some(shared) = self.shared.clone() else {
                    warn!("lockstep needs an in-process group; stepping asynchronously");
                    self.try_step();
                    continue;
                };
                if !shared.barrier.wait() {
                    self.shutting_down = true;
                    continue;
                }
                if self.runnable() > 0 {
                    self.step();
                }
                if !shared.barrier.wait() {
                    self.shutting_down = true;
                }
            } else {
                self.try_step();
            }
            self.publish_queue_stats();
        }
    }

    fn try_step(&mut self) {
        if self.decide() {
            self.step();
        }
    }

    fn wait_timeout(&self, lockstep: bool) -> Duration {
        let runnable = self.runnable();
        if lockstep {
            return if runnable > 0 {
                Duration::ZERO
            } else {
                Duration::from_micros(200)
            };
        }
        if runnable == 0 {
            return Duration::from_millis(50);
        }
        if self.decide() {
            return Duration::ZERO;
        }
        let waited = self
            .oldest_runnable()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        self.cfg
            .max_batch_wait
            .saturating_sub(waited)
            .max(Duration::from_micros(50))
    }

    /// The delayed-batching decision (see [`should_step`]).
    fn decide(&self) -> bool {
        let runnable = self.runnable();
        match self.cfg.mode {
            ExecutionMode::Async | ExecutionMode::Serial | ExecutionMode::Lockstep => runnable > 0,
            ExecutionMode::AsyncDelayed => {
                let n = self.n_active().max(runnable);
                let waited = self
                    .oldest_runnable()
                    .map(|t| t.elapsed())
                    .unwrap_or_default();
                should_step(StepInputs {
                    runnable,
                    n_active: n,
                    threshold: threshold(&self.cfg.thresholds, n),
                    waited_out: waited >= self.cfg.max_batch_wait,
                    group_quiet: self.shared.as_ref().is_some_and(|s| s.quiet()),
                })
            }
        }
    }

    // ---- inbox --------------------------------------------------------------

    fn handle(&mut self, msg: Inbound) {
        match msg {
            Inbound::Generate(req) => self.on_generate(req),
            Inbound::Cancel(rid) => self.on_cancel(rid),
            Inbound::Peer(m) => {
                if let Some(s) = &self.shared {
                    s.message_received();
                }
                self.stats.count_message(m.from(), self.me(), m.kind());
                match m {
                    PeerMsg::Req(req) => self.on_peer_req(req),
                    PeerMsg::Progress {
                        rid,
                        from,
                        loc,
                        tokens,
                        logprobs,
                    } => self.on_progress(rid, from, loc as usize, &tokens, logprobs),
                    PeerMsg::Release { rid, n_active, .. } => {
                        self.reported_active = n_active as usize;
                        self.on_release(rid)
                    }
                    PeerMsg::Failed { rid, from, reason } => self.on_peer_failed(rid, from, reason),
                }
            }
            Inbound::SetThresholds(t) => {
                if !t.is_empty() && t.iter().all(|&b| b >= 1) {
                    self.stats.set_threshold_table(t.clone());
                    self.cfg.thresholds = t;
                }
            }
            Inbound::Nudge => {}
            Inbound::Shutdown => self.shutting_down = true,
        }
    }

    fn validate(&self, req: &GenerateReq) -> Result<(), String> {
        req.params.validate().map_err(|e| e.to_string())?;
        let info = self.runner.info();
        if req.prompt.is_empty() {
            return Err("the prompt is empty".into());
        }
        if let Some(&bad) = req.prompt.iter().find(|&&t| t as usize >= info.vocab_size) {
            return Err(format!(
                "token id {bad} is outside the vocabulary ({})",
                info.vocab_size
            ));
        }
        let total = req.prompt.len() + req.params.max_tokens;
        if total > info.max_context {
            return Err(format!(
                "prompt ({} tokens) + max_tokens ({}) exceeds the context of {} tokens",
                req.prompt.len(),
                req.params.max_tokens,
                info.max_context
            ));
        }
        let pool = info.num_blocks * info.block_size;
        if total > pool {
            return Err(format!(
                "prompt + max_tokens = {total} tokens can never fit the KV pool of {pool} tokens"
            ));
        }
        if !req.params.stop.is_empty() && self.tokenizer.is_none() {
            return Err("stop strings need a tokenizer, and this backend has none".into());
        }
        if self.seqs.contains_key(&req.rid) {
            return Err(format!("request id {} is already active", req.rid));
        }
        if let Some(m) = req.options.pin {
            if m as usize >= self.num_models() {
                return Err(format!(
                    "pinned to model {m}, the group has {}",
                    self.num_models()
                ));
            }
            if m != self.me() && !self.peers.is_up(m) {
                return Err(format!(
                    "model `{}` is unreachable",
                    self.cfg.model_names[m as usize]
                ));
            }
        }
        Ok(())
    }

    fn on_generate(&mut self, req: GenerateReq) {
        if let Err(e) = self.validate(&req) {
            let _ = req.sink.send(StreamEvent::Failed(RequestError::Invalid(e)));
            self.stats.count_failure("invalid_request");
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

    fn on_cancel(&mut self, rid: Rid) {
        if self.seqs.get(&rid).is_some_and(|s| s.is_home()) {
            self.end_failed(rid, RequestError::Cancelled);
        }
    }

    fn on_peer_req(&mut self, req: PeerReq) {
        // Only a request's home knows the group's load; a guest's figure
        // is second-hand and goes stale once the group is idle.
        if !self.seqs.get(&req.rid).is_some_and(Seq::is_home) {
            self.reported_active = req.n_active as usize;
        }
        match self.seqs.get(&req.rid).map(|s| s.is_home()) {
            Some(true) => self.on_pen_returned(req),
            Some(false) => {
                let Some(seq) = self.seqs.get_mut(&req.rid) else {
                    return;
                };
                let loc = req.loc as usize;
                if loc > seq.tokens.len() {
                    let reason =
                        format!("anchor {loc} is past the {} tokens held", seq.tokens.len());
                    self.reply_failed(req.rid, req.from, reason);
                    return;
                }
                // A shorter anchor means the home kept fewer of our tokens: drop the rest.
                seq.tokens.truncate(loc);
                seq.computed = seq.computed.min(loc);
                seq.tokens.extend_from_slice(&req.tokens);
                self.give_pen(req.rid, req.budget as usize);
            }
            None => {
                let Some(meta) = req.meta else {
                    self.reply_failed(
                        req.rid,
                        req.from,
                        "first hand-over without request metadata".into(),
                    );
                    return;
                };
                if req.loc != 0 {
                    self.reply_failed(
                        req.rid,
                        req.from,
                        format!("first hand-over anchored at {}", req.loc),
                    );
                    return;
                }
                if let Some(&bad) = req
                    .tokens
                    .iter()
                    .find(|&&t| t as usize >= self.runner.info().vocab_size)
                {
                    self.reply_failed(
                        req.rid,
                        req.from,
                        format!("token {bad} outside this model's vocabulary"),
                    );
                    return;
                }
                let seq = Seq {
                    rid: req.rid,
                    home: req.from,
                    computed: 0,
                    state: SeqState::Runnable,
                    admitted: false,
                    turn_start: req.tokens.len(),
                    runnable_since: Instant::now(),
                    sampler: Sampler::new(&meta.sampling, meta.seed),
                    budget: req.budget as usize,
                    written_this_turn: 0,
                    seed: meta.seed,
                    logprobs: meta.sampling.logprobs,
                    turn_logprobs: Vec::new(),
                    pinned: meta.pinned,
                    home_state: None,
                    tokens: req.tokens,
                };
                self.seqs.insert(req.rid, seq);
                self.give_pen(req.rid, req.budget as usize);
            }
        }
    }

    fn give_pen(&mut self, rid: Rid, budget: usize) {
        if let Some(seq) = self.seqs.get_mut(&rid) {
            seq.budget = budget;
            seq.state = SeqState::Runnable;
            seq.turn_start = seq.tokens.len();
            seq.written_this_turn = 0;
            seq.turn_logprobs.clear();
            seq.runnable_since = Instant::now();
            if seq.pending_tokens() == 0 {
                // Every token is computed but the logits of the last one are
                // gone: recompute it (same K/V, same slots).
                seq.computed = seq.tokens.len().saturating_sub(1);
            }
        }
    }

    /// A peer hands the pen back to this home with the tokens it wrote.
    fn on_pen_returned(&mut self, req: PeerReq) {
        let rid = req.rid;
        let Some(seq) = self.seqs.get(&rid) else {
            return;
        };
        if !matches!(seq.state, SeqState::Pending { at, .. } if at == req.from) {
            debug!(rid, from = req.from, "stale hand-over ignored");
            return;
        }
        if req.loc as usize != seq.tokens.len() {
            let reason = format!(
                "returned tokens anchored at {}, home holds {}",
                req.loc,
                seq.tokens.len()
            );
            self.end_failed(
                rid,
                RequestError::PeerFailed {
                    model: req.from,
                    reason,
                },
            );
            return;
        }
        let accepted = self.policy.receive(rid, &req.tokens).min(req.tokens.len());
        let from = req.from;
        let mut logprobs = req.logprobs.into_iter();
        for &t in &req.tokens[..accepted] {
            if let Some(seq) = self.seqs.get_mut(&rid) {
                seq.tokens.push(t);
            }
            if self.commit(rid, t, from, logprobs.next()) {
                return; // finished
            }
        }
        if let Some(hs) = self.seqs.get_mut(&rid).and_then(|s| s.home_state.as_mut()) {
            hs.peer_holds[from as usize] = req.loc as usize + accepted;
        }
        let budget = self.seqs.get(&rid).map(|s| s.budget).unwrap_or(0);
        self.give_pen(rid, budget);
    }

    /// A pinned guest's tokens, streamed while it keeps the pen.
    fn on_progress(
        &mut self,
        rid: Rid,
        from: ModelIdx,
        loc: usize,
        tokens: &[u32],
        logprobs: Vec<crate::sampling::logprobs::TokenLogprobs>,
    ) {
        let Some(seq) = self.seqs.get_mut(&rid) else {
            return; // ended here already; the release is on its way
        };
        if !seq.is_home() || !matches!(seq.state, SeqState::Pending { at, .. } if at == from) {
            debug!(rid, from, "stale progress ignored");
            return;
        }
        if loc != seq.tokens.len() {
            let reason = format!(
                "progress anchored at {loc}, home holds {}",
                seq.tokens.len()
            );
            self.end_failed(
                rid,
                RequestError::PeerFailed {
                    model: from,
                    reason,
                },
            );
            return;
        }
        // The writer is alive: restart the pending timeout.
        seq.state = SeqState::Pending {
            at: from,
            since: Instant::now(),
        };
        let mut logprobs = logprobs.into_iter();
        for &t in tokens {
            if let Some(seq) = self.seqs.get_mut(&rid) {
                seq.tokens.push(t);
            }
            if self.commit(rid, t, from, logprobs.next()) {
                return;
            }
        }
        if let Some(seq) = self.seqs.get_mut(&rid) {
            let held = seq.tokens.len();
            if let Some(hs) = seq.home_state.as_mut() {
                hs.peer_holds[from as usize] = held;
            }
        }
    }

    fn on_release(&mut self, rid: Rid) {
        if let Some(seq) = self.seqs.remove(&rid) {
            if seq.is_home() {
                // Only a home releases; a peer never releases a home's request.
                self.seqs.insert(rid, seq);
                return;
            }
            self.free_kv(&seq, true);
            self.policy.release(rid);
        }
    }

    fn on_peer_failed(&mut self, rid: Rid, from: ModelIdx, reason: String) {
        let Some(seq) = self.seqs.get(&rid) else {
            return;
        };
        if !seq.is_home() {
            return;
        }
        if self.cfg.fallback_on_peer_failure {
            warn!(rid, peer = from, %reason, "peer failed; continuing on the entry model");
            if let Some(hs) = self.seqs.get_mut(&rid).and_then(|s| s.home_state.as_mut()) {
                hs.peer_holds[from as usize] = 0;
                hs.failed_peers[from as usize] = true;
            }
            let budget = self.seqs.get(&rid).map(|s| s.budget).unwrap_or(0);
            self.give_pen(rid, budget);
        } else {
            self.end_failed(
                rid,
                RequestError::PeerFailed {
                    model: from,
                    reason,
                },
            );
        }
    }

    fn reply_failed(&mut self, rid: Rid, to: ModelIdx, reason: String) {
        warn!(rid, to, %reason, "refusing a hand-over");
        self.send(
            to,
            PeerMsg::Failed {
                rid,
                from: self.me(),
                reason,
            },
        );
    }

    fn check_peer_timeouts(&mut self) {
        let timeout = self.cfg.peer_timeout;
        let expired: Vec<(Rid, ModelIdx, String)> = self
            .seqs
            .values()
            .filter(|s| s.is_home())
            .filter_map(|s| match s.state {
                SeqState::Pending { at, since } if !self.peers.is_up(at) => Some((
                    s.rid,
                    at,
                    format!("model {at} is unreachable (pending {:?})", since.elapsed()),
                )),
                SeqState::Pending { at, since } if since.elapsed() > timeout => {
                    Some((s.rid, at, format!("no answer within {timeout:?}")))
                }
                _ => None,
            })
            .collect();
        for (rid, at, reason) in expired {
            self.on_peer_failed(rid, at, reason);
        }
    }

    // ---- stepping -------------------------------------------------------------

    /// Picks the batch: runnable requests oldest first, admitting and
    /// chunking prefill within the token budget, preempting the newest
    /// admitted requests when the KV pool runs dry.
    fn plan(&mut self) -> Vec<(Rid, usize)> {
        let mut order: Vec<(Instant, Rid)> = self
            .seqs
            .values()
            .filter(|s| s.runnable())
            .map(|s| (s.runnable_since, s.rid))
            .collect();
        order.sort();
        let mut budget = self.cfg.limits.max_batched_tokens;
        let mut plan: Vec<(Rid, usize)> = Vec::new();
        for (_, rid) in order {
            if budget == 0 || plan.len() >= self.cfg.limits.max_batch_size {
                break;
            }
            if !self.admit(rid) {
                break;
            }
            let Some(seq) = self.seqs.get(&rid) else {
                continue;
            };
            let n = seq.pending_tokens().min(budget);
            let end = seq.computed + n;
            // Reserve now, so later items see the blocks this one takes.
            while self.runner.kv().reserve(rid, end).is_err() {
                if !self.preempt_one(rid, &plan) {
                    break;
                }
            }
            if !self.runner.kv_ref().can_reserve(rid, end) {
                if plan.is_empty() {
                    self.fail_unservable(rid);
                }
                break;
            }
            plan.push((rid, n));
            budget -= n;
        }
        plan
    }

    /// Admits a runnable request to the KV cache (prefix reuse). False when the
    /// pool cannot take it now.
    fn admit(&mut self, rid: Rid) -> bool {
        let Some(seq) = self.seqs.get(&rid) else {
            return false;
        };
        if seq.admitted {
            return true;
        }
        let cached = match self.runner.kv().admit(rid, &seq.tokens) {
            Ok(c) => c,
            Err(e) => {
                warn!(rid, error = %e, "KV admission failed");
                return false;
            }
        };
        if let Some(seq) = self.seqs.get_mut(&rid) {
            seq.admitted = true;
            seq.computed = cached;
            if let Some(hs) = seq.home_state.as_mut() {
                if hs.tokens_by_model.iter().sum::<usize>() == 0 {
                    hs.cached_prompt = cached.min(hs.prompt_len);
                    self.stats.count_prefix(hs.prompt_len, hs.cached_prompt);
                }
            }
        }
        true
    }

    /// Frees the KV of the newest admitted request not in `plan` (and not
    /// `keep`), pending ones last. False when there is none.
    fn preempt_one(&mut self, keep: Rid, plan: &[(Rid, usize)]) -> bool {
        let victim = self
            .seqs
            .values()
            .filter(|s| s.admitted && s.rid != keep && !plan.iter().any(|(r, _)| *r == s.rid))
            .max_by_key(|s| (s.runnable(), s.runnable_since))
            .map(|s| s.rid);
        let Some(victim) = victim else { return false };
        if let Some(seq) = self.seqs.get_mut(&victim) {
            seq.admitted = false;
            seq.computed = 0;
        }
        let _ = self.runner.kv().free(victim);
        self.stats.count_preemption();
        debug!(rid = victim, "preempted to free KV blocks");
        true
    }

    fn fail_unservable(&mut self, rid: Rid) {
        let err = "the KV pool cannot hold this request".to_string();
        if self.seqs.get(&rid).is_some_and(|s| s.is_home()) {
            self.end_failed(rid, RequestError::Engine(err));
        } else if let Some(seq) = self.seqs.remove(&rid) {
            self.free_kv(&seq, false);
            self.reply_failed(rid, seq.home, err);
        }
    }

    /// One forward over the planned batch, then sample, route, and commit or send.
    fn step(&mut self) {
        let plan = self.plan();
        if plan.is_empty() {
            return;
        }
        let items: Vec<StepItem> = plan
            .iter()
            .filter_map(|&(rid, n)| {
                let s = self.seqs.get(&rid)?;
                Some(StepItem {
                    rid,
                    start: s.computed,
                    tokens: s.tokens[s.computed..s.computed + n].to_vec(),
                })
            })
            .collect();
        let entropy_items = self.entropy_items(&items);
        let batch = StepBatch {
            items,
            entropy_items,
        };
        let shared = self.shared.clone();
        if let Some(s) = &shared {
            s.step_started();
        }
        let serial_guard = match (&shared, self.cfg.mode) {
            (Some(s), ExecutionMode::Serial) => Some(s.serial.lock()),
            _ => None,
        };
        let started = Instant::now();
        let result = self.runner.forward(&batch);
        let elapsed = started.elapsed();
        if let Some(g) = serial_guard {
            parking_lot::MutexGuard::unlock_fair(g);
        }
        match result {
            Ok(out) => {
                self.stats.record_step(batch.items.len(), elapsed);
                if let Err(e) = self.after_forward(&plan, out, &batch.entropy_items) {
                    self.fail_batch(&plan, &e.to_string());
                }
            }
            Err(e) => {
                warn!(error = %e, "forward failed");
                self.fail_batch(&plan, &e.to_string());
            }
        }
        if let Some(s) = &shared {
            s.step_ended();
        }
    }

    /// Items whose step feeds prompt tokens the policy wants entropies of
    /// (each prompt position once, in order).
    fn entropy_items(&self, items: &[StepItem]) -> Vec<usize> {
        if !self.policy.wants_prompt_entropy() {
            return Vec::new();
        }
        items
            .iter()
            .enumerate()
            .filter(|(_, item)| {
                self.seqs
                    .get(&item.rid)
                    .and_then(|s| s.home_state.as_ref())
                    .is_some_and(|hs| {
                        !hs.first_routed
                            && item.start + item.tokens.len() <= hs.prompt_len
                            && item.start >= hs.prompt_entropy.upto
                    })
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn fail_batch(&mut self, plan: &[(Rid, usize)], reason: &str) {
        for &(rid, _) in plan {
            if self.seqs.get(&rid).is_some_and(|s| s.is_home()) {
                self.end_failed(rid, RequestError::Engine(reason.to_string()));
            } else if let Some(seq) = self.seqs.remove(&rid) {
                self.free_kv(&seq, false);
                self.reply_failed(rid, seq.home, reason.to_string());
            }
        }
    }

    fn after_forward(
        &mut self,
        plan: &[(Rid, usize)],
        out: crate::runner::StepOutput,
        entropy_rows: &[usize],
    ) -> Result<(), crate::error::EngineError> {
        let rows = if out.tokens.is_none() {
            Some(out.sample_rows(self.runner.info().vocab_size)?)
        } else {
            None
        };
        let mut route_items: Vec<RouteItem> = Vec::new();
        let mut route_rows: Vec<i64> = Vec::new();
        let mut route_logprobs: Vec<Option<TokenLogprobs>> = Vec::new();
        for (row, &(rid, n)) in plan.iter().enumerate() {
            let Some(seq) = self.seqs.get_mut(&rid) else {
                continue;
            };
            if let (Some(sums), Some(hs)) = (&out.entropy_sums, seq.home_state.as_mut()) {
                if entropy_rows.contains(&row) {
                    let sum = sums.get(row).copied().unwrap_or(0.0);
                    hs.prompt_entropy.add(sum, n, seq.computed + n);
                }
            }
            seq.computed += n;
            if seq.pending_tokens() > 0 {
                continue; // a prefill chunk: not a next-token distribution yet
            }
            let token = match (&out.tokens, &rows) {
                (Some(t), _) => t[row],
                (None, Some(r)) => seq
                    .sampler
                    .sample(&r[row])
                    .map_err(|e| crate::error::EngineError::InvalidRequest(e.to_string()))?,
                (None, None) => {
                    return Err(crate::error::EngineError::InvalidRequest(
                        "the backend returned neither logits nor tokens".into(),
                    ))
                }
            };
            let lp = match (seq.logprobs, &rows) {
                (Some(n), Some(r)) => Some(
                    logprobs(&r[row], token, n)
                        .map_err(|e| crate::error::EngineError::InvalidRequest(e.to_string()))?,
                ),
                _ => None,
            };
            route_logprobs.push(lp);
            let prompt_entropy = match seq.home_state.as_mut() {
                Some(hs) if !hs.first_routed => {
                    hs.first_routed = true;
                    hs.prompt_entropy.mean()
                }
                _ => None,
            };
            route_items.push(RouteItem {
                prompt_entropy,
                rid,
                home: seq.home,
                token,
                position: seq.tokens.len(),
                written_this_turn: seq.written_this_turn,
                seed: seq.seed,
            });
            route_rows.push(row as i64);
        }
        if route_items.is_empty() {
            return Ok(());
        }
        let pick = |t: &tch::Tensor| -> Result<tch::Tensor, crate::error::EngineError> {
            let idx = tch::Tensor::f_from_slice(&route_rows)?.f_to_device(t.device())?;
            Ok(t.f_index_select(0, &idx)?)
        };
        let logits = out.logits.as_ref().map(pick).transpose()?;
        let hidden = out.hidden.as_ref().map(pick).transpose()?;
        let view = StepView {
            model: self.me(),
            num_models: self.num_models(),
            items: &route_items,
            logits: logits.as_ref(),
            hidden: hidden.as_ref(),
            embeddings: self.runner.embeddings(),
        };
        let dests = self.policy.route(&view);
        for ((i, item), lp) in route_items.iter().enumerate().zip(route_logprobs) {
            let dest = dests.get(i).copied().unwrap_or(Dest::Stay);
            self.apply(item, dest, lp);
        }
        Ok(())
    }

    /// Applies one routing decision.
    fn apply(&mut self, item: &RouteItem, dest: Dest, lp: Option<TokenLogprobs>) {
        let me = self.me();
        let rid = item.rid;
        let Some(seq) = self.seqs.get(&rid) else {
            return;
        };
        let home = seq.home;
        let is_home = seq.is_home();
        let eos = self.runner.info().eos_ids.contains(&item.token);
        let avoided = |to: ModelIdx| {
            seq.home_state
                .as_ref()
                .is_some_and(|hs| hs.failed_peers[to as usize])
        };
        // A pinned request (query-level) is written here whatever the policy says.
        let pinned = seq.pinned
            || seq
                .home_state
                .as_ref()
                .is_some_and(|hs| hs.pinned_to.is_some());
        let first_contact = |to: ModelIdx| {
            seq.home_state
                .as_ref()
                .is_some_and(|hs| hs.peer_holds.get(to as usize) == Some(&0))
        };
        let mut dest = match dest {
            _ if pinned => Dest::Stay,
            Dest::Peer { to, .. } | Dest::Delegate { to }
                if to as usize >= self.num_models() || to == me || avoided(to) =>
            {
                Dest::Stay
            }
            Dest::Delegate { to } if !first_contact(to) => Dest::Peer {
                to,
                keep_token: false,
            },
            d => d,
        };
        if !is_home {
            // A guest writes at least one token per turn, stops at EOS or at
            // the request's budget, and always returns to the home.
            let written = seq.written_this_turn;
            let out_of_budget = written + 1 >= seq.budget;
            dest = match dest {
                Dest::Peer { keep_token, .. } => Dest::Peer {
                    to: home,
                    keep_token: keep_token || written == 0,
                },
                Dest::Stay if eos || out_of_budget => Dest::Peer {
                    to: home,
                    keep_token: true,
                },
                Dest::Stay => Dest::Stay,
                // Only a home delegates (first_contact is false at a guest).
                Dest::Delegate { .. } => Dest::Peer {
                    to: home,
                    keep_token: written == 0,
                },
            };
        }
        self.stats.record_decision(me, &dest);
        match dest {
            Dest::Delegate { to } => self.delegate(rid, to),
            Dest::Stay => {
                let lp = self.push_token(rid, item.token, lp);
                if is_home {
                    self.commit(rid, item.token, me, lp);
                } else if pinned {
                    self.send_progress(rid);
                }
            }
            Dest::Peer { to, keep_token } => {
                if keep_token {
                    let lp = self.push_token(rid, item.token, lp);
                    if is_home && self.commit(rid, item.token, me, lp) {
                        return;
                    }
                }
                if is_home {
                    self.send_to_peer(rid, to);
                } else {
                    self.return_to_home(rid);
                }
            }
        }
    }

    /// Home → `to` for the rest of the request: this model's KV goes back
    /// to the pool (its prefix stays cached) and `to` streams every token.
    fn delegate(&mut self, rid: Rid, to: ModelIdx) {
        let Some(mut seq) = self.seqs.remove(&rid) else {
            return;
        };
        self.free_kv(&seq, true);
        seq.admitted = false;
        seq.computed = 0;
        if let Some(hs) = seq.home_state.as_mut() {
            hs.pinned_to = Some(to);
        }
        self.seqs.insert(rid, seq);
        self.send_to_peer(rid, to);
    }

    /// Appends a token this model wrote. A guest keeps its logprobs for the
    /// trip home; at the home they go straight to `commit` (returned).
    fn push_token(
        &mut self,
        rid: Rid,
        token: u32,
        lp: Option<TokenLogprobs>,
    ) -> Option<TokenLogprobs> {
        let seq = self.seqs.get_mut(&rid)?;
        seq.tokens.push(token);
        seq.written_this_turn += 1;
        match (seq.is_home(), lp) {
            (false, Some(lp)) => {
                seq.turn_logprobs.push(lp);
                None
            }
            (_, lp) => lp,
        }
    }

    /// Pinned guest → home: the tokens written since the last progress; the
    /// pen stays here.
    fn send_progress(&mut self, rid: Rid) {
        let me = self.me();
        let Some(seq) = self.seqs.get_mut(&rid) else {
            return;
        };
        let home = seq.home;
        let (loc, tokens, logprobs) = seq.take_turn();
        let msg = PeerMsg::Progress {
            rid,
            from: me,
            loc: loc as u32,
            tokens,
            logprobs,
        };
        if !self.send(home, msg) {
            // The home is gone: nobody will read this request again.
            if let Some(seq) = self.seqs.remove(&rid) {
                self.free_kv(&seq, false);
            }
        }
    }

    /// Commits one output token at the home: accounting, streaming, stop
    /// conditions. True when the request finished (and was removed).
    fn commit(
        &mut self,
        rid: Rid,
        token: u32,
        writer: ModelIdx,
        logprobs: Option<TokenLogprobs>,
    ) -> bool {
        let Some(seq) = self.seqs.get_mut(&rid) else {
            return true;
        };
        seq.budget = seq.budget.saturating_sub(1);
        let Some(hs) = seq.home_state.as_mut() else {
            return false;
        };
        hs.tokens_by_model[writer as usize] += 1;
        if let Some(c) = self.share.as_mut() {
            if let Some(t) = c.observe(writer) {
                self.stats.set_routing_threshold(t);
            }
        }
        if let Some(prev) = hs.last_writer {
            if prev != writer {
                hs.switches += 1;
            }
        }
        let from = hs.last_writer.unwrap_or(writer);
        hs.last_writer = Some(writer);
        let delta = match hs.detok.as_mut() {
            Some(d) => d.push(token).unwrap_or_default(),
            None => String::new(),
        };
        let finish = hs.stop.push(token, &delta);
        let text = hs.stop.take_safe();
        let _ = hs.sink.send(StreamEvent::Token {
            token,
            writer,
            text,
            logprobs,
        });
        self.stats.record_commit(from, writer);
        match finish {
            Some(f) => {
                self.end_finished(rid, f.reason);
                true
            }
            None => false,
        }
    }

    /// Sends to a peer; false when the transport refused it.
    fn send(&mut self, to: ModelIdx, msg: PeerMsg) -> bool {
        if let Some(s) = &self.shared {
            s.message_sent();
        }
        self.stats.count_message(self.me(), to, msg.kind());
        match self.peers.send(to, msg) {
            Ok(()) => true,
            Err(e) => {
                if let Some(s) = &self.shared {
                    s.message_received(); // it never arrives
                }
                debug!(to, error = %e, "peer send failed");
                false
            }
        }
    }

    /// Home → peer: hand over the suffix the peer has not seen.
    fn send_to_peer(&mut self, rid: Rid, to: ModelIdx) {
        let n_active = self.n_active() as u32;
        let me = self.me();
        let Some(seq) = self.seqs.get_mut(&rid) else {
            return;
        };
        let Some(hs) = seq.home_state.as_mut() else {
            return;
        };
        let holds = hs.peer_holds[to as usize];
        let first = holds == 0;
        let (loc, tokens) = self.policy.send(rid, &seq.tokens, holds);
        hs.peer_holds[to as usize] = seq.tokens.len();
        let meta = first.then(|| RequestMeta {
            sampling: hs.params.clone(),
            seed: derive_seed(seq.seed, to),
            pinned: hs.pinned_to == Some(to),
        });
        seq.state = SeqState::Pending {
            at: to,
            since: Instant::now(),
        };
        let msg = PeerMsg::Req(PeerReq {
            rid,
            from: me,
            to,
            loc: loc as u32,
            tokens,
            finished: false,
            budget: seq.budget as u32,
            n_active,
            meta,
            logprobs: Vec::new(),
        });
        if !self.peers.is_up(to) || !self.send(to, msg) {
            self.on_peer_failed(rid, to, format!("model {to} is unreachable"));
        }
    }

    /// Guest → home: the tokens written this turn.
    fn return_to_home(&mut self, rid: Rid) {
        let n_active = self.n_active() as u32;
        let me = self.me();
        let Some(seq) = self.seqs.get_mut(&rid) else {
            return;
        };
        let home = seq.home;
        let (loc, tokens, logprobs) = seq.take_turn();
        seq.state = SeqState::Pending {
            at: home,
            since: Instant::now(),
        };
        let budget = seq.budget.saturating_sub(tokens.len()) as u32;
        self.stats.record_guest_tokens(tokens.len());
        let msg = PeerMsg::Req(PeerReq {
            rid,
            from: me,
            to: home,
            loc: loc as u32,
            tokens,
            finished: false,
            budget,
            n_active,
            meta: None,
            logprobs,
        });
        if !self.send(home, msg) {
            // The home is gone: nobody will ask for this request again.
            if let Some(seq) = self.seqs.remove(&rid) {
                self.free_kv(&seq, false);
            }
        }
    }

    // ---- endings --------------------------------------------------------------

    fn free_kv(&mut self, seq: &Seq, cache: bool) {
        if !seq.admitted {
            return;
        }
        let kv = self.runner.kv();
        let cached = cache && kv.release(seq.rid, &seq.tokens[..seq.computed]).is_ok();
        if !cached {
            let _ = kv.free(seq.rid);
        }
    }

    fn release_peers(&mut self, seq: &Seq) {
        let Some(hs) = &seq.home_state else { return };
        let holders: Vec<ModelIdx> = hs
            .peer_holds
            .iter()
            .enumerate()
            .filter(|&(m, &h)| h > 0 && m != self.me() as usize)
            .map(|(m, _)| m as ModelIdx)
            .collect();
        // This request is still counted here; peers hear the count after it.
        let n_active = self.n_active().saturating_sub(1) as u32;
        for m in holders {
            self.send(
                m,
                PeerMsg::Release {
                    rid: seq.rid,
                    from: self.me(),
                    n_active,
                },
            );
        }
    }

    fn end_finished(&mut self, rid: Rid, reason: FinishReason) {
        let Some(mut seq) = self.seqs.remove(&rid) else {
            return;
        };
        self.release_peers(&seq);
        self.free_kv(&seq, true);
        self.policy.release(rid);
        if let Some(hs) = seq.home_state.as_mut() {
            let mut text = hs.stop.take_safe();
            if let Some(d) = hs.detok.as_mut() {
                text.push_str(&d.flush().unwrap_or_default());
            }
            let usage = Usage {
                prompt_tokens: hs.prompt_len,
                completion_tokens: hs.tokens_by_model.iter().sum(),
                tokens_by_model: hs.tokens_by_model.clone(),
                switches: hs.switches,
                cached_prompt_tokens: hs.cached_prompt,
            };
            let _ = hs.sink.send(StreamEvent::Finished {
                reason,
                text,
                usage,
            });
            self.stats.count_success(reason.as_str());
        }
        self.request_ended();
    }

    fn end_failed(&mut self, rid: Rid, err: RequestError) {
        let Some(seq) = self.seqs.remove(&rid) else {
            return;
        };
        self.release_peers(&seq);
        self.free_kv(&seq, false);
        self.policy.release(rid);
        if let Some(hs) = &seq.home_state {
            self.stats.count_failure(err.error_type());
            let _ = hs.sink.send(StreamEvent::Failed(err));
            self.request_ended();
        }
    }

    fn request_ended(&mut self) {
        self.home_active = self.home_active.saturating_sub(1);
        if let Some(s) = &self.shared {
            s.request_ended();
        }
    }

    fn fail_all(&mut self, err: RequestError) {
        let homes: Vec<Rid> = self
            .seqs
            .values()
            .filter(|s| s.is_home())
            .map(|s| s.rid)
            .collect();
        for rid in homes {
            self.end_failed(rid, err.clone());
        }
        let guests: Vec<Rid> = self.seqs.keys().copied().collect();
        for rid in guests {
            if let Some(seq) = self.seqs.remove(&rid) {
                self.free_kv(&seq, false);
            }
        }
    }

    fn publish_queue_stats(&self) {
        let (mut running, mut waiting, mut pending) = (0, 0, 0);
        for s in self.seqs.values() {
            match (s.state, s.admitted) {
                (SeqState::Pending { .. }, _) => pending += 1,
                (SeqState::Runnable, true) => running += 1,
                (SeqState::Runnable, false) => waiting += 1,
            }
        }
        let kv = self.runner.kv_ref();
        self.stats.set_queue(
            running,
            waiting,
            pending,
            kv.usage(),
            kv.num_requests(),
            kv.num_available_blocks(),
            kv.num_blocks(),
        );
        self.stats.set_concurrency(
            self.n_active(),
            threshold(&self.cfg.thresholds, self.n_active()),
        );
    }
}
