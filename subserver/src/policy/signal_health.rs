//! Per-step routing-signal failures: counted and logged, never silent. A
//! policy whose signal (router output, entropy) cannot be computed for a
//! step lets the current writer keep the pen for that step, and says so.
//! Start-up refuses what can be checked before the first step (a backend
//! without logits, a router of the wrong width); this covers the rest.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Failure count of one policy instance (clones share it).
#[derive(Debug, Clone)]
pub struct SignalHealth {
    policy: &'static str,
    failures: Arc<AtomicU64>,
}

impl SignalHealth {
    /// No failures yet.
    pub fn new(policy: &'static str) -> Self {
        Self {
            policy,
            failures: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records one failed step; logs the 1st, 2nd, 4th, 8th, ... so a
    /// persistent fault stays visible without flooding the log.
    pub fn failed(&self, reason: &str) {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::error!(
                policy = self.policy,
                failures = n,
                reason,
                "routing signal unavailable for a step; the current writer kept the pen"
            );
        }
    }

    /// Steps that failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_count() {
        let h = SignalHealth::new("X");
        let c = h.clone();
        h.failed("a");
        c.failed("b");
        assert_eq!(h.failures(), 2);
    }
}
