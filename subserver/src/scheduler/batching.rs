//! When a model starts a step. Pure functions, so the rules are tested
//! exhaustively apart from threads and clocks.

pub use crate::config::ExecutionMode;

/// `B` for `n` active requests: the table is indexed by concurrency (entry
/// `i` is for `n = i + 1`), the index clamped at both ends, and `B` clamped to
/// `[1, n]` (a batch can never need more requests than exist).
pub fn threshold(table: &[usize], n_active: usize) -> usize {
    let n = n_active.max(1);
    let raw = match table {
        [] => 1,
        t => t[(n - 1).min(t.len() - 1)],
    };
    raw.clamp(1, n)
}

/// What the scheduler knows when it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepInputs {
    /// Requests whose pen is at this model.
    pub runnable: usize,
    /// Active requests in the group.
    pub n_active: usize,
    /// The threshold `B(n_active)`.
    pub threshold: usize,
    /// The oldest runnable request has waited `max_batch_wait`.
    pub waited_out: bool,
    /// No model is in a step and no peer message is in flight (in-process groups):
    /// waiting longer cannot bring more requests.
    pub group_quiet: bool,
}

/// Whether to start a step now under delayed batching. A step starts when
/// `B` requests are here; when every active request is here (no more can
/// come); when the oldest has waited the bound; or when the group is quiet
/// (the deadlock breaker for threshold vectors that would otherwise park
/// every model).
pub fn should_step(i: StepInputs) -> bool {
    i.runnable > 0
        && (i.runnable >= i.threshold || i.runnable >= i.n_active || i.waited_out || i.group_quiet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_clamps_index_and_value() {
        let t = [1, 3, 5];
        assert_eq!(threshold(&t, 0), 1);
        assert_eq!(threshold(&t, 1), 1);
        assert_eq!(threshold(&t, 2), 2); // 3 clamped to n = 2
        assert_eq!(threshold(&t, 3), 3); // t[2] = 5, clamped to n = 3
        assert_eq!(threshold(&t, 10), 5);
        assert_eq!(threshold(&[], 4), 1);
        assert_eq!(threshold(&[0], 4), 1);
    }

    /// Every combination up to 8 requests: a step never waits when waiting
    /// cannot help, and never starts with nothing to run.
    #[test]
    fn exhaustive_rules() {
        for n in 0..=8usize {
            for r in 0..=n {
                for b in 1..=8usize {
                    for waited_out in [false, true] {
                        for group_quiet in [false, true] {
                            let th = threshold(&[b], n);
                            let i = StepInputs {
                                runnable: r,
                                n_active: n,
                                threshold: th,
                                waited_out,
                                group_quiet,
                            };
                            let go = should_step(i);
                            if r == 0 {
                                assert!(!go);
                                continue;
                            }
                            // Everyone is here: nothing else can come.
                            if r == n {
                                assert!(go, "{i:?}");
                            }
                            // The deadlock breaker and the wait bound always fire.
                            if group_quiet || waited_out {
                                assert!(go, "{i:?}");
                            }
                            assert_eq!(go, r >= th || waited_out || group_quiet || r >= n);
                        }
                    }
                }
            }
        }
    }
}
