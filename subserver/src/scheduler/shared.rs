//! State the models of an in-process group share: the active-request count,
//! who is inside a step, messages in flight (for the deadlock breaker), the
//! lockstep barrier and the serial lock. A model in its own process (TCP
//! transport) has none of this and relies on `max_batch_wait_ms` instead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::scheduler::inbox::{Inbound, InboxSender};

/// Shared by the schedulers of one in-process group.
pub struct GroupShared {
    active: AtomicUsize,
    busy: AtomicUsize,
    in_flight: AtomicUsize,
    inboxes: Mutex<Vec<InboxSender>>,
    /// Lockstep barrier (lockstep mode).
    pub barrier: StepBarrier,
    /// One step at a time (serial mode); `unlock_fair` hands it over in turn.
    pub serial: parking_lot::Mutex<()>,
}

impl GroupShared {
    /// State for `num_models` models.
    pub fn new(num_models: usize) -> Self {
        Self {
            active: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            inboxes: Mutex::new(Vec::new()),
            barrier: StepBarrier::new(num_models),
            serial: parking_lot::Mutex::new(()),
        }
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

    /// A model enters a step.
    pub fn step_started(&self) {
        self.busy.fetch_add(1, Ordering::SeqCst);
    }

    /// A model left a step; when none is busy, everyone re-evaluates.
    pub fn step_ended(&self) {
        if self.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.nudge_all();
        }
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

    /// No model in a step and nothing in flight: waiting cannot bring requests.
    pub fn quiet(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0 && self.in_flight.load(Ordering::SeqCst) == 0
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

    #[test]
    fn quiet_tracks_busy_and_in_flight() {
        let g = GroupShared::new(2);
        assert!(g.quiet());
        g.step_started();
        assert!(!g.quiet());
        g.message_sent();
        g.step_ended();
        assert!(!g.quiet());
        g.message_received();
        assert!(g.quiet());
        g.message_received(); // never underflows
        assert!(g.quiet());
    }
}
