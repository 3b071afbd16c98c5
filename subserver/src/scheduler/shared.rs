//! State the models of an in-process group share: the active-request count,
//! who is inside a step, messages in flight (for the deadlock breaker), the
//! lockstep barrier and the serial lock. A model in its own process (TCP
//! transport) has none of this and relies on `max_batch_wait_ms` instead.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::scheduler::cpu_share::CpuShare;
use crate::scheduler::inbox::{Inbound, InboxSender};

/// Shared by the schedulers of one in-process group.
///
/// The deadlock breaker of delayed batching needs to know that waiting
/// cannot bring a model more requests. That holds only when every other
/// scheduler thread is asleep on its inbox with nothing to step (empty, or
/// parked under its threshold) and no peer message is in flight. So each
/// thread counts as *awake* from the moment it wakes (before it takes a
/// message out of its inbox) until it goes back to sleep, including the gap
/// between two steps; counting only "inside a forward" made a model that had
/// just ended a step and was about to start the next look quiet, and a
/// parked peer started early, below its `B`.
pub struct GroupShared {
    active: AtomicUsize,
    awake: AtomicUsize,
    parked: Vec<AtomicBool>,
    delivering: AtomicUsize,
    in_flight: AtomicUsize,
    inboxes: Mutex<Vec<InboxSender>>,
    /// Lockstep barrier (lockstep mode).
    pub barrier: StepBarrier,
    /// One step at a time (serial mode); `unlock_fair` hands it over in turn.
    pub serial: parking_lot::Mutex<()>,
    /// The CPU cores the models' steps draw their threads from, when the
    /// group's models run on the CPU (`None`: threads fixed at start).
    cpu: Option<CpuShare>,
}

impl GroupShared {
    /// State for `num_models` models (their threads start awake).
    pub fn new(num_models: usize) -> Self {
        Self {
            active: AtomicUsize::new(0),
            awake: AtomicUsize::new(num_models),
            parked: (0..num_models).map(|_| AtomicBool::new(false)).collect(),
            delivering: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            inboxes: Mutex::new(Vec::new()),
            barrier: StepBarrier::new(num_models),
            serial: parking_lot::Mutex::new(()),
            cpu: None,
        }
    }

    /// Steps draw their intra-op threads from `cores` CPU cores (see [`CpuShare`]).
    pub fn with_cpu_cores(mut self, cores: Option<usize>) -> Self {
        self.cpu = cores.map(|c| CpuShare::new(c, self.parked.len()));
        self
    }

    /// Intra-op threads for a step of an awake thread (`None`: no share).
    pub fn cpu_threads(&self) -> Option<usize> {
        let others = self.awake.load(Ordering::SeqCst).saturating_sub(1);
        self.cpu.map(|c| c.threads(others))
    }

    /// Registers the inboxes to nudge when the group goes quiet.
    pub fn set_inboxes(&self, inboxes: Vec<InboxSender>) {
        if let Ok(mut g) = self.inboxes.lock() {
            *g = inboxes;
        }
    }

    /// Active requests in the group.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// A request started at its home.
    pub fn request_started(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
    }

