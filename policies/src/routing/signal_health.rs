//! Per-step routing-signal failures: counted, logged and exported, never
//! silent. A policy whose signal (router output, entropy) cannot be
//! computed for a step lets the current writer keep the pen for that step,
//! and says so: a log line, and the scheduler moves
//! `tokenrouter_signal_failures_total{model,policy,reason}` by what
//! [`SignalHealth::counts`] gained. Start-up refuses what can be checked
//! before the first step (a backend without logits, a router of the wrong
//! width); this covers the rest.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Why a step had no routing signal (the metric's `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalFailure {
    /// The step lacked an input the signal reads (logits, hidden states,
    /// embeddings).
    MissingInput,
    /// An input or the signal had the wrong shape (a router of another
    /// width, no deferral column, one signal per row violated).
    Shape,
    /// Computing the signal failed (a tensor operation returned an error).
    Compute,
}

impl SignalFailure {
    /// Every reason, in label order.
    pub const ALL: [SignalFailure; 3] = [Self::MissingInput, Self::Shape, Self::Compute];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::MissingInput => "missing_input",
            Self::Shape => "shape",
            Self::Compute => "compute",
        }
    }
}

/// A failed signal: why, and the detail for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalError {
    /// The reason label.
    pub kind: SignalFailure,
    /// What exactly went wrong.
    pub detail: String,
}

impl SignalError {
    /// An input the signal reads is absent.
    pub fn missing(detail: impl Into<String>) -> Self {
        Self {
            kind: SignalFailure::MissingInput,
            detail: detail.into(),
        }
    }

    /// An input or output has the wrong shape.
    pub fn shape(detail: impl Into<String>) -> Self {
        Self {
            kind: SignalFailure::Shape,
            detail: detail.into(),
        }
    }

    /// The computation failed.
    pub fn compute(detail: impl ToString) -> Self {
        Self {
            kind: SignalFailure::Compute,
            detail: detail.to_string(),
        }
    }
}

impl std::fmt::Display for SignalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.kind.label())
    }
}

/// Failure counts of one policy instance, by reason (clones share them).
#[derive(Debug, Clone)]
pub struct SignalHealth {
    policy: &'static str,
    failures: Arc<[AtomicU64; 3]>,
}

impl SignalHealth {
    /// No failures yet.
    pub fn new(policy: &'static str) -> Self {
        Self {
            policy,
            failures: Arc::new(Default::default()),
        }
    }

    /// The policy's registry name (the metric's `policy` label).
    pub fn policy(&self) -> &'static str {
        self.policy
    }

    /// Records one failed step; logs the 1st, 2nd, 4th, 8th, ... so a
    /// persistent fault stays visible without flooding the log.
    pub fn failed(&self, error: &SignalError) {
        let i = SignalFailure::ALL
            .iter()
            .position(|&k| k == error.kind)
            .unwrap_or(0);
        self.failures[i].fetch_add(1, Ordering::Relaxed);
        let n = self.failures();
        if n.is_power_of_two() {
            tracing::error!(
                policy = self.policy,
                failures = n,
                reason = error.kind.label(),
                detail = %error.detail,
                "routing signal unavailable for a step; the current writer kept the pen"
            );
        }
    }

    /// Steps that failed so far, by reason (in [`SignalFailure::ALL`] order).
    pub fn counts(&self) -> [u64; 3] {
        std::array::from_fn(|i| self.failures[i].load(Ordering::Relaxed))
    }

    /// Steps that failed so far.
    pub fn failures(&self) -> u64 {
        self.counts().iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_count_by_reason() {
        let h = SignalHealth::new("X");
        let c = h.clone();
        h.failed(&SignalError::shape("a"));
        c.failed(&SignalError::missing("b"));
        c.failed(&SignalError::shape("c"));
        assert_eq!(h.failures(), 3);
        assert_eq!(h.counts(), [1, 2, 0]);
        assert_eq!(
            SignalFailure::ALL.map(SignalFailure::label),
            ["missing_input", "shape", "compute"]
        );
    }
}
