//! Batch planning, shared by the single-model [`BatchEngine`](super::BatchEngine)
//! and the routed scheduler: which requests run in the next step and how
//! many new tokens each brings.
//!
//! The [`Planner`] walks the candidates in the table's order within the
//! step's token and request budgets, admits each to the KV cache (prefix
//! reuse), chunks prefill to the budget left, and reserves the KV slots
//! right away so later candidates see the blocks earlier ones took. When
//! the pool runs dry it preempts the table's victim (recomputed later) and
//! retries; when there is no victim the table decides what happens to the
//! request that does not fit. The tables differ only in order, victim and
//! that decision ([`PlanTable`]).

use crate::error::EngineError;

use super::EngineLimits;

/// What [`PlanTable::admit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The request was in the KV cache already.
    Held,
    /// The request entered the KV cache now.
    New,
    /// The pool cannot take the request now: planning stops.
    Refused,
}

/// A request table the [`Planner`] can plan a step over.
pub trait PlanTable {
    /// The requests that may run, in the order they are served.
    fn candidates(&self) -> Vec<u64>;
    /// Puts `id` into the KV cache unless it is there already.
    fn admit(&mut self, id: u64) -> Result<Admission, EngineError>;
    /// `(computed, pending)` tokens of `id`; `None` when it is gone.
    fn progress(&self, id: u64) -> Option<(usize, usize)>;
    /// Reserves KV slots for positions `0..end` of `id`; true on success.
    fn reserve(&mut self, id: u64, end: usize) -> bool;
    /// The request to preempt so that `keep` fits; never one in `plan`.
    fn victim(&self, keep: u64, plan: &[(u64, usize)]) -> Option<u64>;
    /// Frees `id`'s KV; it will be recomputed when it runs again.
    fn preempt(&mut self, id: u64);
    /// `id` cannot get its slots and nothing is left to preempt. `alone`:
    /// the step is empty so far. Returns whether to plan further candidates.
    fn no_room(&mut self, id: u64, admission: Admission, alone: bool) -> bool;
}

/// Plans steps within [`EngineLimits`].
#[derive(Debug, Clone, Copy)]
pub struct Planner {
    limits: EngineLimits,
}

impl Planner {
    /// A planner with these step budgets.
    pub fn new(limits: EngineLimits) -> Self {
        Self { limits }
    }

    /// The next step: `(request, new tokens)` in the table's order.
    pub fn plan<T: PlanTable>(&self, table: &mut T) -> Result<Vec<(u64, usize)>, EngineError> {
        let mut budget = self.limits.max_batched_tokens;
        let mut plan: Vec<(u64, usize)> = Vec::new();
        for id in table.candidates() {
            if budget == 0 || plan.len() >= self.limits.max_batch_size {
                break;
            }
            let admission = table.admit(id)?;
            if admission == Admission::Refused {
                break;
            }
            let Some((computed, pending)) = table.progress(id) else {
                continue;
            };
            let n = pending.min(budget);
            let end = computed + n;
            // Reserve now, so later items see the blocks this one takes.
            let reserved = loop {
                if table.reserve(id, end) {
                    break true;
                }
                match table.victim(id, &plan) {
                    Some(victim) => table.preempt(victim),
                    None => break false,
                }
            };
            if !reserved {
                if table.no_room(id, admission, plan.is_empty()) {
                    continue;
                }
                break;
            }
            plan.push((id, n));
            budget -= n;
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table of `(id, computed, pending, admitted)` over a pool of
    /// `capacity` positions; the newest admitted request is the victim.
    struct Table {
        reqs: Vec<(u64, usize, usize, bool)>,
        reserved: Vec<(u64, usize)>,
        capacity: usize,
        preempted: Vec<u64>,
        no_room: Vec<u64>,
    }

    impl Table {
        fn new(capacity: usize, reqs: &[(u64, usize)]) -> Self {
            Self {
                reqs: reqs.iter().map(|&(id, p)| (id, 0, p, false)).collect(),
                reserved: Vec::new(),
                capacity,
                preempted: Vec::new(),
                no_room: Vec::new(),
            }
        }
        fn used(&self, except: u64) -> usize {
            self.reserved
                .iter()
                .filter(|(r, _)| *r != except)
                .map(|(_, n)| n)
                .sum()
        }
    }

    impl PlanTable for Table {
        fn candidates(&self) -> Vec<u64> {
            self.reqs.iter().map(|r| r.0).collect()
        }
        fn admit(&mut self, id: u64) -> Result<Admission, EngineError> {
            let r = self.reqs.iter_mut().find(|r| r.0 == id);
            Ok(match r {
                Some(r) if r.3 => Admission::Held,
                Some(r) => {
                    r.3 = true;
                    Admission::New
                }
                None => Admission::Refused,
            })
        }
        fn progress(&self, id: u64) -> Option<(usize, usize)> {
            self.reqs.iter().find(|r| r.0 == id).map(|r| (r.1, r.2))
        }
        fn reserve(&mut self, id: u64, end: usize) -> bool {
            if self.used(id) + end > self.capacity {
                return false;
            }
            self.reserved.retain(|(r, _)| *r != id);
            self.reserved.push((id, end));
            true
        }
        fn victim(&self, keep: u64, plan: &[(u64, usize)]) -> Option<u64> {
            self.reqs
                .iter()
                .rev()
                .find(|r| r.3 && r.0 != keep && !plan.iter().any(|(p, _)| *p == r.0))
                .map(|r| r.0)
        }
        fn preempt(&mut self, id: u64) {
            self.reserved.retain(|(r, _)| *r != id);
            if let Some(r) = self.reqs.iter_mut().find(|r| r.0 == id) {
                r.3 = false;
            }
            self.preempted.push(id);
        }
        fn no_room(&mut self, id: u64, _: Admission, _: bool) -> bool {
            self.no_room.push(id);
            false
        }
    }

    fn limits(tokens: usize, size: usize) -> Planner {
        Planner::new(EngineLimits {
            max_batched_tokens: tokens,
            max_batch_size: size,
        })
    }

    #[test]
    fn chunks_prefill_to_the_token_budget_in_order() {
        let mut t = Table::new(1000, &[(1, 6), (2, 6), (3, 6)]);
        let plan = limits(10, 8).plan(&mut t).unwrap();
        assert_eq!(plan, vec![(1, 6), (2, 4)]);
    }

    #[test]
    fn stops_at_the_request_budget() {
        let mut t = Table::new(1000, &[(1, 1), (2, 1), (3, 1)]);
        let plan = limits(100, 2).plan(&mut t).unwrap();
        assert_eq!(plan, vec![(1, 1), (2, 1)]);
    }

    #[test]
    fn preempts_the_victim_and_never_a_planned_request() {
        let mut t = Table::new(10, &[(1, 4), (2, 4), (3, 4)]);
        // 3 holds the pool's last slots from an earlier step.
        t.reqs[2].3 = true;
        t.reserved.push((3, 4));
        let plan = limits(100, 8).plan(&mut t).unwrap();
        assert_eq!(plan, vec![(1, 4), (2, 4)]);
        assert_eq!(t.preempted, vec![3]);
        // 3 was re-admitted but nothing it may preempt is left.
        assert_eq!(t.no_room, vec![3]);
    }
}
