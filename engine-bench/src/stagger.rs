//! Staggered starts for the capped sim benchmark. With an output cap C and N
//! closed-loop clients, the steady state has the clients' answers spread over
//! every length from 0 to C. Starting them all at 0 would measure only short
//! contexts, and running whole answers would take minutes per cell. Instead
//! client c's first request starts with a history of `(c + ½)/N × C` tokens
//! (and writes the rest of its cap). While every client brings its history
//! in, the simulated steps cost nothing (the steady state never pays that
//! prefill); the clock starts once each client has committed a few tokens,
//! which with R2R routing means both models hold its history.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use subserver::error::EngineError;

/// Tokens each client commits before the free start-up ends: enough that
/// at a hand-over probability of 0.35 the large model has seen every
/// history (0.65^32 ≈ 1e-6 that it has not).
pub const START_TOKENS: u64 = 32;

/// How long the free start-up may take before the bench gives up.
const START_DEADLINE: Duration = Duration::from_secs(300);

/// The staggered start of one run.
#[derive(Clone)]
pub struct Stagger {
    cap: Option<usize>,
    clients: usize,
    free: Arc<AtomicBool>,
    committed: Arc<Vec<AtomicU64>>,
}

impl Stagger {
    /// A start for `clients` clients under output cap `cap`; without a cap
    /// there is no history and no free start-up.
    pub fn new(cap: Option<usize>, clients: usize) -> Self {
        Self {
            cap,
            clients,
            free: Arc::new(AtomicBool::new(cap.is_some())),
            committed: Arc::new((0..clients).map(|_| AtomicU64::new(0)).collect()),
        }
    }

    /// The switch the simulated runners read: set while steps are free.
    pub fn free_switch(&self) -> Arc<AtomicBool> {
        self.free.clone()
    }

    /// History tokens of client `client`'s first request (0 without a cap).
    pub fn history(&self, client: usize) -> usize {
        self.cap.map_or(0, |cap| {
            ((2 * client + 1) * cap / (2 * self.clients.max(1))).min(cap.saturating_sub(1))
        })
    }

    /// Tokens request `k` of `client` may write: the rest of the cap after
    /// its history, or `uncapped` without a cap.
    pub fn max_tokens(&self, client: usize, k: u64, uncapped: usize) -> usize {
        match self.cap {
            None => uncapped,
            Some(cap) if k == 0 => cap - self.history(client),
            Some(cap) => cap,
        }
    }

    /// Counts a token committed for `client`.
    pub fn committed(&self, client: usize) {
        if let Some(c) = self.committed.get(client) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until every client has committed [`START_TOKENS`] tokens, then
    /// makes steps cost their time again. Returns at once without a cap.
    pub fn wait_started(&self) -> Result<(), EngineError> {
        if self.cap.is_none() {
            return Ok(());
        }
        let deadline = Instant::now() + START_DEADLINE;
        while self
            .committed
            .iter()
            .any(|c| c.load(Ordering::Relaxed) < START_TOKENS)
        {
            if Instant::now() > deadline {
                return Err(EngineError::InvalidRequest(format!(
                    "staggered start: not every client wrote {START_TOKENS} tokens in {} s",
                    START_DEADLINE.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.free.store(false, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histories_spread_over_the_cap() {
        let s = Stagger::new(Some(1000), 4);
        let h: Vec<usize> = (0..4).map(|c| s.history(c)).collect();
        assert_eq!(h, vec![125, 375, 625, 875]);
        assert_eq!(s.max_tokens(1, 0, 9), 625);
        assert_eq!(s.max_tokens(1, 1, 9), 1000);
        assert!(s.free_switch().load(Ordering::Relaxed));
        let none = Stagger::new(None, 4);
        assert_eq!((none.history(3), none.max_tokens(3, 0, 9)), (0, 9));
        assert!(!none.free_switch().load(Ordering::Relaxed));
        none.wait_started().unwrap();
    }

    #[test]
    fn the_start_ends_when_every_client_has_written() {
        let s = Stagger::new(Some(100), 2);
        for _ in 0..START_TOKENS {
            s.committed(0);
            s.committed(1);
        }
        s.wait_started().unwrap();
        assert!(!s.free_switch().load(Ordering::Relaxed));
    }
}
