//! Batch planning for the routed scheduler: the shared
//! [`Planner`] serves runnable requests oldest first; this table says how a
//! request enters the KV cache, which one is preempted (the newest
//! admitted, pending ones last), and that a request the empty pool can
//! never hold fails.

use std::time::Instant;

use tracing::{debug, warn};

use crate::engine::planner::{Admission, PlanTable, Planner};
use crate::error::EngineError;
use crate::peer::message::Rid;
use crate::runner::ModelRunner;
use crate::scheduler::client::RequestError;

use super::Scheduler;

impl<R: ModelRunner> Scheduler<R> {
    /// Picks the batch: runnable requests oldest first, admitting and
    /// chunking prefill within the token budget, preempting the newest
    /// admitted requests when the KV pool runs dry.
    pub(super) fn plan(&mut self) -> Vec<(Rid, usize)> {
        // Admission failures are refusals here, so planning cannot fail.
        Planner::new(self.cfg.limits).plan(self).unwrap_or_default()
    }

    fn fail_unservable(&mut self, rid: Rid) {
        let err = RequestError::KvExhausted;
        if self.seqs.get(&rid).is_some_and(|s| s.is_home()) {
            self.end_failed(rid, err);
        } else if let Some(seq) = self.seqs.remove(&rid) {
            self.free_kv(&seq, false);
            self.reply_failed(rid, seq.home, err.to_string());
        }
    }
}

impl<R: ModelRunner> PlanTable for Scheduler<R> {
    fn candidates(&self) -> Vec<u64> {
        let mut order: Vec<(Instant, Rid)> = self
            .seqs
            .values()
            .filter(|s| s.runnable())
            .map(|s| (s.runnable_since, s.rid))
            .collect();
        order.sort();
        order.into_iter().map(|(_, rid)| rid).collect()
    }

    /// Admits a runnable request to the KV cache (prefix reuse); refused
    /// when the pool cannot take it now.
    fn admit(&mut self, rid: Rid) -> Result<Admission, EngineError> {
        let Some(seq) = self.seqs.get(&rid) else {
            return Ok(Admission::Refused);
        };
        if seq.admitted {
            return Ok(Admission::Held);
        }
        let cached = match self.runner.kv().admit(rid, &seq.tokens) {
            Ok(c) => c,
            Err(e) => {
                warn!(rid, error = %e, "KV admission failed");
                return Ok(Admission::Refused);
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
        Ok(Admission::New)
    }

    fn progress(&self, rid: Rid) -> Option<(usize, usize)> {
        let seq = self.seqs.get(&rid)?;
        Some((seq.computed, seq.pending_tokens()))
    }

    fn reserve(&mut self, rid: Rid, end: usize) -> bool {
        self.runner.kv().reserve(rid, end).is_ok()
    }

    /// The newest admitted request not in `plan` (and not `keep`), pending
    /// ones last.
    fn victim(&self, keep: Rid, plan: &[(Rid, usize)]) -> Option<Rid> {
        self.seqs
            .values()
            .filter(|s| s.admitted && s.rid != keep && !plan.iter().any(|(r, _)| *r == s.rid))
            .max_by_key(|s| (s.runnable(), s.runnable_since))
            .map(|s| s.rid)
    }

    fn preempt(&mut self, victim: Rid) {
        if let Some(seq) = self.seqs.get_mut(&victim) {
            seq.admitted = false;
            seq.computed = 0;
        }
        self.runner.kv().discard(victim);
        self.stats.count_preemption();
        debug!(rid = victim, "preempted to free KV blocks");
    }

    fn no_room(&mut self, rid: Rid, _: Admission, alone: bool) -> bool {
        if alone {
            self.fail_unservable(rid);
        }
        false
    }
}
