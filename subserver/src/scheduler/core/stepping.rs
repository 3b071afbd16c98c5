//! Stepping: one forward over the planned batch, then sample, route, and
//! commit at the home or hand over.

use std::time::Instant;

use tracing::warn;

use crate::peer::message::{ModelIdx, Rid};
use crate::runner::{ModelRunner, StepBatch, StepItem};
use crate::sampling::logprobs::{logprobs, TokenLogprobs};
use crate::sampling::HostLogits;
use crate::scheduler::batching::ExecutionMode;
use crate::scheduler::client::{RequestError, StreamEvent};
use policies::routing::{Dest, RouteItem, StepView};

use super::Scheduler;

/// The sampled columns of row `i`, or why there is none.
fn row_of(r: &HostLogits, i: usize, vocab: usize) -> Result<&[f32], crate::error::EngineError> {
    r.sample_row(i, vocab).ok_or_else(|| {
        crate::error::EngineError::InvalidRequest(format!("the backend returned no logits row {i}"))
    })
}

impl<R: ModelRunner> Scheduler<R> {
    /// One forward over the planned batch, then sample, route, and commit or send.
    pub(super) fn step(&mut self) {
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
        let serial_guard = match (&shared, self.cfg.mode) {
            (Some(s), ExecutionMode::Serial) => Some(s.serial.lock()),
            _ => None,
        };
        if let Some(threads) = shared.as_ref().and_then(|s| s.cpu_threads()) {
            self.use_cpu_threads(threads);
        }
        let started = Instant::now();
        let result = self.runner.forward(&batch);
        let elapsed = started.elapsed();
        if let Some(g) = serial_guard {
            parking_lot::MutexGuard::unlock_fair(g);
        }
        match result {
            Ok(out) => {
                let fed = batch.items.iter().map(|i| i.tokens.len()).sum();
                self.stats.record_step(batch.items.len(), fed, elapsed);
                // Delayed batching counts a step's hand-overs as one event.
                let delivery = shared
                    .as_ref()
                    .filter(|_| self.cfg.mode == ExecutionMode::AsyncDelayed);
                if let Some(s) = delivery {
                    s.delivery_started();
                }
                if let Err(e) = self.after_forward(&plan, out, &batch.entropy_items) {
                    self.fail_batch(&plan, &e.to_string());
                }
                if let Some(s) = delivery {
                    s.delivery_ended(self.me() as usize);
                }
            }
            Err(e) => {
                warn!(error = %e, "forward failed");
                self.fail_batch(&plan, &e.to_string());
            }
        }
    }

    /// Sets this thread's intra-op threads for the coming step (only on a
    /// change). A one-thread step first ends the OpenMP workers an earlier
    /// step started: while two models' threads each keep a pool, libgomp
    /// counts more threads than cores and sleeps at every op's barrier
    /// (see `device::release_cpu_workers`).
    fn use_cpu_threads(&mut self, threads: usize) {
        if threads == 1 {
            self.release_cpu_pool();
        }
        if self.cpu_threads != Some(threads) {
            crate::device::set_cpu_threads(threads as i32);
            self.cpu_threads = Some(threads);
        }
        self.holds_cpu_pool |= threads > 1;
    }

    /// Ends this thread's OpenMP workers, if a step started them: before it
    /// sleeps (another model may take every core next) or steps on one thread.
    pub(super) fn release_cpu_pool(&mut self) {
        if std::mem::take(&mut self.holds_cpu_pool) {
            crate::device::release_cpu_workers();
        }
    }