    /// A request ended at its home.
    pub fn request_ended(&self) {
        let _ = self
            .active
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1));
        self.nudge_all();
    }

    /// Model `m`'s thread woke up (call before handling what woke it).
    pub fn wake(&self, m: usize) {
        self.awake.fetch_add(1, Ordering::SeqCst);
        if let Some(p) = self.parked.get(m) {
            p.store(false, Ordering::SeqCst);
        }
    }

    /// Model `m`'s thread is about to sleep on its inbox; `parked`: it holds
    /// runnable requests it waits to batch. Refused (`false`: the thread
    /// stays awake and steps, it is the deadlock breaker) when it is parked,
    /// the last thread awake, and no message is in flight. When the last
    /// thread goes to sleep with nothing in flight, the parked ones are
    /// nudged to re-decide (one of them then breaks the deadlock).
    pub fn sleep(&self, m: usize, parked: bool) -> bool {
        let went = self
            .awake
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| {
                let last = v <= 1 && self.in_flight.load(Ordering::SeqCst) == 0;
                (!(parked && last)).then(|| v.saturating_sub(1))
            });
        let Ok(before) = went else {
            return false;
        };
        if let Some(p) = self.parked.get(m) {
            p.store(parked, Ordering::SeqCst);
        }
        if before <= 1 && self.in_flight.load(Ordering::SeqCst) == 0 {
            self.nudge_parked(m);
        }
        true
    }

    /// A model starts handing out the requests of a step that just ended.
    /// They leave one by one but arrive, in the chain's terms, at one
    /// event: a parked model waits for the whole delivery before it counts
    /// its requests against `B`.
    pub fn delivery_started(&self) {
        self.delivering.fetch_add(1, Ordering::SeqCst);
    }

    /// Model `me`'s delivery is complete: the others are nudged to count
    /// what they got (or to take the step they put off while it ran).
    pub fn delivery_ended(&self, me: usize) {
        let _ = self
            .delivering
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1));
        if let Ok(g) = self.inboxes.lock() {
            for (m, tx) in g.iter().enumerate() {
                if m != me {
                    let _ = tx.send(Inbound::Nudge);
                }
            }
        }
    }

    /// Some model is in the middle of a delivery.
    pub fn delivering(&self) -> bool {
        self.delivering.load(Ordering::SeqCst) > 0
    }

    /// A peer message is about to be sent.
    pub fn message_sent(&self) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// A peer message was taken out of an inbox.
    pub fn message_received(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1));
    }

    /// Asked by an awake thread: every other thread is asleep with nothing
    /// to step and nothing is in flight, so waiting cannot bring requests.
    pub fn quiet(&self) -> bool {
        self.awake.load(Ordering::SeqCst) <= 1 && self.in_flight.load(Ordering::SeqCst) == 0
    }

    /// Nudges the parked models other than `me`.
    fn nudge_parked(&self, me: usize) {
        if let Ok(g) = self.inboxes.lock() {
            for (m, tx) in g.iter().enumerate() {
                if m != me && self.parked.get(m).is_some_and(|p| p.load(Ordering::SeqCst)) {
                    let _ = tx.send(Inbound::Nudge);
                }
            }
        }
    }

    fn nudge_all(&self) {
        if let Ok(g) = self.inboxes.lock() {
            for tx in g.iter() {
                let _ = tx.send(Inbound::Nudge);
            }
        }
    }
}

/// A reusable barrier that can be aborted (so shutdown never hangs a model
/// waiting for one that already left).
pub struct StepBarrier {
    parties: usize,
    state: Mutex<(usize, u64, bool)>, // (arrived, generation, aborted)
    cv: Condvar,
}

impl StepBarrier {
    /// A barrier for `parties` threads.
    pub fn new(parties: usize) -> Self {
        Self {
            parties: parties.max(1),
            state: Mutex::new((0, 0, false)),
            cv: Condvar::new(),
        }
    }

