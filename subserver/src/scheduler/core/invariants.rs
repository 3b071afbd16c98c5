//! The internal invariant check a soak run (or a test) asks for between
//! steps: the KV pool is consistent on its own, and the request table and
//! the KV bookkeeping agree on who holds blocks, so a leak shows up as a
//! named broken rule rather than as a slowly shrinking pool.

use crate::runner::ModelRunner;

use super::Scheduler;

impl<R: ModelRunner> Scheduler<R> {
    /// `Err` names the first broken invariant.
    pub(super) fn check_invariants(&self) -> Result<(), String> {
        let kv = self.runner.kv_ref();
        kv.check_consistency()
            .map_err(|e| format!("KV pool: {e}"))?;
        if kv.free_errors() > 0 {
            return Err(format!(
                "{} KV frees failed (a double free or a leak)",
                kv.free_errors()
            ));
        }
        let mut admitted = 0;
        let mut homes = 0;
        for seq in self.seqs.values() {
            let rid = seq.rid;
            if seq.computed > seq.tokens.len() {
                return Err(format!(
                    "request {rid}: {} tokens computed of {} held",
                    seq.computed,
                    seq.tokens.len()
                ));
            }
            homes += usize::from(seq.is_home());
            match (seq.admitted, kv.block_table(rid)) {
                (true, Ok(table)) => {
                    admitted += 1;
                    if table.num_positions() < seq.computed {
                        return Err(format!(
                            "request {rid}: {} tokens computed, KV for {}",
                            seq.computed,
                            table.num_positions()
                        ));
                    }
                }
                (true, Err(_)) => return Err(format!("request {rid} admitted without KV")),
                (false, Ok(_)) => return Err(format!("request {rid} holds KV while waiting")),
                (false, Err(_)) if seq.computed > 0 => {
                    return Err(format!(
                        "request {rid} waiting with {} tokens computed",
                        seq.computed
                    ))
                }
                (false, Err(_)) => {}
            }
        }
        if kv.num_requests() != admitted {
            return Err(format!(
                "{} requests hold KV, {admitted} admitted",
                kv.num_requests()
            ));
        }
        if homes != self.home_active {
            return Err(format!(
                "{homes} requests at home, {} counted active",
                self.home_active
            ));
        }
        if self.seqs.is_empty() && kv.num_available_blocks() != kv.num_blocks() {
            return Err(format!(
                "no request held, {} of {} blocks free or cached",
                kv.num_available_blocks(),
                kv.num_blocks()
            ));
        }
        Ok(())
    }
}