    /// Items whose step feeds prompt tokens the policy wants entropies of
    /// (each prompt position once, in order).
    pub(super) fn entropy_items(&self, items: &[StepItem]) -> Vec<usize> {
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

    pub(super) fn fail_batch(&mut self, plan: &[(Rid, usize)], reason: &str) {
        for &(rid, _) in plan {
            if self.seqs.get(&rid).is_some_and(|s| s.is_home()) {
                self.end_failed(rid, RequestError::Engine(reason.to_string()));
            } else if let Some(seq) = self.seqs.remove(&rid) {
                self.free_kv(&seq, false);
                self.reply_failed(rid, seq.home, reason.to_string());
            }
        }
    }

    pub(super) fn after_forward(
        &mut self,
        plan: &[(Rid, usize)],
        out: crate::runner::StepOutput,
        entropy_rows: &[usize],
    ) -> Result<(), crate::error::EngineError> {
        // One host copy of the logits per step, in a buffer kept across
        // steps: sampling, log-probabilities and signals all read it.
        let mut host = std::mem::take(&mut self.host_logits);
        let have_rows = out.tokens.is_none();
        if have_rows {
            out.host_logits_into(&mut host)?;
        }
        let result = self.sample_and_route(plan, &out, entropy_rows, have_rows.then_some(&host));
        self.host_logits = host;
        result
    }

    fn sample_and_route(
        &mut self,
        plan: &[(Rid, usize)],
        out: &crate::runner::StepOutput,
        entropy_rows: &[usize],
        rows: Option<&HostLogits>,
    ) -> Result<(), crate::error::EngineError> {
        let vocab = self.runner.info().vocab_size;
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
            let token = match (&out.tokens, rows) {
                (Some(t), _) => t[row],
                (None, Some(r)) => seq
                    .sampler
                    .sample(row_of(r, row, vocab)?)
                    .map_err(|e| crate::error::EngineError::InvalidRequest(e.to_string()))?,
                (None, None) => {
                    return Err(crate::error::EngineError::InvalidRequest(
                        "the backend returned neither logits nor tokens".into(),
                    ))
                }
            };
            let lp = match (seq.logprobs, rows) {
                (Some(n), Some(r)) => Some(
                    logprobs(row_of(r, row, vocab)?, token, n)
                        .map_err(|e| crate::error::EngineError::InvalidRequest(e.to_string()))?,
                ),
                _ => None,
            };
            route_logprobs.push(lp);
            let prompt_entropy = match seq.home_state.as_mut() {
                Some(hs) if !hs.first_routed => {
                    hs.first_routed = true;
                    let measured = hs.prompt_entropy.mean();
                    if self.policy.wants_prompt_entropy() {
                        let prompt = &seq.tokens[..hs.prompt_len.min(seq.tokens.len())];
                        self.prompt_memo.score(prompt, measured)
                    } else {
                        measured
                    }
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
        // Signals over the full head row, as the policies always read them.
        let signals: Option<Vec<kernels::RowStats>> =
            rows.filter(|_| self.policy.wants_logit_signals()).map(|r| {
                route_rows
                    .iter()
                    .filter_map(|&i| r.row(i as usize).map(kernels::row_stats))
                    .collect()
            });
        let view = StepView {
            model: self.me(),
            num_models: self.num_models(),
            items: &route_items,
            logits: logits.as_ref(),
            hidden: hidden.as_ref(),
            embeddings: self.runner.embeddings(),
            signals: signals.as_deref(),
        };
        let dests = self.policy.route(&view);
        self.report_signal_failures();
        for ((i, item), lp) in route_items.iter().enumerate().zip(route_logprobs) {
            let dest = dests.get(i).copied().unwrap_or(Dest::Stay);
            self.apply(item, dest, lp);
        }
        Ok(())
    }

    /// Applies one routing decision.
    pub(super) fn apply(&mut self, item: &RouteItem, dest: Dest, lp: Option<TokenLogprobs>) {
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
            // the request's budget, and always returns to the home. A pinned
            // guest keeps the pen to the end: its EOS reaches the home as
            // progress, where the stop rules (and `ignore_eos`) decide, so it
            // never hands the rest of a pinned answer to the home.
            let written = seq.written_this_turn;
            let out_of_budget = written + 1 >= seq.budget;
            let eos = eos && !pinned;
            dest = match dest {
                // The home, or another guest (ME: the pen passes on through
                // the home without a step there).
                Dest::Peer { to, keep_token } => Dest::Peer {
                    to,
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
                    self.return_to_home(rid, Some(to));
                }
            }
        }
    }

    /// Appends a token this model wrote. A guest keeps its logprobs for the
    /// trip home; at the home they go straight to `commit` (returned).
    pub(super) fn push_token(
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

    /// Commits one output token at the home: accounting, streaming, stop
    /// conditions. True when the request finished (and was removed).
    pub(super) fn commit(
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
}
