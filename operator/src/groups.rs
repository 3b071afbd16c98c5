//! How many groups run and how many the gateway may use, given the decided
//! count: a new group (also the first ones) is listed once it is ready;
//! scale-down unlists the highest groups first and removes their pods only
//! after they drained.

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
/// when they do not exist yet); `listed_now`: the groups the gateway's list
/// holds now; `ready`: groups whose every model is ready; `drained`: the
/// groups above `desired` have finished their work. A group is listed once
/// it is ready (also on first creation) and stays listed until a
/// scale-down unlists it.
pub fn plan(
    current: Option<i32>,
    listed_now: i32,
    desired: i32,
    ready: i32,
    drained: bool,
) -> GroupPlan {
    let listed = listed_now.max(ready).min(desired).max(0);
    match current {
        Some(current) if desired < current && !drained => GroupPlan {
            replicas: current,
            listed,
            draining: true,
        },
        _ => GroupPlan {
            replicas: desired,
            listed,
            draining: false,
        },
    }
}

/// How many groups a groups-ConfigMap text lists (one URL a line, `#` comments).
pub fn listed_in(text: &str) -> i32 {
    let n = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
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
    fn first_apply_runs_everything_and_lists_groups_once_ready() {
        let p = plan(None, 0, 3, 0, false);
        assert_eq!((p.replicas, p.listed, p.draining), (3, 0, false));
        // Next reconciles: the sets exist; groups are listed as they get ready.
        let p = plan(Some(3), 0, 3, 0, false);
        assert_eq!((p.replicas, p.listed), (3, 0));
        let p = plan(Some(3), 0, 3, 2, false);
        assert_eq!((p.replicas, p.listed), (3, 2));
    }

    #[test]
    fn scale_up_lists_new_groups_once_ready() {
        let p = plan(Some(2), 2, 4, 2, false);
        assert_eq!((p.replicas, p.listed), (4, 2));
        // The StatefulSets are at 4 now: still only what is ready.
        let p = plan(Some(4), 2, 4, 3, false);
        assert_eq!((p.replicas, p.listed), (4, 3));
        // A listed group that turns unready (a pod restarts) stays listed:
        // the gateway's health checks steer around it.
        let p = plan(Some(4), 4, 4, 3, false);
        assert_eq!((p.replicas, p.listed), (4, 4));
    }

    #[test]
    fn scale_down_unlists_first_and_removes_after_drain() {
        let p = plan(Some(4), 4, 2, 4, false);
        assert_eq!((p.replicas, p.listed, p.draining), (4, 2, true));
        let p = plan(Some(4), 2, 2, 4, true);
        assert_eq!((p.replicas, p.listed, p.draining), (2, 2, false));
    }

    #[test]
    fn the_group_list_counts_urls_only() {
        assert_eq!(
            listed_in("# Written by tokenrouter-operator\nhttp://a\n\nhttp://b\n"),
            2
        );
        assert_eq!(listed_in("# Written by tokenrouter-operator\n"), 0);
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
