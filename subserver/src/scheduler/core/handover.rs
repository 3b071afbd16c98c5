//! Hand-over: requests moving between models. The home hands the pen to
//! a peer and takes it back; a guest writes its turn and returns; pinned
//! guests stream progress; peers that fail or time out are dropped (or the
//! request fails).

use std::time::Instant;

use tracing::{debug, warn};

use crate::peer::message::{ModelIdx, PeerMsg, PeerReq, RequestMeta, Rid};
use crate::runner::ModelRunner;
use crate::sampling::Sampler;
use crate::scheduler::client::RequestError;
use crate::scheduler::seq::{Seq, SeqState};

use super::{derive_seed, Scheduler};

impl<R: ModelRunner> Scheduler<R> {
    pub(super) fn on_peer_req(&mut self, req: PeerReq) {
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
                    // Policies draw from the request's own stream at every
                    // model (the sampler above has its derived seed).
                    seed: meta.route_seed,
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

    pub(super) fn give_pen(&mut self, rid: Rid, budget: usize) {
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
    pub(super) fn on_pen_returned(&mut self, req: PeerReq) {
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
        match req
            .next
            .filter(|&to| accepted == req.tokens.len() && self.may_pass_to(rid, to))
        {
            Some(to) => {
                // The guest drew the next writer: pass the pen on now. This
                // model computes nothing; it stays pending with its KV and
                // catches up on the skipped tokens when it next writes.
                self.stats.count_pass_on();
                self.send_to_peer(rid, to);
            }
            None => {
                let budget = self.seqs.get(&rid).map(|s| s.budget).unwrap_or(0);
                self.give_pen(rid, budget);
            }
        }
    }

    /// Whether the home may hand `rid` to `to` on a guest's word: another
    /// model of the group that has not failed this request, and the request
    /// is not pinned.
    fn may_pass_to(&self, rid: Rid, to: ModelIdx) -> bool {
        let Some(hs) = self.seqs.get(&rid).and_then(|s| s.home_state.as_ref()) else {
            return false;
        };
        (to as usize) < self.num_models()
            && to != self.me()
            && !hs.failed_peers[to as usize]
            && hs.pinned_to.is_none()
    }

    /// A pinned guest's tokens, streamed while it keeps the pen.
    pub(super) fn on_progress(
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

    pub(super) fn on_release(&mut self, rid: Rid) {
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

    pub(super) fn on_peer_failed(&mut self, rid: Rid, from: ModelIdx, reason: String) {
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
                hs.peer_fallbacks += 1;
            }
            self.stats.count_peer_fallback(from);
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

    pub(super) fn reply_failed(&mut self, rid: Rid, to: ModelIdx, reason: String) {
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

    pub(super) fn check_peer_timeouts(&mut self) {
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

    /// Home → `to` for the rest of the request: this model's KV goes back
    /// to the pool (its prefix stays cached) and `to` streams every token.
    pub(super) fn delegate(&mut self, rid: Rid, to: ModelIdx) {
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

    /// Pinned guest → home: the tokens written since the last progress; the
    /// pen stays here.
    pub(super) fn send_progress(&mut self, rid: Rid) {
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

    /// Sends to a peer; false when the transport refused it.
    pub(super) fn send(&mut self, to: ModelIdx, msg: PeerMsg) -> bool {
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
    pub(super) fn send_to_peer(&mut self, rid: Rid, to: ModelIdx) {
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
            route_seed: seq.seed,
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
            next: None,
        });
        if !self.peers.is_up(to) || !self.send(to, msg) {
            self.on_peer_failed(rid, to, format!("model {to} is unreachable"));
        }
    }

    /// Guest → home: the tokens written this turn, and the model the guest
    /// drew to write next when that is not the home (the home passes the
    /// pen on without a step).
    pub(super) fn return_to_home(&mut self, rid: Rid, next: Option<ModelIdx>) {
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
            next: next.filter(|&m| m != home),
        });
        if !self.send(home, msg) {
            // The home is gone: nobody will ask for this request again.
            if let Some(seq) = self.seqs.remove(&rid) {
                self.free_kv(&seq, false);
            }
        }
    }
}
