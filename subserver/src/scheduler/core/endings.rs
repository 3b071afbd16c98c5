//! Endings: a request finishes or fails at its home, its peers are told,
//! and every model frees its KV.

use crate::peer::message::{ModelIdx, PeerMsg, Rid};
use crate::runner::ModelRunner;
use crate::sampling::FinishReason;
use crate::scheduler::batching::threshold;
use crate::scheduler::client::{RequestError, StreamEvent, Usage};
use crate::scheduler::seq::{Seq, SeqState};

use super::Scheduler;

impl<R: ModelRunner> Scheduler<R> {
    /// Frees what `seq` holds; every request leaving this scheduler passes here.
    pub(super) fn free_kv(&mut self, seq: &Seq, cache: bool) {
        self.freed_unpublished += 1;
        if !seq.admitted {
            return;
        }
        // Either way a failure is logged and counted (`kv_free_errors`, which
        // fails the invariant check) once, inside the KV manager.
        let kv = self.runner.kv();
        if cache {
            kv.finish(seq.rid, &seq.tokens[..seq.computed]);
        } else {
            kv.discard(seq.rid);
        }
    }

    pub(super) fn release_peers(&mut self, seq: &Seq) {
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

    pub(super) fn end_finished(&mut self, rid: Rid, reason: FinishReason) {
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
                peer_fallbacks: hs.peer_fallbacks,
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

    pub(super) fn end_failed(&mut self, rid: Rid, err: RequestError) {
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

    pub(super) fn request_ended(&mut self) {
        self.home_active = self.home_active.saturating_sub(1);
        if let Some(s) = &self.shared {
            s.request_ended();
        }
    }

    pub(super) fn fail_all(&mut self, err: RequestError) {
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

    pub(super) fn publish_queue_stats(&self) {
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
        self.stats.set_kv_free_errors(kv.free_errors());
        self.stats.set_concurrency(
            self.n_active(),
            threshold(&self.cfg.thresholds, self.n_active()),
        );
    }
}
