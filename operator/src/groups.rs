//! How many groups run and how many the gateway may use, given the decided
//! count: a new group (also the first ones) is listed once it is ready;
//! scale-down unlists the highest groups first and removes their pods only
//! after they drained. The list is a set of groups, not a prefix: a roll
//! (crate::roll) takes one group out of the middle while it is replaced.

use std::collections::BTreeSet;
use std::time::Duration;

/// Replicas of every serving StatefulSet and the groups listed to the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// StatefulSet replicas (includes groups still draining).
    pub replicas: i32,
    /// The groups that receive requests (all below the decided count).
    pub listed: BTreeSet<i32>,
    /// A scale-down is waiting for groups `listed..replicas` to drain.
    pub draining: bool,
}

/// Plans the group count. `current`: the StatefulSets' replicas now (`None`
/// when they do not exist yet); `listed_now`: the groups the gateway's list
/// holds now; `ready`: groups whose every model is ready; `drained`: the
/// groups above `desired` have finished their work. A group is listed once
/// it is ready (also on first creation) and stays listed until a
/// scale-down unlists it; `ready` counts ready pods, so it lists `0..ready`.
pub fn plan(
    current: Option<i32>,
    listed_now: &BTreeSet<i32>,
    desired: i32,
    ready: i32,
    drained: bool,
) -> GroupPlan {
    let listed = listed_now
        .iter()
        .copied()
        .chain(0..ready)
        .filter(|k| (0..desired).contains(k))
        .collect();
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

/// The groups a groups-ConfigMap text lists (one URL a line, `#` comments);
/// `urls[k]` is group k's URL. A line naming no known group is ignored (it
/// is rewritten on the next apply).
pub fn listed_in(text: &str, urls: &[String]) -> BTreeSet<i32> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| urls.iter().position(|u| u == l))
        .filter_map(|k| i32::try_from(k).ok())
        .collect()
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

    fn set(groups: &[i32]) -> BTreeSet<i32> {
        groups.iter().copied().collect()
    }

    #[test]
    fn first_apply_runs_everything_and_lists_groups_once_ready() {
        let p = plan(None, &set(&[]), 3, 0, false);
        assert_eq!((p.replicas, p.listed, p.draining), (3, set(&[]), false));
        // Next reconciles: the sets exist; groups are listed as they get ready.
        let p = plan(Some(3), &set(&[]), 3, 0, false);
        assert_eq!((p.replicas, p.listed), (3, set(&[])));
        let p = plan(Some(3), &set(&[]), 3, 2, false);
        assert_eq!((p.replicas, p.listed), (3, set(&[0, 1])));
    }

    #[test]
    fn scale_up_lists_new_groups_once_ready() {
        let p = plan(Some(2), &set(&[0, 1]), 4, 2, false);
        assert_eq!((p.replicas, p.listed), (4, set(&[0, 1])));
        // The StatefulSets are at 4 now: still only what is ready.
        let p = plan(Some(4), &set(&[0, 1]), 4, 3, false);
        assert_eq!((p.replicas, p.listed), (4, set(&[0, 1, 2])));
        // A listed group that turns unready (a pod restarts) stays listed:
        // the gateway's health checks steer around it.
        let p = plan(Some(4), &set(&[0, 1, 2, 3]), 4, 3, false);
        assert_eq!((p.replicas, p.listed), (4, set(&[0, 1, 2, 3])));
        // A set, not a prefix: a group out of the middle stays out unless ready.
        let p = plan(Some(3), &set(&[0, 2]), 3, 1, false);
        assert_eq!(p.listed, set(&[0, 2]));
    }

    #[test]
    fn scale_down_unlists_first_and_removes_after_drain() {
        let p = plan(Some(4), &set(&[0, 1, 2, 3]), 2, 4, false);
        assert_eq!((p.replicas, p.listed, p.draining), (4, set(&[0, 1]), true));
        let p = plan(Some(4), &set(&[0, 1]), 2, 4, true);
        assert_eq!((p.replicas, p.listed, p.draining), (2, set(&[0, 1]), false));
    }

    #[test]
    fn the_group_list_is_the_set_of_known_urls() {
        let urls = ["http://a".to_string(), "http://b".into(), "http://c".into()];
        let text = "# Written by tokenrouter-operator\nhttp://a\n\n http://c\nhttp://old\n";
        assert_eq!(listed_in(text, &urls), set(&[0, 2]));
        assert_eq!(
            listed_in("# Written by tokenrouter-operator\n", &urls),
            set(&[])
        );
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
