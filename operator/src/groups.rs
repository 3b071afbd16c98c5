//! How many groups run and how many the gateway may use, given the decided
//! count: scale-up lists a new group once it is ready; scale-down unlists
//! the highest groups first and removes their pods only after they drained.

use std::time::Duration;

/// Replicas of every serving StatefulSet and the groups listed to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPlan {
    /// StatefulSet replicas (includes groups still draining).
    pub replicas: i32,
    /// Groups `0..listed` receive requests.
    pub listed: i32,
    /// A scale-down is waiting for groups `listed..replicas` to drain.
    pub draining: bool,
}

/// Plans the group count. `current`: the StatefulSets' replicas now (`None`
/// when they do not exist yet); `ready`: groups whose every model is ready;
/// `drained`: the groups above `desired` have finished their work.
pub fn plan(current: Option<i32>, desired: i32, ready: i32, drained: bool) -> GroupPlan {
    let Some(current) = current else {
        return GroupPlan {
            replicas: desired,
            listed: desired,
            draining: false,
        };
    };
    if desired >= current {
        GroupPlan {
            replicas: desired,
            listed: current.max(ready.min(desired)),
            draining: false,
        }
    } else if drained {
        GroupPlan {
            replicas: desired,
            listed: desired,
            draining: false,
        }
    } else {
        GroupPlan {
            replicas: current,
            listed: desired,
            draining: true,
        }
    }
}

/// How long a scale-down waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainPolicy {
    /// Least time between unlisting a group and removing it: the gateway
    /// must have re-read its group list (a mounted ConfigMap updates within
    /// the kubelet's sync period, about a minute).
    pub settle: Duration,
    /// Remove the group after this long even if it never reported idle.
    pub timeout: Duration,
}

impl Default for DrainPolicy {
    fn default() -> Self {
        Self {
            settle: Duration::from_secs(90),
            timeout: Duration::from_secs(600),
        }
    }
}

/// Whether unlisted groups may go: the settle time passed and every one of
/// them reports no in-flight work (`None`: did not answer), or the timeout passed.
pub fn drained(policy: &DrainPolicy, elapsed: Duration, inflight: &[Option<u64>]) -> bool {
    if elapsed < policy.settle {
        return false;
    }
    elapsed >= policy.timeout || inflight.iter().all(|n| *n == Some(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_apply_runs_and_lists_everything() {
        let p = plan(None, 3, 0, false);
        assert_eq!((p.replicas, p.listed, p.draining), (3, 3, false));
    }

    #[test]
    fn scale_up_lists_new_groups_once_ready() {
        let p = plan(Some(2), 4, 2, false);
        assert_eq!((p.replicas, p.listed), (4, 2));
        let p = plan(Some(4), 4, 3, false);
        assert_eq!(
            (p.replicas, p.listed),
            (4, 4),
            "groups already running stay listed"
        );
        let p = plan(Some(2), 4, 4, false);
        assert_eq!((p.replicas, p.listed), (4, 4));
    }

    #[test]
    fn scale_down_unlists_first_and_removes_after_drain() {
        let p = plan(Some(4), 2, 4, false);
        assert_eq!((p.replicas, p.listed, p.draining), (4, 2, true));
        let p = plan(Some(4), 2, 4, true);
        assert_eq!((p.replicas, p.listed, p.draining), (2, 2, false));
    }

    #[test]
    fn drain_needs_settle_and_idle_or_timeout() {
        let policy = DrainPolicy {
            settle: Duration::from_secs(10),
            timeout: Duration::from_secs(100),
        };
        let s = Duration::from_secs;
        assert!(!drained(&policy, s(5), &[Some(0)]));
        assert!(drained(&policy, s(10), &[Some(0), Some(0)]));
        assert!(!drained(&policy, s(50), &[Some(0), Some(2)]));
        assert!(!drained(&policy, s(50), &[None]));
        assert!(drained(&policy, s(100), &[None, Some(3)]));
    }
}