    /// Waits for every party; `false` once aborted.
    pub fn wait(&self) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        if s.2 {
            return false;
        }
        s.0 += 1;
        if s.0 == self.parties {
            s.0 = 0;
            s.1 = s.1.wrapping_add(1);
            self.cv.notify_all();
            return true;
        }
        let generation = s.1;
        while s.1 == generation && !s.2 {
            match self.cv.wait_timeout(s, Duration::from_millis(100)) {
                Ok((g, _)) => s = g,
                Err(_) => return false,
            }
        }
        !s.2
    }

    /// Releases every waiter, now and later.
    pub fn abort(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.2 = true;
            self.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn barrier_releases_all_parties_each_round_and_aborts() {
        let b = Arc::new(StepBarrier::new(3));
        let counter = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let (b, c) = (b.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        c.fetch_add(1, Ordering::SeqCst);
                        assert!(b.wait());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(counter.load(Ordering::SeqCst), 150);
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || b2.wait());
        std::thread::sleep(Duration::from_millis(20));
        b.abort();
        assert!(!waiter.join().unwrap());
    }

    /// A two-model group state with its inboxes' receiving ends.
    fn two_models() -> (
        GroupShared,
        crate::scheduler::inbox::InboxReceiver,
        crate::scheduler::inbox::InboxReceiver,
    ) {
        let g = GroupShared::new(2);
        let (tx0, rx0) = crate::scheduler::inbox::inbox();
        let (tx1, rx1) = crate::scheduler::inbox::inbox();
        g.set_inboxes(vec![tx0, tx1]);
        (g, rx0, rx1)
    }

    /// The race that made delayed batching start below `B`: model 0 has
    /// just ended a step and is about to start its next one, model 1 is
    /// parked under its threshold. Model 0 is still awake, so model 1 must
    /// not see a quiet group.
    #[test]
    fn a_model_between_steps_keeps_the_group_busy() {
        let g = GroupShared::new(2);
        // Model 1 goes to sleep parked; model 0 is stepping.
        assert!(g.sleep(1, true));
        // Model 0 ends a step without sending anything; model 1 wakes
        // (a nudge, a timeout) while model 0 is between steps.
        g.wake(1);
        assert!(!g.quiet(), "a model between steps is not quiet");
        // Model 1 parks again: model 0 is awake, so that is allowed.
        assert!(g.sleep(1, true));
        // Model 0 hands a request over: in flight until model 1 takes it.
        g.message_sent();
        assert!(g.sleep(0, false));
        g.wake(1);
        assert!(!g.quiet(), "model 1 has not taken the message yet");
        g.message_received();
        // Now only model 1 is awake, nothing is in flight: quiet.
        assert!(g.quiet());
        g.message_received(); // never underflows
        assert!(g.quiet());
    }

    /// The last awake thread may not park: it must break the deadlock; the
    /// last to sleep wakes only the parked ones.
    #[test]
    fn the_last_parked_thread_is_refused_sleep() {
        let (g, rx0, rx1) = two_models();
        assert!(g.sleep(1, true)); // model 1 parks while model 0 steps
        assert!(rx1.try_recv().is_err());
        assert!(g.sleep(0, false)); // model 0 has nothing: model 1 is nudged
        assert!(matches!(rx1.try_recv(), Ok(Inbound::Nudge)));
        assert!(rx0.try_recv().is_err(), "an idle model is not nudged");
        g.wake(1);
        assert!(g.quiet());
        assert!(!g.sleep(1, true), "last awake and parked: step instead");
        // A message in flight will wake its receiver: parking is fine.
        g.message_sent();
        assert!(g.sleep(1, true));
        assert!(rx0.try_recv().is_err() && rx1.try_recv().is_err());
        // Two parked threads woken together: exactly one may sleep.
        let g = GroupShared::new(2);
        assert!(g.sleep(0, true));
        assert!(!g.sleep(1, true));
    }

    /// A step's hand-overs are one event: while a model delivers them the
    /// group says so, and at the end every other model is nudged to count
    /// them (a parked model that counted the first one and started below
    /// the chain's batch was the second cause of the N=8 gap).
    #[test]
    fn a_delivery_is_announced_and_ends_with_a_nudge() {
        let (g, rx0, rx1) = two_models();
        assert!(!g.delivering());
        g.delivery_started();
        assert!(g.delivering());
        g.delivery_ended(0);
        assert!(!g.delivering());
        assert!(matches!(rx1.try_recv(), Ok(Inbound::Nudge)));
        assert!(rx0.try_recv().is_err(), "the deliverer is not nudged");
        g.delivery_ended(0); // never underflows
        assert!(!g.delivering());
    }
}
